#!/usr/bin/env bash
# The CUDA sub-plugin on a lent GPU machine (the device tool), whose image has torch 2.11+cu130,
# Python 3.12 and JAX's jax-cuda13-pjrt but no registry access and no xla-cpu-pjrt:
#
#   bash bench/cuda_check.sh prepare          # here: the PJRT header and our entry points into .devcheck/
#   (device tool) run "bash bench/cuda_check.sh run", carry [".devcheck"]
#   (device tool) run "bash bench/cuda_check.sh autoload", carry [".devcheck"]   # the build and
#                 bench/cuda_autoload_check.py only: torch_pjrt installed beside torch's own CUDA
#   (device tool) run "bash bench/cuda_check.sh gpt", carry [".devcheck"]   # the build and the GPT
#                 example lazy and compiled on pjrt, and eager and inductor on torch's CUDA
#   (device tool) run "bash bench/cuda_check.sh smoke", carry [".devcheck"]   # the shortest regression
#                 check (~5 min): the build, the smoke checks, our own errors (bench/cuda_errors.py),
#                 the GPT example on pjrt and its CPU curve
#   (device tool) run "bash bench/cuda_check.sh fuzz", carry [".devcheck"]   # the build, then the
#                 differential fuzzer (tests/fuzz_sweep.py: FUZZ_N programs from seed FUZZ_START, for
#                 at most FUZZ_SECONDS) on the cuda sub-plugin with float32 matmuls at "highest" (the
#                 plugin's "high" is TF32, which the fuzzer's float32 tolerance does not allow); each
#                 segment's report and log come back as fuzz_cuda_SEED.md and fuzz_log_SEED.txt
#   (device tool) run "bash bench/cuda_check.sh script .devcheck/x.py", carry [".devcheck"]   # the
#                 build, then one Python script of yours (copied into .devcheck/)
#
# `run` builds the extension in place against the machine's torch with two stand-ins for what
# torch 2.11 lacks (torch.accelerator.Graph: no device graphs; c10d::PreMulSumSupplement is
# NCCLPreMulSumSupplement there), then: smoke checks against CPU eager, examples/gpt.py on pjrt
# and on torch's own CUDA (without and with torch_pjrt imported), and its --compare-cpu curve.
# Results of 2026-11-26 are in docs/plugins.md ("Hardware runs").
set -uo pipefail
cd "$(dirname "$0")/.."
gpt() {  # label, extra imports, device, flags: examples/gpt.py at batch 64 x 256, its last steps
  echo "== examples/gpt.py, batch 64 x 256, $1"
  timeout 150 python3 -c "import sys, runpy, torch$2
sys.argv = ['gpt.py', '--device', '$3', '--steps', '25', '--batch', '64', '--context', '256'] + '${4:-}'.split()
runpy.run_path('examples/gpt.py', run_name='__main__')" 2>&1 | grep -E "^step  2[2-4]|Error" | tail -3
}
build() {  # in place; again with the system g++ where the first compiler linked libstdc++ statically
  MAX_JOBS=16 python3 setup.py build_ext --inplace > "$OUT/build.log" 2>&1 || { grep error: "$OUT/build.log" | head; exit 1; }
  # The lent machine's /opt/gcc g++ (the default there on 2026-11-27) copies libstdc++ into _C; that
  # copy's ostream code then runs on the process's libstdc++ locale data and every message of ours
  # that formats a number segfaulted (bench/cuda_errors.py; docs/plugins.md, Hardware runs).
  if nm -C torch_pjrt/_C*.so | grep -q "codecvt_utf8_utf16_base"; then
    echo "$(command -v c++): libstdc++ linked statically into _C"
    if [ -x /usr/bin/g++ ]; then
      echo "rebuilding with /usr/bin/g++"; rm -rf build
      CC=/usr/bin/gcc CXX=/usr/bin/g++ MAX_JOBS=16 python3 setup.py build_ext --inplace > "$OUT/build.log" 2>&1 \
        || { grep error: "$OUT/build.log" | head; exit 1; }
      nm -C torch_pjrt/_C*.so | grep -q "codecvt_utf8_utf16_base" && echo "still static with /usr/bin/g++"
    fi
  fi
}
cuda_fuzz() {  # the fuzzer in segments: a native crash ends one, the next starts after its seed
  local start=${FUZZ_START:-0} end=$(( ${FUZZ_START:-0} + ${FUZZ_N:-1500} )) deadline=$(( SECONDS + ${FUZZ_SECONDS:-300} ))
  local segments=0 done_count rc
  while [ "$start" -lt "$end" ] && [ "$SECONDS" -lt "$deadline" ] && [ "$segments" -lt 3 ]; do
    segments=$(( segments + 1 ))
    python3 -X faulthandler -c "import runpy, sys, torch_pjrt.backends.cuda as cuda
cuda.CudaPlugin.default_matmul_precision = 'highest'
sys.argv = ['fuzz_sweep.py', '--programs', '$(( end - start ))', '--start', '$start', '--progress', '1',
            '--seconds', '$(( deadline - SECONDS ))', '--out', '$OUT/fuzz_cuda_$start.md']
runpy.run_path('tests/fuzz_sweep.py', run_name='__main__')" > "$OUT/fuzz_log_$start.txt" 2>&1
    rc=$?
    done_count=$(grep -oE '^[0-9]+ programs' "$OUT/fuzz_log_$start.txt" | tail -1 | cut -d' ' -f1)
    echo "segment from seed $start: exit status $rc, ${done_count:-0} programs"
    grep -E "^done:" "$OUT/fuzz_log_$start.txt"
    [ "$rc" -le 1 ] && break  # 0: no failures, 1: failures (in the segment's report)
    echo "crashed at seed $(( start + ${done_count:-0} )):"; grep -v Warning "$OUT/fuzz_log_$start.txt" | tail -12
    start=$(( start + ${done_count:-0} + 1 ))
  done
}

case "${1:-}" in
prepare)
  mkdir -p .devcheck/fake/xla_plugins/xla_cpu_pjrt/include .devcheck/fake/torch_pjrt_devcheck-0.1.dist-info
  grep -qx "/.devcheck/" .git/info/exclude || echo "/.devcheck/" >> .git/info/exclude
  cp .venv/lib/python3.*/site-packages/xla_plugins/xla_cpu_pjrt/include/*.h .devcheck/fake/xla_plugins/xla_cpu_pjrt/include/
  touch .devcheck/fake/xla_plugins/__init__.py .devcheck/fake/xla_plugins/xla_cpu_pjrt/__init__.py
  printf 'Metadata-Version: 2.1\nName: torch_pjrt_devcheck\nVersion: 0.1\n' > .devcheck/fake/torch_pjrt_devcheck-0.1.dist-info/METADATA
  printf '[torch.backends]\ntorch_pjrt = _torch_pjrt_autoload:autoload\n\n[torch_dynamo_backends]\npjrt = torch_pjrt.dynamo:pjrt_backend\n\n[torch_pjrt.plugins]\ncuda = torch_pjrt.backends.cuda:CudaPlugin\n' \
    > .devcheck/fake/torch_pjrt_devcheck-0.1.dist-info/entry_points.txt
  echo "prepared .devcheck/" ;;
run|autoload|gpt|smoke|fuzz|script)
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
  build
  if [ "$1" = fuzz ]; then
    cuda_fuzz; exit 0
  fi
  if [ "$1" = script ]; then
    timeout 400 python3 "$2"; exit $?
  fi
  [ "$1" = gpt ] || [ "$1" = smoke ] || timeout 240 python3 bench/cuda_autoload_check.py
  [ "$1" = autoload ] && exit 0
  [ "$1" = gpt ] || timeout 300 python3 bench/cuda_smoke.py
  [ "$1" = gpt ] || timeout 200 python3 bench/cuda_errors.py
  if [ "$1" = run ]; then
    gpt "torch CUDA, torch_pjrt not imported" "" cuda
    gpt "torch CUDA, torch_pjrt imported (an explained error expected)" ", torch_pjrt" cuda
  fi
  gpt "pjrt on the cuda sub-plugin" ", torch_pjrt" pjrt
  [ "$1" = smoke ] || gpt "pjrt on the cuda sub-plugin, torch.compile(backend='pjrt')" ", torch_pjrt" pjrt --compile
  [ "$1" = gpt ] && gpt "torch CUDA eager" "" cuda && gpt "torch CUDA, torch.compile (inductor)" "" cuda --compile
  [ "$1" = gpt ] && exit 0
  echo "== examples/gpt.py --compare-cpu"
  timeout 200 python3 -c "import sys, runpy, torch, torch_pjrt
sys.argv = ['gpt.py', '--compare-cpu', '--steps', '20']
runpy.run_path('examples/gpt.py', run_name='__main__')" 2>&1 | grep -E "largest|Error" ;;
*) echo "usage: $0 prepare|run|autoload|gpt|smoke|fuzz|script FILE" >&2; exit 2 ;;
esac
