"""Pipelined launches (graph/trace.h PipelinedLaunchDue, docs/design.md "Pipelined inference"): a
trace that autograd records nothing of is launched in pieces as it is traced, without waiting, so
the device runs its start while the host traces the rest: the first piece `pipelined_launch_nodes()`
ops long, each later one as long as those before it together. Results equal CPU eager's,
every step of a loop reuses the same pieces, and training steps, optimizer steps, backward passes
and captures are never cut."""
import pytest
import torch
import torch.nn as nn

from helpers import Counters, step_launches

PIECE = torch.pjrt.pipelined_launch_nodes()


def chain(x, ops):
    """`ops` elementwise ops, each one op node."""
    for i in range(ops):
        x = x * 1.001 if i % 2 == 0 else torch.tanh(x)
    return x


def mlp(width=32, depth=40):
    return nn.Sequential(*[m for _ in range(depth) for m in (nn.Linear(width, width), nn.GELU())])


@pytest.fixture
def piece_length():
    """Restores the default piece length after a test that changes it."""
    yield
    torch.pjrt.set_pipelined_launch_nodes(PIECE)


def test_an_inference_trace_launches_in_pieces_and_matches_cpu():
    assert PIECE == 100
    x = torch.randn(64)
    with torch.no_grad():
        with Counters() as c:
            got = chain(x.to("pjrt"), 4 * PIECE + 10).cpu()
    torch.testing.assert_close(got, chain(x, 4 * PIECE + 10))
    # Pieces of 100, 100 and 200 ops (each as long as those before it), then the read's 10.
    assert c["Sync::pipelined"] == 3 and c["Sync::to_cpu"] == 1 and c["Executions"] == 4


def test_every_step_of_an_inference_loop_reuses_the_same_pieces():
    torch.manual_seed(0)
    model = mlp()
    x = torch.randn(8, 32)
    on_pjrt = mlp().to("pjrt")
    on_pjrt.load_state_dict(model.state_dict())
    with torch.inference_mode():
        on_pjrt(x.to("pjrt")).cpu()  # compiles the pieces
        with Counters() as c:
            for _ in range(3):
                got = on_pjrt(x.to("pjrt")).cpu()
        expected = model(x)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    assert c["Sync::pipelined"] >= 3 and c["GraphsCompiled"] == 0


def test_training_steps_and_optimizer_steps_are_not_pipelined():
    # The forward and backward are recorded by autograd; the optimizer's updates, traced under
    # no_grad, launch as one program at the step's end (SetInOptimizerStep).
    torch.manual_seed(0)
    model = mlp(depth=60).to("pjrt")
    assert len(list(model.parameters())) > PIECE  # AdamW traces several ops per parameter
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(8, 32).to("pjrt")
    with Counters() as c:
        for _ in range(2):
            opt.zero_grad(set_to_none=True)
            loss = model(x).square().mean()
            loss.backward()
            opt.step()
            loss.item()
    assert c["Sync::pipelined"] == 0 and step_launches(c) == (6, 2, 2, 2)


def test_a_backward_pass_traced_alone_is_not_pipelined():
    # A read between the forward and the backward launches the forward; the backward's ops then run
    # with grad mode off, but inside a backward pass.
    model = mlp(depth=60).to("pjrt")
    loss = model(torch.randn(8, 32).to("pjrt")).square().mean()
    loss.item()
    with Counters() as c:
        loss.backward()
        model[0].weight.grad.cpu()
    assert c["Sync::pipelined"] == 0 and c["Executions"] == 1


def test_a_loop_that_does_not_read_stops_being_cut_after_the_bound():
    # Cut positions drift from step to step in such a loop; past kPipelinedTraceNodes (1000 ops)
    # from the last other launch nothing more is cut, which bounds the pieces it compiles: 100,
    # 100, 200 and 400 ops, and the next (800) would pass the bound.
    x = torch.randn(16)
    with torch.no_grad():
        with Counters() as c:
            y = chain(x.to("pjrt"), 25 * PIECE)
        assert c["Sync::pipelined"] == 4
        torch.testing.assert_close(y.cpu(), chain(x, 25 * PIECE))


def test_pipelining_can_be_turned_off(piece_length):
    torch.pjrt.set_pipelined_launch_nodes(0)
    with torch.no_grad(), Counters() as c:
        chain(torch.randn(16).to("pjrt"), 3 * PIECE).cpu()
    assert c["Sync::pipelined"] == 0 and c["Executions"] == 1
    with pytest.raises(ValueError, match="pipelined_launch_nodes"):
        torch.pjrt.set_pipelined_launch_nodes(-1)


def test_an_out_of_range_index_in_an_earlier_piece_raises_at_the_read():
    # A piece does not wait for the previous piece's index checks (it would stall the host): its
    # results inherit them, and the read raises.
    table = torch.randn(10, 16).to("pjrt")
    with torch.no_grad():
        rows = table[torch.tensor([3, 12]).to("pjrt")]
        y = chain(rows, 2 * PIECE)
        with pytest.raises(IndexError):
            y.cpu()


def test_a_compiled_function_under_no_grad_is_captured_whole():
    x = torch.randn(32)
    compiled = torch.compile(lambda t: chain(t, 3 * PIECE), backend="pjrt")
    with torch.no_grad():
        for _ in range(3):
            with Counters() as c:
                got = compiled(x.to("pjrt")).cpu()
            torch.testing.assert_close(got, chain(x, 3 * PIECE))
    assert c["Sync::pipelined"] == 0


def test_a_device_graph_captured_under_no_grad_is_one_region():
    x = torch.randn(32).to("pjrt")
    with torch.no_grad():
        chain(x, 3 * PIECE).cpu()  # warm-up
        graph = torch.pjrt.PJRTGraph()
        with Counters() as c, torch.pjrt.graph(graph):
            y = chain(x, 3 * PIECE)
        assert c["Sync::pipelined"] == 0
        x.copy_(torch.ones(32))
        graph.replay()
        torch.testing.assert_close(y.cpu(), chain(torch.ones(32), 3 * PIECE))
