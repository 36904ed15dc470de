"""sin, cos and tan (lowering/trigonometric.cc). XLA:CPU computes its own sine, cosine and tan with a
scalar libm call per element (11-29 ms over 1M floats against CPU eager's 0.3-0.6), so float32
tensors of 1024 elements or more are range-reduced and evaluated in float64 arithmetic that XLA
vectorizes, with XLA's ops kept for arguments beyond 1e6 (a stablehlo.if over the whole tensor).
Results must be within an ulp of the float64 value (CPU eager's SLEEF kernels are within 0.54
here), keep the sign of zero, give NaN for inf and NaN, and equal CPU eager's."""
import math

import pytest
import torch

from helpers import dumped_text, dumping_graphs, ulps_from_float64

FUNCS = [torch.sin, torch.cos, torch.tan]
SPECIAL = [0.0, -0.0, math.inf, -math.inf, math.nan, 1e-40, -1e-45, math.pi / 2, -math.pi, 1.0]


def arguments(scale, n=4096, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.rand(n, generator=g, dtype=torch.float64) * 2 - 1) * scale
    x[: len(SPECIAL)] = torch.tensor(SPECIAL, dtype=torch.float64)
    return x.float()


def on_pjrt(fn, x):
    torch.pjrt.metrics.reset()
    got = fn(x.to("pjrt")).cpu()
    assert torch.pjrt.metrics.fallbacks() == {}
    assert torch.pjrt.metrics.lowered().get(fn.__name__, 0) == 1, torch.pjrt.metrics.lowered()
    return got


@pytest.mark.parametrize("fn", FUNCS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("scale", [1.0, 100.0, 1e4, 9.9e5])
def test_within_an_ulp_and_equal_to_cpu(fn, scale):
    x = arguments(scale)
    got, expected = on_pjrt(fn, x), fn(x)
    assert ulps_from_float64(got, x, fn).max() <= 1.0
    torch.testing.assert_close(got, expected, equal_nan=True)
    assert torch.equal(got.isnan(), expected.isnan())  # inf and NaN give NaN
    assert torch.equal(torch.signbit(got[:2]), torch.signbit(expected[:2]))  # sin(-0.0) is -0.0


@pytest.mark.parametrize("fn", FUNCS, ids=lambda f: f.__name__)
def test_arguments_beyond_the_reduction_take_xlas_ops(fn):
    x = arguments(10.0)
    x[100], x[200] = 3.0e7, -1.0e38
    torch.testing.assert_close(on_pjrt(fn, x), fn(x), equal_nan=True)


@pytest.mark.parametrize("fn", FUNCS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_other_dtypes_equal_cpu(fn, dtype):
    x = arguments(8.0).to(dtype)
    torch.testing.assert_close(on_pjrt(fn, x), fn(x), equal_nan=True)


def test_large_float32_tensors_are_reduced_here_and_small_ones_use_xla(tmp_path):
    """The native path ran: the large tensor's program holds the reduction (a stablehlo.if whose
    branch rounds x * 2/pi), a small tensor's is XLA's sine alone."""
    with dumping_graphs(tmp_path / "large"):
        torch.sin(torch.rand(4096, device="pjrt") + 1).cpu()
    large = dumped_text(tmp_path / "large")
    assert "stablehlo.if" in large and "round_nearest_even" in large
    with dumping_graphs(tmp_path / "small"):
        torch.sin(torch.rand(64, device="pjrt") + 2).cpu()
    small = dumped_text(tmp_path / "small")
    assert "stablehlo.sine" in small and "stablehlo.if" not in small


def test_gradients_and_out_variants_equal_cpu():
    x = arguments(5.0)[-64 * 63:].reshape(64, 63)
    leaf_cpu = x.clone().requires_grad_()
    leaf_dev = x.to("pjrt").requires_grad_()
    (leaf_cpu.sin() * leaf_cpu.cos() + leaf_cpu.tan()).sum().backward()
    (leaf_dev.sin() * leaf_dev.cos() + leaf_dev.tan()).sum().backward()
    torch.testing.assert_close(leaf_dev.grad.cpu(), leaf_cpu.grad)
    out = torch.empty(64, 63, device="pjrt")
    torch.cos(x.to("pjrt"), out=out)
    torch.testing.assert_close(out.cpu(), torch.cos(x))
    y = x.t().to("pjrt")  # non-contiguous, in place
    y.sin_()
    torch.testing.assert_close(y.cpu(), x.t().sin())
