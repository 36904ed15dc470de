"""Runs every benchmark side by side and writes bench/results.md and bench/results.json.

    .venv/bin/python bench/run.py [--skip-inductor]

Every workload first runs in a fresh process per backend (pjrt lazy, pjrt with
torch.compile(backend="pjrt"), pjrt with torch.accelerator.Graph, CPU eager, torch.compile/inductor
on the CPU) with fresh, empty compile caches (pjrt's and inductor's), the backends one after
another: first steps, peak RSS, host times per step and counts. Then its rates come from a
lock-step round (bench/lockstep.py, `LOCKSTEP_RATES`): a process per backend on the caches the
first filled, the processes taking turns at blocks of steps, so that this shared machine's slow
stretches fall on all backends alike. Ratios are against CPU eager from the same run.
"""

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile

import lockstep

HERE = os.path.dirname(os.path.abspath(__file__))
PY = sys.executable
LOCKSTEP_BLOCKS = 10  # blocks per backend in a workload's lock-step round


def child_env(cache):
    return dict(os.environ, TORCH_PJRT_CACHE_DIR=cache, TORCHINDUCTOR_CACHE_DIR=cache)


def run_workload(workload, backend, cache):
    """The cold process: `workload` on `backend` with the compile caches in `cache` (empty)."""
    proc = subprocess.run([PY, os.path.join(HERE, "workloads.py"), workload, backend],
                          capture_output=True, text=True, env=child_env(cache), timeout=1800)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "failed"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def lockstep_rates(workload, backends, caches, blocks=LOCKSTEP_BLOCKS):
    """One lock-step round of `workload` over `backends`, each on the caches its cold process
    filled: each backend's rates over the median unit of its blocks, or its error."""
    def start(backend):
        cmd = [PY, os.path.join(HERE, "workloads.py"), workload, backend, "--serve"]
        return lockstep.ServingChild(cmd, child_env(caches[backend]))

    return lockstep.run_round(start, backends, blocks)


def run_all(workload, backends, root):
    """Every backend's cold process, then the lock-step round whose rates replace theirs
    (`merge_lockstep`)."""
    caches = {b: tempfile.mkdtemp(prefix=f"{workload}_{b}_", dir=root) for b in backends}
    results = {b: run_workload(workload, b, caches[b]) for b in backends}
    live = [b for b in backends if "error" not in results[b]]
    for backend, steady in lockstep_rates(workload, live, caches).items():
        merge_lockstep(results[backend], steady)
    return results


def import_times(runs=9):
    """Wall time of `python -c "import torch"` without torch_pjrt (autoload off) and with it, the
    median of `runs` each, the two alternating so that a slow stretch of this shared machine
    falls on both."""
    code = "import time; t=time.perf_counter(); import torch; print(time.perf_counter()-t)"
    times = {False: [], True: []}
    for _ in range(runs):
        for autoload in times:
            env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="1" if autoload else "0")
            out = subprocess.run([PY, "-c", code], capture_output=True, text=True, env=env, check=True)
            times[autoload].append(float(out.stdout.strip()))
    return {"without_torch_pjrt_s": statistics.median(times[False]),
            "with_torch_pjrt_s": statistics.median(times[True])}


FIRST_OP = """
import json, sys, time
import torch
t = time.perf_counter()
y = (torch.ones(2, device=DEVICE) + 1).cpu()
print(json.dumps({"s": time.perf_counter() - t, "dynamo": "torch._dynamo" in sys.modules,
                  "sympy": "sympy" in sys.modules}))
"""


def first_op_time(device, runs=5):
    """Seconds from the end of `import torch` to the first op's result on the CPU, in a fresh
    process with an empty compile cache (for pjrt: plugin start, tracing, compile, execution),
    the median of `runs`; and whether that first op imported torch._dynamo or sympy."""
    times, imported = [], {}
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, TORCH_PJRT_CACHE_DIR=cache)
            out = subprocess.run([PY, "-c", FIRST_OP.replace("DEVICE", repr(device))], capture_output=True,
                                 text=True, env=env, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        times.append(r["s"])
        imported = {k: r[k] for k in ("dynamo", "sympy")}
    return {"s": statistics.median(times), **imported}


def fmt(v, digits=1):
    return "-" if v is None else f"{v:.{digits}f}"


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


WORKLOADS = ["tracing", "mlp", "gpt", "cnn", "matmul"]
COLUMNS = [("pjrt", "pjrt (lazy)"), ("pjrt-compiled", "pjrt compiled"), ("pjrt-graph", "pjrt graph"),
           ("eager", "CPU eager"), ("inductor", "inductor")]
# (workload, metric label, result key, digits): one table row each.
ROWS = [
    ("tracing", "tracing (1000 small elementwise ops, then one sync): µs per op, traced or run", "us_per_op_trace", 2),
    ("tracing", "tracing, including the sync: µs per op", "us_per_op_total", 2),
    ("tracing", "the same chain in place (`y.mul_(0.999).add_(0.5)`): µs per op, traced or run", "us_per_op_trace_in_place", 2),
    ("tracing", "the same 1000-op chain: µs per call, including the sync", "us_per_call_total", 1),
    ("mlp", "MLP 784-2048-2048-10, batch 128, SGD+momentum: training steps/s", "steps_per_s", 1),
    ("mlp", "MLP: host ms per step (the step call, before its loss is read), wall", "host_ms_per_step", 2),
    ("mlp", "MLP: host CPU ms per step (the calling thread's CPU time in the step call)", "host_cpu_ms_per_step", 2),
    ("mlp", "MLP: first step (s, includes compile)", "first_step_s", 2),
    ("mlp", "MLP: peak RSS (MB)", "peak_rss_mb", 0),
    ("gpt", "GPT (examples/gpt.py, 4x128, batch 16x64), AdamW: training steps/s", "steps_per_s", 2),
    ("gpt", "GPT: host ms per step, wall", "host_ms_per_step", 2),
    ("gpt", "GPT: host CPU ms per step", "host_cpu_ms_per_step", 2),
    ("gpt", "GPT: first step (s, includes compile)", "first_step_s", 2),
    ("cnn", "small CNN inference, batch 64, 3x32x32: images/s", "images_per_s", 0),
    ("matmul", "1024x1024 float32 matmul: GFLOP/s", "gflops", 1),
]


# The metrics a lock-step round measures (workloads.steady_unit's rates): this machine is shared,
# and a neighbour's burst can slow one process by half, so they come from the round, where the
# backends took turns. First steps, peak RSS, host times per step and counts are the cold
# process's; its own rates stay in `cold`.
LOCKSTEP_RATES = ("steps_per_s", "images_per_s", "gflops", "us_per_op_total", "us_per_call_total")


def merge_lockstep(result, steady):
    """`result` (a cold process's) with the lock-step round's rates, or the round's error."""
    if "error" in steady:
        result["lockstep_error"] = steady["error"]
        return
    result["cold"] = {k: result[k] for k in LOCKSTEP_RATES if k in result}
    result.update({k: steady[k] for k in LOCKSTEP_RATES if k in steady})


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--skip-inductor", action="store_true")
    args = parser.parse_args()
    backends = [b for b, _ in COLUMNS if not (args.skip_inductor and b == "inductor")]
    results = {"date": datetime.date.today().isoformat(), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
               "python": platform.python_version()}
    with tempfile.TemporaryDirectory(prefix="torch_pjrt_bench_") as root:
        for workload in WORKLOADS:
            results[workload] = run_all(workload, backends, root)
            print(workload, json.dumps(results[workload]), flush=True)
    results["import"] = import_times()
    print("import", results["import"], flush=True)
    results["first_op"] = {device: first_op_time(device) for device in ("pjrt", "cpu")}
    print("first op", results["first_op"], flush=True)

    with open(os.path.join(HERE, "results.json"), "w") as f:
        json.dump(results, f, indent=2)

    r = results
    get = lambda w, b, k: r[w].get(b, {}).get(k)
    lines = [
        "# torch_pjrt benchmarks",
        "",
        f"Produced by `.venv/bin/python bench/run.py` on {r['date']} ({r['machine']}, Python {r['python']}).",
        "Each workload first runs in a fresh process per backend with empty compile caches (first steps,",
        "peak RSS, host times per step, counts); its rates (steps, images or GFLOP per second, and µs per",
        "op including the sync) then come from one lock-step round (bench/lockstep.py): a process per",
        f"backend on the caches the first filled, taking turns at {LOCKSTEP_BLOCKS} blocks of",
        f"~{lockstep.BLOCK_SECONDS} s each, so that the machine's slow stretches fall on all backends alike;",
        "a rate is the backend's median unit over its blocks. Ratios are against CPU eager from the same",
        "run. `pjrt compiled` is torch.compile(backend=\"pjrt\") on the pjrt",
        "device (each graph traced once, then replayed); `pjrt graph` is torch.accelerator.Graph (the",
        "whole step captured once after two lazy warm-up steps, then replayed: bench/graph_replay.py);",
        "`inductor` is torch.compile on the CPU.",
        "",
        "| workload: metric | " + " | ".join(label for b, label in COLUMNS) +
        " | pjrt / eager | compiled / eager | graph / eager |",
        "|---|" + "---|" * (len(COLUMNS) + 3),
    ]
    for workload, label, key, digits in ROWS:
        values = [fmt(get(workload, b, key), digits) for b, _ in COLUMNS]
        eager = get(workload, "eager", key)
        lines.append(f"| {label} | " + " | ".join(values) +
                     f" | {fmt(ratio(get(workload, 'pjrt', key), eager), 2)}"
                     f" | {fmt(ratio(get(workload, 'pjrt-compiled', key), eager), 2)}"
                     f" | {fmt(ratio(get(workload, 'pjrt-graph', key), eager), 2)} |")
    lines += [
        "",
        "| check | value |",
        "|---|---|",
        f"| MLP executions per training step (after warm-up): lazy / compiled | {fmt(get('mlp', 'pjrt', 'executions_per_step'), 2)} / {fmt(get('mlp', 'pjrt-compiled', 'executions_per_step'), 2)} |",
        f"| MLP executions per training step: graph | {fmt(get('mlp', 'pjrt-graph', 'executions_per_step'), 2)} |",
        *[f"| {name} host {what} per step, compiled / lazy and graph / lazy{target} | "
          f"{fmt(ratio(get(w, 'pjrt-compiled', key), get(w, 'pjrt', key)), 2)} / "
          f"{fmt(ratio(get(w, 'pjrt-graph', key), get(w, 'pjrt', key)), 2)} |"
          for w, name, target in (("mlp", "MLP", " (issue 12: <= 10%)"), ("gpt", "GPT", ""))
          for what, key in (("CPU time", "host_cpu_ms_per_step"), ("wall time", "host_ms_per_step"))],
        f"| MLP compiles / CPU fallbacks during the timed loop | {get('mlp', 'pjrt', 'compiles_in_loop')} / {get('mlp', 'pjrt', 'fallbacks_in_loop')} |",
        f"| the 1000-op chain per call including the sync, compiled / inductor (issue 12: within 2x) | {fmt(ratio(get('tracing', 'pjrt-compiled', 'us_per_call_total'), get('tracing', 'inductor', 'us_per_call_total')), 2)} |",
        f"| StableHLO lowerings / compiles on a cache hit (tracing loop) | {get('tracing', 'pjrt', 'lowered_on_cache_hit')} / {get('tracing', 'pjrt', 'compiled_on_cache_hit')} |",
        f"| `import torch` without torch_pjrt (autoload off) | {r['import']['without_torch_pjrt_s']:.3f} s |",
        f"| `import torch` with torch_pjrt autoloaded | {r['import']['with_torch_pjrt_s']:.3f} s |",
        f"| difference | {r['import']['with_torch_pjrt_s'] - r['import']['without_torch_pjrt_s']:+.3f} s |",
        f"| first op after `import torch`, cold process and empty compile cache: pjrt (plugin start included) / CPU eager | {r['first_op']['pjrt']['s']:.3f} s / {r['first_op']['cpu']['s']:.4f} s |",
        f"| the pjrt first op imported torch._dynamo / sympy | {r['first_op']['pjrt']['dynamo']} / {r['first_op']['pjrt']['sympy']} |",
        "",
    ]
    errors = {f"{w}/{b}{' (lock-step round)' if key == 'lockstep_error' else ''}": v[key]
              for w in WORKLOADS for b, v in r[w].items() for key in ("error", "lockstep_error") if key in v}
    if errors:
        lines += ["Errors:", ""] + [f"- {k}: {v}" for k, v in errors.items()] + [""]
    with open(os.path.join(HERE, "results.md"), "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
