"""The main job: train a small classifier on device="pjrt" and report what the device did.

No torch_pjrt import is needed: `import torch` loads the pjrt device itself.
The data is synthetic (a random teacher network labels Gaussian inputs), so the job needs no
download; a student MLP learns it with AdamW and a cosine schedule.
"""

import argparse
import time

import torch
import torch.nn as nn


def make_data(n, teacher, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, teacher.shape[0], generator=g)
    y = (x @ teacher).argmax(1)
    return x, y


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--device", default="pjrt")
    args = parser.parse_args()

    torch.manual_seed(0)
    dim, classes = 64, 10
    teacher = torch.randn(dim, classes, generator=torch.Generator().manual_seed(42))
    x, y = make_data(8192, teacher, seed=1)
    test_x, test_y = make_data(1024, teacher, seed=2)
    model = nn.Sequential(nn.Linear(dim, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                          nn.Linear(256, classes)).to(args.device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, args.steps)

    if args.device == "pjrt":
        info = torch.pjrt.platform()
        print(f"pjrt device: plugin={info['plugin']} platform={info['platform_name']} "
              f"{info['platform_version']} devices={info['device_count']}")
        torch.pjrt.metrics.reset()

    start = time.perf_counter()
    for step in range(args.steps):
        t0 = time.perf_counter()
        i = (step * args.batch) % len(x)
        xb = x[i:i + args.batch].to(args.device)
        yb = y[i:i + args.batch].to(args.device)
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
        sched.step()
        print(f"step {step:3d}  loss {loss.item():.4f}  lr {sched.get_last_lr()[0]:.4f}  "
              f"{(time.perf_counter() - t0) * 1e3:7.1f} ms")
    elapsed = time.perf_counter() - start

    with torch.no_grad():
        pred = model(test_x.to(args.device)).argmax(1).cpu()
    accuracy = (pred == test_y).float().mean().item()
    print(f"trained {args.steps} steps in {elapsed:.2f} s; held-out accuracy {accuracy:.1%}")
    if args.device == "pjrt":
        print(torch.pjrt.metrics.report())


if __name__ == "__main__":
    main()
