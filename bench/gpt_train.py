"""Training throughput of examples/gpt.py on pjrt, CPU eager and inductor, in one run.

    .venv/bin/python bench/gpt_train.py            # writes bench/gpt_results.md and .json
    .venv/bin/python bench/gpt_train.py --steps 12 --skip-inductor

Each (backend, configuration) runs in its own process with an empty pjrt compile cache, so first-step
times include compiling and peak memory is its own. Configurations: float32 without dropout,
bfloat16 autocast without dropout, float32 with dropout 0.1. Reported: tokens/s (median over the
steps after the first three), the first three steps' times, peak memory (pjrt: the device's
reserved-bytes peak; every backend: the process's peak RSS), and for pjrt the executions and
compiles per step after warm-up.
"""

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = {
    "float32": dict(dropout=0.0, autocast=False),
    "bf16 autocast": dict(dropout=0.0, autocast=True),
    "float32, dropout 0.1": dict(dropout=0.1, autocast=False),
}
BACKENDS = ["pjrt", "eager", "inductor"]


def measure(backend, config, steps, batch, context):
    """Runs in the child process: one JSON line on stdout."""
    import torch

    sys.path.insert(0, str(ROOT / "examples"))
    import gpt

    device = "pjrt" if backend == "pjrt" else "cpu"
    opts = CONFIGS[config]
    text = gpt.make_text()
    vocab = sorted(set(text))
    data = torch.tensor([vocab.index(c) for c in text])
    torch.manual_seed(0)
    model = gpt.GPT(len(vocab), context, dropout=opts["dropout"]).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    forward = torch.compile(model) if backend == "inductor" else model
    stream = gpt.batches(data, batch, context, 0)
    times, per_step = [], []
    for _ in range(steps):
        x, y = (t.to(device) for t in next(stream))
        before = torch.pjrt.metrics.counters() if device == "pjrt" else {}
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=opts["autocast"]):
            loss = forward(x, y)
        loss.backward()
        opt.step()
        loss.item()
        times.append(time.perf_counter() - t0)
        if device == "pjrt":
            after = torch.pjrt.metrics.counters()
            per_step.append({k: after.get(k, 0) - before.get(k, 0)
                             for k in ("Executions", "GraphsCompiled", "FallbackOps")})
    steady = times[3:]
    out = {
        "tokens_per_s": batch * context / statistics.median(steady),
        "first_steps_s": times[:3],
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    if device == "pjrt":
        out["peak_reserved_mb"] = torch.pjrt.max_memory_reserved() / 2**20
        out["param_mb"] = sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20
        warm = per_step[3:]
        out["executions_per_step"] = statistics.mean(s["Executions"] for s in warm)
        out["compiles_after_warmup"] = sum(s["GraphsCompiled"] for s in warm)
        out["fallbacks"] = sum(s["FallbackOps"] for s in per_step)
    print(json.dumps(out))


def run_child(backend, config, args):
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, TORCH_PJRT_CACHE_DIR=cache, TORCH_PJRT_FALLBACK_WARNINGS="0")
        cmd = [sys.executable, __file__, "--child", backend, config, "--steps", str(args.steps),
               "--batch", str(args.batch), "--context", str(args.context)]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"{backend} / {config} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def table(results, args):
    lines = [
        "# GPT training benchmark (examples/gpt.py)",
        "",
        f"Produced by `.venv/bin/python bench/gpt_train.py` on {date.today()} ({platform.machine()}, "
        f"{os.cpu_count()} cores). Model: 4 layers, width 128, 4 heads, context {args.context}, "
        f"batch {args.batch}, AdamW; {args.steps} steps per run, each run its own process with an "
        "empty compile cache. tokens/s is the median over steps 4 and later; ratios are against CPU "
        "eager in this run. `inductor` is torch.compile(model) on the CPU (the optimizer runs eagerly).",
        "",
        "| configuration | backend | tokens/s | / eager | steps 1-3 (s) | peak RSS (MB) |",
        "|---|---|---|---|---|---|",
    ]
    for config in CONFIGS:
        eager = results.get(("eager", config), {}).get("tokens_per_s")
        for backend in BACKENDS:
            r = results.get((backend, config))
            if r is None:
                continue
            ratio = f"{r['tokens_per_s'] / eager:.2f}" if eager else "-"
            first = " / ".join(f"{t:.2f}" for t in r["first_steps_s"])
            lines.append(f"| {config} | {backend} | {r['tokens_per_s']:.0f} | {ratio} | {first} | "
                         f"{r['peak_rss_mb']:.0f} |")
    lines += ["", "| configuration | pjrt executions per step | compiles after warm-up | CPU fallbacks | "
              "device peak reserved (MB) | parameters (MB) |", "|---|---|---|---|---|---|"]
    for config in CONFIGS:
        r = results.get(("pjrt", config))
        if r:
            lines.append(f"| {config} | {r['executions_per_step']:.2f} | {r['compiles_after_warmup']} | "
                         f"{r['fallbacks']} | {r['peak_reserved_mb']:.1f} | {r['param_mb']:.1f} |")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--child", nargs=2, metavar=("BACKEND", "CONFIG"))
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--context", type=int, default=64)
    parser.add_argument("--skip-inductor", action="store_true")
    args = parser.parse_args()
    if args.child:
        measure(*args.child, args.steps, args.batch, args.context)
        return
    results = {}
    for config in CONFIGS:
        for backend in BACKENDS:
            if backend == "inductor" and args.skip_inductor:
                continue
            print(f"{config} / {backend} ...", flush=True)
            results[(backend, config)] = run_child(backend, config, args)
            print("   ", json.dumps(results[(backend, config)]), flush=True)
    md = table(results, args)
    (ROOT / "bench" / "gpt_results.md").write_text(md)
    (ROOT / "bench" / "gpt_results.json").write_text(
        json.dumps({f"{b} / {c}": r for (b, c), r in results.items()}, indent=1) + "\n")
    print(md)


if __name__ == "__main__":
    main()
