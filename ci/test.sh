#!/usr/bin/env bash
# Installs like ci/main.sh, then runs every test: the project's own (tests/) and PyTorch's
# device-generic suites run against pjrt (openreg_tests/).
set -euo pipefail
cd "$(dirname "$0")/.."
ci/install.sh
ci/install_test_deps.sh
exec .venv/bin/python -m pytest -q tests openreg_tests "$@"
