"""Smoke checks of the pjrt device on the CUDA sub-plugin against CPU eager and torch CUDA (bench/cuda_check.sh)."""
import copy
import os
import time

import torch
import torch_pjrt  # noqa: F401  (autoload is off there: no installed entry point)

print("plugin", torch.pjrt.plugin(), torch.pjrt.platform(), "devices", torch.pjrt.device_count())
print("plugins", torch.pjrt.plugins())
x = torch.ones(2, device="pjrt"); print("ones+1", (x + 1).cpu())
torch.manual_seed(0)
a = torch.randn(256, 256); b = torch.randn(256, 256)
r = (a.to("pjrt") @ b.to("pjrt")).cpu()
print("matmul max abs diff vs CPU", (r - a @ b).abs().max().item())
ref = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
model = copy.deepcopy(ref).to("pjrt")
opt = torch.optim.AdamW(model.parameters(), lr=1e-2); ropt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
xs = torch.randn(32, 64); ys = torch.randint(0, 10, (32,))
for step in range(5):
    losses = {}
    for m, o, dev in ((model, opt, "pjrt"), (ref, ropt, "cpu")):
        o.zero_grad(); loss = torch.nn.functional.cross_entropy(m(xs.to(dev)), ys.to(dev)); loss.backward(); o.step()
        losses[dev] = round(loss.item(), 6)
    print("step", step, losses)
n = int(os.environ.get("SMOKE_N", "4096"))  # the product's size (smaller for a CPU plugin: SMOKE_N=256)
def bench(make, sync):
    A, B = make(), make()
    for _ in range(3):
        C = A @ B; sync()
    t = time.perf_counter()
    for _ in range(20):
        C = A @ B; sync()
    return 20 * 2 * n**3 / (time.perf_counter() - t) / 1e12
pj = bench(lambda: torch.randn(n, n, device="pjrt", dtype=torch.bfloat16), torch.pjrt.synchronize)
line = f"bf16 {n}^3 matmul, launch + sync each: pjrt {pj:.1f} TFLOP/s"
if torch.cuda.is_available():
    cu = bench(lambda: torch.randn(n, n, device="cuda", dtype=torch.bfloat16), torch.cuda.synchronize)
    line += f", torch cuda eager {cu:.1f} TFLOP/s"
print(line)
print(torch.pjrt.metrics.report()[:600])
