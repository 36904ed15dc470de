"""torch.accelerator.Graph on pjrt (graph/device_graph.h): a region traced once and replayed on the
same tensors with no tracing, as a CUDA graph is. Replays match CPU eager and the lazy path, each
replay is one execution, the capture itself changes nothing, and what a replay could not repeat
(host reads, a CPU-side optimizer state) raises the error torch raises for CUDA graphs."""
import pytest
import torch

from helpers import Counters


def make_mlp(device):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, capturable=device != "cpu")
    return model, opt


def train_step(model, opt, x, y, set_to_none=True):
    opt.zero_grad(set_to_none=set_to_none)
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    return loss


def batches(n):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)) for _ in range(n)]


@pytest.mark.parametrize("set_to_none", [True, False], ids=["grads_made_in_region", "grads_zeroed_in_place"])
def test_training_step_replays_match_cpu_one_execution_each(set_to_none):
    data = batches(6)
    model, opt = make_mlp("cpu")
    expected = [train_step(model, opt, x, y, set_to_none).item() for x, y in data]

    model_p, opt_p = make_mlp("pjrt")
    static_x, static_y = data[0][0].to("pjrt"), data[0][1].to("pjrt")
    for x, y in data[:2]:  # warm-up: the optimizer state exists before the capture
        static_x.copy_(x)
        static_y.copy_(y)
        train_step(model_p, opt_p, static_x, static_y, set_to_none)
    graph = torch.accelerator.Graph()
    with graph:
        static_loss = train_step(model_p, opt_p, static_x, static_y, set_to_none)
    got = []
    for x, y in data[2:]:
        static_x.copy_(x)
        static_y.copy_(y)
        with Counters() as c:
            graph.replay()
        assert c["Executions"] == 1 and c["NodesTraced"] == 0 and c["GraphsCompiled"] == 0
        got.append(static_loss.item())
    torch.testing.assert_close(torch.tensor(got), torch.tensor(expected[2:]), rtol=1e-5, atol=1e-5)
    for p, q in zip(model_p.parameters(), model.parameters()):
        torch.testing.assert_close(p.cpu(), q, rtol=1e-4, atol=1e-5)


def make_convnet():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Dropout(0.5),
                               torch.nn.Conv2d(8, 4, 3), torch.nn.Flatten(), torch.nn.Linear(4 * 12 * 12, 2))


def test_a_step_of_host_kernels_replays_as_two_programs_split_where_the_lazy_step_is():
    """Where a backward is mostly host kernels (convolutions), the lazy step launches it before the
    optimizer's step (the two compete for the cores as one program); a captured step is then two
    programs, replayed in order, with the forward's dropout drawing as the lazy step's does."""
    x = torch.randn(4, 3, 16, 16)
    results = {}
    for mode in ("lazy", "graph"):
        model = make_convnet().to("pjrt")
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        static_x = x.to("pjrt")

        def step():
            opt.zero_grad()
            loss = model(static_x).square().mean()
            loss.backward()
            opt.step()
            return loss

        step()  # momentum buffers exist before the capture
        torch.manual_seed(7)
        if mode == "graph":
            graph = torch.accelerator.Graph()
            with graph:
                loss = step()
            losses = []
            for _ in range(3):
                with Counters() as c:
                    graph.replay()
                assert c["Executions"] == 2 and c["NodesTraced"] == 0
                losses.append(loss.item())
        else:
            losses = [step().item() for _ in range(3)]
        results[mode] = (losses, [p.detach().cpu() for p in model.parameters()])
    torch.testing.assert_close(results["graph"], results["lazy"])


def test_capture_changes_nothing_until_replayed():
    x = torch.arange(4.0).to("pjrt")
    graph = torch.accelerator.Graph()
    with graph:
        x.mul_(2)
        y = x + 1
    assert x.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]  # as a CUDA graph capture, nothing ran
    graph.replay()
    assert x.cpu().tolist() == [0.0, 2.0, 4.0, 6.0]
    assert y.cpu().tolist() == [1.0, 3.0, 5.0, 7.0]
    graph.replay()
    assert y.cpu().tolist() == [1.0, 5.0, 9.0, 13.0]


def test_replay_reads_inputs_written_lazily_and_never_written_inputs():
    static = torch.empty(4, device="pjrt")  # never written before the capture
    graph = torch.accelerator.Graph()
    with graph:
        out = static * 3
    static.copy_(torch.tensor([1.0, 2.0, 3.0, 4.0]))
    graph.replay()
    assert out.cpu().tolist() == [3.0, 6.0, 9.0, 12.0]
    static.add_(1)  # pending when the replay starts
    graph.replay()
    assert out.cpu().tolist() == [6.0, 9.0, 12.0, 15.0]
    static.view(2, 2).copy_(torch.ones(2, 2))  # a buffer of another shape than the captured one
    graph.replay()
    assert out.cpu().tolist() == [3.0] * 4


def test_random_ops_draw_fresh_numbers_like_the_lazy_path():
    x = torch.ones(64, device="pjrt")
    torch.manual_seed(5)
    lazy = [torch.nn.functional.dropout(x, 0.5).cpu() for _ in range(3)]
    torch.manual_seed(5)
    graph = torch.accelerator.Graph()
    with graph:
        out = torch.nn.functional.dropout(x, 0.5)
    replays = []
    for _ in range(3):
        graph.replay()
        replays.append(out.cpu())
    for a, b in zip(lazy, replays):
        torch.testing.assert_close(a, b)
    assert not torch.equal(replays[0], replays[1])


def test_graphs_chained_through_a_dropped_tensor():
    x = torch.tensor([1.0, 2.0], device="pjrt")
    first, second = torch.accelerator.Graph(), torch.accelerator.Graph()
    with first:
        hidden = x + 1
    with second:
        out = hidden * 3
    del hidden  # the graphs keep what it holds between them
    x.copy_(torch.tensor([10.0, 20.0]))
    first.replay()
    second.replay()
    assert out.cpu().tolist() == [33.0, 63.0]


@pytest.mark.parametrize("read", [
    lambda x: (x + 1).cpu(),  # results to the host: a replay would not read them
    lambda x: float(x.exp().exp().exp().exp().exp().sin().cos().tan().log().sum()),  # too much to compute ahead
], ids=["cpu", "large_item"])
def test_host_read_in_the_region_raises(read):
    x = torch.ones(3, device="pjrt")
    graph = torch.accelerator.Graph()
    with pytest.raises(RuntimeError, match="while a graph is being captured"):
        with graph:
            read(x)
    assert (x + 1).cpu().tolist() == [2.0] * 3  # the device works after the failed capture


def test_a_remembered_copy_to_the_host_in_the_region_is_refused_naming_its_line():
    """A remembered read answers without a sync; a replay would not read afresh. A copy of values to
    the host (not a scalar the host's control flow reads) cannot be guarded: the capture refuses
    the region and names the line of the read."""
    mask = torch.ones(4, device="pjrt", dtype=torch.long)
    mask.cpu()
    w = torch.zeros(4, device="pjrt")

    def step():
        if mask.all().cpu():  # the read
            w.add_(1)

    for _ in range(3):
        step()
    graph = torch.accelerator.Graph()
    with pytest.raises(RuntimeError, match=r"reads a value to the host \(.*test_device_graph.py:\d+ in step\)"):
        with graph:
            step()
    assert w.cpu().tolist() == [3.0] * 4


def _masked_step(mask, w):
    if bool(mask.all()):  # transformers' BERT: skip the attention mask when nothing is padded
        w.add_(1)
    else:
        w.sub_(1)
    return w * 2


@pytest.mark.parametrize("warm_up", [True, False], ids=["remembered", "computed_ahead"])
def test_a_scalar_read_in_the_region_is_guarded_on_every_replay(warm_up):
    """A scalar read for the host's control flow (BERT's `attention_mask.all()`) is captured with
    the value it had; every replay computes it again inside the program. While it is unchanged the
    replays match the lazy path, one execution each; once it differs, the next read raises naming
    the read's line, and what that replay wrote raises too (it took the captured branch)."""
    mask = torch.ones(4, device="pjrt", dtype=torch.long)
    w = torch.zeros(4, device="pjrt")
    if warm_up:  # the read is then answered from memory in the capture (as BERT's after warm-up steps)
        for _ in range(2):
            _masked_step(mask, w)
    before = w.cpu().tolist()
    graph = torch.accelerator.Graph()
    with graph:
        out = _masked_step(mask, w)
    assert w.cpu().tolist() == before  # the capture changed nothing
    for k in range(1, 3):
        mask.copy_(torch.tensor([1, 2, 3, 4]))  # new values, still all nonzero
        with Counters() as c:
            graph.replay()
        assert c["Executions"] == 1 and c["NodesTraced"] == 0
        assert w.cpu().tolist() == [before[0] + k] * 4
        assert out.cpu().tolist() == [2 * (before[0] + k)] * 4
    mask.copy_(torch.tensor([1, 0, 1, 1]))  # the lazy path would now take the other branch
    graph.replay()
    with pytest.raises(RuntimeError, match=r"read to the host \(at .*test_device_graph.py:\d+ in _masked_step\) is different in this replay"):
        out.cpu()
    with pytest.raises(RuntimeError, match="different in this replay"):
        w.cpu()  # written by the failed replay: spoiled too
    assert (mask + 1).cpu().tolist() == [2, 1, 2, 2]  # what it did not write is intact
    w2 = torch.full((4,), 5.0, device="pjrt")
    assert _masked_step(mask, w2).cpu().tolist() == [8.0] * 4  # the device goes on working


def test_optimizer_without_capturable_raises_like_cuda():
    model = torch.nn.Linear(4, 2).to("pjrt")
    opt = torch.optim.Adam(model.parameters(), capturable=False)
    model(torch.ones(1, 4, device="pjrt")).sum().backward()
    opt.step()
    graph = torch.accelerator.Graph()
    with pytest.raises(RuntimeError, match="capturable is False"):
        with graph:
            opt.step()


def test_replay_needs_a_capture_and_reset_allows_another():
    graph = torch.accelerator.Graph()
    with pytest.raises(RuntimeError, match="needs a captured graph"):
        graph.replay()
    x = torch.zeros(2, device="pjrt")
    with graph:
        x.add_(1)
    graph.reset()
    with graph:
        x.add_(5)
    graph.replay()
    assert x.cpu().tolist() == [5.0, 5.0]


def test_torch_pjrt_mirrors_torch_cuda_graph_names():
    x = torch.ones(2, device="pjrt")
    g = torch.pjrt.PJRTGraph()
    assert not torch.pjrt.is_current_stream_capturing()
    with torch.pjrt.graph(g):
        assert torch.pjrt.is_current_stream_capturing()
        x.mul_(3)
    assert not torch.pjrt.is_current_stream_capturing()
    g.replay()
    g.replay()
    assert x.cpu().tolist() == [9.0, 9.0]


def test_a_dropped_input_keeps_its_last_value():
    x = torch.tensor([1.0, 2.0], device="pjrt")
    graph = torch.accelerator.Graph()
    with graph:
        out = x * 2
    del x
    graph.replay()
    assert out.cpu().tolist() == [2.0, 4.0]


def test_replay_inside_a_capture_raises():
    x = torch.zeros(2, device="pjrt")
    first, second = torch.accelerator.Graph(), torch.accelerator.Graph()
    with first:
        x.add_(1)
    with pytest.raises(RuntimeError, match="while another is being captured"):
        with second:
            first.replay()
    first.replay()
    assert x.cpu().tolist() == [1.0, 1.0]
