"""torch.distributed on pjrt: the `pjrt` process-group backend (collectives on host copies through
gloo), torchrun, DDP, FSDP2 and distributed checkpoints, each against what CPU computes
(tests/distributed_worker.py runs in the launched processes)."""
import os
import subprocess
import sys

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
