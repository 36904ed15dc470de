"""Runs the graph path's collective programs (tests/test_distributed_graph.py) for real on the CPU
plugin: one process with 4 CPU devices plays a group of 4 processes. Each collective is traced as
every group rank would trace it, the program compiled with the replicated compile options, and
run on all 4 devices at once; each replica's results must equal what torch computes on CPU.

Run with TORCH_PJRT_CPU_DEVICE_COUNT=4. Prints "ok <case>" per case.
"""
import torch
import torch_pjrt
from torch_pjrt import _C

N = 4
torch.manual_seed(0)


def traced_program(kind, rank, devices, x_shape, out_shape, dtype, op="sum", root=0):
    """The StableHLO group rank `rank` would run for one collective: its input is a parameter
    (a device buffer), so each replica can be given its own."""
    x = torch.zeros(x_shape, dtype=dtype).to("pjrt")
    torch.pjrt.synchronize()
    out = torch.empty(out_shape, dtype=dtype, device="pjrt")
    _C._trace_collective(kind, out, x, list(devices), rank, op, root)
    text = _C._pending_graph_text(0), _C._pending_graph_scalars(0)
    del x, out  # dropping the results leaves nothing to run (this process is not a 4-process job)
    assert _C._pending_graph_text(0) == ""
    return text


def run(kind, inputs, out_shape, op="sum", root=0, devices=tuple(range(N))):
    """Each replica's result of `kind` when replica r holds inputs[r]."""
    dtype, shape = inputs[0].dtype, tuple(inputs[0].shape)
    texts = [traced_program(kind, r, devices, shape, out_shape, dtype, op, root) for r in range(N)]
    assert "mhlo.num_replicas = 4" in texts[0][0], texts[0][0]
    assert "replica_groups = dense<[[0, 1, 2, 3]]>" in texts[0][0], texts[0][0]
    # Every rank traces the same program (a broadcast finds its source by replica id), so one
    # execution on all replicas is what the ranks' processes would run.
    assert all(t[0] == texts[0][0] for t in texts), "ranks traced different programs"
    text, scalars = texts[0]
    # A storage's array is 1-D (docs/design.md, "Flat storages"): inputs and results are flat.
    results = _C._run_all_replicas(text, list(devices), [[t.reshape(-1), *scalars] for t in inputs])
    return [r[-1].reshape(out_shape) for r in results]


def check_all_reduce():
    cases = [
        (torch.float32, "sum", lambda xs: sum(xs[1:], xs[0].clone())),
        (torch.float32, "avg", lambda xs: sum(xs[1:], xs[0].clone()) / N),
        (torch.float32, "max", lambda xs: torch.stack(xs).amax(0)),
        (torch.float32, "min", lambda xs: torch.stack(xs).amin(0)),
        (torch.float32, "product", lambda xs: torch.stack(xs).prod(0)),
        (torch.int64, "avg", lambda xs: torch.div(torch.stack(xs).sum(0), N, rounding_mode="trunc")),
        (torch.bfloat16, "sum", None),
        (torch.complex64, "sum", lambda xs: torch.stack(xs).sum(0)),
    ]
    for dtype, op, reference in cases:
        if dtype.is_floating_point or dtype.is_complex:
            inputs = [torch.randn(2, 3, dtype=dtype) for _ in range(N)]
        else:
            inputs = [torch.randint(-50, 50, (2, 3), dtype=dtype) for _ in range(N)]
        results = run("all_reduce", inputs, (2, 3), op=op)
        if reference is None:  # bf16: summed in the program's order; compare in float32
            expected = torch.stack([t.float() for t in inputs]).sum(0)
            for got in results:
                torch.testing.assert_close(got.float(), expected, atol=0.1, rtol=0.02)
        else:
            expected = reference(inputs)
            for got in results:
                torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6)
        print(f"ok all_reduce {dtype} {op}")
    flags = [torch.tensor([True, False, False]), torch.tensor([True, True, False]),
             torch.tensor([True, False, False]), torch.tensor([True, False, False])]
    for op, expected in (("sum", torch.tensor([True, True, False])), ("min", torch.tensor([True, False, False]))):
        for got in run("all_reduce", flags, (3,), op=op):
            assert torch.equal(got, expected), (op, got)
    print("ok all_reduce bool")


def check_broadcast():
    special = torch.tensor([-0.0, float("nan"), float("inf"), -1.5, 3.0])
    for dtype in (torch.float32, torch.bfloat16, torch.float64, torch.int32, torch.bool, torch.complex64):
        inputs = [(special * (r + 1)).to(dtype) if dtype != torch.bool else torch.tensor([r % 2 == 0] * 5)
                  for r in range(N)]
        root = 2
        for got in run("broadcast", inputs, (5,), root=root):
            a, b = got, inputs[root]
            if dtype.is_floating_point:  # bit for bit: -0.0 and NaN included
                assert torch.equal(a.view(torch.uint8), b.view(torch.uint8)), (dtype, a, b)
            elif dtype.is_complex:
                assert torch.equal(torch.view_as_real(a).view(torch.uint8), torch.view_as_real(b).view(torch.uint8))
            else:
                assert torch.equal(a, b), (dtype, a, b)
        print(f"ok broadcast {dtype}")


def check_all_gather_and_reduce_scatter():
    inputs = [torch.randn(2, 3) for _ in range(N)]
    expected = torch.cat(inputs)
    for got in run("all_gather", inputs, (2 * N, 3)):
        assert torch.equal(got.reshape(2 * N, 3), expected)
    print("ok all_gather")
    inputs = [torch.randn(N * 2, 3) for _ in range(N)]
    total = torch.stack(inputs).sum(0)
    for op, scale in (("sum", 1), ("avg", N)):
        results = run("reduce_scatter", inputs, (2, 3), op=op)
        for r, got in enumerate(results):
            torch.testing.assert_close(got.reshape(2, 3), total[2 * r:2 * r + 2] / scale, rtol=1e-6, atol=1e-6)
    print("ok reduce_scatter")


def check_device_assignment_is_honored():
    """Replica r runs on devices[r]: with a permuted assignment, replica 0 (the first in the
    gathered result) runs on device 3 and reads the input placed there."""
    devices = (3, 1, 2, 0)
    inputs = [torch.full((2,), float(r)) for r in range(N)]
    texts = [traced_program("all_gather", r, devices, (2,), (2 * N,), torch.float32) for r in range(N)]
    results = _C._run_all_replicas(texts[0][0], list(devices), [[t] for t in inputs])
    assert torch.equal(results[0][-1], torch.cat(inputs)), results[0][-1]
    print("ok device assignment")


def check_one_group_per_graph():
    """A collective of another group launches the pending graph first: one program, one group."""
    x = torch.ones(3).to("pjrt")
    torch.pjrt.synchronize()
    out = torch.empty(3, device="pjrt")
    _C._trace_collective("all_reduce", out, x, [0], 0, "sum", 0)
    assert "all_reduce" in _C._pending_graph_text(0)
    before = torch.pjrt.metrics.counters().get("Sync::other", 0)
    _C._trace_collective("all_reduce", out, x, [0, 1], 0, "sum", 0)
    assert torch.pjrt.metrics.counters().get("Sync::other", 0) == before + 1
    assert "mhlo.num_replicas = 2" in _C._pending_graph_text(0)
    del x, out
    print("ok one group per graph")


check_all_reduce()
check_broadcast()
check_all_gather_and_reduce_scatter()
check_device_assignment_is_honored()
check_one_group_per_graph()
