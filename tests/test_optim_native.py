"""Optimizers run inside the step graph on their native ops: torch's foreach (`_foreach_*`) and
fused (`_fused_adam_`...) kernels are lowered as one node per call, hyperparameters are values
(a learning-rate schedule never recompiles), parameters and state update in place through
donation, and results match the CPU."""
import re

import pytest
import torch

from helpers import Counters, step_launches

OPTIMIZERS = {
    "sgd-foreach": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.01, foreach=True),
    "sgd-fused": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True, fused=True),
    "adam-foreach": lambda p: torch.optim.Adam(p, lr=0.01, foreach=True),
    "adam-fused": lambda p: torch.optim.Adam(p, lr=0.01, fused=True),
    "adamw-fused-amsgrad": lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1, amsgrad=True, fused=True),
    "adamw-foreach": lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1, foreach=True),
    "rmsprop-foreach": lambda p: torch.optim.RMSprop(p, lr=0.01, momentum=0.5, centered=True, foreach=True),
    "adagrad-foreach": lambda p: torch.optim.Adagrad(p, lr=0.1, lr_decay=0.01, foreach=True),
    "adagrad-fused": lambda p: torch.optim.Adagrad(p, lr=0.1, fused=True),
    "adafactor-foreach": lambda p: torch.optim.Adafactor(p, lr=0.01, foreach=True),
}


def train(device, make_opt, steps=6):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3)).to(device)
    opt = make_opt(model.parameters())
    sched = torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.8)
    x = torch.randn(5, 8).to(device)
    per_step = []
    for _ in range(steps):
        with Counters() as c:
            opt.zero_grad()
            model(x).square().mean().backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            if device == "pjrt":
                torch.pjrt.synchronize()
        per_step.append(c)
    return [p.detach().cpu() for p in model.parameters()], per_step


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_optimizer_matches_cpu_in_three_cached_programs_per_step(name):
    want, _ = train("cpu", OPTIMIZERS[name])
    got, per_step = train("pjrt", OPTIMIZERS[name])
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    for c in per_step[2:]:  # after the state exists: two executions, nothing compiled, no fallback
        # torch's Adafactor reads each parameter's and update's norm with .item() (a sync on any
        # device); every other execution is one of the step's two programs.
        reads = c["Sync::item"] if name.startswith("adafactor") else 0
        assert c["GraphsCompiled"] == 0 and c["FallbackOps"] == 0
        # optimizer.step() launches the forward and backward as it begins and the updates as it
        # ends; the synchronize after it finds nothing pending.
        assert step_launches(c) == (3 + reads, 1, 1, 1) and c["Executions"] == 3 + c["Sync::item"]


def test_foreach_and_fused_ops_are_native_nodes():
    torch.pjrt.metrics.reset()
    train("pjrt", OPTIMIZERS["adam-fused"], steps=2)
    train("pjrt", OPTIMIZERS["adam-foreach"], steps=2)
    lowered = torch.pjrt.metrics.lowered()
    assert lowered.get("_fused_adam", 0) >= 2
    assert any(k.startswith("_foreach_") for k in lowered), lowered
    # The foreach step traces a handful of list ops, not one op per parameter and per operation.
    assert lowered.get("addcdiv", 0) == 0


FOREACH_CASES = {
    "add.List": lambda a, b: torch._foreach_add(a, b, alpha=2),
    "add.Scalar": lambda a, b: torch._foreach_add(a, 1.5),
    "add.ScalarList": lambda a, b: torch._foreach_add(a, [0.5, -1.0, 2.0]),
    "mul.Tensor": lambda a, b: torch._foreach_mul(a, torch.tensor(3.0, device=a[0].device)),
    "div.List": lambda a, b: torch._foreach_div(a, b),
    "sub.Scalar_": lambda a, b: (torch._foreach_sub_(a, 0.25), a)[1],
    "addcmul_.ScalarList": lambda a, b: (torch._foreach_addcmul_(a, b, b, [0.1, 0.2, 0.3]), a)[1],
    "addcdiv_.ScalarList.equal": lambda a, b: (torch._foreach_addcdiv_(a, b, b, [-0.25] * 3), a)[1],
    "div_.ScalarList.signed_zeros": lambda a, b: (torch._foreach_div_(a, [0.0, -0.0, 0.0]), a)[1],
    "add.ScalarList.int_and_float": lambda a, b: torch._foreach_add(a, [2, 2.0, 2]),
    "addcdiv.Scalar": lambda a, b: torch._foreach_addcdiv(a, b, b, 0.5),
    "lerp.Scalar": lambda a, b: torch._foreach_lerp(a, b, 0.3),
    "lerp.List": lambda a, b: torch._foreach_lerp(a, b, b),
    "maximum.List": lambda a, b: torch._foreach_maximum(a, b),
    "clamp_min.Scalar": lambda a, b: torch._foreach_clamp_min(a, 0.0),
    "pow.Scalar": lambda a, b: torch._foreach_pow(a, 2.0),
    "pow.ScalarAndTensor": lambda a, b: torch._foreach_pow(2.0, a),
    "sqrt_abs": lambda a, b: torch._foreach_sqrt(torch._foreach_abs(a)),
    "exp": lambda a, b: torch._foreach_exp(a),
    "neg_": lambda a, b: (torch._foreach_neg_(a), a)[1],
    "norm": lambda a, b: torch._foreach_norm(a),
    "norm.inf": lambda a, b: torch._foreach_norm(a, float("inf")),
    "max": lambda a, b: torch._foreach_max(a),
    "zero_": lambda a, b: (torch._foreach_zero_(a), a)[1],
    "copy_": lambda a, b: (torch._foreach_copy_(a, b), a)[1],
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=str)
@pytest.mark.parametrize("case", sorted(FOREACH_CASES))
def test_foreach_op_matches_cpu(case, dtype):
    def lists():
        g = torch.Generator().manual_seed(0)
        shapes = [(3,), (2, 4), ()]
        a = [torch.randn(s, generator=g).to(dtype) for s in shapes]
        b = [torch.rand(s, generator=g).to(dtype) + 0.5 for s in shapes]
        return a, b

    a, b = lists()
    want = FOREACH_CASES[case](a, b)
    a, b = lists()
    with Counters() as c:
        got = FOREACH_CASES[case]([t.to("pjrt") for t in a], [t.to("pjrt") for t in b])
        got = [t.cpu() for t in got]
    assert c["FallbackOps"] == 0, torch.pjrt.metrics.fallbacks()
    tol = dict(rtol=2e-2, atol=2e-2) if dtype == torch.bfloat16 else dict(rtol=1e-5, atol=1e-6)
    for x, y in zip(got, want):
        torch.testing.assert_close(x, y, **tol)


def value_scalars_read(tmp_path, scalars, steps=1):
    """How many value scalars the program of `_foreach_mul_(four tensors, scalars)` reads (the
    length of its packed value-scalar parameter), and the tensors after `steps` such steps."""
    tensors = [torch.full((3, 5), 2.0).to("pjrt") for _ in range(4)]
    torch.pjrt.set_dump_dir(tmp_path)
    try:
        for _ in range(steps):
            torch._foreach_mul_(tensors, scalars)
            torch.pjrt.synchronize()
    finally:
        torch.pjrt.set_dump_dir(None)
    sizes = {int(m) for f in tmp_path.glob("*.mlir") for m in re.findall(r"%arg\d+: tensor<(\d+)xf64>", f.read_text())}
    return sizes, [t.cpu() for t in tensors]


def test_equal_scalars_of_a_list_share_one_value(tmp_path):
    # One param group's bias corrections are equal for every parameter: one value for all of them
    # makes the updates of same-shaped parameters one computation, which XLA compiles once.
    sizes, got = value_scalars_read(tmp_path / "equal", [0.5] * 4, steps=2)
    assert sizes == {1}
    for t in got:
        torch.testing.assert_close(t, torch.full((3, 5), 0.5))
    sizes, got = value_scalars_read(tmp_path / "unequal", [0.5, 0.5, 0.25, 0.5])
    assert sizes == {4}
    for t, s in zip(got, [0.5, 0.5, 0.25, 0.5]):
        torch.testing.assert_close(t, torch.full((3, 5), 2.0 * s))


def test_a_list_whose_scalars_stop_being_equal_gets_each_value():
    tensors = [torch.ones(4).to("pjrt") for _ in range(3)]
    for scalars in ([2.0, 2.0, 2.0], [2.0, 3.0, 2.0], [1.5, 1.5, 1.5]):
        torch._foreach_mul_(tensors, scalars)
    want = [torch.full((4,), 2.0 * s * 1.5) for s in (2.0, 3.0, 2.0)]
    for t, w in zip(tensors, want):
        torch.testing.assert_close(t.cpu(), w)


def test_parameters_and_state_are_updated_in_place_without_a_second_copy():
    # 4 MB of parameters: Adam keeps params + grads + two moments = 4 copies; without donation
    # a step would also hold the new parameters and moments beside the old ones (7 copies).
    torch.manual_seed(0)
    model = torch.nn.Linear(1024, 1024, bias=False).to("pjrt")
    param_bytes = 1024 * 1024 * 4
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, fused=True)
    x = torch.randn(8, 1024).to("pjrt")

    def step():
        opt.zero_grad(set_to_none=False)
        model(x).square().mean().backward()
        opt.step()
        torch.pjrt.synchronize()

    step(), step()
    weight_address = model.weight.data_ptr()
    torch.pjrt.reset_peak_memory_stats()
    with Counters() as c:
        step()
    peak = torch.pjrt.memory_stats()["reserved_bytes.peak"]
    assert c["DonatedBuffers"] >= 3  # weight, exp_avg, exp_avg_sq
    assert peak < 5.5 * param_bytes, peak / param_bytes
    assert model.weight.data_ptr() == weight_address


def test_a_loop_that_never_reads_values_runs_the_same_cached_programs_each_step():
    """optimizer.step() ends the lazy graph (asynchronously): without it, steps that read nothing
    would pile into one trace until the pending-node bound cut it at arbitrary points, each cut a
    new graph to compile."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3)).to("pjrt")
    opt = torch.optim.AdamW(model.parameters(), lr=0.01, foreach=True)
    x = torch.randn(5, 8).to("pjrt")

    def step():
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()

    for _ in range(3):
        step()
    with Counters() as c:
        for _ in range(20):
            step()
        torch.pjrt.synchronize()
    assert step_launches(c) == (60, 20, 20, 20) and c["GraphsCompiled"] == 0 and c["Sync::graph_too_large"] == 0


def test_optimizer_steps_on_cpu_parameters_launch_nothing():
    pending = torch.ones(3, device="pjrt") * 2  # traced, not yet run
    p = torch.nn.Parameter(torch.ones(2))
    opt = torch.optim.SGD([p], lr=0.1)
    p.grad = torch.ones(2)
    with Counters() as c:
        opt.step()
    assert c["Executions"] == 0 and c["Sync::optimizer_step"] == 0
    assert pending.cpu().tolist() == [2.0, 2.0, 2.0]


# Optimizers whose state starts as zeros (zeros_like / zeros): read as device buffers during
# optimizer.step(), the first step's graph is the one every later step runs. SGD's momentum starts
# as a copy of the gradient and Adagrad's sum as full_like, so their second step is a new graph.
ZERO_STATE = ["adam-foreach", "adam-fused", "adamw-foreach", "adamw-fused-amsgrad", "rmsprop-foreach"]


@pytest.mark.parametrize("name", ZERO_STATE)
def test_the_first_step_compiles_the_graph_of_every_later_step(name):
    results = {}
    for device in ("cpu", "pjrt"):
        torch.manual_seed(0)  # layer sizes no other test uses, so no earlier test compiled this graph
        model = torch.nn.Sequential(torch.nn.Linear(6, 11), torch.nn.Tanh(), torch.nn.Linear(11, 2)).to(device)
        opt = OPTIMIZERS[name](model.parameters())
        x = torch.randn(3, 6).to(device)
        per_step = []
        for _ in range(3):
            with Counters() as c:
                opt.zero_grad()
                model(x).square().mean().backward()
                opt.step()
                if device == "pjrt":
                    torch.pjrt.synchronize()
            per_step.append(c)
        results[device] = [p.detach().cpu() for p in model.parameters()]
    for a, b in zip(results["pjrt"], results["cpu"]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert per_step[0]["GraphsLowered"] >= 1  # the updates (and the forward and backward, unless a case before lowered them)
    assert [c["GraphsLowered"] for c in per_step[1:]] == [0, 0]
    assert [step_launches(c) for c in per_step] == [(3, 1, 1, 1)] * 3


def test_an_out_of_range_index_poisons_the_updates_launched_without_waiting_for_its_check():
    """A training step's launches do not wait for the index checks of the launch before them:
    the backward launches as optimizer.step() begins while the forward's checks may be pending,
    and inherits them. The updates' launch, with two launches' checks pending, settles them and
    raises the bad index, CPU's error type; the loss and the parameters updated from its gradient
    raise when read."""
    torch.manual_seed(0)
    emb = torch.nn.Embedding(5, 3).to("pjrt")
    opt = torch.optim.SGD(emb.parameters(), lr=0.1)
    good, bad = torch.tensor([0, 1]).to("pjrt"), torch.tensor([0, 7]).to("pjrt")
    emb(good).sum().backward()
    opt.step()
    opt.zero_grad()
    with Counters() as c:
        loss = emb(bad).sum()
        loss.backward()  # does not raise: the forward's launch waited for nothing
        with pytest.raises(IndexError, match="index 7 is out of bounds"):
            opt.step()
    assert c["Sync::backward"] == 1 and c["Sync::before_optimizer_step"] == 1
    with pytest.raises(IndexError, match="index 7 is out of bounds"):
        loss.item()
    with pytest.raises(IndexError, match="index 7 is out of bounds"):
        emb.weight.cpu()
    unrelated = torch.ones(2, device="pjrt") * 3  # the device keeps working
    assert unrelated.cpu().tolist() == [3.0, 3.0]
