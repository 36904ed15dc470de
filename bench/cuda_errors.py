"""Errors that torch_pjrt raises itself, with numbers in their messages, raise instead of crashing
(bench/cuda_check.sh smoke): on the lent GPU machine of 2026-11-27, a build whose compiler copied
libstdc++ into the extension segfaulted while formatting them. Each case runs in its own process."""
import subprocess
import sys

CASES = {  # statement -> the exception type CPU eager raises for the same mistake
    "torch.tensor(1.0, device='pjrt').mul_(torch.ones(3, device='pjrt'))": "RuntimeError",
    "torch.ones(1, 4, device='pjrt').add_(torch.ones(3, 1, device='pjrt'))": "RuntimeError",
    "torch.ones(3, device='pjrt').index_select(0, torch.tensor([5], device='pjrt')).cpu()": "IndexError",
    "torch.ones(3, device='pjrt') + torch.ones(4, device='pjrt')": "RuntimeError",
}
PROGRAM = """import torch
torch._C._set_print_stack_traces_on_fatal_signal(True)
import torch_pjrt  # noqa: F401
try:
    {}
    print('no error')
except Exception as e:
    print('raised', type(e).__name__)
"""

failed = 0
for stmt, expected in CASES.items():
    r = subprocess.run([sys.executable, "-c", PROGRAM.format(stmt)], capture_output=True, text=True, timeout=120)
    lines = [l for l in r.stdout.splitlines() if l.startswith(("raised", "no error"))]
    ok = r.returncode == 0 and lines == [f"raised {expected}"]
    failed += not ok
    print(f"{'ok  ' if ok else 'FAIL'} {stmt}: exit status {r.returncode}, {lines[-1] if lines else 'no result'}")
    if not ok:
        frames = [l for l in r.stderr.splitlines() if "frame #" in l]
        print("\n".join(l[:200] for l in frames[:25]))
sys.exit(1 if failed else 0)
