"""Training on pjrt: after warm-up a step is exactly two executions (the forward and backward as
the optimizer step begins, the updates as it ends), with no compiles and no CPU fallbacks, and the
loss curve matches CPU eager."""
import copy

import pytest
import torch
import torch.nn as nn

from helpers import Counters, run_python, step_launches


def mlp():
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 10))


def train(model, data, lr_schedule, steps, device, momentum=0.9):
    model = model.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=lr_schedule(0), momentum=momentum)
    x, y = data[0].to(device), data[1].to(device)
    losses, deltas = [], []
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = lr_schedule(step)
        with Counters() as c:
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        deltas.append(c)
    return model, losses, deltas


@pytest.fixture
def setup():
    torch.manual_seed(0)
    model = mlp()
    data = (torch.randn(64, 32), torch.randint(0, 10, (64,)))
    return model, data


def test_mlp_steady_state_is_three_launches_no_compile_no_fallback(setup):
    model, data = setup
    _, losses, deltas = train(copy.deepcopy(model), data, lambda s: 0.05, 8, "pjrt")
    _, ref_losses, _ = train(copy.deepcopy(model), data, lambda s: 0.05, 8, "cpu")
    for c in deltas[2:]:  # step 0 and 1 differ (momentum buffers appear at step 1)
        assert step_launches(c) == (3, 1, 1, 1)  # forward, backward, then the updates; the read syncs nothing
        assert c["GraphsCompiled"] == 0
        assert c["GraphsLowered"] == 0  # a cache hit emits no StableHLO at all
        assert c["FallbackOps"] == 0
        assert c["DonatedBuffers"] > 0  # parameters and momentum are updated in place
    torch.testing.assert_close(losses, ref_losses, rtol=1e-4, atol=1e-5)


def test_changing_learning_rate_compiles_nothing(setup):
    model, data = setup
    schedule = lambda s: 0.1 / (1 + s)  # a new value every step
    trained, losses, deltas = train(copy.deepcopy(model), data, schedule, 7, "pjrt")
    ref, ref_losses, _ = train(copy.deepcopy(model), data, schedule, 7, "cpu")
    assert sum(c["GraphsCompiled"] for c in deltas[2:]) == 0
    torch.testing.assert_close(losses, ref_losses, rtol=1e-4, atol=1e-5)
    for p, q in zip(trained.parameters(), ref.parameters()):
        torch.testing.assert_close(p.cpu(), q, rtol=1e-4, atol=1e-5)


def test_adam_and_weight_decay_match_cpu(setup):
    model, data = setup
    results = {}
    for device in ["pjrt", "cpu"]:
        m = copy.deepcopy(model).to(device)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.1)
        x, y = data[0].to(device), data[1].to(device)
        losses = []
        for _ in range(5):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(m(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        results[device] = losses
    torch.testing.assert_close(results["pjrt"], results["cpu"], rtol=1e-4, atol=1e-5)


def test_a_steady_training_loop_donates_the_same_buffers_every_step():
    """BatchNorm's running statistics are read by the backward's program and overwritten by the
    next forward's, which donates them. The backward's arguments are dropped on another thread
    once it finished; a donation test made in between (one argument's read no longer counted, its
    reference not yet dropped) kept the buffers now and then, and that step compiled and ran
    a program without the donation (runtime::Buffer::SoleHolderApartFromReads)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 6, 3, padding=1), nn.BatchNorm2d(6), nn.ReLU(), nn.Flatten(),
                          nn.Linear(6 * 12 * 12, 10)).to("pjrt")
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(8, 1, 12, 12).to("pjrt"), torch.randint(0, 10, (8,)).to("pjrt")
    donated = []
    for step in range(600):  # the race was narrow: about one step in a hundred
        with Counters() as c:
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            loss.item()  # not synchronize(), which also waits for the freeing of finished programs' arguments
        if step >= 2:
            assert c["GraphsCompiled"] == 0, step
            donated.append(c["DonatedBuffers"])
    assert len(set(donated)) == 1, donated


def test_cnn_training_matches_cpu():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 6, 3, padding=1), nn.BatchNorm2d(6), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(6, 8, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))
    x, y = torch.randn(8, 1, 12, 12), torch.randint(0, 10, (8,))
    results = {}
    for device in ["pjrt", "cpu"]:
        m = copy.deepcopy(model).to(device)
        opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
        xd, yd = x.to(device), y.to(device)
        losses = []
        for step in range(4):
            with Counters() as c:
                opt.zero_grad()
                loss = nn.functional.cross_entropy(m(xd), yd)
                loss.backward()
                opt.step()
                losses.append(loss.item())
            if device == "pjrt" and step >= 2:
                # The forward and backward launch as the optimizer step begins, the step after it.
                assert step_launches(c) == (3, 1, 1, 1)
                assert c["GraphsCompiled"] == 0 and c["FallbackOps"] == 0
        results[device] = (losses, m[1].running_mean.cpu())
    torch.testing.assert_close(results["pjrt"][0], results["cpu"][0], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(results["pjrt"][1], results["cpu"][1], rtol=1e-4, atol=1e-5)


def test_eval_mode_inference():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.GELU(), nn.Flatten(), nn.LazyLinear(5)).eval()
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        expected = model(x)
        actual = copy.deepcopy(model).to("pjrt")(x.to("pjrt"))
    torch.testing.assert_close(actual.cpu(), expected, rtol=1e-4, atol=1e-5)


def test_second_process_reuses_the_persistent_cache(tmp_path):
    script = """
        import torch, torch.nn as nn
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).to("pjrt")
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        x, y = torch.randn(8, 16).to("pjrt"), torch.randint(0, 4, (8,)).to("pjrt")
        for _ in range(4):
            opt.zero_grad(); loss = nn.functional.cross_entropy(model(x), y); loss.backward(); opt.step()
            loss.item()
        c = torch.pjrt.metrics.counters()
        print("compiled", c["GraphsCompiled"], "disk_hits", c["CacheHitsDisk"], "loss", round(loss.item(), 6))
    """
    env = {"TORCH_PJRT_CACHE_DIR": str(tmp_path / "cache")}
    first = run_python(script, env=env).stdout.split()
    second = run_python(script, env=env).stdout.split()
    assert int(first[1]) > 0 and int(first[3]) == 0
    assert int(second[1]) == 0 and int(second[3]) == int(first[1])
    assert first[5] == second[5]  # same loss
