"""Run by tests/test_distributed.py's fault tests, two of them started directly (not under
torchrun, which would kill the survivor when a rank fails and so hide a hang): DDP training on
pjrt through the `pjrt` process group, where rank 1 fails in the middle of step 2, between its
forward and its backward (whose gradient all_reduce rank 0 is then waiting in):

    RANK=r WORLD_SIZE=2 LOCAL_RANK=r LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=p \
        python tests/distributed_fault_worker.py <kill|raise|stall> <timeout seconds>

kill: rank 1 SIGKILLs itself. raise: rank 1 raises, and exits with the traceback. stall: rank 1
raises, catches it and sleeps without exiting (its sockets stay open), so only the process
group's timeout can end rank 0's wait. Each rank prints "rank r: step s" as it finishes a step
and rank 1 prints "rank 1: failing at <time.time()>" just before it fails.
"""
import os
import signal
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS, FAILING_STEP = 4, 2


class InjectedFailure(RuntimeError):
    pass


def fail(mode):
    print(f"rank 1: failing at {time.time():.3f}", flush=True)
    if mode == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    raise InjectedFailure(f"rank 1 fails on purpose in step {FAILING_STEP} ({mode})")


def train(mode, rank):
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)).to("pjrt"))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(STEPS):
        x, y = torch.randn(8, 16).to("pjrt"), torch.randn(8, 1).to("pjrt")
        loss = nn.functional.mse_loss(model(x), y)
        if rank == 1 and step == FAILING_STEP:
            fail(mode)
        loss.backward()  # DDP's gradient all_reduce
        optimizer.step()
        optimizer.zero_grad()
        print(f"rank {rank}: step {step} loss {loss.item():.4f}", flush=True)


def main(mode, timeout_s):
    dist.init_process_group("pjrt", timeout=timedelta(seconds=timeout_s))
    rank = dist.get_rank()
    try:
        train(mode, rank)
    except InjectedFailure:
        if mode != "stall":
            raise
        time.sleep(10 * timeout_s)  # alive and silent: rank 0 must give up on its own
        sys.exit(3)
    dist.destroy_process_group()
    print(f"rank {rank}: finished", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]))
