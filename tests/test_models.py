"""Real models train on pjrt like on the CPU, every op native: transformers GPT-2, BERT, Llama
(RoPE, RMSNorm, GQA, SDPA) and T5, timm ResNet-18, ViT and MobileNetV3, and an LSTM language model,
all from small configs with random weights (bench/real_models.py), and six architectures of
bench/zoo_models.py whose patterns those lack. Each trains a few steps from the same initial
weights on both devices; losses and weights must match, and the step must not fall back to the
CPU for any op. SGD with momentum, not Adam: Adam divides each gradient by its own magnitude, so a
weight whose true gradient is ~1e-11 moves by +-lr depending on rounding noise, and weights could
not be compared."""
import copy

import pytest
import torch

import real_models
from graph_replay import graph_replayer

STEPS = 3


def train(model, batch, loss_fn, steps=STEPS, compile=False, traced=None, graph=False):
    """The losses of `steps` SGD steps; with `compile`, the whole step under
    torch.compile(backend="pjrt"); with `graph`, the first step runs lazily and the whole step is
    then captured with torch.accelerator.Graph and replayed. `traced` collects the ops each step
    traced (replays trace none; under torch.compile autograd's implicit ones_like(loss) is traced
    outside the graphs)."""
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    def step():
        opt.zero_grad()
        loss = loss_fn(model, *batch)
        loss.backward()
        opt.step()
        return loss

    if compile:
        step = torch.compile(step, backend="pjrt")
    if graph:
        step = graph_replayer(step, warmup=1)
    losses = []
    for _ in range(steps):
        before = torch.pjrt.metrics.counter("NodesTraced")
        losses.append(step().item())
        if traced is not None:
            traced.append(torch.pjrt.metrics.counter("NodesTraced") - before)
    return losses


def compare(builder, rtol=2e-4, atol=2e-5, compile=False, graph=False):
    """Trains on CPU and on pjrt (`compile`: under torch.compile; `graph`: captured with
    torch.accelerator.Graph and replayed) and checks losses, weights and
    that nothing fell back; returns the ops each pjrt step traced."""
    torch.manual_seed(0)
    cpu_model, cpu_batch, loss_fn = builder("cpu")
    dev_model = copy.deepcopy(cpu_model).to("pjrt")
    dev_batch = tuple(t.to("pjrt") for t in cpu_batch)
    want = train(cpu_model, cpu_batch, loss_fn)
    torch.pjrt.metrics.reset()
    traced = []
    got = train(dev_model, dev_batch, loss_fn, compile=compile, traced=traced, graph=graph)
    fallbacks = torch.pjrt.metrics.fallbacks()
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want), rtol=rtol, atol=atol)
    for (name, p_cpu), p_dev in zip(cpu_model.named_parameters(), dev_model.parameters()):
        torch.testing.assert_close(p_dev.detach().cpu(), p_cpu.detach(), rtol=rtol, atol=atol,
                                   msg=lambda m, name=name: f"{name}: {m}")
    assert fallbacks == {}, f"CPU fallbacks in a training step: {fallbacks}"
    return traced


@pytest.mark.parametrize("name", sorted(real_models.TEXT_MODELS))
def test_transformers_model_trains_natively(name):
    pytest.importorskip("transformers")
    compare(real_models.TEXT_MODELS[name])


# MobileNetV3's first forward agrees with CPU's to ~1e-6 relative (its loss to 3e-6), and its
# first step's weights to 7e-6; three SGD-momentum steps through its batch norms, squeeze-excite
# gates and hard-swishes amplify that to ~5e-4 in the stem convolution's near-zero weights.
VISION_TOLERANCE = {"mobilenetv3": dict(rtol=1e-3, atol=1e-3)}


@pytest.mark.parametrize("name", sorted(real_models.VISION_MODELS))
def test_timm_model_trains_natively(name):
    pytest.importorskip("timm")
    compare(real_models.VISION_MODELS[name], **VISION_TOLERANCE.get(name, dict(rtol=1e-3, atol=1e-4)))


def test_lstm_language_model_trains_natively():
    compare(real_models.lstm)


# From bench/zoo.py's twenty (all of which match there), the ones whose patterns the models above
# do not have: grouped convolutions (RegNet), channels-last layer norms and 7x7 depthwise
# convolutions (ConvNeXt), shifted-window attention with rolls and relative position biases
# (Swin), one layer's weights reused by every layer (ALBERT), sliding-window causal masks
# (Mistral), and an encoder-decoder with learned positions and shifted labels (BART).
ZOO = ["regnetx_002", "convnext_atto", "swin_small_config", "albert", "mistral", "bart"]


@pytest.mark.parametrize("name", ZOO)
def test_zoo_model_trains_natively(name):
    import zoo_models

    pytest.importorskip("timm" if name in zoo_models.VISION else "transformers")
    tolerance = dict(rtol=1e-3, atol=1e-4) if name in zoo_models.VISION else {}
    compare(zoo_models.MODELS[name], **tolerance)


LSTM_CONFIGS = [dict(num_layers=2, batch_first=True), dict(num_layers=1, bias=False), dict(num_layers=2),
                dict(num_layers=2, bidirectional=True), dict(num_layers=2, bidirectional=True, batch_first=True),
                dict(num_layers=1, proj_size=8)]


def lstm_against_cpu(config, dtype, tolerance):
    """Outputs, final states and gradients of a pjrt nn.LSTM (given initial states) against CPU
    eager's; returns the ops the pjrt forward and backward lowered."""
    torch.manual_seed(0)
    cpu = torch.nn.LSTM(16, 12, **config).to(dtype)
    dev = copy.deepcopy(cpu).to("pjrt")
    states = config["num_layers"] * (2 if config.get("bidirectional") else 1)
    x = torch.randn(3, 5, 16, dtype=dtype) if config.get("batch_first") else torch.randn(5, 3, 16, dtype=dtype)
    h0 = torch.randn(states, 3, config.get("proj_size", 12), dtype=dtype)
    c0 = torch.randn(states, 3, 12, dtype=dtype)
    torch.pjrt.metrics.reset()
    results = []
    for model, device in [(cpu, "cpu"), (dev, "pjrt")]:
        out, (h, c) = model(x.to(device), (h0.to(device), c0.to(device)))
        (out.square().sum() + h.sum() + c.square().sum()).backward()
        results.append([out, h, c] + [p.grad for p in model.parameters()])
    for want, got in zip(*results):
        torch.testing.assert_close(got.detach().cpu(), want.detach(), **tolerance)
    assert torch.pjrt.metrics.fallbacks() == {}
    return {k.split("::", 1)[1]: v for k, v in torch.pjrt.metrics.counters().items() if k.startswith("Lowered::")}


@pytest.mark.parametrize("config", LSTM_CONFIGS, ids=str)
def test_lstm_runs_one_op_per_layer(config):
    """A float32 nn.LSTM on pjrt (torch_pjrt/rnn.py) runs each layer and direction as one
    mkldnn_rnn_layer, as torch does on the CPU, lowered as a loop over time
    (lowering/lstm_layer.cc): outputs, final states and gradients match CPU eager, and no per-step
    cell is traced. Projected LSTMs keep torch's own decomposition."""
    lowered = lstm_against_cpu(config, torch.float32, dict(rtol=1e-5, atol=1e-5))
    layers = config["num_layers"] * (2 if config.get("bidirectional") else 1)
    if config.get("proj_size"):
        assert "mkldnn_rnn_layer" not in lowered and lowered["_thnn_fused_lstm_cell"] == 5 * layers
    else:
        assert lowered["mkldnn_rnn_layer"] == layers and lowered["mkldnn_rnn_layer_backward"] == layers
        assert "_thnn_fused_lstm_cell" not in lowered and "mm" not in lowered, lowered


@pytest.mark.parametrize("config", LSTM_CONFIGS[:4], ids=str)
def test_float64_lstm_projects_all_time_steps_at_once(config):
    """float64 keeps the per-step form, as on the CPU (mkldnn_rnn_layer's Meta kernel gives
    float32 gradients): each layer's whole input sequence is projected in one product, and a
    forward runs one input product per layer plus one hidden product per step (torch's composite
    on other devices: two per step). Bidirectional ones keep torch's own decomposition."""
    torch.manual_seed(0)
    dev = torch.nn.LSTM(16, 12, **config).double().to("pjrt")
    torch.pjrt.metrics.reset()
    with torch.no_grad():
        dev(torch.randn(5, 5, 16, dtype=torch.float64, device="pjrt"))[0].cpu()
    products = torch.pjrt.metrics.counter("Lowered::mm")
    layers, steps = config["num_layers"], 5
    if config.get("bidirectional"):
        assert products == 2 * layers * steps * 2, products
    else:
        assert products == layers * (1 + steps), products
    lstm_against_cpu(config, torch.float64, dict(rtol=1e-10, atol=1e-10))


def test_lstm_in_inference_mode_runs_one_op_per_layer():
    """Under torch.inference_mode (no autograd key) the kernel still runs: one op per layer."""
    torch.manual_seed(0)
    cpu = torch.nn.LSTM(16, 12, num_layers=2)
    dev = copy.deepcopy(cpu).to("pjrt")
    x = torch.randn(5, 3, 16)
    torch.pjrt.metrics.reset()
    with torch.inference_mode():
        got = dev(x.to("pjrt"))[0].cpu()
        want = cpu(x)[0]
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert torch.pjrt.metrics.counter("Lowered::mkldnn_rnn_layer") == 2


def test_lstm_layer_op_matches_cpu_kernel():
    """aten::mkldnn_rnn_layer called directly, forward and reverse, against the CPU kernel (the
    one torch's CPU LSTM runs), gradients included."""
    def run(device, reverse):
        g = torch.Generator().manual_seed(1)
        tensors = [torch.randn(5, 3, 4, generator=g), torch.randn(3, 6, generator=g), torch.randn(3, 6, generator=g),
                   torch.randn(24, 4, generator=g) * 0.5, torch.randn(24, 6, generator=g) * 0.5,
                   torch.randn(24, generator=g), torch.randn(24, generator=g)]
        x, h0, c0, *weights = leaves = [t.to(device).requires_grad_() for t in tensors]
        out, h, c, _ = torch.ops.aten.mkldnn_rnn_layer(x, *weights, h0, c0, reverse, [], 2, 6, 1, True, False, False,
                                                       True)
        (out.square().sum() + (h * 2).sum() + c.sum()).backward()
        return [out, h, c] + [t.grad for t in leaves]

    for reverse in (False, True):
        for got, want in zip(run("pjrt", reverse), run("cpu", reverse)):
            torch.testing.assert_close(got.detach().cpu(), want.detach(), rtol=1e-5, atol=1e-5)


def test_lstm_dropout_between_layers():
    """Dropout between the layers of a pjrt nn.LSTM applies only in training mode, as on the CPU:
    in eval mode the outputs equal CPU eager's, in training mode they differ from eval's and the
    gradients flow through the dropout."""
    torch.manual_seed(0)
    cpu = torch.nn.LSTM(16, 12, num_layers=2, dropout=0.5).eval()
    dev = copy.deepcopy(cpu).to("pjrt")
    x = torch.randn(5, 3, 16)
    torch.testing.assert_close(dev(x.to("pjrt"))[0].cpu(), cpu(x)[0].detach(), rtol=1e-5, atol=1e-5)
    dev.train()
    out = dev(x.to("pjrt"))[0]
    out.sum().backward()
    assert not torch.allclose(out.detach().cpu(), cpu(x)[0].detach())
    assert all(torch.isfinite(p.grad.cpu()).all() for p in dev.parameters())



@pytest.mark.parametrize("name", ["llama", "lstm", "lstm_allow_rnn"])
def test_compiled_training_step_matches_cpu_and_replays(name):
    if name == "llama":
        pytest.importorskip("transformers")
    import torch._dynamo

    torch._dynamo.reset()
    try:
        # Dynamo runs RNN modules eagerly unless its global `allow_rnn` is set (README).
        with torch._dynamo.config.patch(allow_rnn=name == "lstm_allow_rnn"):
            traced = compare(real_models.TEXT_MODELS[name] if name == "llama" else real_models.lstm, compile=True)
    finally:
        torch._dynamo.reset()
    if name == "lstm":  # "does not support RNN, GRU, or LSTM": nn.LSTM runs outside the graphs,
        # traced lazily on every step, as inductor runs it eagerly: at least its 2 layers x 15
        # steps of cells (torch_pjrt/rnn.py projects each layer's inputs in one product)
        assert min(traced) > 30, traced
    else:
        # The first step traces the model (the LSTM: two layer ops, their backwards, the head and
        # SGD: ~60 nodes); the third step only replays.
        assert traced[0] > 40 and max(traced[2:]) <= 3, traced


@pytest.mark.parametrize("name", ["bert", "llama", "lstm", "resnet18"])
def test_graph_captured_training_step_matches_cpu(name):
    """torch.accelerator.Graph over a whole real-model step: replays match CPU eager and trace
    nothing. BERT reads `attention_mask.all()` to the host in its forward: the capture guards it.
    ResNet-18's step (a backward of host kernels) replays as two programs."""
    pytest.importorskip("timm" if name == "resnet18" else "transformers")
    builder = {**real_models.TEXT_MODELS, **real_models.VISION_MODELS, **real_models.PLAIN_MODELS}[name]
    tolerance = dict(rtol=1e-3, atol=1e-4) if name in real_models.VISION_MODELS else {}
    traced = compare(builder, graph=True, **tolerance)
    assert traced[0] > 40 and traced[2] == 0, traced  # the capture's step traces, replays do not


@pytest.mark.parametrize("compiled", [False, True], ids=["lazy", "compiled"])
def test_gpt_example_loss_curve_matches_cpu(compiled):
    """examples/gpt.py's own training loop (AdamW, warm-up schedule, float32, no dropout), lazily
    traced and under torch.compile(backend="pjrt"), against the same loop on the CPU."""
    import os
    import sys

    import torch._dynamo

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
    try:
        import gpt
    finally:
        sys.path.pop(0)
    torch._dynamo.reset()
    try:
        got = gpt.train("pjrt", 4, 4, 32, 0.0, False, log=False, compile=compiled)
    finally:
        torch._dynamo.reset()
    want = gpt.train("cpu", 4, 4, 32, 0.0, False, log=False)
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want), rtol=1e-4, atol=1e-5)
