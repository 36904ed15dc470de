#!/usr/bin/env bash
# Test-only dependencies: the real models of tests/test_models*.py and bench/ (transformers, timm),
# the fuzzing library and pytest-xdist (ci/test.sh's two workers). torch stays the pinned CPU
# wheel: transformers 5.x does not depend on torch (torch==2.13.0 is repeated so the resolver can
# only keep it); timm and torchvision do, so they are installed with --no-deps (torchvision 0.28.0
# is the release built for torch 2.13.0; its CUDA C++ ops do not load here, see
# bench/torchvision_compat.py).
set -euo pipefail
cd "$(dirname "$0")/.."
PIP=(.venv/bin/python -m pip -q --disable-pip-version-check)
"${PIP[@]}" install "torch==2.13.0" hypothesis "pytest-xdist==3.8.0" "transformers==5.23.0" "tokenizers==0.23.3" \
    "safetensors==0.8.0" "huggingface-hub==2.4.0" "pillow==13.0.0"
"${PIP[@]}" install --no-deps "timm==1.0.31" "torchvision==0.28.0"
.venv/bin/python -c "import torch; assert torch.__version__ == '2.13.0+cpu', torch.__version__"
