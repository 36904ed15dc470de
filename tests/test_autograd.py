"""Autograd on pjrt behaves as on the CPU: every test runs one program on both devices, compares
values and gradients, and checks that nothing fell back to the CPU. Covers torch.autograd.grad
(double backward included), retain_graph, gradient accumulation, no_grad / inference_mode, tensor
and module hooks, activation checkpointing, retain_grad, a training step's two cached executions,
and custom ops with pjrt and autograd kernels (the code of docs/custom_ops.md, run as written)."""
import copy
import os
import re
import threading
import warnings

import pytest
import torch

from helpers import Counters, step_launches

DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "custom_ops.md")


def to_cpu(x):
    if isinstance(x, torch.Tensor):
        return x.detach().cpu()
    if isinstance(x, dict):
        return {k: to_cpu(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(to_cpu(v) for v in x)
    return x


def assert_same(actual, expected, **tol):
    """Tensors anywhere in nested lists, tuples and dicts are close; everything else is equal."""
    if isinstance(expected, torch.Tensor):
        torch.testing.assert_close(actual, expected, **tol)
    elif isinstance(expected, dict):
        assert actual.keys() == expected.keys()
        for k in expected:
            assert_same(actual[k], expected[k], **tol)
    elif isinstance(expected, (list, tuple)):
        assert type(actual) is type(expected) and len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_same(a, e, **tol)
    else:
        assert actual == expected


def on_both(program, **tol):
    """program(device) on the CPU and on pjrt; asserts the same results (see assert_same) and no
    CPU fallback on pjrt; returns (pjrt's, CPU's)."""
    expected = to_cpu(program("cpu"))
    with Counters() as c:
        actual = to_cpu(program("pjrt"))
    assert c["FallbackOps"] == 0, torch.pjrt.metrics.counters()
    assert_same(actual, expected, **tol)
    return actual, expected


def mlp(device, act=torch.nn.Tanh, dropout=None, seed=0):
    torch.manual_seed(seed)
    layers = [torch.nn.Linear(6, 16), act()]
    if dropout is not None:
        layers.append(torch.nn.Dropout(dropout))
    layers += [torch.nn.Linear(16, 16), act(), torch.nn.Linear(16, 3)]
    return torch.nn.Sequential(*layers).to(device)


def data(device, *shape, seed=1, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(device).requires_grad_(requires_grad)


def grads(params):
    return [p.grad for p in params]


def error_of(fn):
    """(type, message) of what fn() raises."""
    with pytest.raises(Exception) as info:
        fn()
    return type(info.value), str(info.value)


# torch.autograd.grad ---------------------------------------------------------------------------

def test_autograd_grad_vector_jacobian_and_multiple_inputs():
    def program(device):
        model = mlp(device)
        x = data(device, 5, 6, requires_grad=True)
        y = model(x)
        v = data(device, 5, 3, seed=2)
        gx, gw = torch.autograd.grad(y, [x, model[0].weight], grad_outputs=v)
        assert not gx.requires_grad and gx.grad_fn is None
        assert x.grad is None and model[0].weight.grad is None  # grad() does not accumulate
        return gx, gw
    on_both(program)


def test_double_backward_create_graph():
    def program(device):
        model = mlp(device)
        params = list(model.parameters())
        x = data(device, 5, 6, requires_grad=True)
        (gx,) = torch.autograd.grad(model(x).square().sum(), x, create_graph=True)
        assert gx.requires_grad and gx.grad_fn is not None
        # Gradient penalty: d/d(x, params) of |d out / dx|^2 goes through tanh's backward.
        second = torch.autograd.grad(gx.square().sum(), [x] + params, retain_graph=True)
        # And backward() through the create_graph result accumulates into .grad.
        gx.sum().backward()
        return [gx, *second, *grads(params), x.grad]
    on_both(program)


# retain_graph ----------------------------------------------------------------------------------

def test_retain_graph_backward_twice_and_error_without_it():
    def program(device):
        model = mlp(device)
        x = data(device, 4, 6, requires_grad=True)
        loss = (model(x).exp() * 0.1).sum()
        loss.backward(retain_graph=True)
        first = [g.clone() for g in grads(model.parameters())]
        loss.backward()  # accumulates: twice the first gradients
        second = grads(model.parameters())
        err = error_of(loss.backward)  # buffers are freed now
        err_grad = error_of(lambda: torch.autograd.grad(loss, x))
        return first, second, x.grad, err, err_grad

    (first, second, _, err, err_grad), (_, _, _, cpu_err, cpu_err_grad) = on_both(program)
    for a, b in zip(first, second):
        torch.testing.assert_close(b, 2 * a)
    assert err[0] is RuntimeError and "backward through the graph a second time" in err[1]
    assert err == cpu_err and err_grad == cpu_err_grad


def test_autograd_grad_retain_graph_then_backward():
    def program(device):
        w = data(device, 6, 3, requires_grad=True)
        x = data(device, 4, 6, seed=2)
        loss = torch.sigmoid(x @ w).log().sum()
        (g1,) = torch.autograd.grad(loss, w, retain_graph=True)
        loss.backward()
        return g1, w.grad
    (g1, g2), _ = on_both(program)
    torch.testing.assert_close(g1, g2)


# gradient accumulation -------------------------------------------------------------------------

def test_gradient_accumulation_matches_one_big_batch():
    def program(device):
        model = mlp(device, act=torch.nn.ReLU)
        x, target = data(device, 12, 6), data(device, 12, 3, seed=2)
        with Counters() as c:
            for xs, ts in zip(x.chunk(3), target.chunk(3)):
                loss = torch.nn.functional.mse_loss(model(xs), ts) / 3
                loss.backward()
        if device == "pjrt":
            # Each forward launches as its backward begins (with the backward before it); the
            # last backward stays traced.
            assert c["Executions"] == 3 and c["Sync::backward"] == 3
        accumulated = [g.clone() for g in grads(model.parameters())]
        model.zero_grad()
        torch.nn.functional.mse_loss(model(x), target).backward()
        return accumulated, grads(model.parameters())

    (accumulated, big), _ = on_both(program)
    torch.testing.assert_close(accumulated, big)


def test_the_forward_launches_as_its_backward_begins():
    model = mlp("pjrt", dropout=0.2)
    x = data("pjrt", 8, 6)
    executions = torch.pjrt.metrics.counter("Executions")
    with Counters() as c:
        loss = model(x).square().mean()
        assert torch.pjrt.metrics.counter("Executions") == executions  # the forward is traced
        loss.backward()
        # The forward ran (or runs) while the backward was traced; the backward is pending.
        assert torch.pjrt.metrics.counter("Executions") == executions + 1
        values = [loss.detach(), *grads(model.parameters())]
        torch.pjrt.synchronize()
    assert c["Executions"] == 2 and c["Sync::backward"] == 1 and c["FallbackOps"] == 0
    assert all(torch.isfinite(v).all() for v in to_cpu(values))


def test_a_forward_with_large_activations_stays_one_program_with_its_backward():
    # Past kBackwardLaunchMaxElements (512k elements of forward results) the forward executes for
    # longer than the backward takes to trace: no launch as the backward begins (graph/trace.h).
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 64)
    x = torch.randn(4096, 64)  # each of the forward's results: 256k elements
    dev = copy.deepcopy(model).to("pjrt")
    with Counters() as c:
        dev(x.to("pjrt")).relu().square().mean().backward()
        grad = dev.weight.grad.cpu()
    model(x).relu().square().mean().backward()
    assert c["Sync::backward"] == 0 and c["Executions"] == 1
    torch.testing.assert_close(grad, model.weight.grad)


def test_a_read_waits_only_for_the_index_checks_that_guard_its_value():
    # The forward launches as the backward begins and does not wait for index checks; its checks
    # guard the loss (computed from the embedding). A value computed before reads without settling
    # them (the bad index is not its problem); the loss's read raises it, CPU's error type, and the
    # next launch would have raised it too.
    emb = torch.nn.Embedding(5, 3).to("pjrt")
    earlier = torch.ones(2, device="pjrt") * 2
    earlier.cpu()  # computed and read: a buffer now
    loss = emb(torch.tensor([0, 7]).to("pjrt")).sum()
    loss.backward()  # launches the forward, checks pending
    assert earlier.cpu().tolist() == [2.0, 2.0]
    with pytest.raises(IndexError, match="index 7 is out of bounds"):
        loss.item()
    with pytest.raises(IndexError, match="embedding_dense_backward"):
        torch.pjrt.synchronize()  # the backward, still traced, checks the indices again
    assert (torch.ones(1, device="pjrt") + 1).item() == 2.0  # the device keeps working


def test_a_pending_index_check_does_not_keep_the_buffers_it_guards():
    # A compiled step's loss read settles only the checks that guard the loss; the backward's
    # (embedding, cross-entropy) stay pending into the next step, guarding the gradients and what
    # the optimizer computed from them. They must not hold those buffers: the next step's
    # optimizer donates (updates in place) every parameter and both AdamW states, as it does with
    # no check pending; held, it copied all of them (1.25x GPT-2's compiled step).
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 10)).to("pjrt")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, capturable=True)
    ids, target = torch.tensor([1, 2, 3]).to("pjrt"), torch.tensor([4, 5, 6]).to("pjrt")

    @torch.compile(backend="pjrt")
    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(ids), target)
        loss.backward()
        opt.step()
        return loss

    for _ in range(4):
        step().item()
    with Counters() as c:
        for _ in range(3):
            step().item()
    assert c["GraphReplays"] == 9
    assert c["DonatedBuffers"] == 3 * 4 * 3  # steps x parameters x (parameter, exp_avg, exp_avg_sq)


def test_without_the_backward_launch_forward_and_backward_are_one_graph():
    model = mlp("pjrt", dropout=0.2)
    x = data("pjrt", 8, 6)
    executions = torch.pjrt.metrics.counter("Executions")
    assert torch.pjrt.launch_forward_at_backward()
    torch.pjrt.set_launch_forward_at_backward(False)
    try:
        with Counters() as c:
            loss = model(x).square().mean()
            loss.backward()
            assert torch.pjrt.metrics.counter("Executions") == executions
            values = [loss.detach(), *grads(model.parameters())]
            torch.pjrt.synchronize()
    finally:
        torch.pjrt.set_launch_forward_at_backward(True)
    assert c["Executions"] == 1 and c["Sync::backward"] == 0 and c["FallbackOps"] == 0
    assert all(torch.isfinite(v).all() for v in to_cpu(values))


# no_grad and inference_mode --------------------------------------------------------------------

def test_no_grad_and_set_grad_enabled():
    def program(device):
        w = data(device, 3, 3, requires_grad=True)
        x = data(device, 2, 3, seed=2)
        with torch.no_grad():
            y = x @ w
            with torch.enable_grad():
                z = (x @ w).sum()
            w.mul_(0.5)  # an in-place update of a leaf that requires grad is allowed here
        with torch.set_grad_enabled(False):
            u = w * 2
        flags = [y.requires_grad, y.grad_fn is None, z.requires_grad, u.requires_grad,
                 w.requires_grad, w.is_leaf]
        z.backward()
        return flags, y, u, w.grad

    (flags, *_), _ = on_both(program)
    assert flags == [False, True, True, False, True, True]


def test_inference_mode_and_its_errors():
    def program(device):
        w = data(device, 3, 3, requires_grad=True)
        with torch.inference_mode():
            assert torch.is_inference_mode_enabled()
            t = data(device, 2, 3, seed=2) * 2
            y = t @ w
            flags = [t.is_inference(), y.is_inference(), y.requires_grad, w.is_inference()]
        assert not torch.is_inference_mode_enabled()
        errors = [
            error_of(lambda: (t @ w).sum().backward()),       # saved for backward
            error_of(lambda: t.requires_grad_()),
            error_of(lambda: t.add_(1)),                       # in-place outside inference mode
        ]
        # A clone is a normal tensor: autograd works with it.
        c = t.clone()
        (c @ w).sum().backward()
        with torch.inference_mode(False):
            v = (w * 3).sum()
        flags += [c.is_inference(), v.requires_grad]
        return flags, errors, y, w.grad

    (flags, errors, *_), (_, cpu_errors, *_) = on_both(program)
    assert flags == [True, True, False, False, False, True]
    assert errors == cpu_errors
    assert all(kind is RuntimeError for kind, _ in errors)
    assert "Inference tensors cannot be saved for backward" in errors[0][1]


# hooks -----------------------------------------------------------------------------------------

def test_tensor_hooks():
    def program(device):
        seen = {}
        x = data(device, 4, 5, requires_grad=True)
        w = data(device, 5, 2, seed=2, requires_grad=True)
        h = x.tanh()
        h.register_hook(lambda g: seen.__setitem__("h", g.clone()))  # observes
        h.register_hook(lambda g: g * 3)                              # replaces the gradient
        x.register_hook(lambda g: g + 1)                              # on a leaf, before .grad
        removed = w.register_hook(lambda g: g * 100)
        removed.remove()
        w.register_post_accumulate_grad_hook(lambda p: seen.__setitem__("w", p.grad.clone()))
        (h @ w).square().sum().backward()
        return seen, x.grad, w.grad
    on_both(program)


def test_module_forward_pre_forward_and_full_backward_hooks():
    def program(device):
        seen = {}
        model = mlp(device)
        first, last = model[0], model[-1]
        first.register_forward_pre_hook(lambda m, args: (args[0] * 2,))
        last.register_forward_hook(lambda m, args, out: out + 1)

        def backward_hook(m, grad_input, grad_output):
            seen["grad_output"], seen["grad_input"] = grad_output[0].clone(), grad_input[0].clone()
            return (grad_input[0] * 0.5,)
        model[2].register_full_backward_hook(backward_hook)
        model[2].register_full_backward_pre_hook(
            lambda m, grad_output: seen.__setitem__("pre", grad_output[0].clone()))
        x = data(device, 4, 6, requires_grad=True)
        out = model(x)
        out.square().sum().backward()
        return seen, out, x.grad, grads(model.parameters())
    on_both(program)


# activation checkpointing ----------------------------------------------------------------------

class Blocks(torch.nn.Module):
    def __init__(self, dropout, checkpoint=None):
        super().__init__()
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU(), torch.nn.Dropout(dropout))
            for _ in range(3))
        self.head = torch.nn.Linear(8, 2)
        self.checkpoint = checkpoint

    def forward(self, x):
        for block in self.blocks:
            if self.checkpoint is None:
                x = block(x)
            else:
                x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=self.checkpoint)
        return self.head(x)


def checkpoint_run(device, dropout, checkpoint, seed=0):
    torch.manual_seed(0)
    model = Blocks(dropout, checkpoint).to(device)
    x = data(device, 4, 8, requires_grad=True)  # reentrant checkpoints need an input that does
    torch.manual_seed(seed)
    if device == "pjrt":
        torch.pjrt.manual_seed(seed)
    loss = model(x).square().sum()
    loss.backward()
    return [loss, x.grad, *grads(model.parameters())]


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_checkpoint_gives_the_gradients_of_no_checkpoint(use_reentrant):
    (actual, _), (plain, _) = (on_both(lambda d: checkpoint_run(d, 0.0, use_reentrant)),
                               on_both(lambda d: checkpoint_run(d, 0.0, None)))
    torch.testing.assert_close(actual, plain)



@pytest.mark.parametrize("device", ["cpu", "pjrt"])
@pytest.mark.parametrize("use_reentrant", [False, True])
def test_checkpoint_recomputes_the_same_dropout_mask(use_reentrant, device):
    # The recomputation must restore the generator's state (torch.pjrt.get_rng_state on pjrt), or
    # the backward would use another mask than the forward.
    with Counters() as c:
        actual = to_cpu(checkpoint_run(device, 0.3, use_reentrant, seed=5))
        plain = to_cpu(checkpoint_run(device, 0.3, None, seed=5))
    assert c["FallbackOps"] == 0
    torch.testing.assert_close(actual, plain)


# retain_grad -----------------------------------------------------------------------------------

def test_backward_runs_in_the_calling_thread():
    """A pjrt backward is host work: its nodes run in the thread that called backward (as for
    torch's CPU and lazy devices), not in an autograd worker thread woken for the device."""
    x = torch.randn(4, device="pjrt", requires_grad=True)
    threads = []
    x.register_hook(lambda grad: threads.append(threading.get_ident()))
    (x.sin() * 2).sum().backward()
    assert threads == [threading.get_ident()]
    torch.testing.assert_close(x.grad.cpu(), 2 * x.detach().cpu().cos())


def test_retain_grad_of_non_leaf():
    def program(device):
        x = data(device, 3, 4, requires_grad=True)
        h = x.sin() * 2
        h.retain_grad()
        k = h.exp()
        assert h.retains_grad and not k.retains_grad and not h.is_leaf
        k.sum().backward()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            k_grad = k.grad  # not retained: None and a warning, as on the CPU
        warned = any(".grad attribute of a Tensor that is not a leaf" in str(w.message) for w in caught)
        return h.grad, x.grad, k_grad is None, warned
    (_, _, k_none, warned), _ = on_both(program)
    assert k_none and warned


# the executions of a training step -------------------------------------------------------------

def test_training_step_with_dropout_and_adamw_runs_its_three_cached_programs():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Dropout(0.1),
                                torch.nn.Linear(32, 32), torch.nn.GELU(), torch.nn.Dropout(0.1),
                                torch.nn.Linear(32, 4)).to("pjrt")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    x, target = data("pjrt", 8, 16), data("pjrt", 8, 4, seed=2)
    losses = []
    for step in range(5):
        with Counters() as c:
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), target)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert c["FallbackOps"] == 0, torch.pjrt.metrics.counters()
        if step >= 2:  # after warm-up
            assert step_launches(c) == (3, 1, 1, 1), c.after  # forward and backward, then AdamW
            assert c["GraphsCompiled"] == 0
    assert losses[-1] < losses[0]


# custom ops (docs/custom_ops.md) ---------------------------------------------------------------

@pytest.fixture(scope="module")
def doc_ops():
    """Runs every ```python block of docs/custom_ops.md in order, once (the registrations are
    global), and returns its namespace."""
    with open(DOC) as f:
        blocks = re.findall(r"^```python\n(.*?)^```", f.read(), flags=re.S | re.M)
    assert len(blocks) >= 3
    namespace = {"__name__": "custom_ops_doc"}
    exec(compile("\n".join(blocks), DOC, "exec"), namespace)
    return namespace


def reference_scaled_tanh(x, scale):
    return scale * torch.tanh(x)


@pytest.mark.parametrize("api", ["custom_op", "library"])
def test_custom_op_forward_backward_match_cpu_without_fallback(doc_ops, api):
    op = doc_ops["scaled_tanh"] if api == "custom_op" else torch.ops.pjrt_test_lib.scaled_tanh
    qualname = "pjrt_test::scaled_tanh" if api == "custom_op" else "pjrt_test_lib::scaled_tanh"
    assert torch._C._dispatch_has_kernel_for_dispatch_key(qualname, "PrivateUse1")
    autograd_key = "Autograd" if api == "custom_op" else "AutogradPrivateUse1"
    assert torch._C._dispatch_has_kernel_for_dispatch_key(qualname, autograd_key)

    def program(device, fn):
        x = data(device, 6, 5, requires_grad=True)
        y = fn(x, 1.5)
        y.square().sum().backward()
        return y, x.grad

    with Counters() as c:
        lowered = torch.pjrt.metrics.lowered().get("tanh", 0)
        y, grad = to_cpu(program("pjrt", op))
        assert torch.pjrt.metrics.lowered().get("tanh", 0) > lowered  # the pjrt kernel was traced
    assert c["FallbackOps"] == 0 and c.after.get(qualname, 0) == c.before.get(qualname, 0)
    assert c["Executions"] == 2  # the forward as the backward began, then the backward
    expected_y, expected_grad = to_cpu(program("cpu", op))  # the op's CPU kernel and autograd
    torch.testing.assert_close(y, expected_y)
    torch.testing.assert_close(grad, expected_grad)
    reference = to_cpu(program("cpu", reference_scaled_tanh))
    torch.testing.assert_close([y, grad], reference)


def test_custom_op_double_backward(doc_ops):
    def program(device):
        x = data(device, 4, 3, requires_grad=True)
        (g,) = torch.autograd.grad(doc_ops["scaled_tanh"](x, 2.0).sum(), x, create_graph=True)
        (gg,) = torch.autograd.grad(g.sum(), x)
        return g, gg
    on_both(program)


def test_custom_op_in_a_training_step_runs_no_fallback_and_no_extra_execution(doc_ops):
    torch.manual_seed(0)
    lin1, lin2 = torch.nn.Linear(6, 8).to("pjrt"), torch.nn.Linear(8, 1).to("pjrt")
    params = [*lin1.parameters(), *lin2.parameters()]
    opt = torch.optim.SGD(params, lr=0.1)
    x = data("pjrt", 8, 6)
    for step in range(4):
        with Counters() as c:
            opt.zero_grad()
            h = torch.ops.pjrt_test_lib.scaled_tanh(doc_ops["scaled_tanh"](lin1(x), 1.5), 0.5)
            loss = lin2(h).square().mean()
            loss.backward()
            opt.step()
            loss.item()
        assert c["FallbackOps"] == 0
        if step >= 2:
            assert step_launches(c) == (3, 1, 1, 1) and c["GraphsCompiled"] == 0


def test_custom_op_without_pjrt_kernel_is_reported_as_a_fallback():
    @torch.library.custom_op("pjrt_test::cpu_only_sin", mutates_args=(), device_types="cpu")
    def cpu_only_sin(x: torch.Tensor) -> torch.Tensor:
        return x.sin()

    x = data("pjrt", 4)
    with Counters() as c, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = cpu_only_sin(x)
    torch.testing.assert_close(y.cpu(), x.cpu().sin())
    assert c["FallbackOps"] == 1 and c["pjrt_test::cpu_only_sin"] == 1
    assert "pjrt_test::cpu_only_sin" in torch.pjrt.metrics.fallbacks()


def test_repr_of_a_fake_pjrt_tensor_is_like_cpu():
    from torch._subclasses.fake_tensor import FakeTensorMode
    real = data("pjrt", 3, 4)
    text = repr(FakeTensorMode().from_tensor(real))
    assert text.startswith("FakeTensor(..., ") and "size=(3, 4)" in text
