"""The pointwise ops and special functions of lowering/special.cc against CPU eager: every dtype
the CPU kernel takes, non-contiguous inputs, 0-d and 0-size tensors, NaN/inf, Python scalars,
in-place and out= variants, and gradients. Each check asserts the op ran through its lowering (no
CPU fallback, and `torch.pjrt.metrics.lowered()` counts the schema). Extremal values of every
dtype are in tests/test_extremal.py."""
import pytest
import torch
import torch.utils._pytree as pytree

aten = torch.ops.aten

NAN, INF = float("nan"), float("inf")
FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]


def tol(dtype):
    if dtype == torch.bfloat16:
        return dict(rtol=1e-2, atol=1e-2)
    if dtype == torch.float16:
        return dict(rtol=2e-3, atol=1e-3)
    if dtype == torch.float64:
        return dict(rtol=1e-12, atol=1e-12)
    return dict(rtol=1e-5, atol=1e-6)


def make(shape, dtype, low=-3.0, high=3.0, seed=0, special=True):
    """Random values; floats also get NaN, +-inf, +-0.0 and integers (where ops switch formulas)."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if not dtype.is_floating_point:
        lo = 0 if dtype == torch.uint8 else int(low) - 5
        return torch.randint(lo, int(high) + 6, shape, generator=g).to(dtype)
    x = torch.rand(shape, generator=g, dtype=torch.float64) * (high - low) + low
    flat = x.view(-1)
    if special and flat.numel() >= 12:
        flat[:8] = torch.tensor([NAN, INF, -INF, 0.0, -0.0, 1.0, -1.0, 2.0], dtype=torch.float64)
        flat[8:12] = flat[8:12].round()
    return x.to(dtype)


def _to(x, device):
    return torch.utils._pytree.tree_map(lambda t: t.to(device) if isinstance(t, torch.Tensor) else t, x)


def check(fn, args, schemas, dtype=torch.float32, exact=False, **kw):
    """fn(*args) on CPU and on pjrt: equal results (exactly for exact ops and integer results),
    no fallback, and every schema in `schemas` ran through its lowering."""
    expected = fn(*args)
    torch.pjrt.metrics.reset()
    actual = _to(fn(*_to(args, "pjrt")), "cpu")
    fallbacks, lowered = torch.pjrt.metrics.fallbacks(), torch.pjrt.metrics.lowered()
    assert fallbacks == {}, f"fell back to the CPU: {fallbacks}"
    for s in [schemas] if isinstance(schemas, str) else schemas:
        assert lowered.get(s, 0) > 0, f"{s} did not run through its lowering: {lowered}"
    t = dict(rtol=0, atol=0) if exact else dict(tol(dtype), **kw)
    torch.testing.assert_close(actual, expected, equal_nan=True, **t)
    return actual


@pytest.fixture(autouse=True, scope="module")
def _quiet():
    torch.pjrt.set_fallback_warnings(False)
    yield
    torch.pjrt.set_fallback_warnings(True)


# ---------------------------------------------------------------------------------- unary

UNARY = {
    # name: (fn, schema, dtypes, exact, make kwargs)
    "signbit": (torch.signbit, "signbit", FLOATS + INTS + [torch.bool], True, {}),
    "sgn": (torch.sgn, "sgn", FLOATS + INTS + [torch.bool], True, {}),
    "frexp": (torch.frexp, "frexp.Tensor", FLOATS, True, {}),
    "sinc": (torch.sinc, "sinc", FLOATS + [torch.int64, torch.bool], False, {}),
    "round_decimals": (lambda x: (torch.round(x, decimals=3), torch.round(x, decimals=-1)), "round.decimals",
                       FLOATS, False, dict(low=-300.0, high=300.0)),
    "logit": (lambda x: (torch.logit(x), torch.logit(x, eps=0.1)), "logit", FLOATS + [torch.int64], False,
              dict(low=-0.2, high=1.2)),
    "angle": (torch.angle, "angle", FLOATS + INTS + [torch.bool], True, {}),
    "erfc": (torch.erfc, "erfc", FLOATS + [torch.int32], False, {}),
    "erfcx": (torch.special.erfcx, "special_erfcx", [torch.float32, torch.float64, torch.int64], False,
              dict(low=-10.0, high=30.0)),
    "ndtri": (torch.special.ndtri, "special_ndtri", [torch.float32, torch.float64], False,
              dict(low=-0.1, high=1.1)),
    "entr": (torch.special.entr, "special_entr", FLOATS + [torch.int16], False, {}),
    "i0": (torch.i0, "i0", FLOATS + [torch.int64], False, dict(low=-20.0, high=20.0)),
    "i0e": (torch.special.i0e, "special_i0e", FLOATS + [torch.uint8], False, dict(low=-20.0, high=20.0)),
    "i1": (torch.special.i1, "special_i1", FLOATS + [torch.int8], False, dict(low=-20.0, high=20.0)),
    "i1e": (torch.special.i1e, "special_i1e", FLOATS + [torch.int32], False, dict(low=-20.0, high=20.0)),
    "polygamma": (lambda x: [torch.polygamma(n, x) for n in range(4)], "polygamma",
                  [torch.float32, torch.float64, torch.bfloat16, torch.int64], False, dict(low=-4.0, high=6.0)),
    "shift_scalar": (lambda x: (x << 3, x >> 2, x << 70, x >> 70), ["__lshift__.Scalar", "__rshift__.Scalar"],
                     INTS + [torch.bool], True, {}),
    "floor_divide_scalar": (lambda x: (x // 3, x // -2.5, aten.floor_divide.Scalar(x, 7)),
                            "floor_divide", FLOATS + INTS, False, {}),
    "remainder_scalar": (lambda x: (torch.remainder(7, x), torch.remainder(-2.5, x)), "remainder.Scalar_Tensor",
                         FLOATS, False, {}),
}


def unary_params():
    return [pytest.param(n, d, id=f"{n}-{str(d)[6:]}") for n, (_, _, ds, _, _) in UNARY.items() for d in ds]


@pytest.mark.parametrize("name,dtype", unary_params())
def test_unary(name, dtype):
    fn, schema, _, exact, kw = UNARY[name]
    # Non-contiguous (a transpose), 0-d and 0-size.
    for x in [make((5, 6), dtype, **kw).t(), make((), dtype, special=False, **kw), make((0, 3), dtype, **kw)]:
        check(fn, [x], schema, dtype, exact=exact)


# ---------------------------------------------------------------------------------- binary

BINARY = {
    "copysign": (torch.copysign, "copysign.Tensor", FLOATS + [torch.int32, torch.bool], True),
    "heaviside": (torch.heaviside, "heaviside", FLOATS + INTS + [torch.bool], True),
    "nextafter": (torch.nextafter, "nextafter", [torch.float32, torch.float64, torch.bfloat16], True),
    "fmax": (torch.fmax, "fmax", FLOATS + INTS + [torch.bool], True),
    "fmin": (torch.fmin, "fmin", FLOATS + INTS + [torch.bool], True),
    "floor_divide": (torch.floor_divide, "floor_divide", FLOATS + INTS, False),
    "logaddexp": (torch.logaddexp, "logaddexp", FLOATS, False),
    "logaddexp2": (torch.logaddexp2, "logaddexp2", FLOATS, False),
    "xlogy": (torch.xlogy, "xlogy.Tensor", FLOATS + [torch.int64, torch.bool], False),
    "xlog1py": (torch.special.xlog1py, "special_xlog1py", FLOATS + [torch.int32], False),
    "hypot": (torch.hypot, "hypot", FLOATS, False),
    "logit_backward": (lambda g, x: aten.logit_backward(g, x.sigmoid(), 0.2), "logit_backward", FLOATS, False),
    "gcd": (torch.gcd, "gcd", INTS, True),
    "lcm": (torch.lcm, "lcm", INTS, True),
    "lshift": (lambda a, b: (a << b, torch.bitwise_left_shift(a, b)), ["__lshift__.Tensor", "bitwise_left_shift.Tensor"],
               INTS, True),
    "rshift": (lambda a, b: (a >> b, torch.bitwise_right_shift(a, b)),
               ["__rshift__.Tensor", "bitwise_right_shift.Tensor"], INTS, True),
    "zeta": (lambda x, q: torch.special.zeta(x.abs() + 1, q), "special_zeta", [torch.float32, torch.float64], False),
}


def binary_params():
    return [pytest.param(n, d, id=f"{n}-{str(d)[6:]}") for n, (_, _, ds, _) in BINARY.items() for d in ds]


@pytest.mark.parametrize("name,dtype", binary_params())
def test_binary(name, dtype):
    fn, schema, _, exact = BINARY[name]
    a = make((6, 5), dtype, seed=1).t()  # non-contiguous
    b = make((5, 6), dtype, seed=2)
    if not dtype.is_floating_point and name in ("floor_divide",):
        b = torch.where(b == 0, torch.ones_like(b), b)
    if name in ("lshift", "rshift") and dtype != torch.uint8:
        b = b.abs() % 12 - 2  # negative and in-range amounts
    check(fn, [a, b], schema, dtype, exact=exact)
    # Broadcasting against a row and a 0-d tensor.
    check(fn, [a, b[:1]], schema, dtype, exact=exact)
    check(fn, [a, b[0, 1]], schema, dtype, exact=exact)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.float64])
def test_mixed_dtypes_and_python_scalars(dtype):
    a = make((4, 5), dtype, seed=3)
    other = torch.float16 if dtype.is_floating_point else torch.int8
    b = make((4, 5), other, seed=4)
    check(torch.fmax, [a, b], "fmax", dtype, exact=True)
    check(torch.floor_divide, [a, torch.where(b == 0, torch.ones_like(b), b)], "floor_divide", dtype)
    check(lambda x: torch.copysign(x, -2), [a], "copysign.Tensor", dtype, exact=True)
    check(lambda x: torch.xlogy(x, 2.5), [a], "xlogy.Tensor", dtype)
    check(lambda x: torch.xlogy(3, x), [a], "xlogy.Tensor", dtype)
    if dtype.is_floating_point:
        check(torch.hypot, [a, torch.tensor(2.0, dtype=torch.float64)], "hypot", dtype)
        check(torch.nextafter, [a, torch.tensor(INF, dtype=dtype)], "nextafter", dtype, exact=True)
    else:
        check(lambda x, six, y: (torch.gcd(x, six), torch.lcm(x, y)),
              [a, torch.tensor(6, dtype=torch.int64), b.to(dtype)], ["gcd", "lcm"], dtype, exact=True)


# ---------------------------------------------------------------------------------- variants

def test_inplace_and_out_variants():
    a, b = make((4, 5), torch.float32, seed=5), make((4, 5), torch.float32, seed=6)
    i, j = make((4, 5), torch.int32, seed=7), make((4, 5), torch.int32, seed=8)

    def inplace(a, b, i, j):
        x, y = a.clone(), i.clone()
        x.copysign_(b).heaviside_(b.flip(0))
        x.hypot_(b)
        y.gcd_(j)
        y <<= 2
        y.bitwise_right_shift_(j.abs() % 5)
        z = a.clone().floor_divide_(b.abs() + 1)
        w = a.sigmoid().logit_(0.1)
        v = a.clone().xlogy_(b.abs())
        return x, y, z, w, v

    check(inplace, [a, b, i, j], ["copysign.Tensor", "heaviside", "hypot", "gcd", "__lshift__.Scalar",
                                  "bitwise_right_shift.Tensor", "floor_divide", "logit", "xlogy.Tensor"])

    def out(a, b, i, j):
        o1, o2 = torch.empty_like(a), torch.empty_like(i)
        torch.logaddexp(a, b, out=o1)
        torch.lcm(i, j, out=o2)
        o3 = torch.empty(0, dtype=torch.float32, device=a.device)  # resized by the out= call
        torch.special.i0e(a, out=o3)
        m, e = torch.empty_like(a), torch.empty_like(a, dtype=torch.int32)
        torch.frexp(a, out=(m, e))
        return o1, o2, o3, m, e

    check(out, [a, b, i, j], ["logaddexp", "lcm", "special_i0e", "frexp.Tensor"])


def test_type_errors():
    """Dtypes CPU refuses: float shifts and integer frexp raise at the call (Meta kernels); float gcd
    (NotImplementedError on CPU) raises when the graph is lowered, at the sync."""
    with pytest.raises(RuntimeError):
        torch.gcd(torch.ones(3, device="pjrt"), torch.ones(3, device="pjrt")).cpu()
    with pytest.raises(RuntimeError):
        torch.tensor([1.5], device="pjrt") << 2
    with pytest.raises(RuntimeError):
        torch.frexp(torch.ones(3, dtype=torch.int32, device="pjrt"))


# ---------------------------------------------------------------------------------- gradients

GRADS = {
    "logit": (lambda x: torch.logit(x, 0.05), "logit_backward", dict(low=0.01, high=0.99)),
    "sinc": (torch.sinc, "sinc", {}),
    "hypot": (lambda x: torch.hypot(x, x.flip(0) + 0.5), "hypot", {}),
    "logaddexp": (lambda x: torch.logaddexp(x, x.flip(0)), "logaddexp", {}),
    "xlogy": (lambda x: torch.xlogy(x, x.abs() + 0.1), "xlogy.Tensor", {}),
    "erfc": (torch.erfc, "erfc", {}),
    "i0": (torch.i0, "special_i1", dict(low=-5.0, high=5.0)),
    "polygamma": (lambda x: torch.polygamma(1, x), "polygamma", dict(low=0.5, high=4.0)),
    "erfcx": (torch.special.erfcx, "special_erfcx", {}),
    "copysign": (lambda x: torch.copysign(x, x.flip(0)), "copysign.Tensor", {}),
}


@pytest.mark.parametrize("name", sorted(GRADS))
def test_gradients(name):
    fn, schema, kw = GRADS[name]
    x = make((12,), torch.float64, seed=9, special=False, **kw)

    def grad(x):
        x = x.detach().requires_grad_()
        y = fn(x)
        g = torch.linspace(-1, 1, y.numel(), dtype=y.dtype).to(y.device).view_as(y)
        return torch.autograd.grad(y, x, g)[0]

    check(grad, [x], schema, torch.float64)


@pytest.mark.parametrize("dtype", [torch.uint16, torch.uint32, torch.uint64])
def test_fill_of_wide_unsigned_types(dtype):
    """The number-range probe once had no uint16/32/64 case and raised NotImplementedError."""
    x = torch.zeros(3, dtype=dtype)
    for value in (7, -1):
        assert torch.equal(torch.full_like(x.to("pjrt"), value).cpu(), torch.full_like(x, value))
        assert torch.equal(x.to("pjrt").fill_(value).cpu(), x.clone().fill_(value))
    if dtype != torch.uint64:
        with pytest.raises(RuntimeError, match="without overflow"):
            torch.full((2,), 2 ** 40, dtype=dtype, device="pjrt")


def _both(fn):
    """fn(device) on CPU and on pjrt, results moved to the CPU."""
    return [pytree.tree_map(lambda t: t.cpu() if isinstance(t, torch.Tensor) else t, fn(d)) for d in ("cpu", "pjrt")]


def test_bool_add_and_multiply_are_logical_inside_fused_programs():
    """XLA adds and multiplies i1 values as one-bit integers where they fuse (true + true was
    false): bool add is a logical or and multiply a logical and, as on the CPU, also as
    reductions and accumulating writes."""
    def run(d):
        b = torch.tensor([[True, True, False], [True, False, False]], device=d)
        doubled = torch.ge(b, b)
        doubled.add_(doubled)
        acc = torch.zeros(3, dtype=torch.bool, device=d)
        acc.index_put_((torch.tensor([0, 0, 1], device=d),), torch.tensor([True, True, False], device=d),
                       accumulate=True)
        added = torch.zeros(3, dtype=torch.bool, device=d).index_add_(0, torch.tensor([2, 2], device=d),
                                                                      torch.tensor([True, True], device=d))
        return doubled, b + b, b * torch.ge(b, b), torch.add(b, b, alpha=True), acc, added, b.prod(1)
    cpu, dev = _both(run)
    for got, want in zip(dev, cpu):
        assert torch.equal(got, want), (got, want)


def test_erf_saturates_to_exactly_one_as_on_the_cpu():
    """XLA's float32 erf stops 3 ulps short of +-1 for |x| >= 3.8325; torch's is exactly +-1 there,
    so erf(36) cast to an integer is 1, not 0 (fuzz seeds 207163, 208164)."""
    values = [36.0, -2.1e9, 2.1e9, 3.8325068, -3.8325068, 3.9, -5.0, 6.0, 3.5, float("nan"), float("inf"), 0.0]
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
        cpu, dev = _both(lambda d: torch.erf(torch.tensor(values, dtype=dtype, device=d)))
        saturated = cpu.abs() == 1
        assert torch.equal(dev[saturated], cpu[saturated]) and saturated.sum() >= 5, (dtype, dev, cpu)
        torch.testing.assert_close(dev, cpu, equal_nan=True)
    cpu, dev = _both(lambda d: torch.erf(torch.tensor([36, -2147483648], dtype=torch.int32, device=d)).to(torch.int32))
    assert dev.tolist() == cpu.tolist() == [1, -1]
    cpu, dev = _both(lambda d: torch._foreach_erf([torch.tensor([40.0, -40.0], device=d)]))
    assert dev[0].tolist() == cpu[0].tolist() == [1.0, -1.0]


def test_logical_ops_test_operands_in_the_promoted_type():
    """A 0-d operand of a wider type is cast to the dimensioned operand's type first, as on the
    CPU: int32 -2^31 beside int16 is 0 (fuzz seed 205049), float64 1e-300 beside float32 is 0."""
    def run(d):
        small = torch.tensor([7, 0], dtype=torch.int16, device=d)
        wide = torch.tensor(-2147483648, dtype=torch.int32, device=d)
        f = torch.tensor([1.0, 0.0], device=d)
        tiny = torch.tensor(1e-300, dtype=torch.float64, device=d)
        z = torch.tensor([0j, 1j], device=d)
        return [op(a, b) for op in (torch.logical_and, torch.logical_or, torch.logical_xor)
                for a, b in ((small, wide), (f, tiny), (z, f))]
    cpu, dev = _both(run)
    for got, want in zip(dev, cpu):
        assert torch.equal(got, want), (got, want)


@pytest.mark.parametrize("dtype,alpha", [(torch.bool, 0.5), (torch.bool, 1j), (torch.int32, True),
                                         (torch.float32, True), (torch.int64, 0.5)])
def test_alpha_kinds_are_checked_as_on_the_cpu(dtype, alpha):
    """add/sub's alpha_check, which the Meta kernels skip for bool results and bool alphas: a
    float alpha with integral (bool) tensors and a bool alpha with non-bool ones raise the CPU's
    RuntimeError at the call (fuzz seed 209991)."""
    for device in ("cpu", "pjrt"):
        x = torch.ones(3, dtype=dtype, device=device)
        for call in (lambda: torch.add(x, x, alpha=alpha), lambda: x.clone().add_(x, alpha=alpha),
                     lambda: torch.add(x, 2, alpha=alpha)):
            with pytest.raises(RuntimeError, match="alpha"):
                call()


@pytest.mark.parametrize("half", [torch.float16, torch.bfloat16])
def test_integer_tensors_beside_half_types_are_cast_to_the_common_dtype_first(half):
    """TensorIterator casts a dimensioned int64 operand to the common float16/bfloat16 before
    computing in float32: 9e18 is inf there (fuzz seed 408974: floor_divide gave +-inf where the
    CPU gives NaN), and 1001 rounds in bfloat16. 0-d operands are CPU scalars, read in float32."""
    def run(d):
        ints = torch.tensor([-9223372036854775808, 9223372036854775807, 1001, 70000, 3], device=d)
        h = torch.tensor([1.5, -2.0, 3.0, 0.5, -100.0], dtype=half, device=d)
        h0 = torch.tensor(-100.0, dtype=half, device=d)
        return [ints + h, h - ints, torch.sub(h, ints, alpha=0.5), ints * h, ints / h0, h / ints,
                torch.floor_divide(ints, h0), torch.floor_divide(h, ints), h0 * ints, h.clone().sub_(ints)]
    cpu, dev = _both(run)
    for got, want in zip(dev, cpu):
        torch.testing.assert_close(got, want, equal_nan=True, rtol=0, atol=0)


# Ops whose CPU kernels, for float16 and bfloat16, read a 0-d tensor or Python number in the
# half type (TensorIterator casts it to the common dtype) or round intermediate steps to it
# (scalar_t math), each with the scalar in the place the kernel treats that way.
HALF_STEPS = {
    "remainder": lambda x, s: (x % s, torch.remainder(s, x), torch.remainder(x, torch.tensor(s, dtype=torch.float64))),
    "fmod": lambda x, s: (torch.fmod(x, s), torch.fmod(torch.tensor(s, dtype=torch.float64), x)),
    "pow": lambda x, s: (x.abs() ** s, s ** x, x ** (s + 2), x.abs() ** torch.tensor(s, dtype=torch.float64)),
    "atan2": lambda x, s: (torch.atan2(x, torch.tensor(s, dtype=torch.float64)), torch.atan2(torch.tensor(s), x)),
    "xlogy": lambda x, s: (torch.xlogy(x, s), torch.xlogy(s, x.abs()), torch.xlogy(x, x.abs() + 0.1),
                           torch.special.xlog1py(x, x.abs())),
    "hypot_logaddexp": lambda x, s: (torch.hypot(x, torch.tensor(s)), torch.logaddexp(x, torch.tensor(s)),
                                     torch.logaddexp2(torch.tensor(s), x)),
    "lerp": lambda x, s: (torch.lerp(x, x * 2 + 1, torch.tensor(s, dtype=torch.float64)), torch.lerp(x, x * 2 + 1, s)),
    "division_first_operand": lambda x, s: (torch.tensor(s, dtype=torch.float64) / x, torch.tensor(s) * x,
                                            torch.div(torch.tensor(s), x, rounding_mode="floor")),
    "floor_and_trunc_division": lambda x, s: (x // (x.flip(0) * s), torch.div(x * 50, x.flip(0), rounding_mode="trunc"),
                                              torch.div(x, s, rounding_mode="trunc"), x // s),
    "shrink": lambda x, s: (torch.nn.functional.hardshrink(x, s), aten.hardshrink_backward(x * 3, x, s),
                            aten.softshrink_backward(x * 3, x, s)),
    # CPU's last-dim log_softmax keeps the sum and its log in the half type
    "log_softmax": lambda x, s: (torch.log_softmax(x.view(16, 16) * s, 1), torch.log_softmax(x.view(16, 16), 0)),
    # mish_backward ran as torch's composite, every step rounded to the half type (7% off)
    "mish_backward": lambda x, s: (aten.mish_backward(x * s, x),),
    "logit_entr": lambda x, s: (torch.logit(x.sigmoid()), torch.logit(x.sigmoid(), s / 10), torch.special.entr(x.abs())),
}


@pytest.mark.parametrize("half", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", sorted(HALF_STEPS))
def test_half_types_read_scalars_and_round_steps_as_the_cpu_kernels(name, half):
    """bfloat16 x % 0.1003 divides by 0.10009765625 on the CPU, pow's exponent 2.003 is 2 there,
    logit and floor division round each step: exactly CPU's values, not merely close."""
    g = torch.Generator().manual_seed(3)
    x = (torch.randn(256, generator=g) * 3).to(half)
    x[:6] = torch.tensor([0.1003, 0.0999, -0.1003, 2.003, 1000.0, 0.004])
    for s in (0.1003, 2.003, 0.0999, 2.276):
        want = HALF_STEPS[name](x, s)
        torch.pjrt.metrics.reset()
        got = HALF_STEPS[name](x.to("pjrt"), s)
        assert torch.pjrt.metrics.fallbacks() == {}
        for g_, w in zip(got, want):
            torch.testing.assert_close(g_.cpu(), w, rtol=0, atol=0, equal_nan=True, msg=lambda m: f"s={s}: {m}")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float64, torch.int64, torch.bool,
                                   torch.complex64])
def test_addr_computes_in_the_cpu_kernels_order(dtype):
    """addr is CPU's elementwise kernel, (alpha * vec1) * vec2 + beta * self, a half type rounding
    every step; torch's composite (alpha * outer(vec1, vec2)) differed in 10-20% of the bfloat16
    elements. bfloat16 is exact; float16 is not (see docs/design.md, "Fused rounding in the half
    types"), float32 and float64 within an ulp: CPU's vector lanes compute fma(alpha * vec1, vec2,
    beta * self), as pjrt does, but its scalar tail fma(beta, self, alpha * vec1 * vec2)."""
    g = torch.Generator().manual_seed(0)
    make = lambda *s: torch.rand(*s, generator=g) > 0.5 if dtype == torch.bool else (
        (torch.randn(*s, generator=g) * 3).to(dtype))
    self_, v1, v2 = make(37, 53), make(37), make(53)
    scalars = [(True, True), (False, True), (True, False)] if dtype == torch.bool else (
        [(1, 1), (0, 3), (2, -1)] if dtype == torch.int64 else [(0.6, 0.2), (0, 1.5), (1, 1), (-2.5, 3)])
    exact = dtype in (torch.bfloat16, torch.int64, torch.bool)
    for beta, alpha in scalars:
        check(lambda s, a, b: torch.addr(s, a, b, beta=beta, alpha=alpha), (self_, v1, v2), "addr", dtype,
              exact=exact, **({} if exact else dict(rtol=2e-6, atol=1e-5)))
    self_[0, 0] = float("nan") if dtype.is_floating_point else self_[0, 0]
    check(lambda s, a, b: s.addr_(a, b, beta=0), (self_.clone(), v1, v2), "addr", dtype, exact=exact,
          **({} if exact else dict(rtol=2e-6, atol=1e-5)))  # beta == 0 ignores self, NaN too


@pytest.mark.parametrize("dtype", FLOATS)
def test_addcmul_and_addcdiv_round_as_the_cpu_kernels(dtype):
    """CPU computes self + value * t1 * t2 as fma(value * t1, t2, self) and addcdiv as
    self + (value * t1) / t2; multiplying t1 * t2 first was an ulp off in 10-30% of the float32
    elements (Adam's second moment among them). Exactly CPU's values, also through _foreach_."""
    g = torch.Generator().manual_seed(0)
    a, t1, t2 = (torch.randn(1003, generator=g).to(dtype) for _ in range(3))
    P = lambda x: x.to("pjrt")
    for v in (1.0, 0.3, 3.7, -0.001):
        for f in (torch.addcmul, torch.addcdiv):
            torch.testing.assert_close(f(P(a), P(t1), P(t2), value=v).cpu(), f(a, t1, t2, value=v), rtol=0, atol=0)
        want, got = [a.clone(), a * 2], [P(a), P(a * 2)]
        torch._foreach_addcmul_(want, [t1, t2], [t2, t1], value=v)
        torch._foreach_addcmul_(got, [P(t1), P(t2)], [P(t2), P(t1)], value=v)
        for w, x in zip(want, got):
            torch.testing.assert_close(x.cpu(), w, rtol=0, atol=0)
