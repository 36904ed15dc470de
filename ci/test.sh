#!/usr/bin/env bash
# Installs like ci/main.sh, then runs every test: the project's own (tests/) and PyTorch's
# device-generic suites run against pjrt (openreg_tests/).
set -euo pipefail
cd "$(dirname "$0")/.."
ci/install.sh
ci/install_test_deps.sh
# Two pytest-xdist workers (PYTEST_WORKERS; 0 runs in this process): most tests are small and
# single-threaded (Python, tracing, one compile), so two keep both cores busy.
exec .venv/bin/python -m pytest -q -n "${PYTEST_WORKERS:-2}" tests openreg_tests "$@"
