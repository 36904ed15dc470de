#!/usr/bin/env bash
# The main job: install, then train a small model on device="pjrt" and print what it did.
set -euo pipefail
cd "$(dirname "$0")/.."
ci/install.sh
exec .venv/bin/python examples/train.py "$@"
