"""atan, asin, acos, atan2 and pow of float32 tensors (lowering/float_math.cc). XLA:CPU computes
them with a scalar libm call per element (atan2 over [512, 1000] floats 11.6 ms, x ** 2.5 2.9,
against 0.8 and 1.3-1.5 in float64 arithmetic that XLA vectorizes), so on a plugin without
fast_transcendentals float32 tensors of 1024 elements or more are computed that way. Results must
be within an ulp of the float64 value, equal CPU eager's at special values (NaN, infinities,
signed zeros; subnormals read as zeros, as the CPU plugin's arithmetic reads them), and the native
path must have run."""
import math

import pytest
import torch

from helpers import dumped_text, dumping_graphs, ulps_from_float64

N = 4096
# No subnormals: the CPU plugin flushes them (capability flushes_denormals), CPU eager does not.
SPECIAL = [0.0, -0.0, 1.0, -1.0, math.inf, -math.inf, math.nan, 2.0, -2.0, 0.5, -0.5, 3.0, -3.0, 2.5,
           -2.5, 1e30, -1e30, 1e-30]


def uniform(scale, seed, n=N, low=-1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(n, generator=g, dtype=torch.float64) * (1 - low) + low) * scale


def special_pairs():
    """Every pair of special values, repeated past the 1024-element threshold."""
    s = torch.tensor(SPECIAL)
    a, b = torch.meshgrid(s, s, indexing="ij")
    reps = N // a.numel() + 1
    return a.reshape(-1).repeat(reps), b.reshape(-1).repeat(reps)


def on_pjrt(fn, *args, op):
    torch.pjrt.metrics.reset()
    got = fn(*[a.to("pjrt") for a in args]).cpu()
    assert torch.pjrt.metrics.fallbacks() == {}
    lowered = torch.pjrt.metrics.lowered()
    assert any(name.split(".")[0] == op for name in lowered), lowered
    return got


def assert_specials_equal(got, expected):
    """Same NaNs, infinities and signed zeros as CPU eager; finite values within an ulp of it."""
    assert torch.equal(got.isnan(), expected.isnan())
    exact = ~torch.isfinite(expected) | (expected == 0)
    exact &= ~expected.isnan()
    assert torch.equal(got[exact], expected[exact])
    assert torch.equal(torch.signbit(got[exact]), torch.signbit(expected[exact]))
    torch.testing.assert_close(got, expected, equal_nan=True, rtol=1.2e-7, atol=0)


UNARY = {"atan": (torch.atan, [1e-3, 1.0, 30.0, 1e30]), "asin": (torch.asin, [1e-3, 0.5, 1.0]),
         "acos": (torch.acos, [1e-3, 0.5, 1.0])}


@pytest.mark.parametrize("name", UNARY)
def test_inverse_trigonometric_within_an_ulp(name):
    fn, scales = UNARY[name]
    for seed, scale in enumerate(scales):
        x = uniform(scale, seed).float()
        got = on_pjrt(fn, x, op=name)
        assert ulps_from_float64(got, x, fn).max() <= 1.0, scale
        torch.testing.assert_close(got, fn(x), equal_nan=True)


@pytest.mark.parametrize("name", UNARY)
def test_inverse_trigonometric_near_one_and_at_special_values(name):
    fn, _ = UNARY[name]
    near_one = (1 - uniform(1e-3, 7, low=0.0)).float()
    x = torch.cat([near_one, -near_one])
    got = on_pjrt(fn, x, op=name)
    assert ulps_from_float64(got, x, fn).max() <= 1.0
    s, _ = special_pairs()
    assert_specials_equal(on_pjrt(fn, s, op=name), fn(s))  # asin(2) and atan(-0.) among them


@pytest.mark.parametrize("y_scale,x_scale", [(1.0, 1.0), (1e-3, 1.0), (1.0, 1e-3), (1e4, 1e4), (1e30, 1.0)])
def test_atan2_within_an_ulp_in_every_quadrant(y_scale, x_scale):
    y, x = uniform(y_scale, 1).float(), uniform(x_scale, 2).float()
    got = on_pjrt(torch.atan2, y, x, op="atan2")
    exact = torch.atan2(y.double(), x.double())
    ulps = (got.double() - exact).abs() / (torch.finfo(torch.float32).eps * exact.abs())
    assert ulps.max() <= 1.0
    torch.testing.assert_close(got, torch.atan2(y, x))


def test_atan2_special_values_equal_cpu():
    """atan2(+-0, +-0), (+-inf, +-inf), NaN with anything: C's values, as CPU eager gives them."""
    y, x = special_pairs()
    assert_specials_equal(on_pjrt(torch.atan2, y, x, op="atan2"), torch.atan2(y, x))


@pytest.mark.parametrize("x_scale,y_scale,negative", [(1.0, 3.0, False), (10.0, 10.0, False), (100.0, 2.0, True),
                                                      (2.0, 30.0, True)])
def test_pow_within_an_ulp(x_scale, y_scale, negative):
    x = uniform(x_scale, 3, low=0.0)
    y = uniform(y_scale, 4)
    if negative:  # a negative base needs an integer exponent
        x, y = -x, y.round()
    x, y = x.float(), y.float()
    got = on_pjrt(torch.pow, x, y, op="pow")
    exact = torch.pow(x.double(), y.double())
    finite = torch.isfinite(exact) & (exact.abs() > torch.finfo(torch.float32).tiny) & (exact.abs() < 3e38)
    ulps = (got.double() - exact).abs()[finite] / (torch.finfo(torch.float32).eps * exact.abs()[finite])
    assert ulps.max() <= 1.0
    torch.testing.assert_close(got, torch.pow(x, y), equal_nan=True)


def test_pow_special_values_equal_cpu():
    """pow(x, +-0) and pow(1, y) are 1 even with NaN, pow(-1, +-inf) is 1, a negative base gives
    NaN for non-integer exponents and keeps its sign for odd ones (-0 and -inf too), and zeros
    and infinities follow C's table."""
    x, y = special_pairs()
    assert_specials_equal(on_pjrt(torch.pow, x, y, op="pow"), torch.pow(x, y))


@pytest.mark.parametrize("exponent", [2.5, -1.7, 1 / 3, 7.0])
def test_pow_with_a_scalar_exponent_or_base(exponent):
    x = uniform(10.0, 5, low=0.0).float()
    x[:4] = torch.tensor([0.0, math.inf, math.nan, 1.0])
    torch.testing.assert_close(on_pjrt(lambda t: t ** exponent, x, op="pow"), x ** exponent, equal_nan=True)
    e = uniform(20.0, 6).float()
    torch.testing.assert_close(on_pjrt(lambda t: torch.pow(exponent, t), e, op="pow"), torch.pow(exponent, e),
                               equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_other_dtypes_equal_cpu(dtype):
    x, y = uniform(0.9, 8).to(dtype), uniform(4.0, 9, low=0.0).to(dtype)
    for name, fn, args in (("atan", torch.atan, (x,)), ("asin", torch.asin, (x,)), ("acos", torch.acos, (x,)),
                           ("atan2", torch.atan2, (x, y)), ("pow", torch.pow, (y, x))):
        torch.testing.assert_close(on_pjrt(fn, *args, op=name), fn(*args), equal_nan=True, msg=name)


def test_gradients_equal_cpu():
    x, y = uniform(0.9, 10).float().reshape(64, 64), uniform(3.0, 11, low=0.1).float().reshape(64, 64)
    grads = {}
    for dev in ("cpu", "pjrt"):
        a, b = x.to(dev).detach().requires_grad_(), y.to(dev).detach().requires_grad_()
        (torch.atan(a) + torch.asin(a) * torch.acos(a) + torch.atan2(a, b) + b ** a + b ** 1.5).sum().backward()
        grads[dev] = (a.grad.cpu(), b.grad.cpu())
    for got, expected in zip(grads["pjrt"], grads["cpu"]):
        torch.testing.assert_close(got, expected)


def test_large_float32_tensors_are_computed_here_and_small_ones_use_xla(tmp_path):
    """The native path ran: a large float32 tensor's program holds none of XLA's libm-bound ops;
    a small tensor's and a float64 tensor's keep them."""
    def run(n, dtype):
        x = torch.rand(n, device="pjrt", dtype=dtype) + 0.5
        return [torch.atan2(x, x + 1), torch.atan(x), torch.asin(x - 1), x ** 2.5, torch.pow(x, x)]

    with dumping_graphs(tmp_path / "large"):
        torch.stack(run(4096, torch.float32)).cpu()
    large = dumped_text(tmp_path / "large")
    for op in ("stablehlo.atan2", "stablehlo.power", "chlo.atan", "chlo.asin"):
        assert op not in large, op
    assert "stablehlo.exponential" in large and "f64" in large
    for n, dtype in ((64, torch.float32), (4096, torch.float64)):
        with dumping_graphs(tmp_path / f"{n}{dtype}"):
            torch.stack(run(n, dtype)).cpu()
        kept = dumped_text(tmp_path / f"{n}{dtype}")
        for op in ("stablehlo.atan2", "stablehlo.power", "chlo.atan", "chlo.asin"):
            assert op in kept, (n, dtype, op)


def test_norms_and_distances_use_the_same_pow():
    """pow inside other lowerings (p-norms, cdist) takes the same form and matches CPU eager."""
    x = uniform(3.0, 12).float().reshape(32, 128)
    torch.testing.assert_close(torch.linalg.vector_norm(x.to("pjrt"), 3.5, dim=-1).cpu(),
                               torch.linalg.vector_norm(x, 3.5, dim=-1))
    torch.testing.assert_close(torch.cdist(x.to("pjrt"), x[:16].to("pjrt"), p=1.5).cpu(), torch.cdist(x, x[:16], p=1.5),
                               rtol=1e-5, atol=1e-4)


def fmod_arguments(seed):
    """Dividends and divisors whose quotients stay under 2^26, specials and signed zeros first."""
    a = uniform(1e3, seed).float()
    b = uniform(1.0, seed + 1).float()
    b = torch.where(b.abs() < 1e-3, torch.full_like(b, 0.37), b)
    s, t = special_pairs()
    # Quotients under 2^26, or a non-finite or zero operand: 1e30 / 1e-30 takes the other branch
    # (where CPU eager, whose float quotient overflows, gives NaN and XLA's fmodf the exact value).
    q = s.double() / t.double()
    keep = (q.abs() < 2 ** 26) | ~torch.isfinite(s) | ~torch.isfinite(t) | (t == 0)
    return torch.cat([s[keep], a]), torch.cat([t[keep], b])


@pytest.mark.parametrize("fn", [torch.fmod, torch.remainder], ids=lambda f: f.__name__)
def test_fmod_and_remainder_equal_cpu_exactly(fn):
    """fmod is exact, and so is this: every result, zero signs and NaNs included, is CPU eager's."""
    a, b = fmod_arguments(13)
    got, expected = on_pjrt(fn, a, b, op=fn.__name__), fn(a, b)
    assert torch.equal(got.isnan(), expected.isnan())
    both = ~expected.isnan()
    assert torch.equal(got[both], expected[both])
    assert torch.equal(torch.signbit(got[both]), torch.signbit(expected[both]))


@pytest.mark.parametrize("fn", [torch.fmod, torch.remainder, torch.floor_divide], ids=lambda f: f.__name__)
def test_quotients_beyond_the_exact_range_take_the_compilers_op(fn):
    a, b = uniform(10.0, 14).float(), uniform(3.0, 15, low=0.5).float()
    a[7], b[7] = 1e30, 3.0  # quotient 3e29
    torch.testing.assert_close(on_pjrt(fn, a, b, op=fn.__name__), fn(a, b), rtol=0, atol=0)


def test_floor_divide_and_scalar_modulo_equal_cpu():
    a, b = fmod_arguments(16)
    finite = torch.isfinite(a) & torch.isfinite(b) & (b != 0)
    a, b = a[finite], b[finite]
    torch.testing.assert_close(on_pjrt(torch.floor_divide, a, b, op="floor_divide"), torch.floor_divide(a, b), rtol=0, atol=0)
    torch.testing.assert_close(on_pjrt(lambda t: t % 0.7, a, op="remainder"), a % 0.7, rtol=0, atol=0)


def test_large_fmod_is_computed_here(tmp_path):
    """The native path ran: a large float32 fmod holds the compiler's remainder only inside the
    stablehlo.if's branch for huge quotients; a small one is the plain op."""
    with dumping_graphs(tmp_path / "large"):
        torch.fmod(torch.rand(4096, device="pjrt") * 10, 0.3).cpu()
    large = dumped_text(tmp_path / "large")
    assert "stablehlo.if" in large and large.count("stablehlo.remainder") == 1
    with dumping_graphs(tmp_path / "small"):
        torch.fmod(torch.rand(64, device="pjrt") * 10, 0.3).cpu()
    small = dumped_text(tmp_path / "small")
    assert "stablehlo.remainder" in small and "stablehlo.if" not in small
