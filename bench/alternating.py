"""The protocol bench/launch.py and bench/pipelined.py share: each model runs in a process of its
own (this machine's speed moves between processes by more than the differences they measure),
which holds every variant and alternates them in blocks of steps; the parent collects one JSON
line per model and prints a table row for it."""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def run_steps(step, n, times=None):
    """`n` calls of `step`, each reading its result with `.item()`; their times appended to `times`."""
    for _ in range(n):
        t0 = time.perf_counter()
        step().item()
        if times is not None:
            times.append(time.perf_counter() - t0)


def median_step_times(variants, run, warmup, blocks, per_block):
    """Median seconds per step of each variant. `run(variant, n, times)` runs `n` steps of it: first
    `warmup` untimed steps of each (compiles), then `blocks` blocks of `per_block` steps, the
    variants' order reversed every other block."""
    for v in variants:
        run(v, warmup, None)
    times = {v: [] for v in variants}
    for b in range(blocks):
        for v in (variants if b % 2 == 0 else variants[::-1]):
            run(v, per_block, times[v])
    return {v: statistics.median(t) for v, t in times.items()}


def run_models(script, measure, models, blocks, steps_per_block, row):
    """Parses the command line (`--only`, `--blocks`, `--steps-per-block`). In a child process
    (`--child NAME`) prints `measure(NAME, blocks, steps_per_block)` as JSON and returns None;
    otherwise runs a child of `script` per model and returns (args, the `row(name, result)` of each)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", nargs="*", default=models)
    parser.add_argument("--blocks", type=int, default=blocks)
    parser.add_argument("--steps-per-block", type=int, default=steps_per_block)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args.blocks, args.steps_per_block)))
        return None
    rows = []
    for name in args.only:
        cmd = [sys.executable, script, "--child", name, "--blocks", str(args.blocks),
               "--steps-per-block", str(args.steps_per_block)]
        env = dict(os.environ, TORCH_PJRT_FALLBACK_WARNINGS="0")
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout
        rows.append(row(name, json.loads(out.strip().splitlines()[-1])))
        print(rows[-1], flush=True)
    return args, rows
