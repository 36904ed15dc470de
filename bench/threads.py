"""`torch.set_num_threads(1)` against the default thread count, on lazy pjrt and on CPU eager, for
bench/models.py's real models, and on pjrt `PJRT_NPROC=1` (XLA's pool alone on one thread). On
the CPU plugin torch's thread count sizes XLA's worker pool as well as the host kernels' OpenMP
team (`torch_pjrt/backends/cpu.py`, docs/design.md "XLA's pool size"), so on these tiny models it
decides how XLA runs a program of a few hundred small kernels.

    .venv/bin/python bench/threads.py               # writes bench/threads_results.md
    .venv/bin/python bench/threads.py --only gpt2 --rounds 3

The pool is fixed when the client starts, so each configuration runs in a process of its own:
the five configurations of a model alternate, `--rounds` times, and each reports the median time
per step of `--seconds` of steps after warm-up (a training step: AdamW, the loss read with
`.item()`; inference: the eval model's no_grad forward, summed and read). The table keeps the
best round of each (this machine's speed moves between processes: bench/models.py).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from results_page import results_page

ROOT = Path(__file__).resolve().parent
RUNS = [("gpt2", "train"), ("bert", "train"), ("llama", "train"), ("t5", "train"), ("lstm", "train"),
        ("vit_tiny", "train"), ("resnet18", "train"), ("mobilenetv3", "train"),
        ("vit_tiny", "infer"), ("resnet18", "infer"), ("mobilenetv3", "infer")]
# (device, threads): 0 the default, 1 torch.set_num_threads(1), "xla1" PJRT_NPROC=1 (XLA's pool of
# one thread, the host kernels' OpenMP team left at torch's default).
CONFIGS = [("pjrt", 0), ("pjrt", 1), ("pjrt", "xla1"), ("cpu", 0), ("cpu", 1)]


def child(name, mode, device, threads, seconds):
    """Median seconds per step of one configuration, in this process."""
    import torch

    if threads == "1":
        torch.set_num_threads(1)  # before the first pjrt op: the client reads it at start
    sys.path.insert(0, str(ROOT))
    from torchvision_compat import ensure_torchvision_importable

    ensure_torchvision_importable()
    import real_models

    torch.manual_seed(0)
    model, batch, loss_fn = getattr(real_models, name)(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    if mode == "infer":
        model.eval()

    def step():
        if mode == "train":
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model, *batch)
            loss.backward()
            opt.step()
            loss.item()
        else:
            with torch.no_grad():
                out = model(batch[0])
                (out if torch.is_tensor(out) else out.logits).sum().item()

    for _ in range(5):
        step()
    times, end = [], time.perf_counter() + seconds
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return {"step_s": statistics.median(times), "threads": torch.get_num_threads()}


def _child(name, mode, device, threads, seconds):
    """One configuration's result, from a fresh process (XLA's pool is fixed when its client starts)."""
    cmd = [sys.executable, __file__, "--child", name, mode, device, str(threads), "--seconds", str(seconds)]
    env = dict(os.environ, TORCH_PJRT_FALLBACK_WARNINGS="0")
    if threads == "xla1":
        env["PJRT_NPROC"] = "1"
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def measure(name, mode, rounds, seconds):
    """The best (lowest) median step time of each configuration, over `rounds` rounds that each run
    every configuration once (configurations interleaved, not one after another)."""
    best = {}
    for _ in range(rounds):
        for device, threads in CONFIGS:
            key = (device, str(threads))
            best[key] = min(best.get(key, float("inf")), _child(name, mode, device, threads, seconds)["step_s"])
    return best


def row(name, mode, best):
    ms = {k: v * 1e3 for k, v in best.items()}
    pjrt, one, xla1 = ms[("pjrt", "0")], ms[("pjrt", "1")], ms[("pjrt", "xla1")]
    eager = min(ms[("cpu", "0")], ms[("cpu", "1")])
    return (f"| {name} | {mode} | {pjrt:.2f} | {one:.2f} | {xla1:.2f} | {ms[('cpu', '0')]:.2f} | {ms[('cpu', '1')]:.2f} "
            f"| {pjrt / one:.2f} | {pjrt / xla1:.2f} | {ms[('cpu', '0')] / pjrt:.2f} | {eager / min(pjrt, one, xla1):.2f} |")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", nargs="*", help="model names (every run of each)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        name, mode, device, threads = args.child
        print(json.dumps(child(name, mode, device, threads, args.seconds)))
        return
    runs = [r for r in RUNS if not args.only or r[0] in args.only]
    rows = []
    for name, mode in runs:
        rows.append(row(name, mode, measure(name, mode, args.rounds, args.seconds)))
        print(rows[-1], flush=True)
    text = results_page(
        "One thread against the default, lazy pjrt and CPU eager", "threads.py",
        f"each configuration in a process of its own, the five of a model alternating over {args.rounds} "
        f"rounds; median ms per step over {args.seconds:g} s of steps, the best round's. `1 thread`: "
        "`torch.set_num_threads(1)` before the model is built (on pjrt, XLA's worker pool and the host "
        "kernels' OpenMP team then have one thread). `PJRT_NPROC=1`: XLA's pool alone has one thread. "
        "Speedups are ratios of step times (above 1: faster); the last column sets pjrt's best "
        "configuration against eager's.",
        ["model", "mode", "pjrt (ms)", "pjrt, 1 thread (ms)", "pjrt, PJRT_NPROC=1 (ms)", "eager (ms)",
         "eager, 1 thread (ms)", "pjrt 1 thread / default", "pjrt PJRT_NPROC=1 / default",
         "pjrt / eager (defaults)", "best pjrt / best eager"],
        rows, machine_extra=f", torch's default {_default_threads()} threads")
    if not args.only:
        (ROOT / "threads_results.md").write_text(text)


def _default_threads():
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
                         capture_output=True, text=True, env=dict(os.environ, TORCH_PJRT_AUTOLOAD="0"))
    return out.stdout.strip()


if __name__ == "__main__":
    main()
