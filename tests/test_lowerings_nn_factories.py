"""Lowerings of lowering/activations.cc, losses.cc and factories.cc, the legacy norm overloads,
renorm and addbmm against CPU eager: NaN/inf, reductions, dtypes, gradients, and that each ran
through its lowering (no CPU fallback). Before these lowerings every op here fell back."""
import pytest
import torch
import torch.nn.functional as F

from test_lowerings_pointwise import FLOATS, check, make, tol

NAN = float("nan")


def check_grad(fn, args, schemas, dtype=torch.float64, **kw):
    """Gradients of <w, fn(*args)> with respect to every floating arg, on CPU and pjrt, with the
    backward ops in `schemas` lowered."""
    def grads(device):
        xs = [a.to(device).requires_grad_() if isinstance(a, torch.Tensor) and a.is_floating_point() else a
              for a in args]
        out = fn(*xs)
        w = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).reshape(out.shape).to(device)
        leaves = [x for x in xs if isinstance(x, torch.Tensor) and x.requires_grad]
        return [g.cpu() for g in torch.autograd.grad((out * w).sum(), leaves)]

    expected = grads("cpu")
    torch.pjrt.metrics.reset()
    actual = grads("pjrt")
    assert torch.pjrt.metrics.fallbacks() == {}
    lowered = torch.pjrt.metrics.lowered()
    for s in schemas:
        assert lowered.get(s, 0) > 0, f"{s} did not run through its lowering: {lowered}"
    torch.testing.assert_close(actual, expected, equal_nan=True, **(kw or tol(dtype)))


# ------------------------------------------------------------------------------ activations

@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("name", ["hardshrink", "softshrink"])
def test_shrink(name, dtype):
    fn = getattr(F, name)
    x = make((6, 7), dtype)
    check(lambda t: fn(t), (x,), [name], dtype)
    check(lambda t: fn(t, 1.5), (x,), [name], dtype)
    check_grad(lambda t: fn(t, 0.7), (make((6, 7), torch.float64, special=False),), [f"{name}_backward"])


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_logsigmoid(dtype):
    x = make((5, 8), dtype, low=-40, high=40)
    check(F.logsigmoid, (x,), ["log_sigmoid_forward"], dtype)
    check_grad(F.logsigmoid, (make((5, 8), torch.float64, low=-30, high=30, special=False),),
               ["log_sigmoid_backward"])


@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_glu(dim):
    x = make((4, 6, 8), torch.float32)
    check(lambda t: F.glu(t, dim), (x,), ["glu"])
    check_grad(lambda t: F.glu(t, dim), (make((4, 6, 8), torch.float64, special=False),), ["glu_backward"])


@pytest.mark.parametrize("channels", [1, 3])
def test_prelu(channels):
    x = make((2, 3, 4, 5), torch.float32)
    w = torch.tensor([0.25, -0.5, 2.0][:channels])
    check(F.prelu, (x, w), ["_prelu_kernel"])
    check_grad(F.prelu, (make((2, 3, 4, 5), torch.float64, special=False), w.double()),
               ["_prelu_kernel_backward"])


# ------------------------------------------------------------------------------ losses

@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("beta", [0.0, 0.5, 1.0])
def test_smooth_l1_loss(reduction, beta):
    x, y = make((4, 5), torch.float32, seed=1), make((4, 5), torch.float32, seed=2, special=False)
    lowered = ["smooth_l1_loss"] if beta else []  # beta = 0: torch.nn.functional calls l1_loss
    check(lambda a, b: F.smooth_l1_loss(a, b, reduction=reduction, beta=beta), (x, y), lowered)
    x64, y64 = make((4, 5), torch.float64, special=False, seed=3), make((4, 5), torch.float64, seed=4, special=False)
    check_grad(lambda a, b: F.smooth_l1_loss(a, b, reduction=reduction, beta=beta), (x64, y64),
               [s + "_backward" for s in lowered])


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("delta", [0.3, 1.0, 2.5])
def test_huber_loss(reduction, delta):
    x, y = make((3, 7), torch.float32, seed=1), make((3, 7), torch.float32, seed=2, special=False)
    check(lambda a, b: F.huber_loss(a, b, reduction=reduction, delta=delta), (x, y), ["huber_loss"])
    x64, y64 = make((3, 7), torch.float64, special=False, seed=3), make((3, 7), torch.float64, seed=4, special=False)
    check_grad(lambda a, b: F.huber_loss(a, b, reduction=reduction, delta=delta), (x64, y64),
               ["huber_loss_backward"])


def test_losses_of_empty_inputs_are_nan_or_zero():
    e = torch.empty(0, 3)
    check(lambda a: F.smooth_l1_loss(a, a), (e,), ["smooth_l1_loss"])   # mean of nothing: NaN
    check(lambda a: F.huber_loss(a, a, reduction="sum"), (e,), ["huber_loss"])


def test_bce_with_logits_runs_natively_through_log_sigmoid():
    x, y = make((4, 6), torch.float32, special=False), torch.rand(4, 6)
    check(F.binary_cross_entropy_with_logits, (x, y), ["log_sigmoid_forward"])


# ------------------------------------------------------------------------------ factories

def _factory(fn, *args, **kw):
    expected = fn(*args, **kw)
    torch.pjrt.metrics.reset()
    actual = fn(*args, device="pjrt", **kw).cpu()
    assert torch.pjrt.metrics.fallbacks() == {}
    return actual, expected


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.complex64], ids=str)
@pytest.mark.parametrize("start,end,steps", [(0, 1, 50), (-3, 12, 16), (5, -5, 11), (2.5, 2.5, 1), (0, 1, 0)])
def test_linspace(start, end, steps, dtype):
    actual, expected = _factory(torch.linspace, start, end, steps, dtype=dtype)
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    # One ulp: torch's CPU kernel vectorizes the first half as base + i * step.
    torch.testing.assert_close(actual, expected, **({} if dtype.is_floating_point or dtype.is_complex else dict(atol=1, rtol=0)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64], ids=str)
@pytest.mark.parametrize("base", [10.0, 2.0, 0.5])
def test_logspace(base, dtype):
    actual, expected = _factory(torch.logspace, -2, 3, 13, base=base, dtype=dtype)
    torch.testing.assert_close(actual, expected)
    actual, expected = _factory(torch.logspace, 1.5, 9, 1, base=base, dtype=dtype)
    torch.testing.assert_close(actual, expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.bool], ids=str)
def test_eye(dtype):
    for args in [(4,), (3, 5), (5, 2), (0,)]:
        actual, expected = _factory(torch.eye, *args, dtype=dtype)
        assert torch.equal(actual, expected)


def test_linspace_start_and_end_are_values():
    torch.linspace(0, 1, 9, device="pjrt").cpu()
    compiled = torch.pjrt.metrics.counters()["GraphsCompiled"]
    torch.testing.assert_close(torch.linspace(-4, 7, 9, device="pjrt").cpu(), torch.linspace(-4, 7, 9))
    assert torch.pjrt.metrics.counters()["GraphsCompiled"] == compiled  # no recompile for new bounds


# ------------------------------------------------------------------------------ norms, products

@pytest.mark.parametrize("p", [1, 2, 3.5, float("inf"), 0])
def test_legacy_norm_overloads(p):
    # torch.norm itself calls linalg_vector_norm; C++ callers (dist, pairwise_distance) reach these.
    aten = torch.ops.aten
    x = make((4, 6), torch.float32, special=False)
    check(lambda t: aten.norm.Scalar(t, p), (x,), ["norm.Scalar"])
    check(lambda t: aten.norm.ScalarOpt_dtype(t, p, dtype=torch.float64), (x,), ["norm.ScalarOpt_dtype"])
    check(lambda t: aten.norm.ScalarOpt_dim(t, p, [1], True), (x,), ["norm.ScalarOpt_dim"])
    check(lambda t: aten.norm.ScalarOpt_dim_dtype(t, p, [0], False, dtype=torch.float64), (x,),
          ["norm.ScalarOpt_dim_dtype"])
    check(lambda a, b: torch.dist(a, b, p), (x, make((4, 6), torch.float32, seed=5, special=False)), ["norm.Scalar"])


def test_norm_of_complex_and_distance_gradients():
    z = torch.randn(3, 4, dtype=torch.complex64)
    check(lambda t: torch.ops.aten.norm.ScalarOpt_dim(t, 2, [1]), (z,), ["norm.ScalarOpt_dim"])
    a, b = make((5, 3), torch.float64, special=False), make((5, 3), torch.float64, seed=7, special=False)
    check_grad(F.pairwise_distance, (a, b), ["norm.ScalarOpt_dim"])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.complex64], ids=str)
@pytest.mark.parametrize("p,dim", [(2, 0), (1, 1), (float("inf"), -1)])
def test_renorm(p, dim, dtype):
    x = (torch.randn(3, 4, 5, dtype=torch.float64) * 3).to(dtype)
    check(lambda t: torch.renorm(t, p, dim, 2.0), (x,), ["renorm"], dtype)


@pytest.mark.parametrize("beta,alpha", [(1, 1), (0.5, -2), (0, 1), (1j, 2 - 1j)])
def test_addbmm(beta, alpha):
    dtype = torch.complex64 if isinstance(beta, complex) or isinstance(alpha, complex) else torch.float32
    self_, b1, b2 = (torch.randn(s, dtype=dtype) for s in [(3, 5), (4, 3, 6), (4, 6, 5)])
    if beta == 0:
        self_[0, 0] = NAN  # beta=0 ignores self, NaN included
    check(lambda s, x, y: torch.addbmm(s, x, y, beta=beta, alpha=alpha), (self_, b1, b2), ["addbmm"],
          rtol=1e-5, atol=1e-5)


def test_polygamma_inplace_is_the_lowered_polygamma():
    # polygamma_(self, n) has its arguments in the other order than polygamma(n, self): it must
    # not be paired with it positionally (it used to be, and then always fell back).
    x = torch.rand(6, dtype=torch.float64) + 0.5
    for n in range(3):
        check(lambda t: t.clone().polygamma_(n), (x,), ["polygamma"], torch.float64)


# ------------------------------------------------------------------------------ distances

@pytest.mark.parametrize("p", [0, 1, 2, 0.5, 3, float("inf")])
@pytest.mark.parametrize("points", [(3, 5), (30, 4)])  # above 25 points, p = 2 is a matrix product
def test_cdist(p, points):
    x1, x2 = torch.randn(2, points[0], 4), torch.randn(1, points[1], 4)
    x1[0, 0, 0], x1[0, 1, 1], x2[0, 2, 3] = NAN, float("inf"), -float("inf")
    # torch.cdist itself computes p = 2 by matrix product (not through _cdist_forward) for many points.
    lowered = [] if p == 2 and max(points) > 25 else ["_cdist_forward"]
    check(lambda a, b: torch.cdist(a, b, p), (x1, x2), lowered)
    check(lambda a, b: torch.ops.aten._cdist_forward(a, b, p, None), (x1, x2), ["_cdist_forward"])
    a, b = torch.randn(2, points[0], 4, dtype=torch.float64), torch.randn(2, points[1], 4, dtype=torch.float64)
    a[0, 1] = b[0, 2]  # a zero distance: its gradient is 0
    check_grad(lambda u, v: torch.cdist(u, v, p, compute_mode="donot_use_mm_for_euclid_dist"), (a, b),
               ["_cdist_backward"])


@pytest.mark.parametrize("p", [0, 1, 2, 1.5, 3, float("inf")])
def test_pdist(p):
    x = torch.randn(6, 3)
    x[1, 2] = NAN
    check(lambda t: F.pdist(t, p), (x,), ["_pdist_forward"])
    check(lambda t: F.pdist(t, p), (torch.randn(1, 3),), [])  # no pairs
    check_grad(lambda t: F.pdist(t, p), (torch.randn(5, 3, dtype=torch.float64),), ["_pdist_backward"])


def test_narrow_copy():
    x = torch.arange(24.0).reshape(4, 6)
    check(lambda t: torch.narrow_copy(t, 1, -4, 3), (x,), ["narrow_copy"])
    check(lambda t: torch.narrow_copy(t, 0, 1, 0), (x,), ["narrow_copy"])


def test_sgn_gradient_makes_its_zero_tensor_on_the_device():
    # sgn's backward is torch's _efficientzerotensor, a factory without tensor arguments: it runs
    # on its device argument instead of failing for want of a pjrt tensor.
    x = torch.tensor([-2.0, 0.0, 3.0], dtype=torch.float64)
    check_grad(torch.sgn, (x,), ["_efficientzerotensor"])


# ------------------------------------------------------------------------------ binary cross entropy

@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("weighted", [False, True])
def test_binary_cross_entropy(reduction, weighted):
    x = torch.rand(4, 5)
    x[0, :3] = torch.tensor([0.0, 1.0, 1e-30])  # log(0) is clamped at -100
    y = torch.rand(4, 5)
    y[1, :2] = torch.tensor([0.0, 1.0])
    w = torch.rand(5) if weighted else None
    check(lambda a, b: F.binary_cross_entropy(a, b, weight=w if w is None else w.to(a.device), reduction=reduction),
          (x, y), ["binary_cross_entropy"])
    x64, y64 = (torch.rand(4, 5, dtype=torch.float64) * 0.9 + 0.05), torch.rand(4, 5, dtype=torch.float64)
    w64 = None if w is None else w.double()
    check_grad(lambda a, b: F.binary_cross_entropy(a, b, weight=w64 if w64 is None else w64.to(a.device),
                                                   reduction=reduction), (x64, y64), ["binary_cross_entropy_backward"])


@pytest.mark.parametrize("bad_input,message", [
    ((1.5, 0.5), "all elements of input should be between 0 and 1"),
    ((float("nan"), 0.5), "all elements of input should be between 0 and 1"),
    ((0.5, -0.1), "all elements of target should be between 0 and 1"),
])
def test_binary_cross_entropy_range_errors_are_raised_at_the_next_sync(bad_input, message):
    # CPU raises at once; the device checks inside the graph (no sync per call) and raises the
    # same RuntimeError where the value is next read. Unrelated values stay usable.
    x, y = torch.full((3,), 0.25), torch.full((3,), 0.5)
    x[1], y[2] = bad_input
    with pytest.raises(RuntimeError, match=message):
        F.binary_cross_entropy(x, y)
    loss = F.binary_cross_entropy(x.to("pjrt"), y.to("pjrt"))
    other = torch.ones(2, device="pjrt") * 3
    with pytest.raises(RuntimeError, match=message):
        loss.item()
    assert other.sum().item() == 6
    with pytest.raises(RuntimeError, match=message):
        (loss * 2).cpu()  # computed from the failed op: poisoned


# ------------------------------------------------------------------------------ more ops

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int32], ids=str)
def test_threshold(dtype):
    x = make((5, 6), dtype)
    check(lambda t: F.threshold(t, 0.5, -7), (x,), ["threshold"], dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.int16, torch.complex64], ids=str)
@pytest.mark.parametrize("shape", [(4, 4), (3, 5), (6, 2), (0, 3)])
def test_trace(shape, dtype):
    x = make(shape, dtype) if not dtype.is_complex else torch.randn(shape, dtype=dtype)
    if dtype == torch.float32 and x.numel():
        x[0, -1] = NAN  # off the diagonal: must not leak into the sum
    check(torch.trace, (x,), ["trace"], dtype)


def test_log_ndtr():
    x = torch.cat([torch.linspace(-40, 10, 101), torch.tensor([NAN, float("inf"), -float("inf"), 0.0, -1.0])])
    check(torch.special.log_ndtr, (x,), ["special_log_ndtr"])
    check(torch.special.log_ndtr, (x.double(),), ["special_log_ndtr"], torch.float64, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dim,size,step", [(0, 3, 1), (1, 2, 2), (1, 3, 4), (-1, 4, 3)])
def test_unfold_backward(dim, size, step):
    x = torch.randn(7, 9, dtype=torch.float64)
    check_grad(lambda t: t.unfold(dim, size, step), (x,), ["unfold_backward"])


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("weighted", [False, True])
def test_multi_margin_loss(p, reduction, weighted):
    x, y = make((5, 4), torch.float32, special=False), torch.tensor([0, 3, 1, 1, 2])
    x[1, 2] = NAN  # a NaN in another sample's row stays in that row
    w = torch.rand(4) if weighted else None
    fn = lambda a, b: F.multi_margin_loss(a, b, p=p, margin=0.7, weight=None if w is None else w.to(a.device),
                                          reduction=reduction)
    check(fn, (x, y), ["multi_margin_loss"])
    x64 = make((5, 4), torch.float64, special=False)
    w64 = None if w is None else w.double()
    check_grad(lambda a: F.multi_margin_loss(a, y.to(a.device), p=p, margin=0.7,
                                             weight=None if w64 is None else w64.to(a.device), reduction=reduction),
               (x64,), ["multi_margin_loss_backward"])
    check(lambda a, b: F.multi_margin_loss(a, b), (torch.randn(4), torch.tensor(2)), ["multi_margin_loss"])


def test_multi_margin_loss_target_out_of_range_raises_at_the_next_sync():
    # CPU's error type and words (a RuntimeError, not an IndexError), found when the graph runs.
    x, y = torch.randn(3, 4, device="pjrt"), torch.tensor([0, 4, 1], device="pjrt")
    loss = F.multi_margin_loss(x, y)
    with pytest.raises(RuntimeError, match="target out of range"):
        loss.item()


MULTILABEL_TARGETS = [
    torch.tensor([[3, 0, -1, 1, 2], [0, 1, 2, 3, 4], [-1, 1, 2, 3, 4]]),  # lists end at the first -1
    torch.tensor([[1, 1, 1, 1, 1], [2, -1, 4, 4, 4], [4, 3, 3, -1, -1]]),  # repeats, entries after -1
]


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_multilabel_margin_loss(reduction, dtype):
    fn = lambda a, b: F.multilabel_margin_loss(a, b, reduction=reduction)
    for y in MULTILABEL_TARGETS:
        x = make((3, 5), dtype)  # with NaN and infinities
        check(fn, (x, y), ["multilabel_margin_loss_forward"], dtype)
        check_grad(lambda a: fn(a, y.to(a.device)), (make((3, 5), torch.float64, special=False),),
                   ["multilabel_margin_loss_backward"])
    # A 1-d input (0-d loss for every reduction) and a 0-d one.
    check(fn, (torch.randn(5, dtype=dtype), torch.tensor([4, 4, 1, -1, 2])), ["multilabel_margin_loss_forward"], dtype)
    y = torch.tensor([4, 0, -1, 1, 2])
    check_grad(lambda a: fn(a, y.to(a.device)), (torch.randn(5, dtype=torch.float64),), ["multilabel_margin_loss_backward"])
    check(fn, (torch.tensor(0.3, dtype=dtype), torch.tensor(0)), ["multilabel_margin_loss_forward"], dtype)


@pytest.mark.parametrize("target", [[[5, -1, 0]], [[1, -2, 0]]], ids=["above", "below_minus_one"])
def test_multilabel_margin_loss_target_out_of_range_raises_like_cpu(target):
    x, y = torch.randn(1, 3), torch.tensor(target)
    with pytest.raises(RuntimeError, match="'target' is out of range"):
        F.multilabel_margin_loss(x, y)
    loss = F.multilabel_margin_loss(x.to("pjrt"), y.to("pjrt"))
    with pytest.raises(RuntimeError, match="'target' is out of range"):
        loss.item()


def test_zero_dim_multi_margin_loss():
    check(lambda a, b: F.multi_margin_loss(a, b), (torch.tensor(0.3), torch.tensor(0)), ["multi_margin_loss"])


def test_deprecated_cholesky_runs_natively_and_raises_like_cpu():
    a = torch.randn(3, 3, dtype=torch.float64)
    spd = a @ a.T + 3 * torch.eye(3, dtype=torch.float64)
    check(lambda t: torch.cholesky(t), (spd,), ["linalg_cholesky_ex"], torch.float64)
    check(lambda t: torch.cholesky(t, upper=True), (spd,), ["linalg_cholesky_ex"], torch.float64)
    with pytest.raises(torch.linalg.LinAlgError, match="leading minor of order 2"):
        torch.cholesky(torch.tensor([[1.0, 2.0], [2.0, 1.0]], device="pjrt"))


# ------------------------------------------------------------------------------ orthogonal polynomials

POLYNOMIALS = ["chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v",
               "chebyshev_polynomial_w", "shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u",
               "shifted_chebyshev_polynomial_v", "shifted_chebyshev_polynomial_w", "hermite_polynomial_h",
               "hermite_polynomial_he", "laguerre_polynomial_l", "legendre_polynomial_p"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("name", POLYNOMIALS)
def test_orthogonal_polynomials(name, dtype):
    # Every branch of torch's kernels: the ends (+-1, 0), |y| < 1 above the closed-form degree,
    # the recurrence (|x| > 1 overflows to NaN and stops), n < 0, fractional, huge and NaN degrees,
    # and the degree limit of the Hermite polynomials.
    xs = torch.tensor([-1.0, 1.0, 0.0, 0.5, -0.3, 0.999, 1.5, -2.0, 7.0, NAN, 1e-20], dtype=dtype)
    ns = torch.tensor([-1.0, 0.0, 1.0, 2.0, 3.7, 5.0, 7.0, 9.0, 12.0, 40.0, 600.0, 1e30, NAN, float("inf")], dtype=dtype)
    x, n = xs[:, None].expand(-1, len(ns)), ns[None, :].expand(len(xs), -1)
    fn = getattr(torch.special, name)
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-9, atol=1e-12)
    check(fn, (x, n), ["special_" + name], dtype, **tol)


# ------------------------------------------------------------------------------ Bessel functions

BESSEL = ["bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1", "modified_bessel_i0", "modified_bessel_i1",
          "modified_bessel_k0", "modified_bessel_k1", "scaled_modified_bessel_k0", "scaled_modified_bessel_k1",
          "spherical_bessel_j0"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("name", BESSEL)
def test_bessel_functions(name, dtype):
    # Both sides of every branch point (1e-5, 0.5, 2, 5, 8), negatives, zero, NaN and infinities.
    x = torch.cat([torch.linspace(-30, 60, 181, dtype=torch.float64),
                   torch.tensor([0.0, -0.0, 1e-6, 1e-5, 0.4999, 0.5, 1.9999, 2.0, 2.0001, 4.9999, 5.0, 5.0001,
                                 7.9999, 8.0, 8.0001, 700.0, NAN, float("inf"), -float("inf")], dtype=torch.float64)])
    tol = dict(rtol=2e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-10, atol=1e-13)
    check(getattr(torch.special, name), (x.to(dtype),), ["special_" + name], dtype, **tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_airy_ai(dtype):
    # The oscillating form below -2.09, the series between, the decaying form above 2.09 (and 8.32,
    # where torch's kernel stops running the series), 0 above 103.892, NaN at +-inf.
    x = torch.cat([torch.linspace(-40, 110, 301, dtype=torch.float64),
                   torch.tensor([0.0, -2.09, -2.0899, 2.0899, 2.09, 8.3203353, 103.892, 103.9, NAN, float("inf"),
                                 -float("inf")], dtype=torch.float64)])
    tol = dict(rtol=2e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-10, atol=1e-13)
    check(torch.special.airy_ai, (x.to(dtype),), ["special_airy_ai"], dtype, **tol)
    check(torch.special.airy_ai, (torch.arange(-3, 4),), ["special_airy_ai"])  # integers promote to float


# ------------------------------------------------------------------------- incomplete gamma

GAMMA_POINTS = [0.0, 1e-3, 0.3, 0.5, 0.7, 1.0, 1.05, 1.1, 1.5, 2.0, 5.0, 10.0, 19.0, 25.0, 30.0, 100.0, 199.0,
                250.0, 1e3, 1e4, float("inf"), -1.0, NAN]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("name", ["igamma", "igammac"])
def test_incomplete_gamma(name, dtype):
    # Every branch of torch's decision tree (series, upper series, continued fraction, the
    # boundary values at 0, inf, negatives and NaN, and the a ~ x region where torch uses its
    # asymptotic expansion) on a grid of (a, x).
    a = torch.tensor(GAMMA_POINTS, dtype=torch.float64)[:, None].expand(-1, len(GAMMA_POINTS))
    x = torch.tensor(GAMMA_POINTS, dtype=torch.float64)[None, :].expand(len(GAMMA_POINTS), -1)
    # float64: torch's asymptotic expansion multiplies by a float pi (sqrt(2 * pi<float> * a)), an
    # error up to ~3e-10 there (igamma(25, 30): torch 0.842757972534, exact 0.842757972762, pjrt
    # 0.842757972762); elsewhere the two agree to ~1e-15.
    tol = {torch.float64: dict(rtol=1e-8, atol=1e-12), torch.float32: dict(rtol=1e-5, atol=2e-6)}.get(dtype, {})
    check(getattr(torch, name), (a.to(dtype), x.to(dtype)), [name], dtype, **tol)
    # Random a near x, where the series run longest.
    g = torch.Generator().manual_seed(0)
    a = torch.rand(400, generator=g, dtype=torch.float64) * 300
    check(getattr(torch, name), (a.to(dtype), (a * (0.7 + 0.6 * torch.rand(400, generator=g))).to(dtype)), [name],
          dtype, **tol)


def test_incomplete_gamma_gradient():
    a = torch.tensor([0.5, 2.0, 7.0, 30.0], dtype=torch.float64)
    x = torch.tensor([0.3, 2.5, 4.0, 31.0], dtype=torch.float64)
    check_grad(lambda t: torch.igamma(a.to(t.device), t), (x,), ["igamma"])
    check_grad(lambda t: torch.igammac(a.to(t.device), t), (x,), ["igammac"])


# ------------------------------------------------------------------------------------ rrelu

def test_rrelu_in_evaluation_is_leaky_relu():
    x = torch.tensor([-1.0, 0.0, 1.0, NAN, -3.0, 2.0, -float("inf")])
    check(lambda t: F.rrelu(t, 0.1, 0.3, training=False), (x,), [])
    with pytest.raises(RuntimeError, match="Lower bound should be less"):
        F.rrelu(x.to("pjrt"), 0.5, 0.3, training=True)


def test_rrelu_in_training_draws_a_slope_per_negative_element():
    torch.pjrt.metrics.reset()
    x = torch.linspace(-5, 5, 1001, dtype=torch.float64)
    x[0] = NAN
    noise = torch.zeros_like(x, device="pjrt")
    xp = x.to("pjrt").requires_grad_()
    y = torch.ops.aten.rrelu_with_noise(xp, noise, 0.1, 0.3, True)
    y.sum().backward()
    assert torch.pjrt.metrics.fallbacks() == {}
    y, noise, grad = y.detach().cpu(), noise.cpu(), xp.grad.cpu()
    scaled = x <= 0
    assert torch.equal(noise[~scaled], torch.ones_like(noise[~scaled]))  # NaN is not <= 0: slope 1
    r = noise[scaled]
    assert ((r >= 0.1) & (r <= 0.3)).all() and r.unique().numel() > 400  # a draw per element
    torch.testing.assert_close(y, torch.where(scaled, x * noise, x), equal_nan=True)
    torch.testing.assert_close(grad, noise)  # the backward reads the noise it wrote
    # In-place, and each call draws afresh from the pjrt generator (seeded: reproducible).
    torch.pjrt.manual_seed(3)
    a = F.rrelu(x.to("pjrt"), training=True).cpu()
    torch.pjrt.manual_seed(3)
    b = x.to("pjrt")
    F.rrelu_(b, training=True)
    torch.testing.assert_close(b.cpu(), a, equal_nan=True)
    assert not torch.equal(F.rrelu(x.to("pjrt"), training=True).cpu()[1:], a[1:])


@pytest.mark.parametrize("size", [0, 3, 7, 30])
def test_nonzero_static_needs_no_sync(size):
    x = torch.tensor([[0.0, 1.5, 0.0, NAN], [2.0, 0.0, -0.0, 3.0]])
    check(lambda t: torch.nonzero_static(t, size=size), (x,), ["nonzero_static"], exact=True)
    check(lambda t: torch.nonzero_static(t, size=size, fill_value=7), (x,), ["nonzero_static"], exact=True)
    check(lambda t: torch.nonzero_static(t, size=size), (torch.zeros(0, 3),), ["nonzero_static"], exact=True)
    check(lambda t: torch.nonzero_static(t, size=size), (torch.tensor(2),), ["nonzero_static"], exact=True)
    before = torch.pjrt.metrics.counters()["Executions"]
    torch.nonzero_static(x.to("pjrt"), size=size)  # static size: traced, not run (unlike nonzero)
    assert torch.pjrt.metrics.counters()["Executions"] == before


def test_unique_consecutive_reads_one_count():
    x = torch.tensor([[1.0, 1.0, 2.0], [2.0, NAN, NAN], [3.0, 1.0, 1.0]])
    for inverse in (False, True):
        for counts in (False, True):
            fn = lambda t: torch.unique_consecutive(t, return_inverse=inverse, return_counts=counts)
            check(fn, (x,), [], exact=True)  # every NaN is its own run, as on the CPU
    check(lambda t: torch.unique_consecutive(t), (torch.zeros(0),), [], exact=True)
    # Along a dim: runs of equal slices (rows holding NaN equal no row), inverse and counts always.
    y = torch.arange(24.0).reshape(2, 3, 4)
    y[:, 1] = y[:, 0]
    for t, dim in [(x, 0), (x, 1), (y, 1), (y.int(), 2), (torch.zeros(0, 3), 0)]:
        check(lambda u: torch.ops.aten.unique_consecutive(u, False, False, dim), (t,), [], exact=True)
    with pytest.raises(RuntimeError, match="0 sized dimensions"):
        torch.unique_consecutive(torch.zeros(3, 0, device="pjrt"), dim=0)


def test_mvlgamma_out_composes_lowered_ops():
    x = torch.rand(4, 3, dtype=torch.float64) + 2
    check(lambda t: torch.mvlgamma(t, 3, out=torch.empty_like(t)), (x,), ["lgamma"], torch.float64)
    check(lambda t: t.clone().mvlgamma_(2), (x,), ["lgamma"], torch.float64)


# ------------------------------------------------------------------------------ embedding_bag

@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("case", ["offsets", "empty_bags", "last_offset", "padding", "two_d"])
def test_embedding_bag(mode, case):
    torch.manual_seed(0)
    weight = torch.randn(10, 4, dtype=torch.float64)
    weight[3, 1] = weight[7, 1]  # a tie for max: the first position wins
    indices = torch.tensor([1, 2, 4, 5, 4, 3, 7, 9, 0, 3])
    kw = dict(mode=mode)
    if case == "offsets":
        args, kw["offsets"] = (indices,), torch.tensor([0, 3, 6])
    elif case == "empty_bags":
        args, kw["offsets"] = (indices,), torch.tensor([0, 0, 4, 4, 10])
    elif case == "last_offset":
        args, kw["offsets"], kw["include_last_offset"] = (indices,), torch.tensor([0, 2, 7, 10]), True
    elif case == "padding":
        args, kw["offsets"], kw["padding_idx"] = (indices,), torch.tensor([0, 3, 6]), 4
    else:
        args = (indices.reshape(2, 5),)

    def fn(w, i):
        return F.embedding_bag(i, w, **{k: (v.to(w.device) if isinstance(v, torch.Tensor) else v) for k, v in kw.items()})
    check(fn, (weight, *args), ["_embedding_bag_forward_only"], torch.float64)  # no grad needed
    check_grad(lambda w: fn(w, args[0].to(w.device)), (weight,), ["_embedding_bag", "_embedding_bag_dense_backward"])


def test_embedding_bag_per_sample_weights():
    torch.manual_seed(0)
    weight, psw = torch.randn(8, 3, dtype=torch.float64), torch.rand(7, dtype=torch.float64)
    indices, offsets = torch.tensor([1, 2, 2, 5, 1, 1, 7]), torch.tensor([0, 2, 5])

    def fn(w, p):
        return F.embedding_bag(indices.to(w.device), w, offsets.to(w.device), mode="sum", per_sample_weights=p)
    check(fn, (weight, psw), ["_embedding_bag_forward_only"], torch.float64)
    check_grad(fn, (weight, psw), ["_embedding_bag_dense_backward", "_embedding_bag_per_sample_weights_backward"])


def test_embedding_bag_scales_gradients_by_each_index_frequency():
    # Each row's gradient is divided by how often its index occurs in the batch (what the docs
    # say and CUDA computes). torch's CPU kernel divides by counts[sorted_indices[g]] for the g-th
    # distinct index instead (it indexes the sorted indices with the group number), so its result
    # is not the reference here: the formula is.
    torch.manual_seed(0)
    weight, psw = torch.randn(8, 3, dtype=torch.float64), torch.rand(7, dtype=torch.float64)
    indices, offsets = torch.tensor([1, 2, 2, 5, 1, 1, 7]), torch.tensor([0, 2, 5])
    w = weight.to("pjrt").requires_grad_()
    out = F.embedding_bag(indices.to("pjrt"), w, offsets.to("pjrt"), mode="sum", per_sample_weights=psw.to("pjrt"),
                          scale_grad_by_freq=True)
    g = torch.randn(out.shape, dtype=torch.float64)
    out.backward(g.to("pjrt"))
    bags = torch.tensor([0, 0, 1, 1, 1, 2, 2])
    counts = torch.bincount(indices, minlength=8).double()
    expected = torch.zeros_like(weight)
    for i, (v, b) in enumerate(zip(indices.tolist(), bags.tolist())):
        expected[v] += psw[i] * g[b] / counts[v]
    torch.testing.assert_close(w.grad.cpu(), expected)
    assert torch.pjrt.metrics.fallbacks() == {}


def test_embedding_bag_module_in_half_precision_and_inference():
    torch.manual_seed(0)
    bag = torch.nn.EmbeddingBag(20, 6, mode="mean")
    indices, offsets = torch.randint(0, 20, (12,)), torch.tensor([0, 5, 9])
    with torch.no_grad():
        expected = bag(indices, offsets)
        check(lambda i, o: bag.to(i.device)(i, o), (indices, offsets), [])
        bag.to("cpu")
    w = bag.weight.detach().bfloat16()
    check(lambda t, i, o: F.embedding_bag(i, t, o, mode="sum"), (w, indices, offsets), ["_embedding_bag_forward_only"],
          torch.bfloat16)


def test_embedding_bag_index_out_of_range_raises_at_the_next_sync():
    w = torch.randn(5, 2, device="pjrt")
    out = F.embedding_bag(torch.tensor([1, 5], device="pjrt"), w, torch.tensor([0], device="pjrt"))
    with pytest.raises(RuntimeError, match="index 5 is out of bounds"):  # CPU's type
        out.cpu()


# --------------------------------------------------------------------------------- ctc_loss

CTC_CASES = {
    # T, N, C, target lengths, input lengths, concatenated targets, blank, reduction, zero_infinity
    "padded": (12, 3, 6, [3, 5, 2], [12, 10, 7], False, 0, "mean", False),
    "concatenated": (12, 3, 6, [3, 5, 2], [12, 10, 7], True, 0, "sum", False),
    "empty_target_and_input": (12, 3, 6, [3, 0, 2], [12, 10, 0], False, 0, "none", False),
    "infeasible": (6, 2, 5, [4, 4], [6, 3], False, 0, "none", False),
    "infeasible_zeroed": (6, 2, 5, [4, 4], [6, 3], False, 0, "sum", True),
    "last_blank": (10, 2, 5, [2, 3], [10, 9], False, 4, "none", False),
}


@pytest.mark.parametrize("case", CTC_CASES, ids=str)
def test_ctc_loss(case):
    # Loss and gradient against torch's CPU kernel: repeated labels (no skip between them), empty
    # targets and inputs, targets longer than the input allows (inf, or 0 with zero_infinity).
    T, N, C, tl, il, concat, blank, reduction, zero_infinity = CTC_CASES[case]
    g = torch.Generator().manual_seed(0)
    log_probs = torch.randn(T, N, C, generator=g, dtype=torch.float64).log_softmax(2)
    targets = torch.randint(0, C - 1, (N, max(tl)), generator=g)
    targets[targets >= blank] += 1  # never the blank
    targets[0, :2] = targets[0, 0]  # a repeated label
    if concat:
        targets = torch.cat([targets[b, :tl[b]] for b in range(N)])
    fn = lambda lp, t: F.ctc_loss(lp, t, il, tl, blank=blank, reduction=reduction, zero_infinity=zero_infinity)
    check(fn, (log_probs, targets), [], torch.float64)
    check_grad(lambda lp: fn(lp, targets.to(lp.device)), (log_probs,), [], dtype=torch.float64)


def test_ctc_loss_new_lengths_reuse_the_graph_and_errors_match_cpu():
    log_probs = torch.randn(10, 2, 5).log_softmax(2).to("pjrt")
    targets = torch.tensor([[1, 1, 2], [3, 3, 3]], device="pjrt")
    F.ctc_loss(log_probs, targets, [10, 9], [3, 3], reduction="none").cpu()
    before = torch.pjrt.metrics.counter("GraphsCompiled")
    for input_lengths, target_lengths in [([8, 7], [3, 2]), ([10, 10], [1, 3])]:
        F.ctc_loss(log_probs, targets, input_lengths, target_lengths, reduction="none").cpu()
    assert torch.pjrt.metrics.counter("GraphsCompiled") == before  # lengths are values
    with pytest.raises(RuntimeError, match="blank must be in label range"):
        F.ctc_loss(log_probs, targets, [10, 9], [3, 3], blank=7)
    with pytest.raises(RuntimeError, match="Expected input_lengths to have value at most 10"):
        F.ctc_loss(log_probs, targets, [11, 9], [3, 3])


# --------------------------------------------------------------------------- segment_reduce

SEGMENT_DATA = torch.tensor([1.0, NAN, 3.0, 4.0, 5.0, 2.0, 2.0, 0.0, 3.0, 0.0], dtype=torch.float64)


@pytest.mark.parametrize("reduce", ["sum", "mean", "max", "min", "prod"])
@pytest.mark.parametrize("segments", ["lengths", "lengths_initial", "offsets", "2d"])
def test_segment_reduce(reduce, segments):
    # Empty segments, NaN, zeros (prod's backward), ties (max/min share the gradient), an initial
    # value, offsets, and a reduction along axis 1 of a 3-d tensor.
    if segments == "2d":
        x = torch.randn(2, 6, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
        x[0, 1, 1] = x[0, 0, 1]
        kw = {"lengths": torch.tensor([[2, 4], [1, 5]]), "axis": 1}
    else:
        x = SEGMENT_DATA
        kw = {"offsets": torch.tensor([0, 2, 2, 5, 7, 10])} if segments == "offsets" else {
            "lengths": torch.tensor([2, 0, 3, 2, 3])}
        if segments == "lengths_initial":
            kw["initial"] = 2.0

    def fn(t):
        args = {k: v.to(t.device) if isinstance(v, torch.Tensor) else v for k, v in kw.items()}
        return torch.segment_reduce(t, reduce, **args)
    check(fn, (x,), [], torch.float64)
    check_grad(lambda t: fn(t).nan_to_num(0, 0, 0), (x,), [])


def test_segment_reduce_checks_lengths_when_the_graph_runs():
    for lengths, message in [([2, 3], "Expected all rows of lengths"), ([12, -2], "lengths contains negative")]:
        with pytest.raises(RuntimeError, match=message):
            torch.segment_reduce(SEGMENT_DATA, "sum", lengths=torch.tensor(lengths))
        out = torch.segment_reduce(SEGMENT_DATA.to("pjrt"), "sum", lengths=torch.tensor(lengths, device="pjrt"))
        with pytest.raises(RuntimeError, match=message):
            out.cpu()


# ------------------------------------------------------------------------------ hash_tensor

@pytest.mark.parametrize("dtype", [torch.bool, torch.int8, torch.int64, torch.float16, torch.float32, torch.float64],
                         ids=str)
def test_hash_tensor(dtype):
    # The xor of 64-bit patterns after widening (floats to double: NaN, -0.0 and inf included;
    # integers sign-extended), over all dims or some, with keepdim.
    x = make((3, 4), dtype) if dtype.is_floating_point else torch.tensor([[-1, 2, 3, 0], [5, -7, 1, 1], [0, 0, 1, -128]]).to(dtype)
    check(torch.hash_tensor, (x,), ["hash_tensor"], exact=True)
    check(lambda t: torch.hash_tensor(t, dim=1, keepdim=True), (x,), ["hash_tensor"], exact=True)
    check(lambda t: torch.hash_tensor(t, dim=(0,)), (x,), ["hash_tensor"], exact=True)
