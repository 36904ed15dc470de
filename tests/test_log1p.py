"""log1p of float32 (Emitter::Log1pFromLog): XLA:CPU computes its own log_plus_one with a libm call
per element, so float32's is computed from XLA's vectorized log by Kahan's formula,
log(1 + x) * (x / ((1 + x) - 1)). It is what softplus, log-sigmoid, BCE with logits and Mish
lower through. Results must stay within 2 ulps of the float64 value (CPU eager's 0.5), keep
-0.0, and give -inf at -1, NaN below it and inf at inf."""
import math

import pytest
import torch
import torch.nn.functional as F

from helpers import dumped_text, dumping_graphs, ulps_from_float64


def ranges():
    g = torch.Generator().manual_seed(0)
    return {
        "tiny": (torch.rand(8192, generator=g) * 2 - 1) * 1e-6,
        "small": (torch.rand(8192, generator=g) * 2 - 1) * 1e-2,
        "unit": torch.rand(8192, generator=g) * 3 - 0.999,
        "near -1": -1 + torch.rand(8192, generator=g) * 1e-3,
        "logspace": torch.logspace(-30, 38, 8192),
    }


@pytest.mark.parametrize("name", list(ranges()))
def test_within_two_ulps_of_float64_and_close_to_cpu(name):
    x = ranges()[name]
    torch.pjrt.metrics.reset()
    got = torch.log1p(x.to("pjrt")).cpu()
    assert torch.pjrt.metrics.fallbacks() == {}
    assert ulps_from_float64(got, x, torch.log1p).max() <= 2.0
    torch.testing.assert_close(got, torch.log1p(x))


def test_special_values_equal_cpu():
    x = torch.tensor([0.0, -0.0, -1.0, -2.0, math.inf, -math.inf, math.nan, -0.5, 1.0, 3.4e38, 1e-30, -1e-30])
    got, expected = torch.log1p(x.to("pjrt")).cpu(), torch.log1p(x)
    torch.testing.assert_close(got, expected, equal_nan=True, rtol=0, atol=0)
    assert torch.equal(torch.signbit(got[:2]), torch.signbit(expected[:2]))


def test_float32_log1p_is_computed_from_log(tmp_path):
    """The native path ran: float32's program holds a log and no log_plus_one; float64 keeps XLA's."""
    with dumping_graphs(tmp_path / "f32"):
        torch.log1p(torch.rand(64, device="pjrt")).cpu()
    f32 = dumped_text(tmp_path / "f32")
    assert "stablehlo.log " in f32 and "log_plus_one" not in f32
    with dumping_graphs(tmp_path / "f64"):
        torch.log1p(torch.rand(64, device="pjrt", dtype=torch.float64)).cpu()
    assert "log_plus_one" in dumped_text(tmp_path / "f64")


@pytest.mark.parametrize("fn", [F.softplus, F.logsigmoid, F.mish, torch.log1p], ids=lambda f: f.__name__)
def test_ops_lowered_through_log1p_equal_cpu_with_gradients(fn):
    x = torch.randn(256, 64) * 10
    x[0, :4] = torch.tensor([0.0, -0.0, 50.0, -50.0])
    if fn is torch.log1p:
        x = x.abs()
    leaf_cpu, leaf_dev = x.clone().requires_grad_(), x.to("pjrt").requires_grad_()
    out_cpu, out_dev = fn(leaf_cpu), fn(leaf_dev)
    torch.testing.assert_close(out_dev.cpu(), out_cpu)
    out_cpu.sum().backward()
    out_dev.sum().backward()
    torch.testing.assert_close(leaf_dev.grad.cpu(), leaf_cpu.grad)


def test_bce_with_logits_equals_cpu():
    logits, target = torch.randn(512, 100) * 5, (torch.rand(512, 100) > 0.5).float()
    got = F.binary_cross_entropy_with_logits(logits.to("pjrt"), target.to("pjrt")).cpu()
    torch.testing.assert_close(got, F.binary_cross_entropy_with_logits(logits, target))
