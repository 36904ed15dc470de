"""One benchmark workload on one backend, in its own process (so peak RSS is its own).

    python bench/workloads.py <workload> <backend>   ->  prints one JSON line

backends: pjrt (this project, lazy tracing), pjrt-compiled (torch.compile(backend="pjrt"): each
graph traced once, then replayed), pjrt-graph (torch.accelerator.Graph: the whole step captured
once after two lazy warm-up calls, then replayed), eager (CPU eager), inductor (torch.compile on
the CPU).
"""

import json
import os
import resource
import statistics
import sys
import time

import torch
import torch.nn as nn

import lockstep
from graph_replay import graph_replayer

WARMUP_UNITS = 4  # a lock-step child's units before it reports ready (pjrt-graph captures on the third)


def device_of(backend):
    return "pjrt" if backend.startswith("pjrt") else "cpu"


def sync(backend):
    if backend.startswith("pjrt"):
        torch.pjrt.synchronize()


def compiled(fn, backend):
    """`fn` as the backend runs it: compiled by inductor or by the pjrt backend, else as is."""
    if backend == "inductor":
        return torch.compile(fn)
    if backend == "pjrt-compiled":
        return torch.compile(fn, backend="pjrt")
    if backend == "pjrt-graph":
        return graph_replayer(fn)
    return fn


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def chain(backend, in_place=False):
    """The tracing workload's unit: 1000 small elementwise ops on 16 floats (`y * 0.999 + 0.5`, or
    `y.mul_(0.999).add_(0.5)` on a copy), as `backend` runs them."""
    x = torch.randn(16).to(device_of(backend))

    def run():
        y = x.clone() if in_place else x
        for _ in range(1000):
            y = y.mul_(0.999).add_(0.5) if in_place else y * 0.999 + 0.5
        return y

    return compiled(run, backend)


CHAIN_OPS = 2000  # ops per call of chain(): a multiply and an add per iteration


def traced_op_times(fn):
    """µs per op of `fn` (CHAIN_OPS ops): the call alone (traced or run) and with its result read,
    medians of 15 calls after 3 warm-up calls."""
    for _ in range(3):
        fn().cpu()
    trace, total = [], []
    for _ in range(15):
        t0 = time.perf_counter()
        y = fn()
        t1 = time.perf_counter()
        y.cpu()
        t2 = time.perf_counter()
        trace.append((t1 - t0) / CHAIN_OPS * 1e6)
        total.append((t2 - t0) / CHAIN_OPS * 1e6)
    return statistics.median(trace), statistics.median(total)


def tracing(backend):
    """1000 small elementwise ops then one sync: per-op cost in steady state; and the same chain
    of in-place ops (each checked for overlap with what it reads, as CPU eager checks)."""
    fn = chain(backend)
    trace, total = traced_op_times(fn)
    out = {"us_per_op_trace": trace, "us_per_op_total": total, "us_per_call_total": total * CHAIN_OPS,
           "us_per_op_trace_in_place": traced_op_times(chain(backend, in_place=True))[0]}
    if backend.startswith("pjrt"):
        c0 = torch.pjrt.metrics.counters()
        fn().cpu()
        c1 = torch.pjrt.metrics.counters()
        out["lowered_on_cache_hit"] = c1["GraphsLowered"] - c0["GraphsLowered"]
        out["compiled_on_cache_hit"] = c1["GraphsCompiled"] - c0["GraphsCompiled"]
    return out


def time_training(step, backend, warmup, n):
    """Compiles `step` as `backend` does, times its first call, warms up, then times `n` steps,
    each reading its loss. Host time is the step call alone: tracing (lazy) or argument mapping
    (replay), then the launch. It is reported twice: wall time, and the CPU time of the calling
    thread (which traces the backward too: pjrt's autograd runs on the caller). On two cores the
    wall time of a call that launched work includes waiting for a core behind XLA's workers; the
    CPU time is the host work itself. pjrt runs also report executions, compiles and fallbacks
    per loop."""
    step = compiled(step, backend)
    t0 = time.perf_counter()
    step().item()
    first = time.perf_counter() - t0
    for _ in range(warmup):
        step().item()
    c0 = torch.pjrt.metrics.counters() if backend.startswith("pjrt") else None
    host, host_cpu = [], []
    t0 = time.perf_counter()
    for _ in range(n):
        t1, c1 = time.perf_counter(), time.thread_time()
        loss = step()
        host_cpu.append(time.thread_time() - c1)
        host.append(time.perf_counter() - t1)
        loss.item()
    elapsed = time.perf_counter() - t0
    out = {"first_step_s": first, "steps_per_s": n / elapsed, "host_ms_per_step": statistics.median(host) * 1e3,
           "host_cpu_ms_per_step": statistics.median(host_cpu) * 1e3}
    if c0 is not None:
        c1 = torch.pjrt.metrics.counters()
        out["executions_per_step"] = (c1["Executions"] - c0["Executions"]) / n
        out["compiles_in_loop"] = c1["GraphsCompiled"] - c0["GraphsCompiled"]
        out["fallbacks_in_loop"] = c1["FallbackOps"] - c0["FallbackOps"]
    return out


def mlp_step(backend):
    """MLP 784-2048-2048-10, batch 128, SGD with momentum: the training step as `backend` runs it,
    returning its loss."""
    dev = device_of(backend)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(),
                          nn.Linear(2048, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(128, 784).to(dev)
    y = torch.randint(0, 10, (128,)).to(dev)

    def step():
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return step


def mlp(backend):
    """The MLP's training steps, loss.item() every step."""
    return time_training(mlp_step(backend), backend, warmup=5, n=40) | {"peak_rss_mb": peak_rss_mb()}


CNN_BATCH = 64


def cnn_forward(backend):
    """A small CNN's inference on 64 images of 3x32x32, as `backend` runs it: a call returns the
    logits."""
    dev = device_of(backend)
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(128, 10)).to(dev).eval()
    x = torch.randn(CNN_BATCH, 3, 32, 32).to(dev)
    fn = compiled(model, backend)

    def forward():
        with torch.no_grad():
            return fn(x)

    return forward


def cnn(backend):
    """The small CNN's inference, each batch's logits read."""
    forward = cnn_forward(backend)
    for _ in range(3):
        forward().cpu()
    n = 100  # ~1 s on pjrt and inductor: 20 batches moved by 30% with this machine's load
    t0 = time.perf_counter()
    for _ in range(n):
        forward().cpu()
    elapsed = time.perf_counter() - t0
    return {"images_per_s": n * CNN_BATCH / elapsed}


MATMUL_FLOP = 2 * 1024 ** 3


def matmul_product(backend):
    """A call makes one 1024x1024 float32 product, materialized (synchronized on pjrt)."""
    dev = device_of(backend)
    a = torch.randn(1024, 1024).to(dev)
    b = torch.randn(1024, 1024).to(dev)
    fn = compiled(torch.mm, backend)

    def product():
        r = fn(a, b)
        sync(backend)
        return r

    return product


def matmul(backend):
    """1024x1024 float32 matmul, GFLOP/s."""
    product = matmul_product(backend)
    for _ in range(3):
        product()
    n = 20
    t0 = time.perf_counter()
    for _ in range(n):
        r = product()
    r.cpu()
    elapsed = time.perf_counter() - t0
    return {"gflops": MATMUL_FLOP * n / elapsed / 1e9}


def gpt_step(backend):
    """examples/gpt.py's model (4 layers, width 128), batch 16 x 64 tokens, AdamW: the training
    step as `backend` runs it, returning its loss (the whole step, forward, backward and optimizer,
    is what inductor and the pjrt backend compile)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
    import gpt as example

    dev = device_of(backend)
    torch.manual_seed(0)
    model = example.GPT(32, 64, dropout=0.0).to(dev)
    # A graph's optimizer keeps its step count on the device (README: capturable=True).
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, capturable=backend == "pjrt-graph")
    x = torch.randint(0, 32, (16, 64)).to(dev)
    y = torch.randint(0, 32, (16, 64)).to(dev)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = model(x, y)
        loss.backward()
        opt.step()
        return loss

    return step


def gpt(backend):
    """The GPT example's training steps, loss.item() every step."""
    return time_training(gpt_step(backend), backend, warmup=4, n=12)


def steady_unit(workload, backend):
    """What a lock-step round (bench/lockstep.py) times for `workload`: one call of its unit (a
    training step, a batch, a product, the 1000-op chain), its result read, and how the median
    seconds of one unit become the rates bench/results.md shows."""
    if workload in ("mlp", "gpt"):
        step = compiled(mlp_step(backend) if workload == "mlp" else gpt_step(backend), backend)
        return (lambda: step().item()), (lambda s: {"steps_per_s": 1 / s})
    if workload == "cnn":
        forward = cnn_forward(backend)
        return (lambda: forward().cpu()), (lambda s: {"images_per_s": CNN_BATCH / s})
    if workload == "matmul":
        product = matmul_product(backend)
        return product, (lambda s: {"gflops": MATMUL_FLOP / s / 1e9})
    fn = chain(backend)
    return (lambda: fn().cpu()), (lambda s: {"us_per_op_total": s / CHAIN_OPS * 1e6, "us_per_call_total": s * 1e6})


WORKLOADS = {"tracing": tracing, "mlp": mlp, "gpt": gpt, "cnn": cnn, "matmul": matmul}

if __name__ == "__main__":
    workload, backend = sys.argv[1], sys.argv[2]
    if sys.argv[3:] == ["--serve"]:  # a lock-step round's child (bench/lockstep.py)
        unit, rates = steady_unit(workload, backend)
        lockstep.serve(unit, WARMUP_UNITS, rates)
    else:
        print(json.dumps(WORKLOADS[workload](backend)))
