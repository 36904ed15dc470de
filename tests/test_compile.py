"""torch.compile(..., backend="pjrt") (torch_pjrt/dynamo.py, graph/capture.h): results match CPU
eager, the first call per input signature captures the graph and later calls replay it without
tracing a single op, and what cannot be captured still runs correctly."""
import copy
import os
import subprocess
import sys

import pytest
import torch
import torch._dynamo

from torch_pjrt import metrics

from helpers import Counters


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def counts():
    c = metrics.counters()
    return {k: c.get(k, 0) for k in ("NodesTraced", "GraphReplays", "GraphsCaptured", "Executions",
                                      "FallbackOps")} | {"dynamo": metrics.dynamo()}


def delta(before, after, name):
    return after[name] - before[name]


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))


def test_backend_is_found_without_importing_torch_pjrt():
    code = ("import sys, torch\n"
            "f = torch.compile(lambda x: torch.sin(x) * 2, backend='pjrt')\n"
            "print(f(torch.ones(3, device='pjrt')).cpu().tolist(), 'torch_pjrt.dynamo' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    values, imported = out.stdout.split("]")
    assert [float(v) for v in values.strip("[ ").split(",")] == pytest.approx([2 * torch.sin(torch.tensor(1.0)).item()] * 3)
    assert imported.strip() == "True"  # loaded by Dynamo through the entry point


def test_inference_matches_cpu_and_replays_trace_nothing():
    model = mlp().eval()
    compiled = torch.compile(copy.deepcopy(model).to("pjrt"), backend="pjrt")
    x = torch.randn(8, 16)
    with torch.no_grad():
        first = compiled(x.to("pjrt"))
        before = counts()
        for _ in range(3):
            got = compiled(x.to("pjrt"))
        after = counts()
        torch.testing.assert_close(got.cpu(), model(x))
        torch.testing.assert_close(first.cpu(), model(x))
    assert delta(before, after, "NodesTraced") == 0
    assert delta(before, after, "GraphReplays") == 3 and delta(before, after, "Executions") == 3
    assert after["GraphsCaptured"] >= 1


def test_forward_and_backward_match_cpu():
    model = mlp()
    device_model = copy.deepcopy(model).to("pjrt")
    compiled = torch.compile(device_model, backend="pjrt")
    x = torch.randn(8, 16)
    start = counts()
    for step in range(3):
        if step == 2:
            before = counts()
        model.zero_grad()
        device_model.zero_grad()
        model(x).square().mean().backward()
        compiled(x.to("pjrt")).square().mean().backward()
        for p, q in zip(model.parameters(), device_model.parameters()):
            torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-5, atol=1e-6)
    after = counts()
    assert delta(before, after, "GraphReplays") == 2  # forward and backward graphs
    assert after["dynamo"]["graphs"] - start["dynamo"].get("graphs", 0) == 2


def train_step(model, opt, x, y):
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss


def test_whole_training_step_with_optimizer_matches_cpu():
    model = mlp()
    device_model = copy.deepcopy(model).to("pjrt")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    device_opt = torch.optim.AdamW(device_model.parameters(), lr=1e-2)
    step = torch.compile(train_step, backend="pjrt")
    x, y = torch.randn(8, 16), torch.randn(8, 4)
    start = metrics.dynamo().get("partitions", 0)
    traced, donated = [], []
    for _ in range(4):
        before = counts()
        donated_before = metrics.counter("DonatedBuffers")
        want = train_step(model, opt, x, y)
        got = step(device_model, device_opt, x.to("pjrt"), y.to("pjrt"))
        torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-6)
        traced.append(delta(before, counts(), "NodesTraced"))
        donated.append(metrics.counter("DonatedBuffers") - donated_before)
    for p, q in zip(model.parameters(), device_model.parameters()):
        torch.testing.assert_close(q.detach().cpu(), p.detach(), rtol=1e-5, atol=1e-6)
    # The optimizer graph mixes CPU step counts with pjrt updates: its pjrt part is captured.
    assert metrics.dynamo().get("partitions", 0) > start
    # Steady steps trace only the implicit ones_like of loss.backward() (outside the graphs).
    assert traced[0] > 50 and max(traced[2:]) <= 3, traced
    # The optimizer's replays update the 4 parameters and their 8 moments in place.
    assert min(donated[2:]) >= 12, donated


def test_random_ops_follow_the_lazy_stream_and_draw_fresh_numbers():
    def f(x):
        return torch.nn.functional.dropout(x, 0.5, training=True) + torch.rand_like(x)

    x = torch.ones(64, device="pjrt")
    torch.manual_seed(7)
    lazy = [f(x).cpu() for _ in range(3)]
    compiled = torch.compile(f, backend="pjrt")
    torch.manual_seed(7)
    before = counts()
    got = [compiled(x).cpu() for _ in range(3)]
    assert delta(before, counts(), "GraphReplays") == 2
    for a, b in zip(got, lazy):
        torch.testing.assert_close(a, b)
    assert not torch.equal(got[1], got[2])


def test_input_mutation_and_aliased_outputs_behave_as_eager():
    def f(x, y):
        x.add_(1)
        return x * 2, x.view(-1), y.t()

    compiled = torch.compile(f, backend="pjrt")
    xc, yc = torch.zeros(2, 3), torch.arange(6.0).reshape(2, 3)
    xp, yp = xc.to("pjrt"), yc.to("pjrt")
    for _ in range(3):
        want = f(xc, yc)
        got = compiled(xp, yp)
        for a, b in zip(got, want):
            torch.testing.assert_close(a.cpu(), b)
        torch.testing.assert_close(xp.cpu(), xc)
    got[1].mul_(10)  # a view of x, as in eager
    assert xp.cpu()[0, 0].item() == 30.0
    assert got[2]._base is yp or got[2].untyped_storage().data_ptr() == yp.untyped_storage().data_ptr()


def test_replays_donate_overwritten_inputs_unless_something_else_reads_them():
    def f(x):
        x.add_(1)
        return x * 2

    compiled = torch.compile(f, backend="pjrt")
    x = torch.zeros(1000, device="pjrt")
    compiled(x)  # capture
    for step in range(2, 4):
        donated = metrics.counter("DonatedBuffers")
        out = compiled(x)
        assert metrics.counter("DonatedBuffers") == donated + 1  # x's old buffer became its new one
        torch.testing.assert_close(out.cpu(), torch.full((1000,), 2.0 * step))
    # A pending (not yet executed) trace reads x's current buffer: the replay must leave it alone.
    reader = x * 3
    donated = metrics.counter("DonatedBuffers")
    compiled(x)
    assert metrics.counter("DonatedBuffers") == donated
    torch.testing.assert_close(reader.cpu(), torch.full((1000,), 9.0))
    torch.testing.assert_close(x.cpu(), torch.full((1000,), 4.0))


def test_ops_without_lowering_split_the_graph_into_captured_parts():
    def f(x):
        y = torch.sin(x) @ x
        s = torch.linalg.svdvals(y)  # no pjrt lowering: runs on the CPU
        return (s * 2).exp(), y + 1

    compiled = torch.compile(f, backend="pjrt")
    x = torch.randn(4, 4)
    start = metrics.dynamo().get("partitions", 0)
    for _ in range(3):
        before = counts()
        got = compiled(x.to("pjrt"))
        for a, b in zip(got, f(x)):
            torch.testing.assert_close(a.cpu(), b, rtol=1e-4, atol=1e-5)
    after = counts()
    assert metrics.dynamo()["partitions"] - start == 2
    assert delta(before, after, "GraphReplays") == 2 and delta(before, after, "FallbackOps") == 1


def test_a_read_answered_without_a_sync_is_never_baked_into_replays():
    """A CPU fallback inside a compiled graph reads its input, a computation that an earlier
    eager read of the same buffers remembered (graph/read_memo.h). The graph is split around the
    fallback and new inputs give new results: no replay reuses the value read once. (The fallback
    itself refuses the capture today; FinishCapture also refuses any trace in which a read was
    answered without a cut, for reads that do not fall back.)"""
    def f(x):
        return torch.linalg.svdvals(torch.sin(x) @ x) * 2  # svdvals: no pjrt lowering

    x = torch.randn(4, 4)
    xp = x.to("pjrt")
    f(xp).cpu()  # eager: the fallback's read of sin(x) @ x is remembered
    compiled = torch.compile(f, backend="pjrt")
    with Counters() as c:
        got = compiled(xp)
    assert c["RememberedReads"] >= 1
    torch.testing.assert_close(got.cpu(), f(x), rtol=1e-4, atol=1e-5)
    for _ in range(2):
        x2 = torch.randn(4, 4)
        torch.testing.assert_close(compiled(x2.to("pjrt")).cpu(), f(x2), rtol=1e-4, atol=1e-5)


def test_default_backend_stops_with_a_pointer_to_the_pjrt_backend():
    compiled = torch.compile(lambda x: torch.sin(x) + 1)
    with pytest.raises(Exception, match='backend="pjrt"'):
        compiled(torch.ones(3, device="pjrt"))


def test_new_shapes_capture_again_and_inputs_of_other_layouts_are_not_misread():
    compiled = torch.compile(lambda x: x * 2 + 1, backend="pjrt", dynamic=True)
    for n in (4, 6, 6):
        x = torch.randn(n)
        torch.testing.assert_close(compiled(x.to("pjrt")).cpu(), x * 2 + 1)
    captured = metrics.counter("GraphsCaptured")
    # Same sizes, strides and offset, but a view of a larger storage: the program read the whole
    # storage as its parameter, so this must capture again rather than replay.
    big = torch.randn(12)
    torch.testing.assert_close(compiled(big.to("pjrt")[:6]).cpu(), big[:6] * 2 + 1)
    assert metrics.counter("GraphsCaptured") == captured + 1


def test_out_of_range_index_in_a_replay_raises_at_the_next_sync():
    emb = torch.nn.Embedding(10, 4).to("pjrt")
    compiled = torch.compile(emb, backend="pjrt")
    with torch.no_grad():
        compiled(torch.tensor([1, 2], device="pjrt")).cpu()
        out = compiled(torch.tensor([1, 12], device="pjrt"))
        with pytest.raises(IndexError, match="out of range|index"):
            out.cpu()
        torch.testing.assert_close(compiled(torch.tensor([3], device="pjrt")).cpu(), emb.weight[3:4].cpu())


def test_a_new_process_loads_the_compiled_graphs_from_the_disk_cache(tmp_path):
    code = ("import torch\n"
            "f = torch.compile(lambda x, w: torch.tanh(x @ w).sum(0), backend='pjrt')\n"
            "x = torch.ones(4, 4, device='pjrt')\n"
            "f(x, x).cpu(); f(x, x).cpu()\n"
            "c = torch.pjrt.metrics.counters()\n"
            "print(c.get('GraphsCompiled', 0), c.get('CacheHitsDisk', 0), c.get('GraphReplays', 0))\n")
    env = dict(os.environ, TORCH_PJRT_CACHE_DIR=str(tmp_path))
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
            for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr
    first, second = ([int(v) for v in r.stdout.split()] for r in runs)
    assert first[0] >= 1 and first[2] == 1
    assert second[0] == 0 and second[1] >= 1 and second[2] == 1


def test_values_computed_from_a_failed_index_check_stay_poisoned_through_replays():
    compiled = torch.compile(lambda t: t * 2 + 1, backend="pjrt")
    weight = torch.randn(10, 3)
    device_weight = weight.to("pjrt")
    for bad in (12, 15):  # the capture, then a replay: neither waits for the lookup's check
        looked_up = device_weight[torch.tensor([1, bad], device="pjrt")]
        out = compiled(looked_up)
        with pytest.raises(IndexError, match="out of bounds"):
            out.cpu()
    good = compiled(device_weight[torch.tensor([3, 4], device="pjrt")])
    torch.testing.assert_close(good.cpu(), weight[[3, 4]] * 2 + 1)


def test_eval_batch_norm_cnn_matches_cpu():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten()).eval()
    model[1].running_mean.uniform_(-1, 1)
    model[1].running_var.uniform_(0.5, 2)
    compiled = torch.compile(copy.deepcopy(model).to("pjrt"), backend="pjrt")
    x = torch.randn(2, 3, 8, 8)
    lowered_before = metrics.lowered().get("_native_batch_norm_legit_no_training", 0)
    before = counts()
    with torch.no_grad():
        for _ in range(2):  # AOT graphs call _native_batch_norm_legit_no_training
            torch.testing.assert_close(compiled(x.to("pjrt")).cpu(), model(x), rtol=1e-4, atol=1e-5)
    assert metrics.lowered().get("_native_batch_norm_legit_no_training", 0) > lowered_before
    assert delta(before, counts(), "FallbackOps") == 0


def test_the_backward_seed_of_a_compiled_loss_is_uploaded_not_executed():
    """loss.backward() seeds the backward graph with ones_like(loss), made by autograd outside any
    graph. The replay uploads that fill from the host instead of executing the pending trace for
    it: one execution per graph, and no sync that would wait for the forward still running."""
    cpu_model = mlp()
    model = copy.deepcopy(cpu_model).to("pjrt")
    compiled = torch.compile(lambda x: model(x).square().mean(), backend="pjrt")
    x = torch.randn(8, 16)
    for _ in range(2):
        compiled(x.to("pjrt")).backward()
        model.zero_grad(set_to_none=True)
    device_x = x.to("pjrt")
    with Counters() as c:
        compiled(device_x).backward()
        torch.pjrt.synchronize()
    assert c["GraphReplays"] == 2 and c["Executions"] == 2 and c["Sync::compiled_call"] == 0
    cpu_model(x).square().mean().backward()
    for p, q in zip(cpu_model.parameters(), model.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-5, atol=1e-6)


def test_0d_cpu_inputs_are_replayed_as_value_scalars_not_uploads():
    """0-d CPU inputs (an optimizer's step counts and bias corrections) take their value from the
    value-scalar arrays each replay uploads anyway: one upload per dtype, not one per scalar, and
    each call sees its own values."""
    def f(x, a, b, c, d, n):
        return (x * a + b) / c - d * n

    compiled = torch.compile(f, backend="pjrt")
    x = torch.randn(5)
    device_x = x.to("pjrt")
    for step in range(4):
        scalars = [torch.tensor(1.5 + step), torch.tensor(-2.0 * step), torch.tensor(3.0 + step),
                   torch.tensor(0.25 * step, dtype=torch.float64), torch.tensor(step + 1)]
        with Counters() as c:
            got = compiled(device_x, *scalars)
        torch.testing.assert_close(got.cpu(), f(x, *scalars), rtol=1e-6, atol=1e-6)
        if step >= 2:
            assert c["GraphReplays"] == 1 and c["NodesTraced"] == 0
            assert c["TransfersToDevice"] <= 3, c  # float32, float64 and int64 arrays


def test_a_function_that_writes_its_0d_cpu_input_is_refused_and_still_correct():
    # Not reachable through Dynamo (AOTAutograd keeps CPU mutations in eager CPU partitions), so
    # through the capture API itself: a replay would have no storage for the written scalar.
    from torch_pjrt import _C

    x = torch.arange(3.0)
    start, (dx, da) = _C._capture_begin([x.to("pjrt"), torch.tensor(2.0)])
    da.add_(1)
    out = dx * da
    call, reason = _C._capture_finish(start, [dx, da], [out])
    assert call is None and reason == "it writes a 0-d CPU input"
    torch.testing.assert_close(out.cpu(), x * 3.0)
    torch.testing.assert_close(da.cpu(), torch.tensor(3.0))


def test_empty_outputs_and_inputs_replay_without_a_sync():
    """A graph that returns an empty tensor it made (mkldnn_rnn_layer's workspace, which the
    forward of a compiled LSTM returns for its backward) is captured, and a graph taking one
    replays as one execution: an empty storage has nothing to compute or upload."""
    make = torch.compile(lambda x: (x * 2, x.new_empty(0)), backend="pjrt")
    use = torch.compile(lambda x, empty: torch.cat([x, empty]) + 1, backend="pjrt")
    x = torch.ones(4, device="pjrt")
    for _ in range(2):
        use(*make(x)).cpu()
    before = counts()
    doubled, empty = make(x)
    got = use(doubled, empty).cpu()
    after = counts()
    assert got.tolist() == [3.0] * 4 and empty.shape == (0,) and empty.device.type == "pjrt"
    assert delta(before, after, "NodesTraced") == 0
    assert delta(before, after, "GraphReplays") == 2 and delta(before, after, "Executions") == 2


def test_compiled_lstm_bias_gradients_are_separate_tensors():
    """A compiled nn.LSTM backward returns one tensor as both bias gradients (AOTAutograd merges
    them: mkldnn_rnn_layer_backward's Meta kernel returns one tensor twice). Replays return it
    twice as one tensor, as the traced call did, so autograd gives each bias its own .grad:
    scaling one in place leaves the other as CPU eager computes it."""
    torch.manual_seed(0)
    cpu = torch.nn.LSTM(8, 8)
    dev = copy.deepcopy(cpu).to("pjrt")
    x = torch.randn(3, 2, 8)
    cpu(x)[0].sum().backward()
    step = torch.compile(lambda: dev(x.to("pjrt"))[0].sum().backward(), backend="pjrt")
    with torch._dynamo.config.patch(allow_rnn=True):
        for _ in range(3):
            dev.zero_grad(set_to_none=True)
            step()
            dev.bias_ih_l0.grad.mul_(2)
            torch.testing.assert_close(dev.bias_hh_l0.grad.cpu(), cpu.bias_hh_l0.grad, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(dev.bias_ih_l0.grad.cpu(), 2 * cpu.bias_ih_l0.grad, rtol=1e-5, atol=1e-6)
    assert metrics.counter("GraphReplays") >= 2
