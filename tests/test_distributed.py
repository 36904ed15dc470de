"""torch.distributed on pjrt: the `pjrt` process-group backend (collectives on host copies through
gloo), torchrun, DDP, FSDP2 and distributed checkpoints, each against what CPU computes
(tests/distributed_worker.py runs in the launched processes), and what a rank sees when another
fails mid-step (tests/distributed_fault_worker.py)."""
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest
import torch
import torch.distributed as dist

from helpers import run_python

WORKER = os.path.join(os.path.dirname(__file__), "distributed_worker.py")


def torchrun(nproc, *args, timeout=400):
    env = dict(os.environ, TORCH_PJRT_CPU_DEVICE_COUNT="1", OMP_NUM_THREADS="1")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc-per-node={nproc}", WORKER, *args]
    proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout)
    assert proc.returncode == 0, f"torchrun failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return proc.stdout + proc.stderr


def assert_phases_passed(output, nproc, phases):
    for rank in range(nproc):
        for phase in phases:
            assert f"rank {rank}: ok {phase}" in output, output[-4000:]


def test_backend_is_registered_by_import_torch_alone():
    out = run_python("""
        import sys, torch, torch.distributed as dist
        print(dist.Backend.PJRT, dist.Backend.default_device_backend_map["pjrt"])
        print("torch_pjrt._C" in sys.modules, torch.pjrt.is_initialized())
    """).stdout.split()
    assert out == ["pjrt", "pjrt", "True", "False"]  # registered; no PJRT client started


def test_two_processes_collectives_ddp_fsdp2_and_checkpoint(tmp_path):
    phases = ["collectives", "ddp", "fsdp", "dcp"]
    output = torchrun(2, *phases, str(tmp_path / "checkpoint"))
    assert_phases_passed(output, 2, phases)
    # The host path explains itself once per process.
    assert output.count("collectives on pjrt tensors run through gloo on host copies") == 2


def test_four_processes_ddp_and_fsdp2():
    output = torchrun(4, "collectives", "ddp", "fsdp")
    assert_phases_passed(output, 4, ["collectives", "ddp", "fsdp"])


def test_topology_comes_from_the_launcher():
    out = run_python("""
        import torch
        print(torch.pjrt.global_rank(), torch.pjrt.world_size(), torch.pjrt.local_rank(),
              torch.pjrt.local_world_size(), torch.pjrt.host_index())
    """, env={"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
              "GROUP_RANK": "1"}).stdout.split()
    assert out == ["3", "8", "1", "2", "1"]
    bad = run_python("import torch; torch.pjrt.global_rank()", env={"RANK": "x"}, check=False)
    assert "RANK='x' is not an integer" in bad.stderr


@pytest.fixture
def single_process_group():
    dist.init_process_group("pjrt", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()


def test_single_process_group(single_process_group):
    assert dist.get_backend() == "pjrt"
    before = torch.pjrt.metrics.collectives().get("allreduce", 0)
    x = torch.arange(4.0, device="pjrt")
    work = dist.all_reduce(x, op=dist.ReduceOp.AVG, async_op=True)
    assert work.is_completed() and work.wait()
    assert torch.equal(x.cpu(), torch.arange(4.0))
    assert torch.pjrt.metrics.collectives()["allreduce"] == before + 1
    cpu = torch.ones(2)
    dist.all_reduce(cpu)  # CPU tensors pass through the same backend
    assert torch.equal(cpu, torch.ones(2))
    assert torch.pjrt.metrics.collectives()["allreduce"] == before + 1  # not a host copy


def test_mixed_cpu_and_pjrt_tensors_in_one_collective(single_process_group):
    outputs = [torch.zeros(3, device="pjrt")]
    dist.all_gather(outputs, torch.arange(3.0))
    assert torch.equal(outputs[0].cpu(), torch.arange(3.0))
    cpu_outputs = [torch.zeros(3)]
    dist.all_gather(cpu_outputs, torch.arange(3.0, device="pjrt"))
    assert torch.equal(cpu_outputs[0], torch.arange(3.0))


def test_streams_and_events_for_fsdp():
    """FSDP2 asks the device module for streams and events; a pjrt device has one stream."""
    s = torch.pjrt.Stream(priority=-1)
    assert isinstance(s, torch.Stream) and s == torch.pjrt.current_stream()
    x = torch.ones(3, device="pjrt") * 2
    event = torch.pjrt.Event()
    with torch.pjrt.stream(s):
        event.record()
    s.wait_event(event)
    event.synchronize()
    assert event.query() and torch.equal(x.cpu(), torch.full((3,), 2.0))


# ---------------------------------------------------------------------------------- faults
# Two ranks started directly, not under torchrun (which kills the survivors when a rank fails and
# so would hide a hang): rank 1 fails in the middle of DDP step 2, after its forward, while rank 0
# waits in the gradient all_reduce of that step's backward (tests/distributed_fault_worker.py).

FAULT_WORKER = os.path.join(os.path.dirname(__file__), "distributed_fault_worker.py")
FAULT_TIMEOUT_S = 15  # the process group's timeout


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_two_ranks_with_a_failure(mode, tmp_path, limit_s=90):
    """Starts both ranks; returns, per rank, (returncode or None if still running at the end,
    stdout, stderr) and the seconds from rank 1's failure to rank 0's exit."""
    base = dict(os.environ, WORLD_SIZE="2", LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(free_port()), TORCH_PJRT_CPU_DEVICE_COUNT="1", OMP_NUM_THREADS="1")
    procs, files = [], []
    try:
        for rank in range(2):
            out, err = open(tmp_path / f"{rank}.out", "w+"), open(tmp_path / f"{rank}.err", "w+")
            files += [out, err]
            env = dict(base, RANK=str(rank), LOCAL_RANK=str(rank))
            procs.append(subprocess.Popen([sys.executable, FAULT_WORKER, mode, str(FAULT_TIMEOUT_S)],
                                          stdout=out, stderr=err, env=env))
        deadline = time.monotonic() + limit_s
        while procs[0].poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        rank0_exit = time.time()
        if mode == "raise":  # rank 1 exits on its own too
            while procs[1].poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
        codes = [p.poll() for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        for f in files:
            f.close()
    texts = [((tmp_path / f"{r}.out").read_text(), (tmp_path / f"{r}.err").read_text()) for r in range(2)]
    failed_at = re.search(r"rank 1: failing at ([\d.]+)", texts[1][0])
    assert failed_at, (f"rank 1 never reached its failure (exits {codes}):\n"
                       + "\n".join(f"rank {r}:\n{o}\n{e[-4000:]}" for r, (o, e) in enumerate(texts)))
    return [(codes[r], *texts[r]) for r in range(2)], rank0_exit - float(failed_at.group(1))


# Per way of failing: what rank 0 must report, and whether only the timeout can end its wait.
# gloo's words for a peer whose process died: an orderly close, or a reset when the kernel tore the
# connection down first (seen once for a SIGKILLed rank: "Read error ...: Connection reset by peer").
PEER_GONE = ("Connection closed by peer", "Connection reset by peer")
FAILURES = {
    "kill": (PEER_GONE, False),  # rank 1 SIGKILLed mid-step
    "raise": (PEER_GONE, False),  # rank 1 raises mid-step and exits
    "stall": ((f"Timed out waiting {FAULT_TIMEOUT_S * 1000}ms",), True),  # raises, stays alive, silent
}


@pytest.mark.parametrize("mode", list(FAILURES))
def test_a_failing_rank_makes_the_other_fail_within_the_timeout(mode, tmp_path):
    errors, after_timeout = FAILURES[mode]
    ranks, waited_s = run_two_ranks_with_a_failure(mode, tmp_path)
    (code0, out0, err0), (code1, out1, err1) = ranks
    report = f"rank 0 exit {code0}, {waited_s:.1f} s after rank 1 failed\n{out0}\n{err0[-6000:]}"
    assert code0 is not None, "rank 0 hangs: " + report
    assert code0 == 1, "rank 0 did not end with a Python exception: " + report  # no signal, no abort
    assert any(error in err0 for error in errors) and "Traceback" in err0, report
    for crash in ("Segmentation fault", "Aborted", "terminate called", "core dumped"):
        assert crash not in err0, report
    # It failed in step 2's backward, after finishing steps 0 and 1 with rank 1.
    assert "rank 0: step 1 " in out0 and "rank 0: step 2 " not in out0, report
    if after_timeout:
        # (rank 0's wait may start a little before rank 1 fails: the ranks are not in lockstep)
        assert FAULT_TIMEOUT_S * 0.5 < waited_s < FAULT_TIMEOUT_S + 30, report
    else:
        assert waited_s < FAULT_TIMEOUT_S, report  # told at once, not at the timeout
    expected_rank1 = {"kill": -signal.SIGKILL, "raise": 1, "stall": None}[mode]
    assert code1 == expected_rank1, f"rank 1 exit {code1}:\n{out1}\n{err1[-4000:]}"
    if mode == "raise":
        assert "InjectedFailure: rank 1 fails on purpose" in err1, err1[-4000:]
