"""Every lowered op against CPU eager: several shapes and dtypes (bf16 and ints where meaningful),
non-contiguous inputs, views, in-place and out= variants. Each check also asserts that the op ran
through its lowering (no CPU fallback)."""
import functools

import pytest
import torch
import torch.nn.functional as F

from helpers import Counters, dumped_text, dumping_graphs

FLOATS = [torch.float32, torch.bfloat16]
ALL_FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int32, torch.int64]


def tol(dtype):
    if dtype in (torch.bfloat16,):
        return dict(rtol=2e-2, atol=2e-2)
    if dtype in (torch.float16,):
        return dict(rtol=5e-3, atol=5e-3)
    if dtype == torch.float64:
        return dict(rtol=1e-7, atol=1e-7)
    return dict(rtol=1e-4, atol=1e-5)


def make(shape, dtype, low=-2.0, high=2.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if not dtype.is_floating_point:
        return torch.randint(int(low) - 3, int(high) + 4, shape, generator=g).to(dtype)
    return (torch.rand(shape, generator=g, dtype=torch.float64) * (high - low) + low).to(dtype)


def check(fn, cpu_args, dtype=torch.float32, atol=None, rtol=None, allow_fallback=False, **kwargs):
    """Runs fn on CPU and on pjrt copies of the args; compares every tensor output."""
    expected = fn(*cpu_args, **kwargs)
    dev_args = [a.to("pjrt") if isinstance(a, torch.Tensor) else
                [t.to("pjrt") for t in a] if isinstance(a, list) and a and isinstance(a[0], torch.Tensor) else a
                for a in cpu_args]
    with Counters() as c:
        actual = fn(*dev_args, **kwargs)
        actual_cpu = torch.utils._pytree.tree_map(
            lambda t: t.cpu() if isinstance(t, torch.Tensor) else t, actual)
    if not allow_fallback:
        assert c["FallbackOps"] == 0, f"fell back to the CPU: {torch.pjrt.metrics.fallbacks()}"
    t = tol(dtype)
    if atol is not None:
        t = dict(rtol=rtol if rtol is not None else t["rtol"], atol=atol)
    torch.testing.assert_close(actual_cpu, expected, equal_nan=True, **t)
    return actual


# ---------------------------------------------------------------------------------- elementwise

BINARY = {
    "add": lambda a, b: a + b,
    "add_alpha": lambda a, b: torch.add(a, b, alpha=2),
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge,
}


@pytest.mark.parametrize("dtype", FLOATS + INTS)
@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("shapes", [((4, 5), (4, 5)), ((3, 1, 5), (4, 1)), ((), (6,))])
def test_binary(name, dtype, shapes):
    a, b = make(shapes[0], dtype, seed=1), make(shapes[1], dtype, seed=2)
    if name == "div":
        b = torch.where(b == 0, torch.ones_like(b), b)
    check(BINARY[name], [a, b], dtype)


@pytest.mark.parametrize("dtype", FLOATS + INTS)
def test_binary_with_python_scalars(dtype):
    a = make((3, 4), dtype)
    check(lambda x: x + 3, [a], dtype)
    check(lambda x: x * 0.5, [a], dtype)
    check(lambda x: 2 - x, [a], dtype)
    check(lambda x: x > 1.5, [a], dtype)
    check(lambda x: x ** 2, [a], dtype)


def test_division_modes_and_remainders():
    a = make((5, 6), torch.float32, -9, 9, seed=3)
    b = make((5, 6), torch.float32, 1, 4, seed=4) * torch.where(torch.rand(5, 6) > 0.5, 1.0, -1.0)
    check(lambda x, y: torch.div(x, y, rounding_mode="floor"), [a, b])
    check(lambda x, y: torch.div(x, y, rounding_mode="trunc"), [a, b])
    check(torch.remainder, [a, b])
    check(torch.fmod, [a, b])
    ai, bi = a.to(torch.int64), torch.where(b.to(torch.int64) == 0, 1, b.to(torch.int64))
    check(lambda x, y: torch.div(x, y, rounding_mode="floor"), [ai, bi], torch.int64)
    check(lambda x, y: torch.div(x, y, rounding_mode="trunc"), [ai, bi], torch.int64)
    check(torch.remainder, [ai, bi], torch.int64)
    check(lambda x, y: x / y, [ai, bi], torch.int64)  # true division of ints gives floats


def test_pow_and_atan2():
    a = make((4, 5), torch.float32, 0.1, 3)
    for p in [2, 3, 0.5, -1, -0.5, 1.7, 0]:
        check(lambda x, p=p: x ** p, [a])
    check(torch.pow, [a, make((4, 5), torch.float32, -1, 2, seed=5)])
    check(lambda x: 2 ** x, [a])
    check(torch.atan2, [make((4, 5), torch.float32), make((4, 5), torch.float32, seed=9)])


UNARY = {
    "neg": torch.neg, "abs": torch.abs, "exp": torch.exp, "exp2": torch.exp2, "expm1": torch.expm1,
    "sin": torch.sin, "cos": torch.cos, "tan": torch.tan, "tanh": torch.tanh, "sigmoid": torch.sigmoid,
    "erf": torch.erf, "atan": torch.atan, "sinh": torch.sinh, "cosh": torch.cosh, "asinh": torch.asinh,
    "floor": torch.floor, "ceil": torch.ceil, "round": torch.round, "trunc": torch.trunc, "frac": torch.frac,
    "sign": torch.sign, "relu": torch.relu, "silu": F.silu, "gelu": F.gelu,
    "gelu_tanh": functools.partial(F.gelu, approximate="tanh"), "mish": F.mish, "elu": F.elu,
    "leaky_relu": functools.partial(F.leaky_relu, negative_slope=0.2), "softplus": F.softplus,
    "hardtanh": F.hardtanh, "hardsigmoid": F.hardsigmoid, "hardswish": F.hardswish,
    "square": torch.square,
}
POSITIVE_UNARY = {"log": torch.log, "log2": torch.log2, "log10": torch.log10, "log1p": torch.log1p,
                  "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "reciprocal": torch.reciprocal,
                  "acosh": lambda x: torch.acosh(x + 1), "lgamma": torch.lgamma, "digamma": torch.digamma}
UNIT_UNARY = {"asin": torch.asin, "acos": torch.acos, "atanh": torch.atanh, "erfinv": torch.erfinv}


@pytest.mark.parametrize("dtype", ALL_FLOATS)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(name, dtype):
    check(UNARY[name], [make((3, 7), dtype, -3, 3)], dtype)


@pytest.mark.parametrize("name", sorted(POSITIVE_UNARY))
def test_unary_positive_domain(name):
    check(POSITIVE_UNARY[name], [make((3, 7), torch.float32, 0.1, 5)])


@pytest.mark.parametrize("name", sorted(UNIT_UNARY))
def test_unary_unit_domain(name):
    check(UNIT_UNARY[name], [make((3, 7), torch.float32, -0.9, 0.9)])


@pytest.mark.parametrize("dtype", INTS)
def test_integer_unary(dtype):
    a = make((4, 4), dtype)
    for fn in [torch.neg, torch.abs, torch.sign, torch.bitwise_not, torch.square, torch.relu]:
        check(fn, [a], dtype)
    check(torch.exp, [a], dtype)  # int -> float promotion


def test_logical_and_bitwise():
    a, b = make((5, 3), torch.bool, seed=1), make((5, 3), torch.bool, seed=2)
    for fn in [torch.logical_and, torch.logical_or, torch.logical_xor, torch.bitwise_and, torch.bitwise_or,
               torch.bitwise_xor]:
        check(fn, [a, b], torch.bool)
    check(torch.logical_not, [a], torch.bool)
    i, j = make((5, 3), torch.int32, seed=1), make((5, 3), torch.int32, seed=2)
    for fn in [torch.bitwise_and, torch.bitwise_or, torch.bitwise_xor, torch.logical_and]:
        check(fn, [i, j], torch.int32)


def test_where_clamp_lerp_addcmul():
    a, b = make((4, 6), torch.float32, seed=1), make((4, 6), torch.float32, seed=2)
    cond = make((4, 6), torch.bool, seed=3)
    check(torch.where, [cond, a, b])
    check(lambda c, x: torch.where(c, x, 0.0), [cond, a])
    check(lambda x: x.clamp(-0.5, 0.7), [a])
    check(lambda x: x.clamp(min=0.1), [a])
    check(lambda x: x.clamp(max=0.1), [a])
    check(lambda x, lo, hi: x.clamp(lo, hi), [a, b.clamp(max=0), b.clamp(min=0)])
    check(lambda x, y: torch.lerp(x, y, 0.3), [a, b])
    check(lambda x, y, w: torch.lerp(x, y, w), [a, b, make((4, 6), torch.float32, 0, 1, seed=5)])
    check(lambda x, y, z: torch.addcmul(x, y, z, value=0.5), [a, b, b])
    check(lambda x, y, z: torch.addcdiv(x, y, z.abs() + 1, value=-2), [a, b, b])
    check(lambda x, m: x.masked_fill(m, -1.5), [a, cond])
    check(torch.isnan, [torch.tensor([1.0, float("nan"), 2.0])])
    check(torch.nan_to_num, [torch.tensor([1.0, float("nan"), float("inf"), -float("inf")])])


def test_activation_backward():
    x = make((4, 5), torch.float32, -3, 3)
    for act in [torch.relu, torch.tanh, torch.sigmoid, F.silu, F.gelu, functools.partial(F.gelu, approximate="tanh"),
                F.elu, functools.partial(F.leaky_relu, negative_slope=0.1), F.softplus, F.hardtanh,
                F.hardsigmoid, F.hardswish]:
        def grad(t, act=act):
            t = t.detach().requires_grad_()
            act(t).sum().backward()
            return t.grad
        check(grad, [x])


# ---------------------------------------------------------------------------------- views, in-place

@pytest.mark.parametrize("dtype", FLOATS + INTS)
def test_non_contiguous_and_view_inputs(dtype):
    a, b = make((6, 4), dtype, seed=1), make((4, 6), dtype, seed=2)
    check(lambda x, y: x.t() + y, [a, b], dtype)
    check(lambda x, y: x[::2] * y[:3, :4], [a, b], dtype)
    check(lambda x: x.t().contiguous(), [a], dtype)
    check(lambda x: x.view(2, 12).sum(1), [a], dtype)
    check(lambda x: x.unsqueeze(0).expand(3, 6, 4).mul(2), [a], dtype)
    check(lambda x: x.permute(1, 0).reshape(-1), [a], dtype)
    check(lambda x: x.diagonal().neg(), [a], dtype)
    check(lambda x: x.unflatten(1, (2, 2)).select(2, 1), [a], dtype)


@pytest.mark.parametrize("dtype", FLOATS + INTS)
def test_in_place_and_out_variants(dtype):
    a, b = make((4, 5), dtype, seed=1), make((4, 5), dtype, seed=2)

    def inplace(x, y):
        x = x.clone()
        x.add_(y).mul_(2)
        x[1:3].sub_(y[0])
        x.t()[0].zero_()
        return x
    check(inplace, [a, b], dtype)

    def out_variant(x, y):
        out = torch.empty(4, 5, dtype=dtype, device=x.device)
        torch.mul(x, y, out=out)
        return out
    check(out_variant, [a, b], dtype)

    def out_into_view(x, y):
        base = torch.zeros(6, 5, dtype=dtype, device=x.device)
        torch.add(x, y, out=base[1:5])
        return base
    check(out_into_view, [a, b], dtype)


def test_in_place_type_promotion_and_broadcast():
    a, b = make((4, 5), torch.float32, seed=1), make((5,), torch.int64, seed=2)
    def f(x, y):
        x = x.clone()
        x += y  # float += int broadcast
        return x
    check(f, [a, b])


def test_fill_zero_and_factories():
    check(lambda x: x.clone().fill_(3.25), [make((3, 3), torch.float32)])
    check(lambda x: x.clone().zero_(), [make((3, 3), torch.int32)], torch.int32)
    for dtype in [torch.float32, torch.int64, torch.bfloat16]:
        assert torch.equal(torch.zeros(2, 3, dtype=dtype, device="pjrt").cpu(), torch.zeros(2, 3, dtype=dtype))
        assert torch.equal(torch.ones(4, dtype=dtype, device="pjrt").cpu(), torch.ones(4, dtype=dtype))
        assert torch.equal(torch.full((2, 2), 7, dtype=dtype, device="pjrt").cpu(), torch.full((2, 2), 7, dtype=dtype))
    assert torch.equal(torch.arange(10, device="pjrt").cpu(), torch.arange(10))
    assert torch.equal(torch.arange(2, 11, 3, device="pjrt").cpu(), torch.arange(2, 11, 3))
    torch.testing.assert_close(torch.arange(0, 1, 0.1, device="pjrt").cpu(), torch.arange(0, 1, 0.1))
    assert torch.equal(torch.zeros_like(make((2, 3), torch.float32).to("pjrt")).cpu(), torch.zeros(2, 3))


def test_casts():
    a = make((4, 4), torch.float32, -100, 100)
    for dtype in [torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.int8, torch.uint8,
                  torch.bool]:
        check(lambda x, dtype=dtype: x.to(dtype), [a], dtype)
    check(lambda x: x.to(torch.float32), [make((4, 4), torch.int64)], torch.int64)
    check(lambda x: x.to(torch.int32), [make((4, 4), torch.bool)], torch.bool)


# ---------------------------------------------------------------------------------- reductions

@pytest.mark.parametrize("dtype", FLOATS + INTS)
def test_reductions(dtype):
    a = make((3, 4, 5), dtype)
    check(torch.sum, [a], dtype)
    check(lambda x: x.sum(1), [a], dtype)
    check(lambda x: x.sum((0, 2), keepdim=True), [a], dtype)
    check(lambda x: x.amax(-1), [a], dtype)
    check(lambda x: x.amin((0, 1)), [a], dtype)
    check(torch.max, [a], dtype)
    check(torch.min, [a], dtype)
    check(lambda x: x.max(1), [a], dtype)
    check(lambda x: x.min(2, keepdim=True), [a], dtype)
    check(lambda x: x.argmax(), [a], dtype)
    check(lambda x: x.argmax(1), [a], dtype)
    check(lambda x: x.argmin(2, keepdim=True), [a], dtype)
    check(lambda x: x.prod(1), [make((3, 4, 5), dtype, -1.5, 1.5)], dtype)
    if dtype.is_floating_point:
        check(torch.mean, [a], dtype)
        check(lambda x: x.mean((1, 2)), [a], dtype)
        check(lambda x: x.var(1), [a], dtype)
        check(lambda x: x.std(unbiased=False), [a], dtype)
        check(lambda x: torch.var_mean(x, 0), [a], dtype)
        check(lambda x: torch.logsumexp(x, 1), [a], dtype)
        check(lambda x: torch.linalg.vector_norm(x), [a], dtype)
        check(lambda x: torch.linalg.vector_norm(x, ord=1, dim=1), [a], dtype)
        check(lambda x: torch.linalg.vector_norm(x, ord=float("inf")), [a], dtype)
        check(lambda x: x.cumsum(1), [a], dtype)
    check(lambda x: (x > 0).any(), [a], dtype)
    check(lambda x: (x > 0).all(1), [a], dtype)


@pytest.mark.parametrize("dtype", FLOATS)
def test_sums_of_negative_zeros_are_positive_zero_as_on_the_cpu(dtype):
    """CPU eager's sums start from +0, so one that comes to zero is +0 (1 / sum is +inf); XLA:CPU
    starts from the first element and summed negative zeros to -0."""
    def run(d):
        z = torch.full((3, 4), -0.0, dtype=dtype, device=d)
        return [z.sum(), z.sum(1), z[:1].sum(0), z.mean(), z.nansum(), z[:, :1].sum(1),
                torch.nn.functional.nll_loss(z.float(), torch.tensor([0, 1, 2], device=d), reduction="sum")]
    cpu, dev = [[t.cpu() for t in run(d)] for d in ("cpu", "pjrt")]
    for got, want in zip(dev, cpu):
        assert torch.equal(got.signbit(), want.signbit()) and torch.equal(got, want), (got, want)


def test_argmax_ties_and_nan():
    check(lambda x: x.argmax(1), [torch.tensor([[1.0, 3.0, 3.0], [2.0, 2.0, 1.0]])])
    check(lambda x: x.argmax(), [torch.tensor([1.0, float("nan"), 3.0, float("nan")])])
    check(lambda x: x.max(0), [torch.tensor([[1.0, 5.0], [5.0, 2.0], [5.0, 5.0]])])


@pytest.mark.parametrize("dtype", FLOATS)
def test_softmax_and_backward(dtype):
    a = make((4, 7), dtype, -4, 4)
    check(lambda x: torch.softmax(x, 1), [a], dtype)
    check(lambda x: torch.log_softmax(x, 0), [a], dtype)
    check(lambda x: torch.softmax(x, -1, dtype=torch.float32), [a], dtype)

    def grads(x, log):
        x = x.detach().requires_grad_()
        y = torch.log_softmax(x, 1) if log else torch.softmax(x, 1)
        (y * torch.arange(7, device=x.device, dtype=y.dtype)).sum().backward()
        return x.grad
    check(functools.partial(grads, log=False), [a], dtype)
    check(functools.partial(grads, log=True), [a], dtype)


# ---------------------------------------------------------------------------------- linear algebra

@pytest.mark.parametrize("dtype", ALL_FLOATS)
def test_matmuls(dtype):
    a, b = make((5, 7), dtype, seed=1), make((7, 3), dtype, seed=2)
    bias = make((3,), dtype, seed=3)
    loose = dict(atol=3e-2, rtol=3e-2) if dtype in (torch.bfloat16, torch.float16) else {}
    check(torch.mm, [a, b], dtype, **loose)
    check(lambda x, y, z: torch.addmm(z, x, y), [a, b, bias], dtype, **loose)
    check(lambda x, y, z: torch.addmm(z, x, y, beta=0.5, alpha=2), [a, b, bias], dtype, **loose)
    check(lambda x, y: x.t().t() @ y, [a, b], dtype, **loose)
    check(lambda x, y: x @ y.t().contiguous().t(), [a, b], dtype, **loose)
    ba, bb = make((2, 5, 7), dtype, seed=4), make((2, 7, 3), dtype, seed=5)
    check(torch.bmm, [ba, bb], dtype, **loose)
    check(lambda x, y, z: torch.baddbmm(z, x, y), [ba, bb, make((2, 5, 3), dtype)], dtype, **loose)
    check(torch.matmul, [make((3, 2, 5, 7), dtype), make((7, 4), dtype)], dtype, **loose)
    check(torch.mv, [a, make((7,), dtype)], dtype, **loose)
    check(torch.dot, [make((7,), dtype), make((7,), dtype, seed=8)], dtype, **loose)
    check(lambda x, w, bb: F.linear(x, w, bb), [a, make((4, 7), dtype), make((4,), dtype)], dtype, **loose)


def test_linear_backward():
    def grads(x, w, b):
        x, w, b = [t.detach().requires_grad_() for t in (x, w, b)]
        F.linear(x, w, b).pow(2).sum().backward()
        return x.grad, w.grad, b.grad
    check(grads, [make((6, 5), torch.float32), make((3, 5), torch.float32), make((3,), torch.float32)])


# ---------------------------------------------------------------------------------- layout and indexing

def test_cat_stack_and_friends():
    a, b = make((2, 3), torch.float32, seed=1), make((4, 3), torch.float32, seed=2)
    check(lambda x, y: torch.cat([x, y]), [a, b])
    check(lambda x, y: torch.cat([x.t(), y.t()], 1), [a, b])
    check(lambda x: torch.stack([x, x * 2, x + 1], 1), [a])
    check(lambda x, y: torch.cat([x, y.to(torch.float64)]), [a, b])
    check(lambda x: torch.flip(x, [0, 1]), [b])
    check(lambda x: torch.roll(x, 1, 0), [b])
    check(lambda x: torch.roll(x, -2), [b])
    check(lambda x: F.pad(x, (1, 2, 0, 1), value=3.0), [a])
    check(lambda x: F.pad(x, (-1, 1)), [a])
    check(lambda x: x.repeat(2, 1, 3), [a])
    check(torch.tril, [make((4, 4), torch.float32)])
    check(lambda x: torch.triu(x, 1), [make((3, 5), torch.float32)])
    check(lambda x: torch.chunk(x, 2, 0)[1] * 1, [b])


def test_gather_scatter_index_select():
    x = make((4, 5), torch.float32)
    idx = torch.tensor([[0, 4, 2], [1, 1, 0], [3, 2, 4], [0, 0, 0]])
    check(lambda t, i: torch.gather(t, 1, i), [x, idx])
    check(lambda t, i: torch.gather(t, 0, i[:3, :3] % 4), [x, idx])
    check(lambda t, i: torch.index_select(t, 0, i), [x, torch.tensor([3, 0, 0, 2])])
    check(lambda t, i: torch.index_select(t, 1, i), [x, torch.tensor([4, 1])])
    src = make((4, 3), torch.float32, seed=3)
    uniq = torch.tensor([[0, 4, 2], [1, 3, 0], [3, 2, 4], [0, 1, 2]])
    check(lambda t, i, s: t.scatter(1, i, s), [x, uniq, src])
    check(lambda t, i: t.scatter(1, i, 2.5), [x, uniq])
    check(lambda t, i, s: t.scatter_add(1, i, s), [x, idx, src])
    check(lambda t, i, s: t.scatter(1, i, s, reduce="multiply"), [x, uniq, src])
    check(lambda t, i, s: t.clone().scatter_add_(0, i % 4, s), [x, idx, src])


def test_advanced_indexing():
    x = make((4, 5, 6), torch.float32)
    i = torch.tensor([0, 3, 3, 1])
    j = torch.tensor([[1], [4]])
    check(lambda t, a: t[a], [x, i])
    check(lambda t, a: t[:, a], [x, torch.tensor([4, 0, 2])])
    check(lambda t, a, b: t[a, :, b % 6], [x, torch.tensor([0, 3]), torch.tensor([5, 1])])
    check(lambda t, a, b: t[a, b], [x, i, j])
    check(lambda t, a: t[-1, a], [x, torch.tensor([-1, 0])])
    check(lambda t, a: t[:, :, a], [x, i])

    def put(t, a, v):
        t = t.clone()
        t[a] = v
        return t
    check(put, [x, torch.tensor([2, 0]), make((2, 5, 6), torch.float32, seed=5)])
    check(put, [x, torch.tensor([1, 3]), torch.tensor(1.5)])

    def put_acc(t, a, v):
        return t.index_put((a,), v, accumulate=True)
    check(put_acc, [x, torch.tensor([1, 1, 2]), make((3, 5, 6), torch.float32, seed=6)])


def test_embedding_and_backward():
    w = make((10, 4), torch.float32)
    idx = torch.tensor([[1, 3, 3], [9, 0, 1]])
    check(F.embedding, [idx, w])

    def grad(i, weight, **kw):
        weight = weight.detach().requires_grad_()
        (F.embedding(i, weight, **kw) * torch.arange(4.0, device=weight.device)).sum().backward()
        return weight.grad
    check(grad, [idx, w])
    check(functools.partial(grad, padding_idx=3), [idx, w])
    check(functools.partial(grad, scale_grad_by_freq=True), [idx, w])


# ---------------------------------------------------------------------------------- nn ops

@pytest.mark.parametrize("groups,stride,padding,dilation", [(1, 1, 1, 1), (2, 2, 0, 1), (1, 2, 2, 2), (4, 1, 1, 1)])
def test_conv2d_forward_backward(groups, stride, padding, dilation):
    x = make((2, 4, 9, 8), torch.float32, seed=1)
    w = make((8, 4 // groups, 3, 3), torch.float32, seed=2)
    b = make((8,), torch.float32, seed=3)

    def f(x, w, b):
        x, w, b = [t.detach().requires_grad_() for t in (x, w, b)]
        y = F.conv2d(x, w, b, stride=stride, padding=padding, dilation=dilation, groups=groups)
        (y * y).sum().backward()
        return y, x.grad, w.grad, b.grad
    check(f, [x, w, b], atol=1e-3, rtol=1e-4)


@pytest.mark.parametrize("groups,stride,padding,output_padding", [(1, 2, 1, 1), (2, 1, 0, 0), (1, 3, 2, 2)])
def test_conv_transpose2d(groups, stride, padding, output_padding):
    x = make((2, 4, 5, 6), torch.float32, seed=1)
    w = make((4, 6 // groups, 3, 3), torch.float32, seed=2)

    def f(x, w):
        x, w = [t.detach().requires_grad_() for t in (x, w)]
        y = F.conv_transpose2d(x, w, stride=stride, padding=padding, output_padding=output_padding, groups=groups)
        (y * y).sum().backward()
        return y, x.grad, w.grad
    check(f, [x, w], atol=1e-3, rtol=1e-4)


def test_conv1d_and_conv3d():
    check(lambda x, w: F.conv1d(x, w, padding=2, stride=2), [make((2, 3, 11), torch.float32), make((5, 3, 4), torch.float32)])
    check(lambda x, w: F.conv3d(x, w, padding=1), [make((1, 2, 4, 5, 6), torch.float32), make((3, 2, 3, 3, 3), torch.float32)],
          atol=1e-4, rtol=1e-4)


# Convolutions whose stride equals their kernel (ViT's patch embedding) lower to dot_general:
# sizes that leave rows and columns uncovered, 1-d to 3-d, bias or none, each float type.
@pytest.mark.parametrize("x_shape,w_shape,stride,dtype", [
    ((2, 3, 32, 32), (8, 3, 16, 16), 16, torch.float32),
    ((2, 3, 35, 33), (8, 3, 16, 16), 16, torch.float32),
    ((2, 3, 12, 10), (5, 3, 4, 2), (4, 2), torch.float64),
    ((2, 3, 12, 10), (5, 3, 4, 2), (4, 2), torch.bfloat16),
    ((2, 3, 13), (4, 3, 3), 3, torch.float32),
    ((1, 2, 5, 6, 7), (3, 2, 2, 3, 2), (2, 3, 2), torch.float32),
])
@pytest.mark.parametrize("bias", [True, False])
def test_patch_convolutions_are_dots(tmp_path, x_shape, w_shape, stride, dtype, bias):
    conv = {3: F.conv1d, 4: F.conv2d, 5: F.conv3d}[len(x_shape)]
    x, w, b = make(x_shape, dtype, seed=1), make(w_shape, dtype, seed=2), make(w_shape[:1], dtype, seed=3)

    def f(x, w, b):
        x, w, b = [t.detach().requires_grad_() for t in (x, w, b)]
        y = conv(x, w, b if bias else None, stride=stride)
        (y * y).sum().backward()
        return y, x.grad, w.grad, b.grad
    torch.pjrt.synchronize()
    with dumping_graphs(tmp_path):
        # float32 sums of up to 768 products in another order than oneDNN's: atol as test_conv2d's.
        tolerance = {torch.bfloat16: dict(atol=0.5, rtol=2e-2), torch.float32: dict(atol=1e-3, rtol=1e-4)}
        y = check(f, [x, w, b], dtype, **tolerance.get(dtype, {}))[0]
    assert y.stride() == conv(x, w, stride=stride).stride()
    text = dumped_text(tmp_path)
    assert "stablehlo.dot_general" in text
    assert "stablehlo.convolution" not in text and "custom_call @torch_pjrt_conv" not in text


@pytest.mark.parametrize("kernel,stride,padding,ceil_mode,dilation", [(2, 2, 0, False, 1), (3, 2, 1, True, 1), (3, 1, 1, False, 2)])
def test_max_pool2d(kernel, stride, padding, ceil_mode, dilation):
    x = make((2, 3, 9, 8), torch.float32)

    def f(x):
        x = x.detach().requires_grad_()
        y, idx = F.max_pool2d(x, kernel, stride, padding, dilation=dilation, ceil_mode=ceil_mode, return_indices=True)
        (y * torch.arange(y.numel(), device=x.device, dtype=y.dtype).view_as(y)).sum().backward()
        return y, idx, x.grad
    check(f, [x])


@pytest.mark.parametrize("kernel,stride,padding,ceil_mode,count_include_pad", [(2, 2, 0, False, True), (3, 2, 1, True, True), (3, 2, 1, True, False)])
def test_avg_pool2d(kernel, stride, padding, ceil_mode, count_include_pad):
    x = make((2, 3, 9, 8), torch.float32)

    def f(x):
        x = x.detach().requires_grad_()
        y = F.avg_pool2d(x, kernel, stride, padding, ceil_mode=ceil_mode, count_include_pad=count_include_pad)
        (y * y).sum().backward()
        return y, x.grad
    check(f, [x])


@pytest.mark.parametrize("out", [(1, 1), (3, 2), (5, 7)])
def test_adaptive_avg_pool2d(out):
    def f(x):
        x = x.detach().requires_grad_()
        y = F.adaptive_avg_pool2d(x, out)
        (y * y).sum().backward()
        return y, x.grad
    check(f, [make((2, 3, 9, 8), torch.float32)])


@pytest.mark.parametrize("training", [True, False])
def test_batch_norm(training):
    x = make((4, 3, 5, 5), torch.float32)
    w, b = make((3,), torch.float32, 0.5, 1.5, seed=2), make((3,), torch.float32, seed=3)
    rm, rv = make((3,), torch.float32, seed=4), make((3,), torch.float32, 0.5, 2, seed=5)

    def f(x, w, b, rm, rv):
        rm, rv = rm.clone(), rv.clone()
        x, w, b = [t.detach().requires_grad_() for t in (x, w, b)]
        y = F.batch_norm(x, rm, rv, w, b, training=training, momentum=0.2, eps=1e-3)
        (y * y).sum().backward()
        return y, rm, rv, x.grad, w.grad, b.grad
    check(f, [x, w, b, rm, rv], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_internal_forms_and_their_out_variants(affine):
    # _batch_norm_with_update (torch's Meta kernel fails without a weight: ours stands in) and the
    # out= forms of it and _native_batch_norm_legit (written by hand: torch has no Meta kernel).
    aten = torch.ops.aten
    x = make((4, 3, 5), torch.float32)
    w, b = (make((3,), torch.float32, 0.5, 1.5, seed=2), make((3,), torch.float32, seed=3)) if affine else (None, None)

    def stats():
        return make((3,), torch.float32, seed=4), make((3,), torch.float32, 0.5, 2, seed=5)

    def with_update(x, w, b, rm, rv):
        rm, rv = rm.clone(), rv.clone()  # the CPU run must not change the pjrt run's inputs
        return aten._batch_norm_with_update(x, w, b, rm, rv, 0.1, 1e-5) + (rm, rv)

    def with_update_out(x, w, b, rm, rv):
        rm, rv = rm.clone(), rv.clone()
        outs = [torch.empty(0, device=x.device) for _ in range(3)] + [torch.empty(0, dtype=torch.uint8, device=x.device)]
        aten._batch_norm_with_update.out(x, w, b, rm, rv, 0.1, 1e-5, out=outs[0], save_mean=outs[1],
                                         save_invstd=outs[2], reserve=outs[3])
        return outs + [rm, rv]

    def legit_out(x, w, b, rm, rv):
        rm, rv = rm.clone(), rv.clone()
        outs = [torch.empty(0, device=x.device) for _ in range(3)]
        aten._native_batch_norm_legit.out(x, w, b, rm, rv, True, 0.1, 1e-5, out=outs[0], save_mean=outs[1],
                                          save_invstd=outs[2])
        return outs + [rm, rv]

    for fn in (with_update, with_update_out, legit_out):
        check(fn, [x, w, b, *stats()], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype,param_dtype", [(torch.float32, torch.float32), (torch.bfloat16, torch.bfloat16),
                                               (torch.bfloat16, torch.float32), (torch.float16, torch.float32)],
                         ids=str)
@pytest.mark.parametrize("training", [True, False])
def test_normalization_statistics_have_cpu_dtypes_and_shapes(dtype, param_dtype, training):
    # The CPU returns batch/layer norm statistics in the input's dtype (float when reduced-precision
    # inputs meet float32 parameters) and empty batch-norm statistics in evaluation; torch's Meta
    # kernels follow CUDA (always float, always per channel).
    aten = torch.ops.aten
    x = make((2, 3, 4), torch.float32).to(dtype)
    w, rm, rv = torch.ones(3, dtype=param_dtype), torch.zeros(3, dtype=param_dtype), torch.ones(3, dtype=param_dtype)

    def norms(x, w, rm, rv):
        rm, rv = rm.clone(), rv.clone()
        return (aten.native_batch_norm(x, w, None, rm, rv, training, 0.1, 1e-5)
                + aten._native_batch_norm_legit(x, w, None, rm, rv, training, 0.1, 1e-5)
                + aten.native_layer_norm(x, [4], w[:1].expand(4).contiguous(), None, 1e-5))

    expected = norms(x, w, rm, rv)
    actual = norms(*[t.to("pjrt") for t in (x, w, rm, rv)])
    for a, e in zip(actual, expected):
        assert (a.dtype, a.shape) == (e.dtype, e.shape)
        torch.testing.assert_close(a.cpu(), e, atol=0.02, rtol=0.02)


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "transposed input", "strided weight"])
def test_batch_norm_with_infinite_parameters_takes_the_cpus_form(training, layout):
    # torch's CPU kernel folds, y = x * (invstd * w) + (b - mean * invstd * w), where the input is
    # contiguous in its memory format and every parameter contiguous, and otherwise computes
    # ((x - mean) * invstd) * w + b: an infinite weight gives NaN in the first where the second
    # gives +-inf. The same call on pjrt takes the same form.
    x = make((2, 3, 4, 5), torch.float32)
    w = torch.tensor([float("nan"), float("inf"), -float("inf")])
    rm, rv = torch.tensor([0.5, float("inf"), 0.0]), torch.tensor([1.0, 2.0, float("inf")])

    def f(x, w, rm, rv):
        if layout == "channels_last":
            x = x.contiguous(memory_format=torch.channels_last)
        if layout == "transposed input":
            x = x.transpose(2, 3)
        if layout == "strided weight":
            w = torch.stack([w, w], 1)[:, 0]
        return F.batch_norm(x, rm.clone(), rv.clone(), w, None, training=training)
    check(f, [x, w, rm, rv])
    check(lambda x, w: f(x, w, torch.full_like(w, 0.5), torch.ones_like(w)), [x, torch.tensor([1.0, float("inf"), 2.0])])


def test_float_to_int32_and_int64_give_the_cpus_indefinite_value():
    # x86's conversion (what the CPU kernels do) gives the type's minimum for NaN, +-inf and
    # out-of-range values; narrower integers go through int64 and wrap.
    x = torch.tensor([float("nan"), float("inf"), -float("inf"), 3e9, -3e9, 1e19, 2.7, -2.7])
    for dtype in (torch.int32, torch.int64, torch.int16, torch.uint8):
        for source in (x, x.double(), x.half()):
            assert torch.equal(source.to("pjrt").to(dtype).cpu(), source.to(dtype)), (source.dtype, dtype)


def test_layer_norm_and_group_norm():
    x = make((4, 6, 8), torch.float32)

    def ln(x, w, b):
        x, w, b = [t.detach().requires_grad_() for t in (x, w, b)]
        y = F.layer_norm(x, (6, 8), w, b, eps=1e-4)
        (y * y * torch.arange(8.0, device=x.device)).sum().backward()
        return y, x.grad, w.grad, b.grad
    check(ln, [x, make((6, 8), torch.float32, seed=1), make((6, 8), torch.float32, seed=2)], atol=1e-4, rtol=1e-4)

    def gn(x, w, b):
        x, w, b = [t.detach().requires_grad_() for t in (x, w, b)]
        y = F.group_norm(x, 3, w, b)
        (y * y * torch.arange(4.0, device=x.device)).sum().backward()
        return y, x.grad, w.grad, b.grad
    check(gn, [make((2, 6, 4), torch.float32), make((6,), torch.float32, seed=1), make((6,), torch.float32, seed=2)],
          atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_losses(reduction):
    logits = make((6, 5), torch.float32)
    target = torch.tensor([0, 4, 2, 2, 1, 3])
    weight = make((5,), torch.float32, 0.5, 2)

    def ce(x, t, **kw):
        x = x.detach().requires_grad_()
        loss = F.cross_entropy(x, t, reduction=reduction, **kw)
        loss.sum().backward()
        return loss, x.grad
    check(ce, [logits, target])
    check(functools.partial(ce, weight=weight.to("pjrt")) if False else (lambda x, t, w: ce(x, t, weight=w)),
          [logits, target, weight])
    check(lambda x, t: ce(x, t, ignore_index=2), [logits, target])
    img = make((2, 5, 3, 4), torch.float32)
    check(ce, [img, torch.randint(0, 5, (2, 3, 4), generator=torch.Generator().manual_seed(0))])

    def mse(a, b):
        a = a.detach().requires_grad_()
        loss = F.mse_loss(a, b, reduction=reduction)
        loss.sum().backward()
        return loss, a.grad
    check(mse, [make((4, 3), torch.float32, seed=1), make((4, 3), torch.float32, seed=2)])


# CPU's out= reductions take out's dtype as theirs when dtype is None: sum(bfloat16, out=float32)
# accumulates in float32 (3 * 3.34375 is 10.03125, which bfloat16 rounds to 10.0), and
# sum(float, out=int64) casts each element first (aten/op_signature.cc DtypeFromOut).
@pytest.mark.parametrize("reduce", [
    lambda x, out: torch.sum(x, 0, out=out), lambda x, out: torch.mean(x, 0, out=out),
    lambda x, out: torch.nansum(x, 0, out=out), lambda x, out: torch.prod(x, 0, out=out),
    lambda x, out: torch.cumsum(x, 0, out=out), lambda x, out: torch.cumprod(x, 0, out=out),
], ids=["sum", "mean", "nansum", "prod", "cumsum", "cumprod"])
def test_reductions_into_a_wider_out_reduce_in_its_dtype(reduce):
    def result(dev, x, out_dtype):
        out = torch.empty(0, dtype=out_dtype, device=dev)
        reduce(x.to(dev), out)
        return out.cpu()
    x = torch.full((3,), 3.34375, dtype=torch.bfloat16)
    assert torch.equal(result("pjrt", x, torch.float32), result("cpu", x, torch.float32))
    y = torch.tensor([0.75, 0.75, 1.5])
    for out_dtype in (torch.int64, torch.float64):
        try:
            expected = result("cpu", y, out_dtype)
        except NotImplementedError:  # "nansum_cpu" not implemented for 'Long' (docs/design.md: left alone)
            continue
        except RuntimeError:  # mean into an integer out
            with pytest.raises(RuntimeError):
                result("pjrt", y, out_dtype)
            continue
        assert torch.equal(result("pjrt", y, out_dtype), expected)


@pytest.mark.parametrize("reduce", [
    lambda x, dtype: torch.sum(x, 1, dtype=dtype), lambda x, dtype: torch.sum(x, dtype=dtype),
    lambda x, dtype: torch.nansum(x, 1, dtype=dtype), lambda x, dtype: torch.prod(x[:2], 1, dtype=dtype),
    lambda x, dtype: torch.cumsum(x, 1, dtype=dtype), lambda x, dtype: torch.cumprod(x, 1, dtype=dtype),
    lambda x, dtype: torch.mean(x, 1, dtype=dtype),
], ids=["sum_dim", "sum", "nansum", "prod", "cumsum", "cumprod", "mean"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_reductions_into_a_half_dtype_round_their_input_to_it_first(reduce, dtype):
    """CPU casts a reduction's input to its result dtype before accumulating in float (mean aside:
    its half types sum the input in float): 9.2e22 is inf in float16, so a row holding it and -1e7
    sums to NaN, 1e5 is inf there, and 1000.123 rounds to 1000 before it is added. prod takes the
    rows whose partial products are exact in the half type: CPU's prod of a half type rounds each
    step, in its own order (docs/design.md, "Products of half types")."""
    x = torch.tensor([[-1e7, 9.2e22, 1.0, 0.0, 3.0, -2.0],
                      [1e5, 2 ** -10, 4.0, 0.5, 2.0, -0.25],
                      [1000.123, 999.751, -3.0625, 0.5, 517.3, 11.0]], dtype=torch.float64)
    expected = reduce(x, dtype)
    with Counters() as c:
        actual = reduce(x.to("pjrt"), dtype).cpu()
    assert c["FallbackOps"] == 0, f"fell back to the CPU: {torch.pjrt.metrics.fallbacks()}"
    assert torch.equal(actual.isnan(), expected.isnan())
    assert torch.equal(actual.nan_to_num(), expected.nan_to_num())
