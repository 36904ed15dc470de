"""CPU eager ops in a process that also runs pjrt convolutions: their time before any pjrt work,
while pjrt's host-kernel thread is alive (right after its convolutions) and once it has been idle
long enough to exit (host_kernels.cc, kIdleExit).

    .venv/bin/python bench/eager_beside.py

libgomp keeps an OpenMP team per thread that starts parallel regions and stops spinning at
barriers once it manages more threads than there are cores; on a 2-core machine the kernel
thread's team beside the main thread's made small parallel eager ops 2-3.5x slower, for as long as
the kernel thread lived (docs/design.md, "Host kernels and CPU eager in one process"). Medians of
200 calls (20 right after the convolutions), in microseconds; one process, so compare the rows with each other.
"""

import statistics
import time

import torch
import torch.nn.functional as F

x = torch.randn(2, 80, 8, 8)
OPS = {
    "layer_norm [2,8,8,80]": lambda: F.layer_norm(x.permute(0, 2, 3, 1), (80,)),
    "depthwise conv 7x7": lambda w=torch.randn(80, 1, 7, 7): F.conv2d(x, w, padding=3, groups=80),
    "1x1 conv 80->320": lambda w=torch.randn(320, 80, 1, 1): F.conv2d(x, w),
    "softmax [64,512]": lambda t=torch.randn(64, 512): t.softmax(-1),
}


def eager_times(calls=200, before_each_op=None):
    out = {}
    for name, op in OPS.items():
        if before_each_op:
            before_each_op()
        times = []
        for _ in range(calls):
            t0 = time.perf_counter()
            op()
            times.append(time.perf_counter() - t0)
        out[name] = statistics.median(times) * 1e6
    return out


def pjrt_convolutions():
    """Convolutions large enough to run on the host-kernel thread (see host_kernels.cc)."""
    a, w = torch.randn(2, 64, 32, 32, device="pjrt"), torch.randn(64, 64, 3, 3, device="pjrt")
    for _ in range(5):
        F.conv2d(a, w, padding=1).sum().item()


def main():
    rows = {"before any pjrt work": eager_times()}
    # 20 calls right after pjrt's convolutions: within kIdleExit, the kernel thread still alive.
    rows["right after pjrt convolutions"] = eager_times(20, before_each_op=pjrt_convolutions)
    time.sleep(0.5)
    rows["after 0.5 s idle"] = eager_times()
    print("| eager op (us) | " + " | ".join(rows) + " |")
    print("|---|" + "---|" * len(rows))
    for name in OPS:
        print(f"| {name} | " + " | ".join(f"{r[name]:.0f}" for r in rows.values()) + " |")


if __name__ == "__main__":
    main()
