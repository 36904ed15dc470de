#!/usr/bin/env bash
# Creates .venv (if missing) with the pinned torch CPU wheel, the CPU PJRT plugin and the build
# tools, then builds and installs torch_pjrt into it. Safe to re-run: the build is incremental.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
PIP=(.venv/bin/python -m pip -q --disable-pip-version-check)
# torch is pinned: any other spec resolves to multi-GB CUDA builds.
"${PIP[@]}" install "torch==2.13.0" numpy xla-cpu-pjrt ninja pybind11 pytest expecttest setuptools wheel
# --no-build-isolation: build against the torch installed above, never a freshly downloaded one.
MAX_JOBS="${MAX_JOBS:-2}" "${PIP[@]}" install --no-build-isolation --no-deps -e .
