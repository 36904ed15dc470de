"""Spatial ops (padding, pooling, upsampling, unfold/fold, grid sampling, shuffles) against CPU
eager: forward values, index outputs (exactly) and gradients, in 1-d to 3-d, batched and
unbatched, channels-last and non-contiguous inputs, float16/bfloat16/float32/float64. Every check
asserts that nothing fell back to the CPU and that the expected lowering ran."""
import functools

import pytest
import torch
import torch.nn.functional as F

from helpers import Counters

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


def tol(dtype):
    return {
        torch.float32: dict(rtol=1e-5, atol=1e-5),
        torch.complex64: dict(rtol=1e-5, atol=1e-5),
        torch.float64: dict(rtol=1e-10, atol=1e-10),
        torch.float16: dict(rtol=5e-3, atol=5e-3),
        torch.bfloat16: dict(rtol=2e-2, atol=2e-2),
    }.get(dtype, dict(rtol=0, atol=0))


def make(shape, dtype=torch.float32, seed=0, low=-2.0, high=2.0):
    g = torch.Generator().manual_seed(seed)
    if not dtype.is_floating_point:
        return torch.randint(int(low) - 3, int(high) + 4, shape, generator=g).to(dtype)
    return (torch.rand(shape, generator=g, dtype=torch.float64) * (high - low) + low).to(dtype)


def _tensors(x):
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _tensors(v)]
    return []


def check(fn, inputs, grad=(0,), schemas=(), dtype=None, atol=None, rtol=None, channels_last=False,
          cpu_in_float64=False):
    """Runs fn on CPU and on pjrt; compares outputs and, for `grad` inputs, gradients of the float
    outputs against fixed random output gradients. cpu_in_float64: the reference runs in float64
    (for CPU kernels that compute half types in half precision, where we compute in float32)."""
    dtype = dtype or inputs[0].dtype
    t = tol(dtype)
    if atol is not None:
        t = dict(atol=atol, rtol=rtol if rtol is not None else t["rtol"])

    def run(device, upcast=False):
        args = []
        for i, a in enumerate(inputs):
            if isinstance(a, torch.Tensor):
                a = a.to(device)
                if upcast and a.is_floating_point():
                    a = a.double()
                if channels_last and a.dim() in (4, 5) and i == 0:
                    a = a.contiguous(memory_format=torch.channels_last if a.dim() == 4 else torch.channels_last_3d)
                if i in grad:
                    a = a.detach().requires_grad_()
            args.append(a)
        out = fn(*args)
        outs = _tensors(out)
        diff = [o for o in outs if o.is_floating_point() and o.requires_grad]
        grads = []
        if grad and diff:
            gouts = [make(o.shape, dtype if upcast else o.dtype, seed=100 + k).to(device).to(o.dtype)
                     for k, o in enumerate(diff)]
            grads = list(torch.autograd.grad(diff, [args[i] for i in grad], gouts))
        if upcast:
            outs = [o.to(dtype) if o.is_floating_point() else o for o in outs]
            grads = [g.to(dtype) for g in grads]
        return [o.detach() for o in outs], grads

    expected_out, expected_grads = run("cpu", upcast=cpu_in_float64)
    with Counters() as c:
        actual_out, actual_grads = run("pjrt")
        actual_out = [o.cpu() for o in actual_out]
        actual_grads = [g.cpu() for g in actual_grads]
    assert c["FallbackOps"] == 0, f"fell back to the CPU: {torch.pjrt.metrics.fallbacks()}"
    lowered = torch.pjrt.metrics.lowered()
    for s in schemas:
        assert s in lowered, f"{s} did not run natively: {lowered}"
    for a, e in zip(actual_out, expected_out):
        exact = not (e.is_floating_point() or e.is_complex())
        torch.testing.assert_close(a, e, equal_nan=True, **(dict(rtol=0, atol=0) if exact else t))
    assert len(actual_grads) == len(expected_grads)
    for a, e in zip(actual_grads, expected_grads):
        torch.testing.assert_close(a, e, equal_nan=True, **t)


# ---------------------------------------------------------------------------------- padding

@pytest.mark.parametrize("mode", ["reflect", "replicate"])
@pytest.mark.parametrize("shape,pad", [
    ((2, 3, 9), (2, 3)), ((3, 9), (0, 4)), ((2, 3, 9), (-2, 3)), ((2, 3, 9), (3, -2)),
    ((2, 3, 6, 7), (1, 2, 3, 0)), ((3, 6, 7), (2, -1, -2, 3)),
    ((2, 2, 4, 5, 6), (1, 2, 3, 1, 0, 2)), ((2, 4, 5, 6), (1, 1, 1, 1, 2, 2)),
])
def test_pad(mode, shape, pad):
    n = len(pad) // 2
    name = {"reflect": "reflection_pad", "replicate": "replication_pad"}[mode] + f"{n}d"
    check(lambda x: F.pad(x, pad, mode=mode), [make(shape)], schemas=[name, name + "_backward"])


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.uint8, torch.complex64])
def test_pad_dtypes(dtype):
    x = make((2, 3, 5, 6), dtype) if dtype != torch.complex64 else torch.randn(2, 3, 5, 6, dtype=dtype)
    grad = (0,) if dtype.is_floating_point or dtype.is_complex else ()
    check(lambda x: F.pad(x, (2, 1, 1, 3), mode="reflect"), [x], grad=grad, schemas=["reflection_pad2d"])
    check(lambda x: F.pad(x, (2, 1, 1, 3), mode="replicate"), [x], grad=grad, schemas=["replication_pad2d"])


def test_pad_channels_last_noncontiguous_nonfinite():
    x = make((2, 3, 6, 7))
    x[0, 1, 0, 0] = float("inf")
    x[1, 2, 5, 6] = float("nan")
    for mode in ("reflect", "replicate", "circular"):
        check(lambda x: F.pad(x, (2, 1, 1, 2), mode=mode), [x], channels_last=True)
        check(lambda x: F.pad(x.transpose(-1, -2), (2, 1, 1, 2), mode=mode), [x])
    check(lambda x: F.pad(x, (2, 1, 1, 2, 1, 1), mode="replicate"), [make((2, 3, 4, 5, 6))], channels_last=True)
    check(lambda x: F.pad(x, (1, 1, 1, 1), mode="reflect"), [make((0, 3, 4, 5))])


# ---------------------------------------------------------------------------------- pooling

@pytest.mark.parametrize("kwargs", [
    dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=(2, 3, 2), stride=(1, 2, 2)),
    dict(kernel_size=3, stride=2, ceil_mode=True), dict(kernel_size=2, dilation=2, padding=1),
    dict(kernel_size=3, stride=1, padding=1, dilation=(1, 2, 1), ceil_mode=True),
])
def test_max_pool3d(kwargs):
    x = make((2, 3, 7, 8, 9))
    check(lambda x: F.max_pool3d(x, return_indices=True, **kwargs), [x],
          schemas=["max_pool3d_with_indices", "max_pool3d_with_indices_backward"])


def test_max_pool3d_unbatched_channels_last_ties_nonfinite():
    x = torch.tensor([1.0, 1.0, -float("inf"), 2.0, 2.0, float("nan"), 0.0, float("nan")]).repeat(3, 5, 5, 1)
    check(lambda x: F.max_pool3d(x, 2, 1, return_indices=True), [x])
    x = torch.full((1, 2, 4, 4, 4), -float("inf"))
    check(lambda x: F.max_pool3d(x, 3, 2, padding=1, return_indices=True), [x], grad=())
    check(lambda x: F.max_pool3d(x, 3, 2, padding=1, return_indices=True), [make((2, 3, 6, 6, 6))], channels_last=True)
    for dt in (torch.int32, torch.uint8):
        check(lambda x: F.max_pool3d(x, 2, return_indices=True), [make((1, 2, 4, 4, 4), dt)], grad=())
    for dt in (torch.float16, torch.bfloat16, torch.float64):
        check(lambda x: F.max_pool3d(x, 2, return_indices=True), [make((1, 2, 4, 4, 4), dt)])


@pytest.mark.parametrize("kwargs", [
    dict(kernel_size=2, return_indices=True), dict(kernel_size=3, stride=2, padding=1, return_indices=True),
    dict(kernel_size=3, stride=2, ceil_mode=True, return_indices=True),
    dict(kernel_size=2, dilation=2, padding=1, return_indices=True),
])
def test_max_pool1d_2d(kwargs):
    check(lambda x: F.max_pool1d(x, **kwargs), [make((2, 3, 11))])
    check(lambda x: F.max_pool2d(x, **kwargs), [make((2, 3, 9, 10))], schemas=["max_pool2d_with_indices"])
    check(lambda x: F.max_pool2d(x, **kwargs), [make((3, 9, 10))])
    check(lambda x: F.max_pool2d(x, **kwargs), [make((2, 3, 9, 10))], channels_last=True)


@pytest.mark.parametrize("requires_grad", [False, True])
def test_max_pool1d_of_a_transposed_input_is_laid_out_as_on_the_cpu(requires_grad):
    """CPU's own max_pool1d kernel (taken without a gradient) writes a contiguous result; with one,
    torch takes max_pool1d_with_indices, laid out like the input (aten/cpu_path_overrides.cc)."""
    x = make((2, 2, 3)).mT

    def pool(dev):
        t = x.to(dev).requires_grad_(requires_grad)
        return F.max_pool1d(t, 1, stride=1), F.max_pool1d(t[0], 2, stride=1)

    for cpu, pjrt in zip(pool("cpu"), pool("pjrt")):
        assert pjrt.stride() == cpu.stride()
        torch.testing.assert_close(pjrt.cpu(), cpu)


def test_max_pool2d_ties_nonfinite():
    x = torch.tensor([1.0, 1.0, -float("inf"), 2.0, 2.0, float("nan"), 0.0, float("nan")]).repeat(1, 2, 6, 1)
    check(lambda x: F.max_pool2d(x, 2, 1, return_indices=True), [x])
    x = torch.full((1, 2, 5, 5), -float("inf"))
    check(lambda x: F.max_pool2d(x, 3, 2, padding=1, return_indices=True), [x], grad=())


@pytest.mark.parametrize("kwargs", [
    dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=3, stride=2, padding=1, count_include_pad=False),
    dict(kernel_size=3, stride=2, ceil_mode=True), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
    dict(kernel_size=(2, 3, 2), stride=(1, 2, 2), divisor_override=5),
])
def test_avg_pool3d(kwargs):
    check(lambda x: F.avg_pool3d(x, **kwargs), [make((2, 3, 7, 8, 9))], schemas=["avg_pool3d", "avg_pool3d_backward"])


def test_avg_pool_layouts_dtypes():
    check(lambda x: F.avg_pool3d(x, 3, 2, 1), [make((3, 7, 8, 9))])
    check(lambda x: F.avg_pool3d(x, 3, 2, 1), [make((2, 3, 7, 8, 9))], channels_last=True)
    check(lambda x: F.avg_pool3d(x, 2), [make((2, 3, 4, 4, 4), torch.float64)])
    check(lambda x: F.avg_pool3d(x, 3, 2, 1), [make((1, 2, 5, 5, 5), torch.int64, low=-50, high=50)], grad=())
    check(lambda x: F.avg_pool1d(x, 3, 2, 1, ceil_mode=True), [make((2, 3, 10))])
    check(lambda x: F.avg_pool2d(x, 3, 2, 1), [make((2, 3, 9, 10))], channels_last=True)


@pytest.mark.parametrize("n,size,out", [
    (1, (2, 3, 10), 4), (1, (3, 10), 5), (2, (2, 3, 10, 9), (4, 3)), (2, (2, 3, 10, 9), (5, 9)),
    (2, (3, 7, 7), 1), (3, (2, 3, 6, 7, 9), (3, 4, 5)), (3, (3, 6, 7, 9), (2, 7, 1)), (3, (1, 2, 5, 5, 5), (7, 3, 2)),
])
def test_adaptive_pools(n, size, out):
    x = make(size)
    avg = [F.adaptive_avg_pool1d, F.adaptive_avg_pool2d, F.adaptive_avg_pool3d][n - 1]
    mx = [F.adaptive_max_pool1d, F.adaptive_max_pool2d, F.adaptive_max_pool3d][n - 1]
    check(lambda x: avg(x, out), [x])
    check(lambda x: mx(x, out, return_indices=True), [x],
          schemas=[f"adaptive_max_pool{max(n, 2)}d", f"adaptive_max_pool{max(n, 2)}d_backward"])


def test_adaptive_pool_layouts_dtypes_nonfinite():
    x = make((2, 3, 6, 7, 9))
    x[0, 0, 1, 1, 1] = float("inf")
    x[1, 1, 2, 3, 4] = float("nan")
    x[1, 2, 0, 0, :] = float("nan")
    check(lambda x: F.adaptive_avg_pool3d(x, (4, 3, 5)), [x], schemas=["_adaptive_avg_pool3d", "_adaptive_avg_pool3d_backward"])
    check(lambda x: F.adaptive_max_pool3d(x, (4, 3, 5), return_indices=True), [x])
    check(lambda x: F.adaptive_max_pool3d(x, (4, 3, 5), return_indices=True), [x], channels_last=True)
    check(lambda x: F.adaptive_avg_pool3d(x, (4, 3, 5)), [x], channels_last=True)
    check(lambda x: F.adaptive_max_pool2d(x, (3, 4), return_indices=True), [make((2, 3, 7, 9))], channels_last=True)
    for dt in (torch.float16, torch.bfloat16, torch.float64):
        check(lambda x: F.adaptive_max_pool2d(x, (3, 4), return_indices=True), [make((2, 3, 7, 9), dt)])
        check(lambda x: F.adaptive_avg_pool3d(x, (3, 2, 4)), [make((2, 3, 5, 7, 9), dt)])


def test_max_unpool():
    def unpool(x, n, **kw):
        pool = [F.max_pool1d, F.max_pool2d, F.max_pool3d][n - 1]
        unp = [F.max_unpool1d, F.max_unpool2d, F.max_unpool3d][n - 1]
        y, i = pool(x, 2, return_indices=True, **kw)
        return unp(y, i, 2, **kw)
    check(functools.partial(unpool, n=1), [make((2, 3, 8))], schemas=["max_unpool2d"])
    check(functools.partial(unpool, n=2), [make((2, 3, 8, 6))])
    check(functools.partial(unpool, n=2), [make((3, 8, 6))])
    check(functools.partial(unpool, n=3), [make((2, 3, 4, 6, 4))], schemas=["max_unpool3d"])
    check(functools.partial(unpool, n=2, stride=1), [make((2, 3, 5, 6))])
    y, i = F.max_pool2d(make((2, 3, 8, 6)), 2, return_indices=True)
    check(lambda y, i: F.max_unpool2d(y, i, 2, output_size=(9, 7)), [y, i])


def test_lp_pool():
    check(lambda x: F.lp_pool2d(x, 2, 3, 2), [make((2, 3, 9, 8), low=0.1)])
    check(lambda x: F.lp_pool1d(x, 3, 2), [make((2, 3, 9), low=0.1)])
    check(lambda x: F.lp_pool3d(x, 2, 2), [make((2, 3, 4, 6, 4), low=0.1)])
    check(torch.sgn, [make((4, 5))], grad=(), schemas=["sgn"])  # its gradient is an _efficientzerotensor
    check(torch.sgn, [torch.tensor([0.0, -0.0, float("nan"), 3.0, -float("inf")])], grad=())
    z = torch.randn(6, dtype=torch.complex64)
    z[2] = 0
    check(torch.sgn, [z], grad=())


# ---------------------------------------------------------------------------------- upsampling

UPSAMPLE_CASES = [
    ("nearest", (2, 3, 5), dict(size=11)), ("nearest", (2, 3, 6), dict(scale_factor=2)),
    ("nearest", (2, 3, 5, 7), dict(size=(3, 12))), ("nearest", (2, 3, 5, 7), dict(scale_factor=1.7)),
    ("nearest", (1, 2, 3, 4, 5), dict(size=(5, 4, 9))), ("nearest", (1, 2, 3, 4, 5), dict(scale_factor=(2, 0.6, 1.5))),
    ("nearest-exact", (2, 3, 5), dict(size=8)), ("nearest-exact", (2, 3, 5, 7), dict(scale_factor=1.3)),
    ("nearest-exact", (1, 2, 3, 4, 5), dict(size=(2, 7, 9))),
    ("linear", (2, 3, 5), dict(size=11)), ("linear", (2, 3, 9), dict(scale_factor=0.45)),
    ("bilinear", (2, 3, 5, 7), dict(size=(9, 4))), ("bilinear", (2, 3, 6, 7), dict(scale_factor=2)),
    ("bilinear", (2, 3, 6, 7), dict(scale_factor=1.37, recompute_scale_factor=False)),
    ("bicubic", (2, 3, 5, 7), dict(size=(9, 4))), ("bicubic", (2, 3, 5, 6), dict(scale_factor=2.3)),
    ("trilinear", (1, 2, 3, 4, 5), dict(size=(5, 4, 9))), ("trilinear", (1, 2, 3, 4, 5), dict(scale_factor=(2, 0.6, 1.5))),
]
SCHEMA = {"nearest": "upsample_nearest{}d", "nearest-exact": "_upsample_nearest_exact{}d", "linear": "upsample_linear1d",
          "bilinear": "upsample_bilinear2d", "bicubic": "upsample_bicubic2d", "trilinear": "upsample_trilinear3d"}


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("mode,shape,kwargs", UPSAMPLE_CASES)
def test_upsample(mode, shape, kwargs, align_corners):
    if mode.startswith("nearest") and align_corners:
        pytest.skip("nearest modes have no align_corners")
    ac = dict(align_corners=align_corners) if not mode.startswith("nearest") else {}
    name = SCHEMA[mode].format(len(shape) - 2)
    check(lambda x: F.interpolate(x, mode=mode, **kwargs, **ac), [make(shape)], schemas=[name, name + "_backward"])


@pytest.mark.parametrize("mode,shape,size", [
    ("bilinear", (2, 3, 16, 13), (5, 7)), ("bilinear", (2, 3, 5, 7), (9, 12)), ("bilinear", (1, 2, 9, 9), (9, 4)),
    ("bicubic", (2, 3, 16, 13), (5, 7)), ("bicubic", (2, 3, 5, 7), (9, 12)), ("bicubic", (1, 2, 31, 9), (4, 9)),
])
@pytest.mark.parametrize("align_corners", [False, True])
def test_upsample_antialias(mode, shape, size, align_corners):
    name = f"_upsample_{mode}2d_aa"
    check(lambda x: F.interpolate(x, size=size, mode=mode, antialias=True, align_corners=align_corners),
          [make(shape)], schemas=[name, name + "_backward"])


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_upsample_dtypes(dtype):
    x = make((2, 3, 5, 7), dtype)
    for mode in ("nearest", "nearest-exact", "bilinear", "bicubic"):
        ac = {} if mode.startswith("nearest") else dict(align_corners=False)
        check(lambda x: F.interpolate(x, size=(9, 11), mode=mode, **ac), [x])
    check(lambda x: F.interpolate(x, size=(8, 4, 6), mode="trilinear"), [make((1, 2, 3, 5, 7), dtype)])
    if dtype == torch.float64:
        check(lambda x: F.interpolate(x, size=(3, 4), mode="bilinear", antialias=True), [x])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_upsample_half_types_weigh_as_the_cpu_kernels(dtype):
    """The generic CPU kernel (linear, trilinear, bicubic) stores weights in the half type, linear's
    lambda0 as scalar_t's 1 - lambda1: exactly CPU's values. upsample_bilinear2d computes in float
    with float weights (rounded weights were off by up to 112 bfloat16 ulps); its two passes
    associate the sum differently from CPU's four-term one, so within an ulp."""
    g = torch.Generator().manual_seed(0)
    cases = [((2, 4, 7), dict(scale_factor=1.7, mode="linear")), ((2, 4, 7), dict(size=11, mode="linear", align_corners=True)),
             ((1, 2, 4, 5, 6), dict(scale_factor=1.5, mode="trilinear")), ((2, 4, 6, 7), dict(size=(9, 9), mode="bicubic"))]
    for shape, kw in cases:
        x = torch.randn(shape, generator=g).to(dtype)
        torch.testing.assert_close(F.interpolate(x.to("pjrt"), **kw).cpu(), F.interpolate(x, **kw), rtol=0, atol=0)
    x = torch.randn(2, 4, 6, 7, generator=g).to(dtype)
    ulp = 2.0 ** -7 if dtype == torch.bfloat16 else 2.0 ** -10  # one ulp, relative, at worst
    for kw in (dict(scale_factor=1.5, mode="bilinear"), dict(size=(4, 5), mode="bilinear"),
               dict(size=(9, 10), mode="bilinear", align_corners=True)):
        torch.testing.assert_close(F.interpolate(x.to("pjrt"), **kw).cpu(), F.interpolate(x, **kw), rtol=ulp, atol=1e-6)


def test_upsample_layouts_nonfinite_uint8():
    x = make((2, 3, 6, 7))
    x[0, 0, 2, 3] = float("inf")
    x[1, 2, 4, 4] = float("nan")
    for mode in ("nearest", "bilinear", "bicubic"):
        ac = {} if mode == "nearest" else dict(align_corners=False)
        check(lambda x: F.interpolate(x, size=(11, 13), mode=mode, **ac), [x])
        check(lambda x: F.interpolate(x, size=(11, 13), mode=mode, **ac), [x], channels_last=True)
        check(lambda x: F.interpolate(x.transpose(-1, -2), size=(11, 13), mode=mode, **ac), [x])
    check(lambda x: F.interpolate(x, size=(4, 3, 9), mode="trilinear"), [make((2, 3, 5, 6, 7))], channels_last=True)
    check(lambda x: F.interpolate(x, size=(4, 3, 9), mode="nearest"), [make((2, 3, 5, 6, 7))], channels_last=True)
    u = make((2, 3, 5, 6), torch.uint8, low=0, high=250)
    check(lambda x: F.interpolate(x, size=(9, 13), mode="nearest"), [u], grad=())
    check(lambda x: F.interpolate(x, size=(9, 13), mode="nearest-exact"), [u], grad=())
    check(lambda x: F.interpolate(x, size=(9, 13), mode="bilinear"), [make((0, 3, 5, 6))])


# ---------------------------------------------------------------------------------- unfold / fold

@pytest.mark.parametrize("kwargs", [
    dict(kernel_size=3), dict(kernel_size=(2, 3), stride=2, padding=1), dict(kernel_size=3, dilation=2, padding=2, stride=(1, 2)),
])
def test_unfold_fold(kwargs):
    x = make((2, 3, 9, 8))
    check(lambda x: F.unfold(x, **kwargs), [x], schemas=["im2col"])
    check(lambda x: F.unfold(x, **kwargs), [x[0]])
    check(lambda x: F.unfold(x, **kwargs), [x], channels_last=True)
    cols = F.unfold(x, **kwargs)
    check(lambda c: F.fold(c, (9, 8), **kwargs), [cols], schemas=["col2im"])
    check(lambda c: F.fold(c, (9, 8), **kwargs), [cols[0]])
    for dt in (torch.float16, torch.bfloat16, torch.float64):
        check(lambda c: F.fold(c, (9, 8), **kwargs), [cols.to(dt)])


# ---------------------------------------------------------------------------------- shuffles

def test_shuffles():
    x = make((2, 12, 3, 4))
    check(lambda x: F.channel_shuffle(x, 3), [x], schemas=["channel_shuffle"])
    check(lambda x: F.channel_shuffle(x, 4), [make((2, 8, 3, 4, 2), torch.int32)], grad=())
    check(lambda x: F.pixel_shuffle(x, 2), [x])
    check(lambda x: F.pixel_unshuffle(x, 2), [make((2, 3, 4, 6))])
    check(lambda x: F.pixel_shuffle(x, 2), [x], channels_last=True)


# ---------------------------------------------------------------------------------- grid sampling

@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [False, True])
def test_grid_sample_2d(mode, padding_mode, align_corners):
    x = make((2, 3, 5, 7))
    grid = make((2, 4, 6, 2), low=-1.3, high=1.3, seed=1)
    grad = (0, 1) if mode != "nearest" else (0,)
    check(lambda x, g: F.grid_sample(x, g, mode=mode, padding_mode=padding_mode, align_corners=align_corners),
          [x, grid], grad=grad, schemas=["grid_sampler_2d", "grid_sampler_2d_backward"], atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [False, True])
def test_grid_sample_3d(mode, padding_mode, align_corners):
    x = make((2, 3, 4, 5, 6))
    grid = make((2, 3, 2, 4, 3), low=-1.3, high=1.3, seed=1)
    grad = (0, 1) if mode != "nearest" else (0,)
    check(lambda x, g: F.grid_sample(x, g, mode=mode, padding_mode=padding_mode, align_corners=align_corners),
          [x, grid], grad=grad, schemas=["grid_sampler_3d", "grid_sampler_3d_backward"], atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_grid_sample_non_finite_coordinates(mode, padding_mode):
    """NaN and infinite grid coordinates as CPU eager samples them: its 2-d kernel clamps a NaN
    coordinate to 0 before padding's clip (and a NaN weight makes a bilinear result NaN), its 3-d
    kernel clips NaN to the last index and adds a corner only where it is in range."""
    nan, inf = float("nan"), float("inf")
    points = [[nan, 0.0], [inf, 0.1], [-inf, -0.2], [0.3, nan], [nan, nan]]
    grid2 = torch.tensor([[points]])
    grid3 = torch.tensor([[[[x, y, z] for (x, y), z in zip(points, [0.0, nan, 0.5, -inf, 0.2])]]]).unsqueeze(1)
    for x, grid in ((make((1, 2, 3, 5)), grid2), (make((1, 2, 2, 3, 5)), grid3)):
        for align_corners in (False, True):
            check(lambda x, g: F.grid_sample(x, g, mode=mode, padding_mode=padding_mode, align_corners=align_corners),
                  [x, grid], grad=())


def test_grid_sample_dtypes_layouts():
    grid = make((2, 4, 6, 2), low=-1.1, high=1.1, seed=1)
    for dt in (torch.float64, torch.float16, torch.bfloat16):
        # torch's CPU kernel computes half types in half precision; we compute in float32
        check(lambda x, g: F.grid_sample(x, g, align_corners=False), [make((2, 3, 5, 7), dt), grid.to(dt)], grad=(0, 1),
              cpu_in_float64=dt != torch.float64)
    check(lambda x, g: F.grid_sample(x, g, mode="bicubic", align_corners=False), [make((2, 3, 5, 7)), grid],
          grad=(0, 1), channels_last=True, atol=2e-5, rtol=1e-4)
    x = make((2, 3, 5, 7))
    x[0, 1, 2, 3] = float("inf")
    check(lambda x, g: F.grid_sample(x, g, align_corners=True), [x, grid], grad=())
    # affine_grid itself reaches aten::linspace (not lowered here): the grid is made on the CPU
    affine = F.affine_grid(make((2, 2, 3), low=-1, high=1), (2, 3, 4, 5), align_corners=False)
    check(lambda x, g: F.grid_sample(x, g, align_corners=False), [x.nan_to_num(), affine], grad=(0, 1), atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("dtype", FLOATS)
def test_fractional_max_pool(dtype):
    def frac2(x, s):
        return F.fractional_max_pool2d(x, (2, 3), output_size=(4, 3), return_indices=True, _random_samples=s)

    def frac3(x, s):
        return F.fractional_max_pool3d(x, (2, 2, 3), output_size=(3, 4, 2), return_indices=True, _random_samples=s)
    s2 = torch.rand(3, 3, 2, generator=torch.Generator().manual_seed(3)).to(dtype)
    s3 = torch.rand(2, 3, 3, generator=torch.Generator().manual_seed(4)).to(dtype)
    check(frac2, [make((2, 3, 9, 8), dtype), s2], schemas=["fractional_max_pool2d", "fractional_max_pool2d_backward"])
    check(frac2, [make((3, 9, 8), dtype), s2])
    check(frac3, [make((2, 3, 7, 9, 6), dtype), s3], schemas=["fractional_max_pool3d", "fractional_max_pool3d_backward"])
    if dtype == torch.float32:
        check(frac2, [make((2, 3, 9, 8), dtype), s2], channels_last=True)
        check(lambda x, s: F.fractional_max_pool2d(x, 2, output_size=(1, 1), _random_samples=s), [make((2, 3, 3, 3)), s2[:2]])


def test_adaptive_avg_pool2d_nonfinite_stays_in_its_window():
    x = make((1, 2, 6, 6))
    x[0, 0, 0, 0] = float("inf")
    x[0, 1, 5, 2] = float("nan")
    for out in ((2, 2), (4, 4), (4, 5), 1):
        check(lambda x: F.adaptive_avg_pool2d(x, out), [x], schemas=["_adaptive_avg_pool2d", "_adaptive_avg_pool2d_backward"])


def batch_norm_parameters(case):
    g = torch.Generator().manual_seed(1)
    rm, rv = torch.rand(4, generator=g) * 2 - 1, torch.rand(4, generator=g) * 1.5 + 0.5
    w, b = torch.rand(4, generator=g) * 1.5 + 0.5, torch.rand(4, generator=g) * 2 - 1
    bad = {"negative weight": (w, 1, -1.5), "zero weight": (w, 2, 0.0), "infinite weight": (w, 0, float("inf")),
           "NaN variance": (rv, 1, float("nan")), "infinite mean": (rm, 2, -float("inf")),
           "infinite bias": (b, 3, float("inf"))}.get(case)
    if bad:
        bad[0][bad[1]] = bad[2]
    return rm, rv, w, b


def nonfinite_input(shape):
    x = make(shape)
    x.view(-1)[::7] = float("nan")
    x.view(-1)[3::11] = float("inf")
    x.view(-1)[5::13] = -float("inf")
    x[0, 1] = -float("inf")  # a channel whose ReLU is 0 everywhere: ties in every window
    return x


BATCH_NORM_CASES = ["finite", "negative weight", "zero weight", "infinite weight", "NaN variance", "infinite mean",
                    "infinite bias"]


@pytest.mark.parametrize("case", BATCH_NORM_CASES)
def test_max_pooling_after_eval_batch_norm_and_relu_runs_first_and_matches_cpu(case):
    # The pooling is lowered ahead of the batch norm and ReLU (graph/pool_through.h): the maximum of
    # an increasing map is the map of the maximum, bit for bit. Batch norm is increasing only where
    # its scale is finite and positive (and its shift finite): the other cases take the original
    # order inside the same program. Values, NaNs and indices as on the CPU.
    params = batch_norm_parameters(case)
    x = nonfinite_input((2, 4, 9 + BATCH_NORM_CASES.index(case), 8))  # a program of its own: lowered here

    def model(x, rm, rv, w, b):
        bn = lambda: F.batch_norm(x, rm, rv, w, b, training=False)
        a, ia = F.max_pool2d(F.relu(bn()), 2, return_indices=True)
        c, ic = F.max_pool2d(F.relu(x), 3, 2, padding=1, return_indices=True)  # ReLU alone: no condition
        return (a, ia, F.max_pool2d(bn(), 2, 2, padding=1, ceil_mode=True), c, ic,
                F.max_pool3d(F.relu(x.unsqueeze(1)), 2),
                F.max_pool2d(F.relu(bn()), 3, 2, padding=1))  # overlapping windows: stays after them

    with torch.no_grad():
        expected = model(x, *params)
        with Counters() as c:
            actual = [t.cpu() for t in model(x.to("pjrt"), *[p.to("pjrt") for p in params])]
    assert c["MaxPoolsMovedFirst"] == 4 and c["FallbackOps"] == 0
    for got, want in zip(actual, expected):
        torch.testing.assert_close(got, want, equal_nan=True, rtol=1e-6, atol=1e-6)


def test_max_pooling_after_non_increasing_ops_keeps_its_order():
    # GELU is not monotone, and batch norm in training takes its statistics from the input.
    x = make((2, 4, 8, 6))
    with torch.no_grad(), Counters() as c:
        for f in (F.gelu, lambda t: F.batch_norm(t, None, None, training=True)):
            torch.testing.assert_close(F.max_pool2d(f(x.to("pjrt")), 2).cpu(), F.max_pool2d(f(x), 2))
    assert c["GraphsLowered"] >= 2 and c["MaxPoolsMovedFirst"] == 0
