"""Sorting, selection, scans, scatter/index reductions, search and histograms against CPU eager:
every dtype the CPU kernel supports, ties (stable order), NaN (sorted as the largest value),
-0.0/+0.0, 0-size and 0-d inputs, negative dims, in-place and out= variants, gradients and
out-of-range indices. Every check asserts that no CPU fallback ran and that the lowering ran."""
import math
import re

import pytest
import torch

from helpers import Counters

D = "pjrt"
INTS = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]
FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
REAL = INTS + FLOATS
ALL = [torch.bool] + REAL


def tree(fn, x):
    return torch.utils._pytree.tree_map(fn, x)


def to_dev(x):
    return tree(lambda t: t.to(D) if isinstance(t, torch.Tensor) else t, x)


def to_cpu(x):
    return tree(lambda t: t.cpu() if isinstance(t, torch.Tensor) else t, x)


def tol(dtype):
    return {torch.float16: dict(rtol=5e-3, atol=5e-3), torch.bfloat16: dict(rtol=2e-2, atol=2e-2),
            torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float64: dict(rtol=1e-10, atol=1e-10),
            torch.complex64: dict(rtol=1e-5, atol=1e-5)}.get(dtype, dict(rtol=0, atol=0))


_PENDING = []  # deferred comparisons of the running test (see `check`)


@pytest.fixture(autouse=True)
def _compare_pending_at_end():
    """Runs each test's deferred comparisons after it: one sync and one compiled graph for all of
    a test's cases instead of one per case (compiles dominate this file's run time)."""
    _PENDING.clear()
    yield
    flush()


def flush():
    pending = list(_PENDING)
    _PENDING.clear()
    actual = to_cpu([p[0] for p in pending])
    for got, (_, expected, kw, label) in zip(actual, pending):
        try:
            torch.testing.assert_close(got, expected, equal_nan=True, **kw)
        except AssertionError as e:
            raise AssertionError(f"{label}: {e}") from None


def check(fn, args, lowered, exact=True, dtype=None, expected=None, now=False):
    """fn(*args) on pjrt equals it on CPU, natively: no fallback, and the `lowered` schemas ran
    (both decided when the op is traced). The comparison runs at the end of the test (or at once,
    returning the result, with `now`)."""
    if expected is None:
        expected = fn(*tree(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, args))
    before = torch.pjrt.metrics.lowered()
    with Counters() as c:
        actual = fn(*to_dev(args))
    assert c["FallbackOps"] == 0, f"fell back to the CPU: {torch.pjrt.metrics.fallbacks()}"
    after = torch.pjrt.metrics.lowered()
    for name in ([lowered] if isinstance(lowered, str) else lowered):
        assert after.get(name, 0) > before.get(name, 0), f"{name} did not run natively"
    kw = dict(rtol=0, atol=0) if exact else tol(dtype)
    label = f"{lowered} {dtype or ''} {[tuple(a.shape) for a in args if isinstance(a, torch.Tensor)]}"
    _PENDING.append((actual, expected, kw, label))
    if now:
        flush()
        return to_cpu(actual)
    return None


def data(shape, dtype, seed=0, low=-4, high=5, special=True):
    """Values with many ties; floats also get NaN, +-inf and -0.0/+0.0."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype == torch.uint8:
        low = 0
    x = torch.randint(low, high, shape, generator=g)
    if not dtype.is_floating_point:
        return x.to(dtype)
    x = x.to(torch.float64) / 2
    if special and x.numel() >= 8:
        flat = x.view(-1)
        idx = torch.randperm(flat.numel(), generator=g)[:6]
        flat[idx[0]] = math.nan
        flat[idx[1]] = math.inf
        flat[idx[2]] = -math.inf
        flat[idx[3]] = -0.0
        flat[idx[4]] = 0.0
        flat[idx[5]] = math.nan
    return x.to(dtype)


def unique(shape, dtype, seed=0):
    """Distinct values (no ties), for ops whose tie order torch leaves unspecified."""
    g = torch.Generator().manual_seed(seed)
    n = math.prod(shape)
    x = torch.randperm(n, generator=g).reshape(shape)
    if dtype in (torch.uint8, torch.int8):
        x = x % 100 if n <= 100 else x
    return (x - (n // 2 if dtype != torch.uint8 else 0)).to(dtype)


def same_sign_of_zero(actual, expected):
    a, e = actual.double(), expected.double()
    zero = e == 0
    assert torch.equal(torch.signbit(a[zero]), torch.signbit(e[zero]))


# ------------------------------------------------------------------------------- sort family

@pytest.mark.parametrize("dtype", ALL)
def test_sort_stable_ties_nan_and_zeros(dtype):
    x = data((6, 9), dtype)
    for dim in (0, 1, -1):
        for desc in (False, True):
            r = check(lambda t: torch.sort(t, dim=dim, descending=desc, stable=True), [x], "sort.stable",
                      now=dtype.is_floating_point)
            if dtype.is_floating_point:
                same_sign_of_zero(r[0], torch.sort(x, dim=dim, descending=desc, stable=True)[0])
    check(lambda t: torch.argsort(t, dim=0, stable=True), [x], "sort.stable")
    check(lambda t: torch.msort(t), [x], "sort.stable")


def test_sort_default_variants_noncontiguous_empty_and_0d():
    x = data((7, 5), torch.float32).t()  # non-contiguous
    check(lambda t: torch.sort(t), [x], "sort.stable")
    check(lambda t: torch.sort(t, 0, True), [x], "sort.stable")
    check(lambda t: torch.argsort(t, descending=True), [x], "sort.stable")
    check(lambda t: torch.sort(t, dim=1), [torch.empty(3, 0)], "sort.stable")
    check(lambda t: torch.sort(t, dim=0), [torch.tensor(2.5)], "sort.stable")
    # out= and a big row (XLA's sort, not an insertion sort)
    big = data((3, 1000), torch.float32, high=50)

    def with_out(t):
        v, i = torch.empty(0, device=t.device), torch.empty(0, dtype=torch.long, device=t.device)
        torch.sort(t, stable=True, out=(v, i))
        return v, i
    check(with_out, [big], "sort.stable")


def test_sort_and_topk_gradients():
    x = unique((4, 6), torch.float64).requires_grad_()
    g = torch.randn(4, 6, dtype=torch.float64)
    for fn in (lambda t: torch.sort(t, 1)[0], lambda t: torch.topk(t, 3)[0].repeat(1, 2),
               lambda t: torch.kthvalue(t, 2, 0, keepdim=True)[0].expand(4, 6),
               lambda t: torch.median(t, 1, keepdim=True)[0].expand(4, 6),
               lambda t: torch.cummax(t, 1)[0], lambda t: torch.cummin(t, 0)[0]):
        expected = torch.autograd.grad(fn(x), x, g)
        xd = x.detach().to(D).requires_grad_()
        with Counters() as c:
            actual = torch.autograd.grad(fn(xd), xd, g.to(D))[0].cpu()
        assert c["FallbackOps"] == 0, torch.pjrt.metrics.fallbacks()
        torch.testing.assert_close(actual, expected[0])


@pytest.mark.parametrize("dtype", REAL)
def test_topk_and_kthvalue(dtype):
    x = unique((5, 12), dtype)
    for k, dim, largest in ((3, 1, True), (3, -1, False), (2, 0, True), (5, 0, False), (12, 1, True)):
        check(lambda t: torch.topk(t, k, dim, largest), [x], "topk")
    for k, dim in ((1, 1), (7, 1), (5, 0)):
        check(lambda t: torch.kthvalue(t, k, dim), [x], "kthvalue")
        check(lambda t: torch.kthvalue(t, k, dim, keepdim=True), [x], "kthvalue")
    if dtype.is_floating_point:
        y = x.clone()
        y[1, 3] = math.nan
        y[2, 5] = math.inf
        check(lambda t: torch.topk(t, 4), [y], "topk")  # NaN is the largest
        check(lambda t: torch.topk(t, 4, largest=False), [y], "topk")
        check(lambda t: torch.kthvalue(t, 12), [y], "kthvalue")


def test_topk_kthvalue_ties_give_a_valid_index():
    x = data((4, 10), torch.float32, special=False)
    for fn in (lambda t: torch.topk(t, 3), lambda t: torch.kthvalue(t, 4, keepdim=True),
               lambda t: torch.topk(t, 3, sorted=False)):
        v, i = to_cpu(fn(x.to(D)))
        ev = fn(x)[0]
        torch.testing.assert_close(v.sort(-1)[0], ev.sort(-1)[0])
        torch.testing.assert_close(x.gather(1, i), v)  # the index points at its value
    check(lambda t: torch.topk(t, 0), [x], "topk")
    check(lambda t: torch.topk(t, 1, 0), [torch.tensor(3.0)], "topk")


@pytest.mark.parametrize("dtype", REAL)
def test_median_and_nanmedian(dtype):
    x = data((5, 9), dtype)
    for op, name in ((torch.median, "median"), (torch.nanmedian, "nanmedian")):
        check(op, [x], name)
        check(op, [x[:, :8]], name)  # even count: the lower median
        for dim in (0, 1, -1):
            check(lambda t: op(t, dim), [x], name + ".dim")  # ties: smallest index
            check(lambda t: op(t, dim, keepdim=True), [x[:4]], name + ".dim")
        check(lambda t: op(t, 0), [torch.tensor(7).to(dtype)], name + ".dim")
        check(op, [torch.empty(0, dtype=dtype)], name)
    if dtype.is_floating_point:
        y = torch.full((3, 4), math.nan, dtype=dtype)
        y[1, 2] = 1.0
        y[2] = torch.tensor([2.0, math.nan, 1.0, math.nan], dtype=dtype)
        check(lambda t: torch.median(t, 1), [y], "median.dim")  # the first NaN, its index
        check(lambda t: torch.nanmedian(t, 1), [y[1:]], "nanmedian.dim")
        # An all-NaN row: NaN; the index is whatever std::nth_element leaves there on the CPU (we
        # return 0, as the CPU does for rows of up to 3 NaNs).
        v, i = to_cpu(torch.nanmedian(y[:1].to(D), 1))
        assert v.isnan().all() and i.tolist() == [0]
        check(torch.nanmedian, [y], "nanmedian")
        check(torch.median, [y], "median")


@pytest.mark.parametrize("dtype", [torch.bool] + REAL)
def test_mode(dtype):
    x = data((6, 11), dtype, low=-2, high=3)
    if dtype.is_floating_point:  # torch's CPU kernel std::sorts with `<`: NaN breaks its order
        x = torch.nan_to_num(x, nan=1.5, posinf=math.inf, neginf=-math.inf)
    for dim in (0, 1, -1):  # short rows: torch's CPU sort is stable here, indices comparable
        check(lambda t: torch.mode(t, dim), [x], "mode")
        check(lambda t: torch.mode(t, dim, keepdim=True), [x], "mode")
    check(lambda t: torch.mode(t), [torch.tensor(4).to(dtype)], "mode")
    if dtype == torch.float32:
        long_rows = data((3, 60), dtype, special=False)
        v, i = to_cpu(torch.mode(long_rows.to(D), 1))
        torch.testing.assert_close(v, torch.mode(long_rows, 1)[0])
        torch.testing.assert_close(long_rows.gather(1, i[:, None])[:, 0], v)


# --------------------------------------------------------------------------------- scans

@pytest.mark.parametrize("dtype", ALL + [torch.complex64])
def test_cumsum_cumprod(dtype):
    for n in (1, 2, 5, 8, 33):
        x = data((3, n), dtype, low=-2, high=3, special=False)
        exact = not (dtype.is_floating_point or dtype.is_complex) or n < 3
        if dtype.is_complex:
            x = torch.complex(data((3, n), torch.float32), data((3, n), torch.float32, seed=1))
            x = torch.nan_to_num(x, nan=0.5, posinf=2.0, neginf=-2.0)
        check(lambda t: torch.cumsum(t, 1), [x], "cumsum", exact, dtype)
        check(lambda t: torch.cumprod(t, -1), [x], "cumprod", exact, dtype)
        check(lambda t: torch.cumsum(t, 0), [x], "cumsum", exact, dtype)
    if dtype in (torch.int8, torch.uint8):  # wrapping in the requested type
        x = torch.full((40,), 3, dtype=dtype)
        check(lambda t: torch.cumprod(t, 0, dtype=dtype), [x], "cumprod")
        check(lambda t: torch.cumsum(t, 0, dtype=dtype), [x * 30], "cumsum")


def test_scans_special_values_long_rows_and_variants():
    x = data((4, 9), torch.float32)  # NaN, inf, -0.0
    check(lambda t: torch.cumsum(t, 1), [x], "cumsum", False, torch.float32)
    check(lambda t: torch.cumprod(t, 1), [x], "cumprod", False, torch.float32)
    z = torch.tensor([-0.0, -0.0, 1.0, -1.0, -0.0])
    r = check(lambda t: torch.cumsum(t, 0), [z], "cumsum", now=True)
    same_sign_of_zero(r, torch.cumsum(z, 0))  # torch starts from +0.0
    r = check(lambda t: torch.logcumsumexp(t, 0), [z], "logcumsumexp", False, torch.float32, now=True)
    same_sign_of_zero(r, torch.logcumsumexp(z, 0))
    long = torch.rand(2, 3000, dtype=torch.float64)
    check(lambda t: torch.cumsum(t, 1), [long], "cumsum", False, torch.float64)
    check(lambda t: torch.cumsum(t, 1, dtype=torch.float64), [long.float()], "cumsum", False, torch.float64)
    check(lambda t: torch.cumsum(t, 0), [torch.tensor(3)], "cumsum")
    check(lambda t: torch.cumprod(t, 1), [torch.empty(2, 0)], "cumprod")
    check(lambda t: t.cumsum_(0), [torch.rand(5, 3)], "cumsum", False, torch.float32)
    check(lambda t: torch.cumsum(t.t(), 1), [torch.rand(6, 4)], "cumsum", False, torch.float32)
    check(lambda t: torch.cumsum(t, 0), [torch.tensor([True, False, True])], "cumsum")


@pytest.mark.parametrize("dtype", ALL)
def test_cummax_cummin(dtype):
    for n in (1, 6, 17):
        x = data((4, n), dtype, low=-2, high=3)  # ties: the later index wins; NaN wins and sticks
        for dim in (1, 0, -1):
            check(lambda t: torch.cummax(t, dim), [x], "cummax")
            check(lambda t: torch.cummin(t, dim), [x], "cummin")
    check(lambda t: torch.cummax(t, 0), [torch.tensor(2).to(dtype)], "cummax")
    check(lambda t: torch.cummin(t, 1), [torch.empty(2, 0, dtype=dtype)], "cummin")
    if dtype.is_floating_point:
        y = torch.tensor([1.0, math.nan, 3.0, math.nan, -0.0, 0.0, -0.0], dtype=dtype)
        check(lambda t: torch.cummax(t, 0), [y], "cummax")
        check(lambda t: torch.cummin(t, 0), [y[4:]], "cummin")


@pytest.mark.parametrize("dtype", FLOATS + [torch.complex64])
def test_logcumsumexp(dtype):
    if dtype.is_complex:
        x = torch.complex(torch.randn(3, 7), torch.randn(3, 7))
        x[0, 2] = complex(-math.inf, 0.0)
        x[1, 3] = complex(math.nan, 0.0)
    else:
        x = (torch.randn(3, 7, dtype=torch.float64) * 3).to(dtype)
        x[0, 2] = -math.inf
        x[0, 3] = -math.inf
        x[1, 1] = math.inf
        x[1, 4] = math.inf
        x[2, 5] = math.nan
    for dim in (0, 1):
        check(lambda t: torch.logcumsumexp(t, dim), [x], "logcumsumexp", False, dtype)
    check(lambda t: torch.logcumsumexp(t, 0), [torch.full((4,), -math.inf, dtype=dtype)], "logcumsumexp",
          False, dtype)


def test_cumprod_gradient_with_infinities_beside_zeros_matches_torchs_masks():
    # torch sums a position's terms only up to the next zero: an infinity before a zero gives an
    # infinite gradient there, not inf * 0 = NaN (found by fuzzing, seed 1870856).
    inf, nan = math.inf, math.nan
    rows = [[-2.5, -inf, 0.0, 100.0], [inf, 2.0, 0.0, 3.0], [2.0, 3.0, 0.0, inf, 0.0, 4.0], [3.0, 0.0, inf, 2.0],
            [nan, 0.0, 1.0, 2.0], [0.0, 0.0, 5.0, inf]]
    for dtype in (torch.float32, torch.float64, torch.complex64):
        for row in rows:
            x = torch.tensor([row, row[::-1]], dtype=torch.float64).to(dtype)
            g = torch.randn(x.shape, dtype=dtype)
            for dim, xs, gs in ((1, x, g), (0, x.t().contiguous(), g.t().contiguous())):
                expected = torch.autograd.grad(torch.cumprod(xs.requires_grad_(), dim), xs, gs)[0]
                xd = xs.detach().to(D).requires_grad_()
                actual = torch.autograd.grad(torch.cumprod(xd, dim), xd, gs.to(D))[0].cpu()
                torch.testing.assert_close(actual, expected, equal_nan=True, msg=f"{dtype} {row} dim {dim}")


def test_scan_gradients_including_cumprod_with_zeros_and_double_backward():
    def grads(fn, x, g, create_graph=False):
        x = x.detach().requires_grad_()
        (gx,) = torch.autograd.grad(fn(x), x, g, create_graph=create_graph)
        return x, gx

    g = torch.randn(3, 7, dtype=torch.float64)
    x = torch.randn(3, 7, dtype=torch.float64)
    x[0, 2] = 0.0  # one zero
    x[1, 1] = 0.0  # two zeros
    x[1, 5] = 0.0
    x[2, 0] = 0.0  # zero first
    for fn in (lambda t: torch.cumprod(t, 1), lambda t: torch.cumprod(t, 0), lambda t: torch.cumsum(t, 1),
               lambda t: torch.logcumsumexp(t, 1), lambda t: torch.cummax(t, 1)[0]):
        expected = grads(fn, x, g)[1]
        with Counters() as c:
            actual = grads(fn, x.to(D), g.to(D))[1].cpu()
        assert c["FallbackOps"] == 0, torch.pjrt.metrics.fallbacks()
        torch.testing.assert_close(actual, expected)
    before = torch.pjrt.metrics.lowered().get("cumprod_backward", 0)
    with Counters() as c:
        grads(lambda t: torch.cumprod(t, 1), x.to(D), g.to(D))[1].cpu()
    assert c["Sync::item"] == 0  # torch's decomposition would read "any zero?" from the device
    assert torch.pjrt.metrics.lowered()["cumprod_backward"] > before
    # complex
    xc = torch.complex(x, torch.randn(3, 7, dtype=torch.float64))
    gc = torch.complex(g, g.flip(0))
    torch.testing.assert_close(grads(lambda t: torch.cumprod(t, 1), xc.to(D), gc.to(D))[1].cpu(),
                               grads(lambda t: torch.cumprod(t, 1), xc, gc)[1])
    # double backward goes through torch's differentiable decomposition
    for dev in ("cpu", D):
        xx, gx = grads(lambda t: torch.cumprod(t, 1), x.to(dev), g.to(dev), create_graph=True)
        (ggx,) = torch.autograd.grad(gx.sum(), xx)
        if dev == "cpu":
            expected = ggx
        else:
            torch.testing.assert_close(ggx.cpu(), expected)


# ------------------------------------------------------------------- scatter / index reductions

def index_along(shape, dim, size, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, size, shape, generator=g)


@pytest.mark.parametrize("dtype", ALL + [torch.complex64])
def test_scatter_reduce_two(dtype):
    x = data((5, 4), dtype, low=1, high=4, special=False)
    src = data((6, 4), dtype, low=1, high=4, special=False, seed=1)
    if dtype.is_complex:
        x, src = torch.complex(x.real, x.real.flip(0)), torch.complex(src.real, src.real.flip(1))
    index = index_along((6, 4), 0, 5)  # duplicates; row 4 of some columns untouched
    reduces = ["sum", "prod", "mean", "amax", "amin"]
    if dtype == torch.bool:
        reduces.remove("mean")
    if dtype.is_complex:
        reduces = ["sum", "prod", "mean"]
    exact = not (dtype.is_floating_point or dtype.is_complex)
    for reduce in reduces:
        for include_self in (True, False):
            fn = lambda t, i, s: t.scatter_reduce(0, i, s, reduce, include_self=include_self)
            check(fn, [x, index, src], "scatter_reduce.two", exact, dtype)
            fn = lambda t, i, s: t.scatter_reduce(1, i[:5, :3], s, reduce, include_self=include_self)
            check(fn, [x, index.clamp(max=3), src], "scatter_reduce.two", exact, dtype)
    check(lambda t, i, s: t.clone().scatter_reduce_(-1, i, s, "sum"), [x, index[:2, :2] % 4, src],
          "scatter_reduce.two", exact, dtype)


def test_scatter_reduce_nan_negative_ints_0d_and_gradients():
    x = torch.tensor([1.0, math.nan, 3.0, 4.0])
    src = torch.tensor([math.nan, 2.0, 5.0, 0.5])
    i = torch.tensor([0, 2, 2, 3])
    for reduce in ("amax", "amin", "sum", "prod", "mean"):
        for inc in (True, False):
            check(lambda t, j, s: t.scatter_reduce(0, j, s, reduce, include_self=inc), [x, i, src],
                  "scatter_reduce.two", False, torch.float32)
    xi = torch.tensor([5, -7, 3])
    si = torch.tensor([-4, 0, -3, 8])
    ii = torch.tensor([1, 1, 0, 2])
    for inc in (True, False):  # integer mean floors
        check(lambda t, j, s: t.scatter_reduce(0, j, s, "mean", include_self=inc), [xi, ii, si],
              "scatter_reduce.two")
    check(lambda t, j, s: t.scatter_reduce(0, j, s, "sum"), [torch.tensor(1.0), torch.tensor(0), torch.tensor(2.0)],
          "scatter_reduce.two")
    # gradients: torch's formulas over lowered ops
    xs = torch.rand(5, 4, dtype=torch.float64) + 0.5
    ss = torch.rand(6, 4, dtype=torch.float64) + 0.5
    ix = index_along((6, 4), 0, 5)
    for reduce in ("sum", "mean", "amax", "amin", "prod"):
        def f(a, b, dev):
            a = a.to(dev).requires_grad_()
            b = b.to(dev).requires_grad_()
            out = a.scatter_reduce(0, ix.to(dev), b, reduce)
            return [t.cpu() for t in torch.autograd.grad(out, (a, b), torch.ones_like(out))]
        torch.testing.assert_close(f(xs, ss, D), f(xs, ss, "cpu"))


@pytest.mark.parametrize("dtype", ALL)
def test_index_reduce(dtype):
    x = data((5, 3), dtype, low=1, high=4, special=False)
    src = data((6, 3), dtype, low=1, high=4, special=False, seed=2)
    index = torch.tensor([0, 2, 2, 4, 0, 2])
    exact = not dtype.is_floating_point
    reduces = ["prod", "amax", "amin"] + ([] if dtype == torch.bool else ["mean"])
    if dtype == torch.bool:  # CPU's kernel has no bool case without self: the CPU path raises it
        for dev in ("cpu", D):
            with pytest.raises(NotImplementedError):
                x.to(dev).index_reduce(0, index.to(dev), src.to(dev), "amax", include_self=False)
    for reduce in reduces:
        for inc in (True, False) if dtype != torch.bool else (True,):
            check(lambda t, i, s: t.index_reduce(0, i, s, reduce, include_self=inc), [x, index, src],
                  "index_reduce", exact, dtype)
            check(lambda t, i, s: t.index_reduce(1, i, s, reduce, include_self=inc),
                  [x, torch.tensor([2, 0, 2, 2]), src[:5, :].repeat(1, 2)[:, :4]], "index_reduce", exact, dtype)
    if dtype.is_floating_point:
        y = x.clone()
        y[1, 1] = math.nan
        s2 = src.clone()
        s2[3, 0] = math.nan
        for reduce in ("amax", "amin"):
            check(lambda t, i, s: t.index_reduce_(0, i, s, reduce), [y, index, s2], "index_reduce")


@pytest.mark.parametrize("dtype", ALL + [torch.complex64])
def test_index_add_copy_fill(dtype):
    x = data((5, 4), dtype, special=False)
    src = data((3, 4), dtype, special=False, seed=3)
    if dtype.is_complex:
        x, src = torch.complex(x.real, x.real.flip(0)), torch.complex(src.real, -src.real)
    exact = not (dtype.is_floating_point or dtype.is_complex)
    dup = torch.tensor([4, 1, 4])
    check(lambda t, i, s: t.index_add(0, i, s), [x, dup, src], "index_add", exact, dtype)
    if dtype != torch.bool:
        check(lambda t, i, s: t.index_add(0, i, s, alpha=2), [x, dup, src], "index_add", exact, dtype)
    check(lambda t, i, s: t.index_add_(1, i, s), [x, torch.tensor([3, 0, 3, 1, 0]), src.repeat(2, 2)[:5, :5]],
          "index_add", exact, dtype)
    check(lambda t, i, s: t.index_copy(0, i, s), [x, torch.tensor([4, 0, 2]), src], "index_copy")
    check(lambda t, i, s: t.index_copy_(-1, i, s.t()[:, :3].t().repeat(2, 1)[:5, :3].contiguous()),
          [x, torch.tensor([3, 1, 0]), src], "index_copy")
    value = True if dtype == torch.bool else 3
    check(lambda t, i: t.index_fill(0, i, value), [x, torch.tensor([1, -1])], "index_fill.int_Scalar")
    check(lambda t, i, v: t.index_fill_(1, i, v), [x, torch.tensor([0, -2, 0]), torch.tensor(value).to(dtype)],
          "index_fill.int_Tensor")
    check(lambda t, i: t.index_fill(0, i, value), [x[0, 0].clone(), torch.tensor([0])], "index_fill.int_Scalar")


def test_index_ops_gradients_and_empty_index():
    x = torch.rand(5, 4, dtype=torch.float64) + 0.5
    s = torch.rand(3, 4, dtype=torch.float64) + 0.5
    i = torch.tensor([4, 1, 4])
    for fn in (lambda a, b, j: a.index_add(0, j, b, alpha=3), lambda a, b, j: a.index_copy(0, j.unique(), b[:2]),
               lambda a, b, j: a.index_fill(0, j, 2.0) * b.sum(),
               lambda a, b, j: a.index_reduce(0, j, b, "mean"), lambda a, b, j: a.index_reduce(0, j, b, "amax")):
        def run(dev):
            a, b = x.to(dev).requires_grad_(), s.to(dev).requires_grad_()
            out = fn(a, b, i.to(dev))
            return [t.cpu() for t in torch.autograd.grad(out, (a, b), torch.ones_like(out), allow_unused=True)
                    if t is not None]
        torch.testing.assert_close(run(D), run("cpu"))
    check(lambda t, j, b: t.index_add(0, j, b), [x, torch.tensor([], dtype=torch.long), s[:0]], "index_add")


def test_masked_fill_and_masked_scatter():
    for dtype in ALL:
        x = data((4, 5), dtype, special=False)
        mask = torch.rand(4, 5) > 0.5
        src = data((30,), dtype, special=False, seed=5)
        check(lambda t, m, s: t.masked_scatter(m, s), [x, mask, src], "masked_scatter")
        check(lambda t, m: t.masked_fill(m, True if dtype == torch.bool else 2), [x, mask], "masked_fill.Scalar")
    x = torch.rand(4, 5)
    check(lambda t, m, s: t.masked_scatter(m, s), [x, torch.rand(5) > 0.3, torch.rand(20)], "masked_scatter")
    check(lambda t, m, s: t.masked_scatter(m, s), [x[:1], torch.rand(3, 5) > 0.3, torch.rand(16)], "masked_scatter")
    mask = torch.rand(4, 5) > 0.5
    check(lambda t, m, s: t.masked_scatter_(m, s), [x, mask, torch.rand(int(mask.sum()))], "masked_scatter")
    check(lambda t, m, s: t.masked_scatter(m, s), [x, torch.zeros(4, 5, dtype=torch.bool), torch.rand(3)],
          "masked_scatter")
    check(lambda t, m, v: t.masked_fill(m, v), [x, torch.rand(5) > 0.5, torch.tensor(-1.0)], "masked_fill.Tensor")
    check(lambda t, m, s: t.masked_scatter(m, s), [torch.empty(0, 3), torch.empty(0, 3, dtype=torch.bool),
                                                    torch.rand(2)], "masked_scatter")

    def run(dev, m, n_src):
        a = x.to(dev).requires_grad_()
        b = torch.arange(float(n_src)).to(dev).requires_grad_()
        out = a.masked_scatter(m.to(dev), b)
        w = torch.arange(20.0).reshape(4, 5).to(dev)
        return [t.cpu() for t in torch.autograd.grad((out * w).sum(), (a, b))]
    for m, n_src in ((mask, 25), (mask, int(mask.sum())), (torch.rand(5) > 0.5, 40)):
        before = torch.pjrt.metrics.lowered().get("masked_scatter_backward", 0)
        with Counters() as c:
            got = run(D, m, n_src)
        assert c["FallbackOps"] == 0, torch.pjrt.metrics.fallbacks()
        assert torch.pjrt.metrics.lowered()["masked_scatter_backward"] > before
        torch.testing.assert_close(got, run("cpu", m, n_src))


@pytest.mark.parametrize("dtype", [torch.bool, torch.int32, torch.float32, torch.bfloat16, torch.complex64])
def test_take_and_put(dtype):
    x = data((12,), dtype, special=False) if not dtype.is_complex else torch.randn(12, dtype=dtype)
    idx = torch.tensor([[0, -1], [11, -12], [5, 5]])
    check(lambda t, i: torch.take(t, i), [x, idx], "take")
    src = x[:6].flip(0).reshape(3, 2).clone()
    check(lambda t, i, s: t.put(i, s), [x, torch.tensor([[0, -1], [3, 4], [7, 8]]), src], "put")
    check(lambda t, i, s: t.put_(i, s, accumulate=True), [x, idx, src], "put",
          dtype != torch.bfloat16, dtype)
    check(lambda t, i: torch.take(t, i), [torch.tensor(5).to(dtype), torch.tensor([0, -1])], "take")
    # Rank > 1: the flat indices are checked against numel, natively.
    m = x.reshape(3, 4)
    check(lambda t, i: torch.take(t, i), [m, idx], "take")
    check(lambda t, i, s: t.put(i, s, accumulate=True), [m, idx, src], "put", dtype != torch.bfloat16, dtype)


def test_take_of_a_matrix_bounds_flat_indices_by_numel():
    m = torch.arange(12.0).reshape(3, 4)
    for bad in (12, -13):
        result = torch.take(m.to(D), torch.tensor([1, bad], device=D))
        with pytest.raises(IndexError, match=f"index {bad} is out of bounds for 12 elements in aten::take"):
            result.cpu()


# ------------------------------------------------------------------------------- search

@pytest.mark.parametrize("dtype", REAL)
def test_isin(dtype):
    elements = data((4, 6), dtype, low=-6, high=7)
    for m in (5, 40):  # compare-all and sort + binary search
        tests = data((m,), dtype, low=-6, high=7, seed=m)
        for invert in (False, True):
            check(lambda a, b: torch.isin(a, b, invert=invert), [elements, tests], "isin.Tensor_Tensor")
        check(lambda a, b: torch.isin(a, b, assume_unique=True), [elements.unique(), tests.unique()],
              "isin.Tensor_Tensor")
    check(lambda a: torch.isin(a, 2), [elements], "isin.Tensor_Scalar")
    check(lambda a: torch.isin(a, 1.5, invert=True), [elements], "isin.Tensor_Scalar")
    check(lambda b: torch.isin(2, b), [elements], "isin.Scalar_Tensor")
    check(lambda a, b: torch.isin(a, b), [elements, data((7,), torch.float64, seed=9)], "isin.Tensor_Tensor")
    check(lambda a, b: torch.isin(a, b), [elements, torch.empty(0, dtype=dtype)], "isin.Tensor_Tensor")


def test_isin_nan_and_signed_zero():
    a = torch.tensor([math.nan, 0.0, -0.0, 1.0, math.inf])
    for b in (torch.tensor([math.nan, -0.0, math.inf]), torch.cat([torch.tensor([math.nan, 0.0]), torch.arange(50.0) + 2])):
        check(lambda x, y: torch.isin(x, y), [a, b], "isin.Tensor_Tensor")


@pytest.mark.parametrize("dtype", REAL)
def test_bucketize_and_searchsorted(dtype):
    bounds = torch.tensor([-3, -1, -1, 0, 2, 2, 2, 4]).to(dtype) if dtype != torch.uint8 else \
        torch.tensor([0, 1, 1, 2, 4, 4, 6])
    values = data((3, 5), dtype, low=-5, high=7)
    for right in (False, True):
        for out_int32 in (False, True):
            check(lambda v, b: torch.bucketize(v, b, right=right, out_int32=out_int32), [values, bounds],
                  "bucketize.Tensor")
            check(lambda b, v: torch.searchsorted(b, v, right=right, out_int32=out_int32), [bounds, values],
                  "searchsorted.Tensor")
    check(lambda b, v: torch.searchsorted(b, v, side="right"), [bounds, values], "searchsorted.Tensor")
    check(lambda b: torch.searchsorted(b, 2), [bounds], "searchsorted.Scalar")
    check(lambda b: torch.bucketize(2, b, right=True), [bounds], "bucketize.Scalar")
    perm = torch.randperm(bounds.numel(), generator=torch.Generator().manual_seed(1))
    shuffled = bounds[perm]
    sorter = torch.argsort(shuffled, stable=True)
    check(lambda b, v, s: torch.searchsorted(b, v, sorter=s), [shuffled, values, sorter], "searchsorted.Tensor")
    nd = torch.sort(data((3, 6), dtype, low=-5, high=7, special=False), dim=1)[0]
    check(lambda b, v: torch.searchsorted(b, v), [nd, values[:, :4]], "searchsorted.Tensor")
    check(lambda b, v: torch.searchsorted(b, v, right=True), [nd, values[:, :4]], "searchsorted.Tensor")


def test_searchsorted_nan_unsorted_empty_and_mixed_dtypes():
    b = torch.tensor([-1.0, 0.0, 0.0, 2.0, math.inf, math.nan])
    v = torch.tensor([math.nan, -0.0, 0.0, math.inf, -math.inf, 5.0, 1.0])
    for right in (False, True):
        check(lambda x, y: torch.searchsorted(x, y, right=right), [b, v], "searchsorted.Tensor")
        check(lambda x, y: torch.searchsorted(x, y, right=right), [b.flip(0), v], "searchsorted.Tensor")
    check(lambda x, y: torch.searchsorted(x, y), [torch.empty(0), v], "searchsorted.Tensor")
    check(lambda x, y: torch.searchsorted(x, y), [b, torch.empty(0)], "searchsorted.Tensor")
    check(lambda x, y: torch.bucketize(x, y), [v, torch.tensor([0, 1, 3])], "bucketize.Tensor")
    check(lambda x: torch.searchsorted(x, 1.5), [torch.tensor([1, 2, 3])], "searchsorted.Scalar")
    check(lambda x: torch.searchsorted(x, 0.5), [torch.tensor(b[:4].tolist()).double()], "searchsorted.Scalar")


@pytest.mark.parametrize("dtype", FLOATS)
def test_histc(dtype):
    x = (torch.rand(200, dtype=torch.float64) * 10 - 3).to(dtype)
    check(lambda t: torch.histc(t, 7, -2, 5), [x], "histc")  # values outside the range count nowhere
    check(lambda t: torch.histc(t), [x], "histc")  # min == max == 0: the data's range
    check(lambda t: torch.histc(t, 4, 1, 1), [x], "histc")
    check(lambda t: torch.histc(t, 5, 0, 5), [torch.tensor([0.0, 1.0, 2.0, 5.0, 5.0, 4.999, -0.0]).to(dtype)], "histc")
    check(lambda t: torch.histc(t, 3), [torch.full((4,), 2.0, dtype=dtype)], "histc")  # one value: +-1
    check(lambda t: torch.histc(t, 3, -1, 1), [torch.tensor([math.nan, 0.5, math.inf]).to(dtype)], "histc")
    check(lambda t: torch.histc(t, 3), [torch.empty(0, dtype=dtype)], "histc")
    out = torch.empty(0, dtype=dtype)
    check(lambda t: torch.histc(t, 6, out=out.to(t.device)), [x.reshape(20, 10)], "histc")


# ------------------------------------------------------------------------------- misc

@pytest.mark.parametrize("dtype", ALL)
def test_aminmax_and_count_nonzero(dtype):
    x = data((4, 5), dtype)
    check(torch.aminmax, [x], "aminmax")
    for dim in (0, -1):
        check(lambda t: torch.aminmax(t, dim=dim), [x], "aminmax")
        check(lambda t: torch.aminmax(t, dim=dim, keepdim=True), [x], "aminmax")
    check(lambda t: torch.aminmax(t, dim=0), [torch.tensor(3).to(dtype)], "aminmax")
    check(torch.count_nonzero, [x], "count_nonzero.dim_IntList")
    check(lambda t: torch.count_nonzero(t, 1), [x], "count_nonzero.dim_IntList")
    check(lambda t: torch.count_nonzero(t, (0, 1)), [x], "count_nonzero.dim_IntList")
    check(lambda t: torch.count_nonzero(t, []), [x.t()], "count_nonzero.dim_IntList")


def test_equal_reads_one_lowered_comparison():
    a = torch.tensor([1.0, 2.0, -0.0])
    cases = [(a, a.clone()), (a, torch.tensor([1.0, 2.0, 0.0])), (a, a + 1), (a, a[:2]),
             (torch.tensor([math.nan]), torch.tensor([math.nan])), (a, a.double()),
             (torch.tensor([1, 2]), torch.tensor([1.0, 2.0])), (torch.empty(0), torch.empty(0))]
    for x, y in cases:
        with Counters() as c:
            got = torch.equal(x.to(D), y.to(D))
        assert c["FallbackOps"] == 0
        assert got == torch.equal(x, y), (x, y)
    nan = torch.tensor([math.nan]).to(D)
    assert not torch.equal(nan, nan)


# ------------------------------------------------------------------------------- index bounds

@pytest.mark.parametrize("name,fn", [
    ("scatter_reduce.two", lambda x, i: x.scatter_reduce(0, i, x[:1], "amax")),
    ("index_reduce", lambda x, i: x.index_reduce(0, i, x[:1], "prod")),
    ("index_add", lambda x, i: x.index_add(0, i, x[:1])),
    ("index_copy", lambda x, i: x.index_copy(0, i, x[:1])),
    ("index_fill.int_Scalar", lambda x, i: x.index_fill(0, i, 1.0)),
    ("take", lambda x, i: torch.take(x, i)),
    ("put", lambda x, i: x.put(i, x[:1])),
    ("searchsorted.Tensor", lambda x, i: torch.searchsorted(x, x, sorter=i.expand(5))),
])
@pytest.mark.parametrize("bad", [5, -6])
def test_out_of_range_indices_raise_cpus_error_type(name, fn, bad):
    x = torch.arange(5.0)
    i = torch.tensor([bad])
    with pytest.raises((IndexError, RuntimeError)) as cpu:
        fn(x, i)  # the CPU refuses too
    d = x.to(D)
    result = fn(d, i.to(D))
    # CPU's type: a RuntimeError from scatter_reduce and searchsorted, an IndexError from the rest.
    # Our words name the index, except searchsorted's, which are CPU's.
    words = str(cpu.value) if name.startswith("searchsorted") else f"index {bad} is out of bounds"
    with pytest.raises(type(cpu.value), match=re.escape(words)):
        result.cpu()
    torch.testing.assert_close((d + 1).cpu(), x + 1)  # the device keeps working


def test_negative_indices_where_cpu_accepts_them():
    x = torch.arange(5.0)
    check(lambda t, i: t.index_fill(0, i, 9.0), [x, torch.tensor([-5, -1])], "index_fill.int_Scalar")
    check(lambda t, i: torch.take(t, i), [x, torch.tensor([-5, 4])], "take")


@pytest.mark.parametrize("dtype", ALL)
def test_nansum(dtype):
    x = data((4, 5), dtype)  # floats: NaN, inf, -0.0
    check(torch.nansum, [x], "nansum", False, dtype)
    check(lambda t: torch.nansum(t, 1), [x], "nansum", False, dtype)
    check(lambda t: torch.nansum(t, (0, -1), keepdim=True), [x], "nansum", False, dtype)
    check(lambda t: torch.nansum(t, 0, dtype=torch.float64), [x], "nansum", False, torch.float64)
    check(lambda t: torch.nansum(t, 0), [torch.empty(0, 3, dtype=dtype)], "nansum")
    check(torch.nansum, [torch.tensor(math.nan if dtype.is_floating_point else 1).to(dtype)], "nansum")
    if dtype == torch.float32:
        check(lambda t: torch.nanmean(t, 1), [x], "nansum", False, dtype)

        def grad(dev):
            a = x.to(dev).requires_grad_()
            return torch.autograd.grad(torch.nansum(a, 1), a, torch.ones(4, device=dev))[0].cpu()
        torch.testing.assert_close(grad(D), grad("cpu"))
    for dev in ("cpu", D):  # complex: the CPU kernel raises
        with pytest.raises(RuntimeError, match="complex"):
            torch.nansum(torch.ones(3, dtype=torch.complex64, device=dev))
