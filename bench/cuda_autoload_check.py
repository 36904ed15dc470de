"""torch_pjrt installed beside torch's own CUDA (bench/cuda_check.sh): each case in a fresh process
whose `import torch` runs our torch.backends entry point.

- PJRT_DEVICE unset: the autoload stays out, torch's CUDA trains, and a forked child can still
  start CUDA (the device count asked NVML, not the CUDA driver);
- PJRT_DEVICE=cuda: pjrt is registered by `import torch` alone, and a CUDA backward gets our
  explained error instead of autograd's internal assert;
- `import torch_pjrt` with PJRT_DEVICE unset registers, and discovery picks cuda;
- what the entry point adds to `import torch`.
"""
import os
import subprocess
import sys
import textwrap

CASES = {
    "autoload, PJRT_DEVICE unset": ({}, """
        import os, sys, torch
        print("torch_pjrt loaded:", "torch_pjrt" in sys.modules, "| accelerator:", torch.accelerator.current_accelerator())
        pid = os.fork()
        if pid == 0:
            os._exit(0 if torch.ones(2, device="cuda").sum().item() == 2 else 1)
        print("forked child ran CUDA:", os.waitpid(pid, 0)[1] == 0)
        model = torch.nn.Linear(64, 64).cuda()
        opt = torch.optim.AdamW(model.parameters())
        for _ in range(3):
            loss = model(torch.randn(32, 64, device="cuda")).square().mean()
            loss.backward(); opt.step(); opt.zero_grad()
        print("torch CUDA training ran, loss", round(loss.item(), 4))
    """),
    "autoload, PJRT_DEVICE=cuda": ({"PJRT_DEVICE": "cuda"}, """
        import sys, torch
        print("torch_pjrt loaded:", "torch_pjrt" in sys.modules, "| accelerator:", torch.accelerator.current_accelerator())
        print("pjrt:", torch.pjrt.plugin(), (torch.ones(2, device="pjrt") + 1).cpu().tolist())
        x = torch.ones(2, device="cuda", requires_grad=True)
        try:
            (x * 2).sum().backward()
            print("torch CUDA backward ran")
        except RuntimeError as e:
            print("torch CUDA backward refused:", str(e)[:150], "| from:", str(e.__cause__).splitlines()[0][:80])
    """),
    "import torch_pjrt, PJRT_DEVICE unset": ({}, """
        import torch, torch_pjrt
        print("pjrt:", torch.pjrt.plugin(), (torch.ones(2, device="pjrt") + 1).cpu().tolist())
    """),
}

IMPORT_TIME = "import time; t = time.perf_counter(); import torch; print(f'{time.perf_counter() - t:.3f}')"


def run(code, env):
    env = {k: v for k, v in os.environ.items() if k not in ("PJRT_DEVICE", "TORCH_DEVICE_BACKEND_AUTOLOAD")} | env
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=env, timeout=120)
    failure = f"\n(exit {proc.returncode}) {proc.stderr.strip()[-400:]}" if proc.returncode else ""
    return proc.stdout.strip() + failure


for name, (env, code) in CASES.items():
    print(f"== {name}\n{run(code, env)}")
times = {"autoload": [], "no autoload": []}
for _ in range(3):
    times["autoload"].append(run(IMPORT_TIME, {}))
    times["no autoload"].append(run(IMPORT_TIME, {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}))
print("== import torch (s), PJRT_DEVICE unset:", times)
