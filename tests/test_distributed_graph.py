"""The graph path of torch.distributed on pjrt, for plugins that run XLA collectives across
processes (``cross_process_collectives``): client options and key-value store, the replicated
compile options, the collectives' StableHLO programs run for real on 4 CPU devices of one
process, the backend putting collectives into the lazy graph (a DDP step is two executions), and
the clear error when the device is used before the process group exists.

No hardware here runs collectives across processes (the CPU plugin ignores the key-value
callbacks), so the process-group tests use the CPU plugin's library under a plugin that declares
the capability, in a group of one process."""
import json
import os
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist

from helpers import run_python
from torch_pjrt import _C
from torch_pjrt.backends.base import DevicePlugin
from torch_pjrt.backends.cpu import CpuPlugin

HERE = os.path.dirname(__file__)
# A plugin over the CPU plugin's library that claims cross-process collectives.
GRAPH_PLUGIN_ENV = {
    "TORCH_PJRT_PLUGIN_LIBRARY": CpuPlugin().library_path(),
    "TORCH_PJRT_PLUGIN_CAPABILITIES": '{"cross_process_collectives": true, "nan_propagating_min_max": false}',
}


def _fields(message: bytes):
    """(field number, value) of each field of a serialized protobuf message (varints and
    length-delimited fields only: all that compile options use)."""
    out, i = [], 0

    def varint():
        nonlocal i
        shift = value = 0
        while True:
            b = message[i]
            i += 1
            value |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                return value

    while i < len(message):
        key = varint()
        if key & 7 == 0:
            out.append((key >> 3, varint()))
        else:
            assert key & 7 == 2, key
            n = varint()
            out.append((key >> 3, message[i:i + n]))
            i += n
    return out


def test_replicated_compile_options_name_replicas_and_devices():
    options = dict(_fields(_C._replicated_compile_options([5, 2, 7])))
    assert 4 not in options  # compile_portable_executable unset: the program is bound to devices
    build = _fields(options[3])
    assert (4, 3) in build and (5, 1) in build  # num_replicas = 3, num_partitions = 1
    assignment = dict(_fields(dict(build)[9]))
    assert assignment[1] == 3 and assignment[2] == 1  # replica_count, computation_count
    assert [v for f, v in _fields(assignment[3])] == [5, 2, 7]  # replica r on device ids[r]
    portable = dict(_fields(_C._replicated_compile_options([])))
    assert portable[4] == 1  # no replicas: the ordinary portable executable


def test_key_value_callbacks_read_and_write_the_store():
    """The C callbacks a plugin is given at client creation, over a torch.distributed store."""
    store = dist.HashStore()
    assert _C._key_value_round_trip(store, "peer/0", "address:1234", "peer/0", 1000) == b"address:1234"
    assert store.get("peer/0") == b"address:1234"
    store.set("peer/1", b"\x00binary\xff")
    assert _C._key_value_round_trip(store, "x", "", "peer/1", 1000) == b"\x00binary\xff"
    missing = _C._key_value_round_trip(store, "y", "1", "never/set", 200).decode()
    assert missing.startswith("error: torch.distributed store get failed"), missing
    assert "timeout" in missing.lower() or "timed out" in missing.lower(), missing


def test_capability_and_distributed_client_options(monkeypatch):
    from torch_pjrt.backends.cuda import CudaPlugin

    assert DevicePlugin.cross_process_collectives is False
    assert CpuPlugin().capabilities()["cross_process_collectives"] is False
    assert DevicePlugin().distributed_client_options(3, 8) == {"node_id": 3, "num_nodes": 8}
    monkeypatch.delenv("TORCH_PJRT_CUDA_GRAPH_COLLECTIVES", raising=False)
    assert CudaPlugin().capabilities()["cross_process_collectives"] is False
    monkeypatch.setenv("TORCH_PJRT_CUDA_GRAPH_COLLECTIVES", "1")  # opt-in (docs/design.md)
    assert CudaPlugin().capabilities()["cross_process_collectives"] is True


def test_collective_programs_run_on_four_replicas():
    env = dict(os.environ, TORCH_PJRT_CPU_DEVICE_COUNT="4")
    proc = subprocess.run([sys.executable, os.path.join(HERE, "distributed_graph_programs.py")],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    for case in ("all_reduce torch.float32 avg", "all_reduce bool", "broadcast torch.bfloat16",
                 "all_gather", "reduce_scatter", "device assignment", "one group per graph"):
        assert f"ok {case}\n" in proc.stdout, proc.stdout


def test_collectives_enter_the_graph_and_a_ddp_step_is_three_launches():
    out = run_python("""
        import torch, torch.distributed as dist, torch.nn as nn
        from torch.nn.parallel import DistributedDataParallel as DDP
        from torch_pjrt.backends import registry
        dist.init_process_group("pjrt", init_method="tcp://127.0.0.1:0", rank=0, world_size=1)
        assert torch.pjrt.capabilities()["cross_process_collectives"]
        # the client started with the store and the plugin's distributed options
        config = registry.candidate_config(0)
        assert config["kv_store"] is not None, config
        assert config["options"]["node_id"] == 0 and config["options"]["num_nodes"] == 1, config

        x = torch.arange(6.0, device="pjrt")
        dist.all_reduce(x, op=dist.ReduceOp.AVG)
        import torch_pjrt
        assert '"stablehlo.all_reduce"' in torch_pjrt._C._pending_graph_text(0)
        assert torch.equal(x.cpu(), torch.arange(6.0))
        flags = torch.tensor([1, 6], device="pjrt")
        dist.all_reduce(flags, op=dist.ReduceOp.BOR)  # no graph combiner: the host path
        assert torch.equal(flags.cpu(), torch.tensor([1, 6]))
        counts = torch.pjrt.metrics.collectives()
        assert counts["graph:allreduce"] == 1 and counts["allreduce"] == 1, counts

        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
        reference = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
        reference.load_state_dict(model.state_dict())
        ddp = DDP(model.to("pjrt"))
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
        data = [(torch.randn(4, 8), torch.randn(4, 4)) for _ in range(5)]
        executions = []
        for xb, yb in data:
            before = torch.pjrt.metrics.counter("Executions")
            opt.zero_grad()
            nn.functional.mse_loss(ddp(xb.to("pjrt")), yb.to("pjrt")).backward()
            opt.step()
            torch.pjrt.synchronize()
            executions.append(torch.pjrt.metrics.counter("Executions") - before)
            ref_opt.zero_grad()
            nn.functional.mse_loss(reference(xb), yb).backward()
            ref_opt.step()
        for p, q in zip(model.parameters(), reference.parameters()):
            torch.testing.assert_close(p.cpu(), q, rtol=1e-5, atol=1e-6)
        import json
        print("RESULT " + json.dumps({"executions": executions, "collectives": torch.pjrt.metrics.collectives()}))
        dist.destroy_process_group()
    """, env=GRAPH_PLUGIN_ENV)
    result = json.loads(out.stdout.split("RESULT ")[-1])
    steps, line = result["executions"], out.stdout
    # From the third step on, the forward is one program, the backward with the gradient
    # all-reduce another and SGD's updates a third, as in any lazy step (the second step also runs
    # DDP's one-time bucket rebuild, which reads bucket sizes back).
    assert steps[2:] == [3, 3, 3], line
    assert result["collectives"]["graph:allreduce"] > 1, line


def test_using_the_device_before_the_process_group_is_a_clear_error():
    env = dict(GRAPH_PLUGIN_ENV, WORLD_SIZE="2", RANK="1", LOCAL_RANK="1", LOCAL_WORLD_SIZE="2")
    out = run_python("""
        import torch
        try:
            torch.ones(2, device="pjrt")
        except RuntimeError as e:
            print("error:", e)
    """, env=env, timeout=120)
    assert "before torch.distributed.init_process_group" in out.stdout, out.stdout + out.stderr
    assert "WORLD_SIZE=2" in out.stdout and 'init_process_group("pjrt")' in out.stdout
