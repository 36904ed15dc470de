"""Real models on pjrt against CPU eager and inductor, in one run: training steps (AdamW) of the
transformers GPT-2, BERT, Llama and T5, timm ResNet-18, ViT and MobileNetV3 and an LSTM language
model, and inference of the three vision models. The models are those of tests/test_models.py
(bench/real_models.py: small configs, random weights, no downloads). `pjrt-compiled` is
torch.compile(backend="pjrt") of the whole training step (with AdamW(capturable=True), as the
README advises) or of the inference step (the forward and the sum that is read). `pjrt-graph` is
torch.accelerator.Graph: the step captured once after two lazy warm-up steps, then replayed.

    .venv/bin/python bench/models.py                  # writes bench/models_results.md and .json
    .venv/bin/python bench/models.py --only gpt2 resnet18 --skip-inductor --steps 8

Each (model, mode, backend) first runs in a process of its own with empty compile caches (pjrt's
and inductor's), the backends one after another: the first two steps' times (compiles), peak RSS
and, for pjrt, the executions per step after warm-up and the CPU fallbacks. Then `--rounds` - 1
lock-step rounds (default 1) time the steady state: every backend's process runs on the caches
its first filled (pjrt's first step there is the cached column), and they take turns running
blocks of steps while the others wait on a pipe, so that the machine's slow stretches fall on
all of them alike; steps/s is the median step of the blocks (the best round's).
`inductor` is torch.compile on the CPU of the model for training (the optimizer runs eagerly) and
of the whole inference step, like `pjrt-compiled`. Ratios are against CPU eager from the same
run; machines differ, so compare ratios, not times, across runs.
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
from datetime import date, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lockstep  # noqa: E402  (bench/lockstep.py)

ROOT = Path(__file__).resolve().parent
BACKENDS = ["pjrt", "pjrt-compiled", "pjrt-graph", "eager", "inductor"]
TRAIN = ["gpt2", "bert", "llama", "t5", "vit_tiny", "resnet18", "mobilenetv3", "lstm"]
INFER = ["resnet18", "mobilenetv3", "vit_tiny"]


def builders():
    sys.path.insert(0, str(ROOT))
    import real_models
    from torchvision_compat import ensure_torchvision_importable

    ensure_torchvision_importable()
    return {**real_models.TEXT_MODELS, **real_models.VISION_MODELS, **real_models.PLAIN_MODELS}


def sync(device, value):
    if device == "pjrt":
        value.cpu()  # one read back, as a loop that logs its loss does


def prepare(backend, name, mode):
    """Runs in a child process: the model's step as `backend` runs it (returning the value that
    a loop reads), and its device."""
    import torch

    device = "pjrt" if backend.startswith("pjrt") else "cpu"
    compiled = backend == "pjrt-compiled"
    if compiled:  # the README's advice: without it Dynamo runs nn.LSTM eagerly (a graph break)
        import torch._dynamo

        torch._dynamo.config.allow_rnn = True
    torch.manual_seed(0)
    model, batch, loss_fn = builders()[name](device)
    run_model = torch.compile(model) if backend == "inductor" and mode == "train" else model
    graphed = backend == "pjrt-graph"
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, capturable=compiled or graphed) if mode == "train" else None
    if mode == "infer":
        model.eval()

    def forward_sum(x):  # an inference step: the forward and the sum that is read
        return model(x).float().sum()

    # Compiled inference compiles the whole step, so its sum is in the same graph as the forward
    # (as in the lazy path's one execution).
    if mode == "infer" and (compiled or backend == "inductor"):
        forward_sum = torch.compile(forward_sum, backend="pjrt" if compiled else "inductor")

    def run_step():
        if opt is None:
            with torch.no_grad():
                return forward_sum(batch[0])
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(run_model, *batch)
        loss.backward()
        opt.step()
        return loss

    step = torch.compile(run_step, backend="pjrt") if compiled and mode == "train" else run_step
    if graphed:
        from graph_replay import graph_replayer

        step = graph_replayer(run_step)
    return step, device


def timed_steps(step, device, n):
    """Runs `n` steps, each reading its value; returns their times and pjrt's executions of each."""
    import torch

    times, executions = [], []
    for _ in range(n):
        before = torch.pjrt.metrics.counter("Executions") if device == "pjrt" else 0
        t0 = time.perf_counter()
        step().item()
        times.append(time.perf_counter() - t0)
        if device == "pjrt":
            executions.append(torch.pjrt.metrics.counter("Executions") - before)
    return times, executions


def process_totals(device):
    """What a child reports at its end: its peak RSS and, for pjrt, its CPU fallbacks."""
    import torch

    out = {"peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    if device == "pjrt":
        out["fallbacks"] = sum(torch.pjrt.metrics.fallbacks().values())
    return out


def measure(backend, name, mode, steps):
    """Runs in the child process of a cold-cache run: one JSON line on stdout."""
    step, device = prepare(backend, name, mode)
    times, executions = timed_steps(step, device, steps)
    out = {"steps_per_s": 1 / statistics.median(times[3:]), "first_steps_s": times[:2], "third_step_s": times[2],
           **process_totals(device)}
    if device == "pjrt":
        out["executions_per_step"] = statistics.mean(executions[3:])
    print(json.dumps(out))


def serve(backend, name, mode):
    """Runs in a child process of a lock-step round (_lockstep, lockstep.serve): its steps, then
    the process totals. (Executions per step are the cold run's.)"""
    step, device = prepare(backend, name, mode)
    lockstep.serve(lambda: step().item(), WARMUP_STEPS, lambda step_s: process_totals(device))


def run_job(name, mode, backends, steps, rounds, blocks=10):
    """Every backend of one (model, mode): first one process each, one after another, on empty
    compile caches (compile times, peak RSS, executions per step), then `rounds - 1` lock-step
    rounds on the caches those filled (_lockstep: for pjrt, the cached first step). Steps/s is the
    best lock-step round's: there the backends' processes run blocks of steps in turn, so a slow
    stretch of this shared machine (its speed moved by up to 2x between minutes) falls on all of
    them alike. The cold processes' own rates stay in `cold_steps_per_s`."""
    with tempfile.TemporaryDirectory() as root:
        caches = {b: os.path.join(root, b) for b in backends}
        first = {b: _child(b, name, mode, steps, caches[b]) for b in backends}
        live = [b for b in backends if "error" not in first[b]]
        for _ in range(rounds - 1):
            for backend, again in _lockstep(live, name, mode, caches, blocks).items():
                merge_later_run(first[backend], again, backend)
    return first


def merge_later_run(result, again, backend):
    if "steps_per_s" not in again:
        return
    runs = result.setdefault("steps_per_s_runs", [])
    if not runs:
        result["cold_steps_per_s"] = result["steps_per_s"]
    runs.append(again["steps_per_s"])
    result["steps_per_s"] = max(runs)
    if backend.startswith("pjrt") and "cached_first_step_s" not in result:
        result["cached_first_step_s"] = again["first_steps_s"][0]


WARMUP_STEPS = 4  # a lock-step child's steps before it reports ready (pjrt-graph captures on the third)


def _lockstep(backends, name, mode, caches, blocks):
    """One lock-step round (lockstep.run_round) of a serving child per backend, on the caches the
    cold processes filled. Returns each backend's steps/s (over the median step of all its
    blocks), first steps and totals, or its error."""
    def start(backend):
        cmd = [sys.executable, __file__, "--child", backend, name, mode, "--serve"]
        return lockstep.ServingChild(cmd, _child_env(caches[backend]))

    out = lockstep.run_round(start, backends, blocks)
    for r in out.values():
        if "step_s" in r:
            r["steps_per_s"] = 1 / r.pop("step_s")
    return out


def _child_env(cache):
    return dict(os.environ, TORCH_PJRT_CACHE_DIR=cache, TORCHINDUCTOR_CACHE_DIR=cache, TORCH_PJRT_FALLBACK_WARNINGS="0",
                HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error")


def _child(backend, name, mode, steps, cache):
    cmd = [sys.executable, __file__, "--child", backend, name, mode, "--steps", str(steps)]
    proc = subprocess.run(cmd, env=_child_env(cache), capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "failed"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def cell(r, key, fmt):
    return fmt.format(r[key]) if r and key in r else "-"


def table(results, args):
    lines = [
        "# Real-model benchmark",
        "",
        f"Produced by `.venv/bin/python bench/models.py` on {date.today()} ({platform.machine()}, "
        f"{os.cpu_count()} cores). Each backend first runs {args.steps} steps in a process of its own with an empty "
        "compile cache (compile times, peak RSS, executions per step), the backends one after another; then, in "
        f"{args.rounds - 1} lock-step round(s), every backend's process runs on the cache its first filled (the cached "
        f"column), and the processes take turns: {args.blocks} blocks of ~{lockstep.BLOCK_SECONDS} s of steps each, one process "
        "running while the others wait, so that this shared machine's slow stretches (its speed moved by up to 2x "
        "between minutes) fall on all backends alike. Steps/s is the median step of those blocks (the best round's). "
        "`/ eager` is the ratio to CPU "
        "eager in this run; `inductor` is torch.compile(model) on the CPU (for inference, the whole step: "
        "the forward and the sum that is read). Training uses AdamW; "
        "inference is a no_grad forward. pjrt executions are per step after warm-up." + measured_dates(results),
        "",
        "| model | mode | pjrt steps/s | eager | inductor | pjrt / eager | pjrt / inductor | "
        "pjrt steps 1, 2 (s) | pjrt step 1, cached (s) | inductor steps 1, 2 (s) | pjrt executions / step | "
        "pjrt fallbacks | peak RSS pjrt / eager (MB) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (name, mode) in sorted({(n, m) for n, m, _ in results}, key=lambda k: (k[1] != "train", k[0])):
        p, e, i = (results.get((name, mode, b)) for b in ("pjrt", "eager", "inductor"))
        if p and "error" in p:
            lines.append(f"| {name} | {mode} | error: {p['error'][:80]} |" + " - |" * 11)
            continue
        lines.append(
            f"| {name} | {mode} | {cell(p, 'steps_per_s', '{:.1f}')} | {cell(e, 'steps_per_s', '{:.1f}')} | "
            f"{cell(i, 'steps_per_s', '{:.1f}')} | {ratio(p, e)} | {ratio(p, i)} | {first_steps(p)} | "
            f"{cell(p, 'cached_first_step_s', '{:.2f}')} | {first_steps(i)} | "
            f"{cell(p, 'executions_per_step', '{:.2f}')} | {cell(p, 'fallbacks', '{}')} | "
            f"{cell(p, 'peak_rss_mb', '{:.0f}')} / {cell(e, 'peak_rss_mb', '{:.0f}')} |")
    return "\n".join(lines + compiled_table(results) + graph_table(results)) + "\n"


def ratio(a, b):
    return f"{a['steps_per_s'] / b['steps_per_s']:.2f}" if a and b and "steps_per_s" in a and "steps_per_s" in b else "-"


def first_steps(r):
    return " / ".join(f"{t:.2f}" for t in r["first_steps_s"]) if r and "first_steps_s" in r else "-"


def compiled_table(results):
    """torch.compile(backend="pjrt") against the lazy path, eager and inductor of the same run."""
    return backend_table(results, "pjrt-compiled", (
        "`torch.compile(backend=\"pjrt\")`: the whole training step (AdamW with `capturable=True`) or "
        "the inference step (the forward and the sum that is read), traced once per graph and then replayed; `torch._dynamo.config.allow_rnn` "
        "is set (the inductor column runs without it: Dynamo then runs nn.LSTM eagerly)."), [
        ("compiled steps/s", field("steps_per_s", "{:.1f}")),
        ("/ lazy pjrt", against("pjrt")), ("/ eager", against("eager")), ("/ inductor", against("inductor")),
        ("steps 1, 2 (s)", lambda this, others: first_steps(this)),
        ("step 1, cached (s)", field("cached_first_step_s", "{:.2f}")),
        ("executions / step", field("executions_per_step", "{:.2f}")),
        ("fallbacks", field("fallbacks", "{}")),
        ("peak RSS (MB)", field("peak_rss_mb", "{:.0f}"))])


def graph_table(results):
    """torch.accelerator.Graph (pjrt-graph) against the other ways of the same run."""
    return backend_table(results, "pjrt-graph", (
        "`torch.accelerator.Graph` (`pjrt-graph`): two lazy warm-up steps, then the whole step "
        "(forward, backward and AdamW with `capturable=True`, or the inference step) captured once on "
        "the third and replayed from then on, with the batch in the same tensors (a CUDA-graph "
        "training loop). The capture column is the third step: tracing, compiling and one replay."), [
        ("graph steps/s", field("steps_per_s", "{:.1f}")),
        ("/ lazy pjrt", against("pjrt")), ("/ compiled", against("pjrt-compiled")),
        ("/ eager", against("eager")), ("/ inductor", against("inductor")),
        ("steps 1, 2 (s)", lambda this, others: first_steps(this)),
        ("capture step (s)", field("third_step_s", "{:.2f}")),
        ("executions / step", field("executions_per_step", "{:.2f}")),
        ("peak RSS (MB)", field("peak_rss_mb", "{:.0f}"))])


def field(key, fmt):
    """A column showing the table's backend's `key`."""
    return lambda this, others: cell(this, key, fmt)


def against(backend):
    """A column with the table's backend's steps/s over `backend`'s."""
    return lambda this, others: ratio(this, others[backend])


def backend_table(results, backend, intro, columns):
    """A table of `backend`'s runs, one row per (model, mode) it ran. `columns` are (heading,
    cell(this, others)) pairs, `others` mapping each other backend to its run of the same model."""
    lines = ["", intro, "", "| model | mode | " + " | ".join(heading for heading, _ in columns) + " |",
             "|---|---|" + "---|" * len(columns)]
    for (name, mode) in sorted({(n, m) for n, m, _ in results}, key=lambda k: (k[1] != "train", k[0])):
        this = results.get((name, mode, backend))
        if not this:
            continue
        if "error" in this:
            lines.append(f"| {name} | {mode} | error: {this['error'][:160]} |" + " - |" * (len(columns) - 1))
            continue
        others = {b: results.get((name, mode, b)) for b in BACKENDS if b != backend}
        lines.append(f"| {name} | {mode} | " + " | ".join(cell_of(this, others) for _, cell_of in columns) + " |")
    return lines


def earlier_results():
    path = ROOT / "models_results.json"
    if not path.exists():
        return {}
    return {tuple(k.split("/")): r for k, r in json.loads(path.read_text()).items()}


def measured_dates(results):
    """The sentence naming the runs the rows come from, where `--only` mixed several."""
    runs = {}
    for (name, mode, _), r in results.items():
        runs.setdefault(r.get("measured", ""), set()).add(f"{name} {mode}")
    if len(runs) < 2:
        return ""
    return " Rows come from separate runs (`--only` re-measures some): " + "; ".join(
        f"{', '.join(sorted(rows))} ({when or 'an earlier run'})" for when, rows in sorted(runs.items())) + "."


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", nargs=3, metavar=("BACKEND", "MODEL", "MODE"))
    # Steps are cheap next to start-up and compiles; a median over 21 rides out bursts of noise.
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--only", nargs="*", help="model names (default: all)")
    parser.add_argument("--skip-inductor", action="store_true")
    parser.add_argument("--rounds", type=int, default=2,
                        help="1 cold-cache process per backend, then rounds - 1 lock-step rounds; steps/s is their best")
    parser.add_argument("--blocks", type=int, default=10, help="blocks of steps per backend in a lock-step round")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        serve(*args.child) if args.serve else measure(*args.child, args.steps)
        return
    backends = [b for b in BACKENDS if not (args.skip_inductor and b == "inductor")]
    jobs = [(n, "train") for n in TRAIN] + [(n, "infer") for n in INFER]
    jobs = [j for j in jobs if not args.only or j[0] in args.only]
    # --only re-measures the named models and keeps the other rows of the last full run.
    results = earlier_results() if args.only else {}
    for name, mode in jobs:
        for backend, r in run_job(name, mode, backends, args.steps, args.rounds, args.blocks).items():
            results[(name, mode, backend)] = dict(r, measured=datetime.now().isoformat(sep=" ", timespec="minutes"))
            print(name, mode, backend, r, flush=True)
    (ROOT / "models_results.json").write_text(json.dumps(
        {f"{n}/{m}/{b}": r for (n, m, b), r in results.items()}, indent=1) + "\n")
    (ROOT / "models_results.md").write_text(table(results, args))
    print(table(results, args))


if __name__ == "__main__":
    main()
