"""DDP training on pjrt against DDP on CPU (gloo), side by side in one run: steps/s of a small
transformer with 1 and 2 processes (torchrun), each process on its own device and a fixed share
of the global batch; then all_reduce bus bandwidth from 1 KB to 64 MB on 2 processes, pjrt
tensors through the pjrt backend against CPU tensors through gloo, the two interleaved size by
size in the same processes. Writes bench/distributed_results.md.

    .venv/bin/python bench/distributed.py [--steps 20]

On this project's CPU-only machines every process shares the same cores, so more processes do
not mean more compute: the numbers show what data parallelism costs on each device (collectives,
host copies on pjrt's gloo path), not scaling.
"""

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
GLOBAL_BATCH, SEQ, DIM, LAYERS = 16, 64, 128, 2
ALLREDUCE_NPROC = 2
ALLREDUCE_SIZES = [1024 * 4 ** k for k in range(9)]  # bytes of float32: 1 KB, 4 KB, ..., 64 MB
ALLREDUCE_WARMUP = 3
ALLREDUCE_ROUNDS = 7  # timed rounds per size, CPU and pjrt alternating; the median round counts
ALLREDUCE_BYTES_PER_ROUND = 64 << 20  # calls per round: this many bytes reduced, within the bounds below
ALLREDUCE_MIN_ITERS, ALLREDUCE_MAX_ITERS = 3, 100


def allreduce_iters(nbytes):
    return max(ALLREDUCE_MIN_ITERS, min(ALLREDUCE_MAX_ITERS, ALLREDUCE_BYTES_PER_ROUND // nbytes))


def worker(device, steps, warmup):
    """One process of the torchrun job: DDP steps; rank 0 prints the result as JSON."""
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("pjrt" if device == "pjrt" else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(DIM, nhead=4, dim_feedforward=4 * DIM, dropout=0.0, batch_first=True)
    model = nn.Sequential(nn.TransformerEncoder(layer, LAYERS), nn.Linear(DIM, 1)).to(device)
    ddp = DDP(model)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-3)
    x = torch.randn(GLOBAL_BATCH // world, SEQ, DIM).to(device)
    y = torch.randn(GLOBAL_BATCH // world, SEQ, 1).to(device)

    def step():
        loss = nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.item()

    for _ in range(warmup):
        step()
    dist.barrier()
    c0 = torch.pjrt.metrics.counters() if device == "pjrt" else {}
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    elapsed = time.perf_counter() - t0
    out = {"steps_per_s": steps / elapsed, "samples_per_s": steps * GLOBAL_BATCH / elapsed}
    if device == "pjrt":
        c1 = torch.pjrt.metrics.counters()
        per_step = lambda k: (c1.get(k, 0) - c0.get(k, 0)) / steps  # noqa: E731
        out["executions_per_step"] = per_step("Executions")
        out["host_collectives_per_step"] = sum(
            per_step(k) for k in c1 if k.startswith(torch.pjrt.metrics.COLLECTIVES_PREFIX))
        out["compiles_in_loop"] = per_step("GraphsCompiled") * steps
    if rank == 0:
        print("RESULT " + json.dumps(out), flush=True)
    dist.destroy_process_group()


def allreduce_worker():
    """One process of the torchrun job: all_reduce (SUM, float32) of each size, on a pjrt tensor
    through the pjrt backend and on a CPU tensor through gloo, in one "cpu:gloo,pjrt:pjrt" group;
    rank 0 prints the seconds per call of each (median of the rounds) as JSON."""
    import statistics

    import torch
    import torch.distributed as dist

    dist.init_process_group("cpu:gloo,pjrt:pjrt")
    rank, world = dist.get_rank(), dist.get_world_size()

    def seconds_per_call(x, iters, sync):
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(x)
        sync()  # the last result in place on the device
        elapsed = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)  # the slowest rank's time
        return elapsed.item() / iters

    syncs = {"cpu": lambda: None, "pjrt": lambda: torch.pjrt.synchronize()}
    out = {}
    for nbytes in ALLREDUCE_SIZES:
        tensors = {}
        for device, sync in syncs.items():
            x = torch.full((nbytes // 4,), float(rank + 1), device=device)
            dist.all_reduce(x)  # checked once: every element is the sum over ranks
            expected = world * (world + 1) / 2
            assert x[:1].cpu().item() == expected and x[-1:].cpu().item() == expected, (device, nbytes)
            x.zero_()  # sums of zeros stay finite however many calls
            for _ in range(ALLREDUCE_WARMUP):
                dist.all_reduce(x)
            sync()
            tensors[device] = x
        rounds = {device: [] for device in syncs}
        for _ in range(ALLREDUCE_ROUNDS):
            for device, sync in syncs.items():
                rounds[device].append(seconds_per_call(tensors[device], allreduce_iters(nbytes), sync))
        out[nbytes] = {device: statistics.median(times) for device, times in rounds.items()}
        del tensors
    if rank == 0:
        print("RESULT " + json.dumps(out), flush=True)
    dist.destroy_process_group()


def launch(device, nproc, steps, warmup):
    # The same intra-op thread count for CPU eager at every process count (torchrun would set 1
    # for several processes and leave it unset for one: oversubscribed OpenMP spins on a busy core).
    env = dict(os.environ, TORCH_PJRT_CPU_DEVICE_COUNT="1", OMP_NUM_THREADS=str(max(1, os.cpu_count() // nproc)),
               TORCH_PJRT_CACHE_DIR=tempfile.mkdtemp(prefix="torch_pjrt_bench_cache_"))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
               os.path.abspath(__file__), "--worker", device, "--steps", str(steps), "--warmup", str(warmup)]
    proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1800)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"{device} x{nproc} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")


def human_bytes(n):
    return f"{n >> 20} MB" if n >= 1 << 20 else f"{n >> 10} KB"


def allreduce_table(results):
    """Rows of the bandwidth table; busbw as nccl-tests define it for all_reduce."""
    factor = 2 * (ALLREDUCE_NPROC - 1) / ALLREDUCE_NPROC
    lines = ["| size | calls per round | CPU µs/call | CPU algbw GB/s | CPU busbw GB/s | pjrt µs/call | "
             "pjrt algbw GB/s | pjrt busbw GB/s | pjrt / CPU busbw |",
             "|---|---|---|---|---|---|---|---|---|"]
    for nbytes in ALLREDUCE_SIZES:
        t = results[str(nbytes)]
        algbw = {d: nbytes / t[d] / 1e9 for d in ("cpu", "pjrt")}
        lines.append(f"| {human_bytes(nbytes)} | {allreduce_iters(nbytes)} | {t['cpu'] * 1e6:.0f} | "
                     f"{algbw['cpu']:.3f} | {algbw['cpu'] * factor:.3f} | {t['pjrt'] * 1e6:.0f} | "
                     f"{algbw['pjrt']:.3f} | {algbw['pjrt'] * factor:.3f} | "
                     f"{algbw['pjrt'] / algbw['cpu']:.2f} |")
    return lines


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", choices=["pjrt", "cpu", "allreduce"])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=8)  # DDP rebuilds buckets, AdamW makes state: ~4 steps of new graphs
    args = parser.parse_args()
    if args.worker == "allreduce":
        return allreduce_worker()
    if args.worker:
        return worker(args.worker, args.steps, args.warmup)
    rows = []
    for nproc in (1, 2):
        results = {device: launch(device, nproc, args.steps, args.warmup) for device in ("cpu", "pjrt")}
        rows.append((nproc, results))
        print(nproc, json.dumps(results), flush=True)
    allreduce = launch("allreduce", ALLREDUCE_NPROC, args.steps, args.warmup)
    print("all_reduce", json.dumps(allreduce), flush=True)
    lines = [
        "# DDP training: pjrt against CPU (gloo)", "",
        f"Written by `bench/distributed.py --steps {args.steps}` on {datetime.date.today()} "
        f"({platform.machine()}, {os.cpu_count()} cores). Model: {LAYERS}-layer transformer encoder, "
        f"width {DIM}, global batch {GLOBAL_BATCH} x {SEQ}, AdamW; each process takes its share of "
        "the batch. All processes share this machine's cores.", "",
        "| processes | CPU steps/s | pjrt steps/s | pjrt / CPU | pjrt executions per step | "
        "pjrt host-copied collectives per step |",
        "|---|---|---|---|---|---|",
    ]
    for nproc, r in rows:
        cpu, pj = r["cpu"], r["pjrt"]
        lines.append(f"| {nproc} | {cpu['steps_per_s']:.2f} | {pj['steps_per_s']:.2f} | "
                     f"{pj['steps_per_s'] / cpu['steps_per_s']:.2f} | {pj['executions_per_step']:.1f} | "
                     f"{pj['host_collectives_per_step']:.1f} |")
    lines += [
        "", "# all_reduce bandwidth: pjrt against CPU (gloo)", "",
        f"all_reduce (SUM, float32) on {ALLREDUCE_NPROC} processes of the same run, one "
        "`cpu:gloo,pjrt:pjrt` process group: a pjrt tensor through the pjrt backend (a copy to the "
        "host, gloo, a copy back) against a CPU tensor through gloo, the two one after the other at "
        f"each size. Per size and device: {ALLREDUCE_WARMUP} warm-up calls, then {ALLREDUCE_ROUNDS} "
        "timed rounds, CPU and pjrt alternating, each of "
        f"min({ALLREDUCE_MAX_ITERS}, max({ALLREDUCE_MIN_ITERS}, 64 MB / size)) calls between a "
        "barrier and, on pjrt, `torch.pjrt.synchronize()`, so the time includes the device-to-host "
        "and host-to-device copies and the last result is on the device; a round takes the "
        "slowest rank's time and the median round counts. algbw = size / time per call; busbw = algbw * 2(n-1)/n (nccl-tests' definition; "
        f"n = {ALLREDUCE_NPROC}, so busbw = algbw). GB = 10^9 bytes.", "",
        *allreduce_table(allreduce),
    ]
    with open(os.path.join(HERE, "distributed_results.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
