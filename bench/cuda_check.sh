#!/usr/bin/env bash
# The CUDA sub-plugin on a lent GPU machine (the device tool), whose image has torch 2.11+cu130,
# Python 3.12 and JAX's jax-cuda13-pjrt but no registry access and no xla-cpu-pjrt:
#
#   bash bench/cuda_check.sh prepare          # here: the PJRT header and our entry points into .devcheck/
#   (device tool) run "bash bench/cuda_check.sh run", carry [".devcheck"]
#   (device tool) run "bash bench/cuda_check.sh autoload", carry [".devcheck"]   # the build and
#                 bench/cuda_autoload_check.py only: torch_pjrt installed beside torch's own CUDA
#
# `run` builds the extension in place against the machine's torch with two stand-ins for what
# torch 2.11 lacks (torch.accelerator.Graph: no device graphs; c10d::PreMulSumSupplement is
# NCCLPreMulSumSupplement there), then: smoke checks against CPU eager, examples/gpt.py on pjrt
# and on torch's own CUDA (without and with torch_pjrt imported), and its --compare-cpu curve.
# Results of 2026-11-26 are in docs/plugins.md ("Hardware runs").
set -uo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
prepare)
  mkdir -p .devcheck/fake/xla_plugins/xla_cpu_pjrt/include .devcheck/fake/torch_pjrt_devcheck-0.1.dist-info
  grep -qx "/.devcheck/" .git/info/exclude || echo "/.devcheck/" >> .git/info/exclude
  cp .venv/lib/python3.*/site-packages/xla_plugins/xla_cpu_pjrt/include/*.h .devcheck/fake/xla_plugins/xla_cpu_pjrt/include/
  touch .devcheck/fake/xla_plugins/__init__.py .devcheck/fake/xla_plugins/xla_cpu_pjrt/__init__.py
  printf 'Metadata-Version: 2.1\nName: torch_pjrt_devcheck\nVersion: 0.1\n' > .devcheck/fake/torch_pjrt_devcheck-0.1.dist-info/METADATA
  printf '[torch.backends]\ntorch_pjrt = _torch_pjrt_autoload:autoload\n\n[torch_pjrt.plugins]\ncuda = torch_pjrt.backends.cuda:CudaPlugin\n' \
    > .devcheck/fake/torch_pjrt_devcheck-0.1.dist-info/entry_points.txt
  echo "prepared .devcheck/" ;;
run|autoload)
  if [ -d .venv ]; then  # the lent machine's copy carries no .venv; a developer's checkout has one
    echo "run edits sources in place (the stand-ins below): run it on the lent GPU machine's copy" >&2; exit 2
  fi
  OUT="${OUT:-/tmp}"
  export PYTHONPATH=$PWD/.devcheck/fake:$PWD TORCH_DEVICE_BACKEND_AUTOLOAD=0 PJRT_DEVICE=cuda
  printf '#include "aten/device_graph_impl.h"\nnamespace torch_pjrt::aten { void RegisterGraphImpl() {} }\n' \
    > torch_pjrt/csrc/aten/device_graph_impl.cc
  sed -i "s/c10d::PreMulSumSupplement/c10d::NCCLPreMulSumSupplement/" torch_pjrt/csrc/distributed/reduction.h
  sed -i '/^import torch$/a if not hasattr(torch.accelerator, "Graph"):\n    torch.accelerator.Graph = type("Graph", (), {})' \
    torch_pjrt/device_module.py
  python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__)"; nvidia-smi -L
  MAX_JOBS=16 python3 setup.py build_ext --inplace > "$OUT/build.log" 2>&1 || { grep error: "$OUT/build.log" | head; exit 1; }
  timeout 240 python3 bench/cuda_autoload_check.py
  [ "$1" = autoload ] && exit 0
  timeout 300 python3 bench/cuda_smoke.py
  for mode in plain imported pjrt; do
    device=cuda; run="import sys, runpy, torch"; label="torch CUDA, torch_pjrt not imported"
    [ "$mode" = imported ] && run="$run, torch_pjrt" && label="torch CUDA, torch_pjrt imported"
    [ "$mode" = pjrt ] && run="$run, torch_pjrt" && device=pjrt && label="pjrt on the cuda sub-plugin"
    echo "== examples/gpt.py, batch 64 x 256, $label"
    timeout 150 python3 -c "$run
sys.argv = ['gpt.py', '--device', '$device', '--steps', '25', '--batch', '64', '--context', '256']
runpy.run_path('examples/gpt.py', run_name='__main__')" 2>&1 | grep -E "^step  2[2-4]|Error" | tail -3
  done
  echo "== examples/gpt.py --compare-cpu"
  timeout 200 python3 -c "import sys, runpy, torch, torch_pjrt
sys.argv = ['gpt.py', '--compare-cpu', '--steps', '20']
runpy.run_path('examples/gpt.py', run_name='__main__')" 2>&1 | grep -E "largest|Error" ;;
*) echo "usage: $0 prepare|run|autoload" >&2; exit 2 ;;
esac
