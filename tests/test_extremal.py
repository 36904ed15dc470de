"""Every lowered elementwise, reduction, scan and normalization op on extremal values, for every
dtype, against CPU eager.

Inputs hold NaN, +-inf, +-0.0, denormals, the smallest normal, large finite values and integer
extremes (iinfo min/max, 0, -1); many values are batched into one tensor per op and dtype (binary
ops see the cartesian product of the values, reductions rows of different extremal mixes). Results
must have CPU's dtype and shape, NaN in the same places, the same infinities and signed zeros, and
equal values: exactly for integer/bool results and IEEE-exact ops, within a few ulps for the rest
(see tolerance()). Every op must run through its lowering (no CPU fallback), and where CPU raises
for a dtype, pjrt must raise the same exception type. The tests are op x dtype (test ids
`<op>-<dtype>`); test_every_lowered_op_is_covered keeps the op list in step with
`torch_pjrt._C._lowered_ops()`. No sort op is lowered (sort/topk/argsort take the CPU fallback),
so there is no sort case.

CPU eager is not one function: an element may also match CPU eager's answer from another of its
code paths (references()): its scalar kernels (what it runs for tensors under 8 elements, which
differ from its vectorized ones for gelu(inf), NaN in some backward formulas, float16 division
rounding, fmod with an overflowing quotient), a float32 computation for half types (pjrt's opmath),
and XLA:CPU's floating-point environment: the XLA CPU client runs every executable with
flush-to-zero and denormals-are-zero set (unconditionally, following TensorFlow), so denormal inputs
read as zero and denormal results are written as zero. That last difference from CPU eager is
recorded by tests/test_fuzz.py::test_known_gap_denormals_are_flushed (a strict xfail).
"""
import contextlib
import math

import pytest
import torch
import torch.nn.functional as F

aten = torch.ops.aten

BOOL = [torch.bool]
INTS = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]
FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
ALL = BOOL + INTS + FLOATS
NAME = {t: str(t).replace("torch.", "") for t in ALL}

NAN, INF = float("nan"), float("inf")


# ---------------------------------------------------------------------------------- values

def float_values(dtype):
    fi = torch.finfo(dtype)
    big = {torch.float16: 60000.0, torch.bfloat16: 1e38, torch.float32: 1e38, torch.float64: 1e308}[dtype]
    vals = [NAN, INF, -INF, 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, -2.5, 2.5, 3.0, -3.0, 7.0, 0.1, -0.7,
            20.5, -20.5, 100.0, -100.0, 11.0, 89.0, -104.0, 710.0, fi.tiny, -fi.tiny, fi.max, -fi.max, big, -big,
            fi.eps, 1 + fi.eps, 2.0 ** 31, -(2.0 ** 63), 1e10]
    return vals + denormal_values(dtype)


def int_values(dtype):
    ii = torch.iinfo(dtype)
    vals = [ii.min, ii.max, 0, -1, 1, 2, -2, 3, -3, 7, -7, 100, -100, ii.min + 1, ii.max - 1, 64, 127, 255,
            ii.max // 2, ii.min // 2, 1000, -1000, 65535, 2 ** 31 - 1, -2 ** 31, 2 ** 40]
    out = []
    for v in vals:
        if ii.min <= v <= ii.max and v not in out:
            out.append(v)
    return out


def values(dtype):
    if dtype == torch.bool:
        return [False, True]
    if dtype.is_floating_point:
        return float_values(dtype)
    return int_values(dtype)


def vec(dtype):
    return torch.tensor(values(dtype), dtype=torch.float64 if dtype.is_floating_point else None).to(dtype)


def cartesian(dtype, n=None):
    v = vec(dtype)
    if n is not None:
        v = v[:n]
    a = v.repeat_interleave(len(v))
    b = v.repeat(len(v))
    return a, b


def triples(dtype):
    """(a, b, c): every pair of a 14-value subset, with a third operand cycling through all values."""
    v = vec(dtype)
    sub = v[:14] if len(v) > 14 else v
    a = sub.repeat_interleave(len(sub))
    b = sub.repeat(len(sub))
    c = v.repeat(len(a) // len(v) + 1)[: len(a)].flip(0)
    return a, b, c


def rows(dtype, tiny_row=True):
    """Rows of 8 for reductions, each a different extremal mix whose reduction does not depend on
    the order of evaluation (no +max and -max in one row, no sums that only cancel in one order).
    Normalizations go without the row of smallest normals: its mean and variance are denormals,
    which XLA:CPU flushes, so its normalized values legitimately differ from CPU eager's by O(1)."""
    if dtype == torch.bool:
        r = [[False] * 8, [True] * 8, [True, False] * 4, [False] * 7 + [True], [True] + [False] * 7]
        return torch.tensor(r)
    if dtype.is_floating_point:
        fi = torch.finfo(dtype)
        r = [
            [1.0, -2.0, 3.5, 0.5, -0.25, 7.0, 2.0, -1.0],
            [1.0, NAN, 3.0, -INF, INF, 0.0, 2.0, -1.0],
            [1.0, INF, 3.0, 0.0, -0.0, 2.0, INF, -1.0],
            [-INF, 1.0, -3.0, 0.0, 2.0, -INF, 5.0, 1.0],
            [INF, -INF, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
            [-INF] * 8,
            [INF] * 8,
            [NAN] * 8,
            [2.0, 3.0, 1.0, NAN, 5.0, NAN, 0.0, -1.0],
            [fi.max, fi.max, 1.0, 2.0, 0.5, fi.max, 3.0, 1.0],
            [-fi.max, -1.0, -fi.max, -2.0, -0.5, -fi.max, -3.0, -1.0],
            [-0.0] * 8,
            [0.0, -0.0, 0.0, -0.0, -0.0, 0.0, -0.0, 0.0],
            [fi.tiny, -fi.tiny, fi.tiny, 0.0, fi.tiny, fi.tiny, -0.0, fi.tiny] if tiny_row else [1.0] * 8,
            [3.0, 3.0, -1.0, 3.0, -1.0, 2.0, 3.0, -1.0],
            [-5.0, -0.5, -7.0, -2.0, -1.5, -3.0, -1.0, -4.0],
        ]
        return torch.tensor(r, dtype=torch.float64).to(dtype)
    ii = torch.iinfo(dtype)
    r = [
        [1, 2, 3, 0, 5, 7, 2, 1],
        [ii.max, ii.max, 1, 2, 0, ii.max, 3, 1],
        [ii.min, ii.min, 0, 1, 2, ii.min, 3, 1],
        [ii.min, ii.max, 0, 1, 2, 3, 4, 5],
        [0] * 8,
        [ii.max] * 8,
        [ii.min] * 8,
        [5, 5, 1, 5, 1, 2, 5, 1],
        [-1, -1, 3, -1, 2, 2, 0, 1] if ii.min < 0 else [255, 254, 3, 255, 2, 2, 0, 1],
        [2, 3, -2, 2, -3, 2, 1, -1] if ii.min < 0 else [2, 3, 200, 2, 100, 2, 1, 7],
    ]
    return torch.tensor(r, dtype=torch.int64).to(dtype)


def denormal_values(dtype):
    if dtype == torch.float16:
        sub = [2.0 ** -24, 2.0 ** -20, 2.0 ** -14 - 2.0 ** -24]
    elif dtype == torch.bfloat16:
        sub = [2.0 ** -133, 2.0 ** -130, 2.0 ** -127]
    elif dtype == torch.float32:
        sub = [1e-40, 2.0 ** -149, 1e-39, 5e-42]
    else:
        sub = [2.0 ** -1074, 1e-310, 2.0 ** -1030]
    return sub + [-s for s in sub]


# ---------------------------------------------------------------------------------- ops

def _scalars(x, fn, scalars):
    return torch.stack([fn(x, s) for s in scalars]) if scalars else fn(x, 1)


def python_scalars(o, dtype):
    """Python numbers to combine with a tensor. Each kind of number (int, float, bool) is another
    graph to compile, so bools only go to the ops where they have rules of their own. Ops that
    store the number into the tensor (masked_fill) get only numbers the dtype can hold
    (masked_fill_overflow checks the others)."""
    out = [0, 1, -1, 2, 3, -7, 0.5, -0.0, 2.5, NAN, INF, -INF] + ([True, False] if o.bool_scalars else [])
    if o.stores_scalar and not dtype.is_floating_point:
        out = [v for v in out if math.isfinite(v)]
    return out


class Op:
    """One torch call reaching one or more lowered schemas.

    kind: how inputs are built ('unary', 'binary', 'ternary', 'rows', 'scalar').
    exact: floating results must equal CPU's exactly (IEEE-exact ops); otherwise within `tol` ulps,
    plus `tol` ulps of `scale(*inputs)` and `atol_eps` ulps of 1 (see tolerance()).
    signed_zeros: zero results carry CPU's sign. Off for ops choosing between +0.0 and -0.0
    (max/min/clamp and friends), whose choice torch leaves open: CPU's own scalar and vectorized
    paths disagree (torch.maximum(0.0, -0.0) is 0.0 for one element, -0.0 for 20).
    """

    def __init__(self, name, fn, kind, schemas, exact=False, tol=1, domain=None, signed_zeros=True, scale=None,
                 atol_eps=0, alt=None, bool_scalars=False, stores_scalar=False):
        self.name, self.fn, self.kind, self.schemas = name, fn, kind, schemas
        self.exact, self.tol, self.domain, self.signed_zeros = exact, tol, domain, signed_zeros
        self.scale, self.atol_eps, self.alt, self.bool_scalars = scale, atol_eps, alt, bool_scalars
        self.stores_scalar = stores_scalar
        if kind in ("rows", "norm", "each"):
            # The sign of a zero that a reduction or normalization returns depends on how its
            # formula is arranged (CPU eager's layer_norm computes x * rstd + (-mean * rstd)).
            self.signed_zeros = False


OPS = []


def op(name, fn, kind, schemas, **kw):
    OPS.append(Op(name, fn, kind, schemas if isinstance(schemas, (list, tuple)) else [schemas], **kw))


def no_fma_overflow(a, b, c, product):
    """Leaves out triples whose product term overflows: CPU eager's FMA-contracted a + p computes p
    unrounded (-inf + 2 * 3 * 1e308 is -inf there, NaN when the product is rounded first)."""
    if not a.dtype.is_floating_point:
        return a, b, c
    with torch.no_grad():
        p = product(a.double(), b.double(), c.double()).abs()
    opmath = torch.float32 if a.dtype in (torch.float16, torch.bfloat16) else a.dtype
    keep = ~(torch.isfinite(b) & torch.isfinite(c) & (p > torch.finfo(opmath).max / 2))
    return a[keep], b[keep], c[keep]


def nonzero_divisor(a, b):
    """Integer division by zero raises ZeroDivisionError on CPU (a data-dependent error pjrt cannot
    raise without a sync; see test_integer_division_by_zero), and int32/int64 min / -1 with
    rounding_mode='trunc' kills CPU eager with SIGFPE: such pairs are left out for integer types."""
    if a.dtype.is_floating_point or a.dtype == torch.bool:
        return a, b
    keep = b != 0
    if a.dtype in (torch.int32, torch.int64):
        keep &= ~((a == torch.iinfo(a.dtype).min) & (b == -1))
    return a[keep], b[keep]


# Binary arithmetic.
op("add", torch.add, "binary", "add.Tensor", exact=True)
# CPU eager's kernels are built with FMA contraction (a + alpha * b rounds once): ulps of alpha * b.
op("add_alpha", lambda a, b: torch.add(a, b, alpha=2), "binary", "add.Tensor", scale=lambda a, b: 2 * b)
op("sub", torch.sub, "binary", "sub.Tensor", exact=True)
op("sub_alpha", lambda a, b: torch.sub(a, b, alpha=3), "binary", "sub.Tensor", scale=lambda a, b: 3 * b)
op("rsub", lambda a, b: torch.rsub(a, b, alpha=2), "binary", "rsub.Tensor", scale=lambda a, b: 2 * a)
op("mul", torch.mul, "binary", "mul.Tensor", exact=True)
op("div", torch.div, "binary", "div.Tensor", exact=True)
op("div_floor", lambda a, b: torch.div(a, b, rounding_mode="floor"), "binary", "div.Tensor_mode",
   domain=nonzero_divisor)
op("div_trunc", lambda a, b: torch.div(a, b, rounding_mode="trunc"), "binary", "div.Tensor_mode",
   exact=True, domain=nonzero_divisor)
op("remainder", torch.remainder, "binary", "remainder.Tensor", domain=nonzero_divisor)
op("fmod", torch.fmod, "binary", "fmod.Tensor", exact=True, domain=nonzero_divisor)
op("pow", torch.pow, "binary", "pow.Tensor_Tensor", tol=4)
op("maximum", torch.maximum, "binary", "maximum", exact=True, signed_zeros=False)
op("minimum", torch.minimum, "binary", "minimum", exact=True, signed_zeros=False)
op("atan2", torch.atan2, "binary", "atan2", tol=2)
op("bitwise_and", torch.bitwise_and, "binary", "bitwise_and.Tensor")
op("bitwise_or", torch.bitwise_or, "binary", "bitwise_or.Tensor")
op("bitwise_xor", torch.bitwise_xor, "binary", "bitwise_xor.Tensor")
op("logical_and", torch.logical_and, "binary", "logical_and")
op("logical_or", torch.logical_or, "binary", "logical_or")
op("logical_xor", torch.logical_xor, "binary", "logical_xor")
for _cmp in ["eq", "ne", "lt", "le", "gt", "ge"]:
    op(_cmp, getattr(torch, _cmp), "binary", f"{_cmp}.Tensor")
    op(f"{_cmp}_scalar", lambda x, s, f=getattr(torch, _cmp): f(x, s), "scalar", f"{_cmp}.Scalar",
       bool_scalars=_cmp in ("eq", "ne"))
op("clamp_tensor", lambda a, b: torch.clamp(a, min=b), "binary", "clamp_min.Tensor", exact=True, signed_zeros=False)
op("clamp_max_tensor", lambda a, b: torch.clamp(a, max=b), "binary", "clamp_max.Tensor", exact=True, signed_zeros=False)
op("clamp_both_tensor", lambda a, b, c: torch.clamp(a, b, c), "ternary", "clamp.Tensor", exact=True, signed_zeros=False)
op("clamp_scalar", lambda x, s: torch.clamp(x, s, 3), "scalar", "clamp", exact=True, signed_zeros=False)
op("clamp_min_scalar", lambda x, s: torch.clamp(x, min=s), "scalar", "clamp_min", exact=True, signed_zeros=False)
op("clamp_max_scalar", lambda x, s: torch.clamp(x, max=s), "scalar", "clamp_max", exact=True, signed_zeros=False)
op("where", lambda c, a, b: torch.where(c != 0, a, b), "ternary", ["where.self", "ne.Scalar"], exact=True)
# An in-range fill, then one the dtype cannot hold (a RuntimeError on CPU for integer types). The
# input has a length of its own, so no other test shares its meta-kernel memo entry.
op("masked_fill_overflow", lambda x: (x[1:].masked_fill(x[1:] > 1, 0.5), x[1:].masked_fill(x[1:] > 1, INF)), "unary",
   ["masked_fill.Scalar", "gt.Scalar"], exact=True)
op("masked_fill_scalar", lambda x, s: x.masked_fill(x > 1, s), "scalar", ["masked_fill.Scalar", "gt.Scalar"],
   bool_scalars=True, stores_scalar=True,
   exact=True)
op("masked_fill_tensor", lambda a, b: a.masked_fill(a > b, b[3]), "binary", ["masked_fill.Tensor", "gt.Tensor"],
   exact=True)
op("lerp_scalar", lambda a, b: torch.lerp(a, b, 0.25), "binary", "lerp.Scalar", tol=2,
   scale=lambda a, b: b - a)
op("lerp_tensor", torch.lerp, "ternary", "lerp.Tensor", tol=2, scale=lambda a, b, w: (b - a) * w.abs().clamp(min=1),
   domain=lambda a, b, w: no_fma_overflow(a, b, w, lambda a, b, w: (b - a) * w))
op("addcmul", lambda a, b, c: torch.addcmul(a, b, c, value=2), "ternary", "addcmul", tol=2,
   scale=lambda a, b, c: 2 * b * c, domain=lambda a, b, c: no_fma_overflow(a, b, c, lambda a, b, c: 2 * b * c))
op("addcdiv", lambda a, b, c: torch.addcdiv(a, b, c, value=-0.5), "ternary", "addcdiv", tol=2,
   scale=lambda a, b, c: 0.5 * b / c, domain=lambda a, b, c: no_fma_overflow(a, b, c, lambda a, b, c: 0.5 * b / c))
# addr's element (i, i) of diag(a) + 2 * outer(b, c) is a + 2 * b * c, as addcmul's.
op("addr", lambda a, b, c: torch.addr(torch.diag_embed(a), b, c, beta=0.5, alpha=2 if a.dtype != torch.bool else True)
   .diagonal(), "ternary", "addr", tol=2,
   scale=lambda a, b, c: 2 * b * c, domain=lambda a, b, c: no_fma_overflow(a, b, c, lambda a, b, c: 2 * b * c))
op("pow_scalar_base", lambda x, s: torch.pow(s, x), "scalar", "pow.Scalar", tol=4)
for _p in [2, 3, 0.5, -0.5, -1, 0, 1.5, -2]:
    op(f"pow_exp_{_p}", lambda x, p=_p: torch.pow(x, p), "unary", "pow.Tensor_Scalar",
       exact=_p in (2, 0, -1), tol=4)
op("add_scalar", lambda x, s: x + s, "scalar", "add.Tensor", exact=True, bool_scalars=True)
op("mul_scalar", lambda x, s: x * s, "scalar", "mul.Tensor", exact=True, bool_scalars=True)
op("div_scalar", lambda x, s: x / s, "scalar", "div.Tensor", exact=True)
op("rsub_scalar", lambda x, s: s - x, "scalar", "rsub.Tensor", exact=True, bool_scalars=True)

# Unary math.
_UNARY = {
    "neg": (torch.neg, True, 1), "abs": (torch.abs, True, 1), "sign": (torch.sign, True, 1),
    "exp": (torch.exp, False, 2), "exp2": (torch.exp2, False, 2), "expm1": (torch.expm1, False, 2),
    "log": (torch.log, False, 2), "log2": (torch.log2, False, 2), "log10": (torch.log10, False, 2),
    # CPU eager's vectorized sqrt (SLEEF, 0.5001 ulp) is not correctly rounded; XLA's is.
    "log1p": (torch.log1p, False, 2), "sqrt": (torch.sqrt, False, 1), "rsqrt": (torch.rsqrt, False, 2),
    "sin": (torch.sin, False, 2), "cos": (torch.cos, False, 2), "tan": (torch.tan, False, 4),
    "tanh": (torch.tanh, False, 2), "sigmoid": (torch.sigmoid, False, 2), "erf": (torch.erf, False, 2),
    "erfinv": (torch.erfinv, False, 4), "asin": (torch.asin, False, 2), "acos": (torch.acos, False, 2),
    "atan": (torch.atan, False, 2), "sinh": (torch.sinh, False, 2), "cosh": (torch.cosh, False, 2),
    "asinh": (torch.asinh, False, 2), "acosh": (torch.acosh, False, 2), "atanh": (torch.atanh, False, 2),
    "lgamma": (torch.lgamma, False, 8), "digamma": (torch.digamma, False, 8),
    "floor": (torch.floor, True, 1), "ceil": (torch.ceil, True, 1), "trunc": (torch.trunc, True, 1),
    "frac": (torch.frac, True, 1), "round": (torch.round, True, 1), "reciprocal": (torch.reciprocal, True, 1),
    "logical_not": (torch.logical_not, True, 1), "bitwise_not": (torch.bitwise_not, True, 1),
    "isnan": (torch.isnan, True, 1), "sgn": (torch.sgn, True, 1), "isposinf": (torch.isposinf, True, 1),
    "isneginf": (torch.isneginf, True, 1), "nan_to_num": (torch.nan_to_num, True, 1),
}
for _n, (_f, _exact, _tol) in _UNARY.items():
    # Special functions: XLA's and torch's approximations differ by ulps of 1 near their zeros.
    op(_n, _f, "unary", _n, exact=_exact, tol=_tol, atol_eps=8 if _n in ("lgamma", "digamma", "erfinv") else 0)
# On real inputs (complex ones: tests/test_lowerings_algebra.py): 0 or pi.
op("angle", torch.angle, "unary", "angle", exact=True)
op("nan_to_num_args", lambda x: torch.nan_to_num(x, nan=2.0, posinf=-3.0, neginf=7.0), "unary", "nan_to_num",
   exact=True)

# Activations.
op("relu", torch.relu, "unary", "relu", exact=True, signed_zeros=False)
# x * (1 + erf(x / sqrt 2)) cancels for negative x: ulps of x (up to 8, past which both saturate).
op("gelu", F.gelu, "unary", "gelu", tol=4, scale=lambda x: x.abs().clamp(max=8))
op("gelu_tanh", lambda x: F.gelu(x, approximate="tanh"), "unary", "gelu", tol=4, scale=lambda x: x.abs().clamp(max=8))
op("silu", F.silu, "unary", "silu", tol=2)
op("leaky_relu", lambda x: F.leaky_relu(x, 0.2), "unary", "leaky_relu", tol=1)
op("elu", lambda x: F.elu(x, 0.7), "unary", "elu", tol=2)
op("selu", F.selu, "unary", "elu", tol=2)
op("softplus", F.softplus, "unary", "softplus", tol=2)
op("softplus_beta", lambda x: F.softplus(x, beta=2, threshold=5), "unary", "softplus", tol=2)
op("hardtanh", lambda x: F.hardtanh(x, -2, 3), "unary", "hardtanh", exact=True, signed_zeros=False)
op("hardsigmoid", F.hardsigmoid, "unary", "hardsigmoid", tol=1)
op("hardswish", F.hardswish, "unary", "hardswish", tol=1)
op("mish", F.mish, "unary", "mish", tol=4)

# Activation backward formulas (called as the aten ops autograd uses).
op("threshold_backward", lambda g, x: aten.threshold_backward(g, x, 0.5), "binary", "threshold_backward",
   exact=True)
op("gelu_backward", lambda g, x: aten.gelu_backward(g, x), "binary", "gelu_backward", tol=8,
   scale=lambda g, x: g * (x.abs().clamp(max=8) + 1))
op("gelu_backward_tanh", lambda g, x: aten.gelu_backward(g, x, approximate="tanh"), "binary", "gelu_backward",
   tol=8, scale=lambda g, x: g * (x.abs().clamp(max=8) + 1))
op("silu_backward", aten.silu_backward, "binary", "silu_backward", tol=4)
op("mish_backward", aten.mish_backward, "binary", "mish_backward", tol=4)
op("sigmoid_backward", aten.sigmoid_backward, "binary", "sigmoid_backward", tol=2)
op("tanh_backward", aten.tanh_backward, "binary", "tanh_backward", tol=2)
op("leaky_relu_backward", lambda g, x: aten.leaky_relu_backward(g, x, 0.2, False), "binary",
   "leaky_relu_backward", tol=1)
op("elu_backward", lambda g, x: aten.elu_backward(g, 0.7, 1.0, 1.0, False, x), "binary", "elu_backward", tol=2)
op("elu_backward_result", lambda g, y: aten.elu_backward(g, 0.7, 1.0, 1.0, True, y), "binary", "elu_backward",
   tol=2)
op("hardtanh_backward", lambda g, x: aten.hardtanh_backward(g, x, -2.0, 3.0), "binary", "hardtanh_backward",
   exact=True)
op("softplus_backward", lambda g, x: aten.softplus_backward(g, x, 1.0, 20.0), "binary", "softplus_backward",
   tol=2)
op("hardsigmoid_backward", aten.hardsigmoid_backward, "binary", "hardsigmoid_backward", tol=1)
op("hardswish_backward", aten.hardswish_backward, "binary", "hardswish_backward", tol=1)

# Reductions over rows (dim=1), over the transposed rows (dim=0 of a non-contiguous input), and
# over everything per row.
def per_row(fn):
    """A full reduction, applied to each row (as its own tensor: see run())."""
    return fn


def both_dims(fn):
    return lambda m: (fn(m, 1), fn(m.t(), 0))


op("sum", per_row(torch.sum), "each", "sum")
op("sum_dim", both_dims(lambda m, d: m.sum(d)), "rows", "sum.dim_IntList")
# (Integer rows summed as float64 would depend on the summation order past 2**53.)
op("sum_keepdim_dtype", lambda m: m.sum(1, keepdim=True, dtype=torch.float64 if m.is_floating_point() else torch.int64),
   "rows", "sum.dim_IntList")
op("mean", per_row(torch.mean), "each", "mean")
op("mean_dim", both_dims(lambda m, d: m.mean(d)), "rows", "mean.dim")
op("amax", both_dims(lambda m, d: m.amax(d)), "rows", "amax", exact=True, signed_zeros=False)
op("amin", both_dims(lambda m, d: m.amin(d, keepdim=True)), "rows", "amin", exact=True, signed_zeros=False)
op("max", per_row(torch.max), "each", "max", exact=True, signed_zeros=False)
op("min", per_row(torch.min), "each", "min", exact=True, signed_zeros=False)
op("max_dim", both_dims(lambda m, d: tuple(m.max(d))), "rows", "max.dim", exact=True, signed_zeros=False)
op("min_dim", both_dims(lambda m, d: tuple(m.min(d, keepdim=True))), "rows", "min.dim", exact=True, signed_zeros=False)
op("argmax", both_dims(lambda m, d: m.argmax(d)), "rows", "argmax")
op("argmin", both_dims(lambda m, d: m.argmin(d)), "rows", "argmin")
op("argmax_all", per_row(torch.argmax), "each", "argmax")
op("argmin_all", per_row(torch.argmin), "each", "argmin")
op("prod", per_row(torch.prod), "each", "prod", tol=4)
op("prod_dim", both_dims(lambda m, d: m.prod(d)), "rows", "prod.dim_int", tol=4)
op("var", both_dims(lambda m, d: m.var(d)), "rows", "var.correction", tol=16)
op("std_unbiased_false", both_dims(lambda m, d: m.std(d, unbiased=False)), "rows", "std.correction", tol=16)
# CPU eager's var_mean computes the mean by Welford's method, which makes it NaN for a row holding
# an infinity unless that comes last (mean([1, inf]) is inf, mean([inf, 1]) NaN); torch.mean's
# value (inf) is accepted there too.
op("var_mean", both_dims(lambda m, d: tuple(torch.var_mean(m, d, correction=0))), "rows", "var_mean.correction",
   tol=16, alt=both_dims(lambda m, d: (torch.var(m, d, correction=0), m.mean(d))))
op("std_mean", both_dims(lambda m, d: tuple(torch.std_mean(m, d))), "rows", "std_mean.correction", tol=16,
   alt=both_dims(lambda m, d: (torch.std(m, d), m.mean(d))))
for _ord in [2, 1, 0, INF, -INF, 3, 0.5]:
    op(f"vector_norm_{_ord}", both_dims(lambda m, d, o=_ord: torch.linalg.vector_norm(m, o, d)), "rows",
       "linalg_vector_norm", tol=8)
op("any", per_row(torch.any), "each", "any")
op("all", per_row(torch.all), "each", "all")
op("any_dim", both_dims(lambda m, d: m.any(d)), "rows", "any.dim")
op("all_dim", both_dims(lambda m, d: m.all(d)), "rows", "all.dim")
op("any_dims", lambda m: torch.any(m.view(-1, 2, 4), dim=(1, 2)), "rows", "any.dims")
op("all_dims", lambda m: torch.all(m.view(-1, 2, 4), dim=(1, 2)), "rows", "all.dims")
op("logsumexp", both_dims(lambda m, d: torch.logsumexp(m, d)), "rows", "logsumexp", tol=4)
op("cumsum", both_dims(lambda m, d: torch.cumsum(m, d)), "rows", "cumsum", tol=4)
op("cumsum_f64", lambda m: torch.cumsum(m, 1, dtype=torch.float64), "rows", "cumsum", tol=4)
op("cumprod", both_dims(lambda m, d: torch.cumprod(m, d)), "rows", "cumprod", tol=8)
op("cummax", both_dims(lambda m, d: tuple(torch.cummax(m, d))), "rows", "cummax", exact=True)
op("cummin", both_dims(lambda m, d: tuple(torch.cummin(m, d))), "rows", "cummin", exact=True)
# max + log1p(exp(min - max)) cancels near a result of 0: ulps of the largest |x| so far.
op("logcumsumexp", lambda m: torch.logcumsumexp(m, 1), "rows", "logcumsumexp", tol=8,
   scale=lambda m: torch.cummax(m.abs().nan_to_num(0.0), 1)[0])
op("logcumsumexp_dim0", lambda m: torch.logcumsumexp(m.t(), 0).t(), "rows", "logcumsumexp", tol=8,
   scale=lambda m: torch.cummax(m.abs().nan_to_num(0.0), 1)[0])
op("nansum", per_row(torch.nansum), "each", "nansum", tol=4)
op("nansum_dim", both_dims(lambda m, d: torch.nansum(m, d)), "rows", "nansum", tol=4)
# Sorting and selection: NaN sorts as the largest value. Values only where the rows' ties leave the
# index to the CPU kernel's algorithm (topk, kthvalue, nanmedian, mode; see test_lowerings_sorting).
op("sort", both_dims(lambda m, d: tuple(torch.sort(m, dim=d, stable=True))), "rows", "sort.stable", exact=True)
op("sort_descending", lambda m: tuple(torch.sort(m, dim=1, descending=True, stable=True)), "rows", "sort.stable",
   exact=True)
op("topk", both_dims(lambda m, d: torch.topk(m, 3, d)[0]), "rows", "topk", exact=True)
op("topk_smallest", lambda m: torch.topk(m, 2, 1, largest=False)[0], "rows", "topk", exact=True)
op("kthvalue", both_dims(lambda m, d: torch.kthvalue(m, 3, d)[0]), "rows", "kthvalue", exact=True)
op("median", per_row(torch.median), "each", "median", exact=True)
op("nanmedian", per_row(torch.nanmedian), "each", "nanmedian", exact=True)
op("median_dim", both_dims(lambda m, d: tuple(torch.median(m, d))), "rows", "median.dim", exact=True)
op("nanmedian_dim", both_dims(lambda m, d: torch.nanmedian(m, d)[0]), "rows", "nanmedian.dim", exact=True)
op("mode", both_dims(lambda m, d: torch.mode(m, d)[0]), "rows", "mode", exact=True)
op("aminmax", both_dims(lambda m, d: tuple(torch.aminmax(m, dim=d))), "rows", "aminmax", exact=True,
   signed_zeros=False)
op("aminmax_all", per_row(lambda r: tuple(torch.aminmax(r))), "each", "aminmax", exact=True, signed_zeros=False)
op("count_nonzero", both_dims(lambda m, d: torch.count_nonzero(m, d)), "rows", "count_nonzero.dim_IntList")
op("softmax", both_dims(lambda m, d: torch.softmax(m, d)), "rows", "_softmax", tol=8)
# x - max - log(sum): a result near 0 carries the ulps of the log of a sum near 1, an absolute error
# (CPU eager's exp differs in the last bit between its vector paths: seen on a CPU without AVX2).
op("log_softmax", both_dims(lambda m, d: torch.log_softmax(m, d)), "rows", "_log_softmax", tol=8, atol_eps=2)
# y * (g - sum(g * y)) cancels: ulps of y * (|g| + |sum(g * y)|).
op("softmax_backward", lambda m: aten._softmax_backward_data(m.flip(1), torch.softmax(m, 1), 1, m.dtype), "rows",
   ["_softmax_backward_data", "_softmax"], tol=16,
   scale=lambda m: torch.softmax(m, 1) * (m.flip(1).abs() + (m.flip(1) * torch.softmax(m, 1)).abs().sum(1, keepdim=True)))
# g - exp(y) * sum(g) cancels, and y (the half-precision log_softmax) carries an ulp of |y|.
op("log_softmax_backward",
   lambda m: aten._log_softmax_backward_data(m.flip(1), torch.log_softmax(m, 1), 1, m.dtype), "rows",
   ["_log_softmax_backward_data", "_log_softmax"], tol=16,
   scale=lambda m: m.flip(1).abs() + (torch.log_softmax(m, 1).exp() * (1 + torch.log_softmax(m, 1).abs()))
   * m.flip(1).sum(1, keepdim=True).abs())

# Normalization: each row is a channel (batch norm), a normalized row (layer norm) or a group. The
# results are (x - mean) * rstd * w + b, which CPU eager computes as x * (rstd * w) + (b - mean * rstd * w):
# ulps of (|x| + |mean|) * rstd * |w| + |b|.
def norm_scale(x, w=None, b=None, rm=None, rv=None):
    """x: [groups, n] (statistics per row), or given running stats."""
    mean = x.mean(1, keepdim=True) if rm is None else rm.view(-1, 1)
    var = x.var(1, unbiased=False, keepdim=True) if rv is None else rv.view(-1, 1)
    s = (x.abs() + mean.abs()) / (var + 1e-5).sqrt()
    if w is not None:
        s = s * w.abs()
    return s if b is None else s + b.abs()


op("batch_norm_train", lambda m: F.batch_norm(m.unsqueeze(0), None, None, training=True), "norm",
   ["native_batch_norm", "_native_batch_norm_legit.no_stats"], tol=16, scale=norm_scale)
op("batch_norm_train_stats",
   lambda m: (lambda rm, rv: (F.batch_norm(m.unsqueeze(0), rm, rv, m[:, 0], m[:, 1], training=True), rm, rv))(
       m[:, 2].clone(), m[:, 3].abs().clone()), "norm", ["_native_batch_norm_legit", "native_batch_norm"], tol=16,
   scale=lambda m: norm_scale(m, m[:, :1], m[:, 1:2]))
op("batch_norm_eval", lambda m: F.batch_norm(m.unsqueeze(0), m[:, 2], m[:, 3].abs(), m[:, 0], m[:, 1]), "norm",
   ["_native_batch_norm_legit_no_training"], tol=16,
   scale=lambda m: norm_scale(m, m[:, :1], m[:, 1:2], m[:, 2], m[:, 3].abs()))
op("layer_norm", lambda m: F.layer_norm(m, (8,)), "norm", "native_layer_norm", tol=16, scale=norm_scale)
op("layer_norm_affine", lambda m: F.layer_norm(m, (8,), m[0], m[1]), "norm", "native_layer_norm", tol=16,
   scale=lambda m: norm_scale(m, m[0], m[1]))
op("group_norm", lambda m: F.group_norm(m.unsqueeze(0), m.shape[0]), "norm", "native_group_norm", tol=16,
   scale=norm_scale)
op("group_norm_affine", lambda m: F.group_norm(m.view(2, -1, 8), 2, m[:, 0].view(-1)[: m.shape[0] // 2],
                                                   m[:, 1].view(-1)[: m.shape[0] // 2]),
   "norm", "native_group_norm", tol=16,
   scale=lambda m: norm_scale(m.reshape(2, -1), None, None).view(2, -1, 8)
   * m[:, 0][: m.shape[0] // 2].abs().view(1, -1, 1) + m[:, 1][: m.shape[0] // 2].abs().view(1, -1, 1))



# The saved statistics and reserve buffer these return are backward helpers whose dtype and shape
# differ between torch's own CPU and Meta kernels (float32 stats for half inputs on Meta, empty ones
# without running stats on CPU; see openreg_tests/test_ops.py): only the output and the running
# statistics are compared.
def bn_with_update(m):
    rm, rv = m[:, 2].clone(), m[:, 3].abs().clone()
    out = aten._batch_norm_with_update(m.unsqueeze(0), m[:, 0], m[:, 1], rm, rv, 0.1, 1e-5)
    return out[0], rm, rv


op("batch_norm_with_update", bn_with_update, "norm", "_batch_norm_with_update", tol=16,
   scale=lambda m: norm_scale(m, m[:, :1], m[:, 1:2]))
op("batch_norm_no_update",
   lambda m: aten._batch_norm_no_update(m.unsqueeze(0), m[:, 0], m[:, 1], m[:, 2], m[:, 3].abs(), 0.1, 1e-5)[0],
   "norm", "_batch_norm_no_update", tol=16,
   scale=lambda m: norm_scale(m, m[:, :1], m[:, 1:2], m[:, 2], m[:, 3].abs()))


def finite_max(m):
    f = m[torch.isfinite(m)].abs()
    return f.max() if f.numel() else m.new_zeros(())


def norm_grads(forward):
    """Gradients of sum(forward(x) * g) for x = m, g = m.flip(1): the normalization's backward."""
    def fn(m):
        x = m.detach().requires_grad_()
        w = m[:, 0].detach().clone().requires_grad_()
        y = forward(x, w)
        y.backward(m.flip(-1).reshape(y.shape))
        return x.grad, w.grad
    return fn


# Normalization backward: its formulas subtract means of the gradient (cancelling), scaled by rstd.
op("layer_norm_backward", norm_grads(lambda x, w: F.layer_norm(x, (8,), w[:8])),
   "norm", "native_layer_norm_backward", tol=64, scale=lambda m: norm_scale(m) * (finite_max(m) + 1))
op("group_norm_backward", norm_grads(lambda x, w: F.group_norm(x.unsqueeze(0), x.shape[0], w)), "norm",
   "native_group_norm_backward", tol=64, scale=lambda m: norm_scale(m) * (finite_max(m) + 1))
op("batch_norm_backward", norm_grads(lambda x, w: F.batch_norm(x.unsqueeze(0), None, None, w, training=True)),
   "norm", ["native_batch_norm_backward", "batch_norm_backward"], tol=64,
   scale=lambda m: norm_scale(m) * (finite_max(m) + 1))

# Fills, zeroing and copies of extremal values.
op("fill_scalar", lambda x, s: x.clone().fill_(s), "scalar", ["fill.Scalar", "clone"], exact=True,
   bool_scalars=True, stores_scalar=True)
op("fill_tensor", lambda x: x.clone().fill_(x[3]), "unary", ["fill.Tensor", "clone"], exact=True)
op("zero", lambda x: x.clone().zero_(), "unary", "zero", exact=True)
# Mean squared error and its backward (elementwise, then a reduction).
op("mse_loss", lambda a, b: (F.mse_loss(a, b), F.mse_loss(a, b, reduction="sum"), F.mse_loss(a, b, reduction="none")),
   "binary", "mse_loss", tol=16, scale=lambda a, b: (a - b) ** 2)
op("mse_loss_backward", lambda g, a: aten.mse_loss_backward(g, a, a.flip(0), 1), "binary", "mse_loss_backward",
   tol=4)


# More pointwise ops and special functions (lowering/special.cc).
def nonzero_ints(x):
    """Integer division by zero raises on CPU (see nonzero_divisor); bools divide as integers."""
    return (x,) if x.dtype.is_floating_point else (x[x != 0],)


def shift_amounts(a, b):
    """Shift amounts from -2 to 70 (every in-range amount and past each width), each with every a."""
    if a.dtype.is_floating_point:
        return a, b
    v = vec(a.dtype)
    n = torch.arange(-2, 71 if a.dtype != torch.uint8 else 9)
    if a.dtype == torch.uint8:
        n = n.clamp(min=0)
    return v.repeat_interleave(len(n)), n.repeat(len(v)).to(a.dtype)


def lcm_domain(a, b):
    """CPU eager's gcd(iinfo.min, odd) is -1 for int32/int64 (|min| overflows), and its lcm then
    divides min by -1: SIGFPE. Such pairs are left out."""
    if a.dtype in (torch.int32, torch.int64):
        keep = ~((a == torch.iinfo(a.dtype).min) & (torch.gcd(a, b) == -1))
        return a[keep], b[keep]
    return a, b


def small_q(x, q):
    """Hurwitz zeta's q: CPU's direct sum runs until q + k > 9, for each element (a q of -1e30 that
    is not an integer would take ~1e30 steps on both sides)."""
    if not x.dtype.is_floating_point:
        return x, q
    keep = ~((q < -1000) & (q != q.floor()))
    return x[keep], q[keep]


op("signbit", torch.signbit, "unary", "signbit", exact=True)
op("copysign", torch.copysign, "binary", "copysign.Tensor", exact=True)
op("copysign_scalar", lambda x, s: torch.copysign(x, s), "scalar", "copysign.Tensor", exact=True)
op("heaviside", torch.heaviside, "binary", "heaviside", exact=True)
op("nextafter", torch.nextafter, "binary", "nextafter", exact=True)
op("frexp", torch.frexp, "unary", "frexp.Tensor", exact=True)
op("fmax", torch.fmax, "binary", "fmax", exact=True, signed_zeros=False)
op("fmin", torch.fmin, "binary", "fmin", exact=True, signed_zeros=False)
op("floor_divide", torch.floor_divide, "binary", "floor_divide", domain=nonzero_divisor)
op("floor_divide_scalar", lambda x: (x // 3, x // -2, x // 0.5, aten.floor_divide.Scalar(x, 7)), "unary",
   "floor_divide")
op("remainder_scalar_tensor", lambda x: (torch.remainder(5, x), torch.remainder(-2.5, x)), "unary",
   "remainder.Scalar_Tensor", domain=nonzero_ints)
# max(a, b) + log1p(exp(-|a - b|)) cancels for negative results: ulps of max(a, b).
op("logaddexp", torch.logaddexp, "binary", "logaddexp", tol=2, scale=lambda a, b: torch.maximum(a, b))
op("logaddexp2", torch.logaddexp2, "binary", "logaddexp2", tol=2, scale=lambda a, b: torch.maximum(a, b))
op("xlogy", torch.xlogy, "binary", "xlogy.Tensor", tol=2)
op("xlogy_scalar", lambda x, s: torch.xlogy(s, x), "scalar", "xlogy.Tensor", tol=2)
op("xlog1py", torch.special.xlog1py, "binary", "special_xlog1py", tol=2)
op("sinc", torch.sinc, "unary", "sinc", tol=2)
op("round_decimals", lambda x: (torch.round(x, decimals=2), torch.round(x, decimals=-1)), "unary",
   "round.decimals", exact=True)
op("hypot", torch.hypot, "binary", "hypot", tol=1)
op("logit", lambda x: (torch.logit(x), torch.logit(x, 0.25)), "unary", "logit", tol=2)
op("logit_backward", lambda g, x: (aten.logit_backward(g, x), aten.logit_backward(g, x, 0.25)), "binary",
   "logit_backward", tol=2)
op("gcd", torch.gcd, "binary", "gcd", exact=True)
op("lcm", torch.lcm, "binary", "lcm", exact=True, domain=lcm_domain)
op("lshift", lambda a, b: (a << b, torch.bitwise_left_shift(a, b)), "binary",
   ["__lshift__.Tensor", "bitwise_left_shift.Tensor"], exact=True, domain=shift_amounts)
op("rshift", lambda a, b: (a >> b, torch.bitwise_right_shift(a, b)), "binary",
   ["__rshift__.Tensor", "bitwise_right_shift.Tensor"], exact=True, domain=shift_amounts)
op("shift_scalar", lambda x: (x << 3, x >> 3, x << 70, x >> 70), "unary", ["__lshift__.Scalar", "__rshift__.Scalar"],
   exact=True)
op("erfc", torch.erfc, "unary", "erfc", tol=4)
op("erfcx", torch.special.erfcx, "unary", "special_erfcx", tol=4)
op("ndtri", torch.special.ndtri, "unary", "special_ndtri", tol=4)
op("entr", torch.special.entr, "unary", "special_entr", tol=2)
op("zeta", torch.special.zeta, "binary", "special_zeta", tol=8, domain=small_q)
for _n in range(4):
    op(f"polygamma_{_n}", lambda x, n=_n: torch.polygamma(n, x), "unary", "polygamma", tol=8, atol_eps=8)
op("i0", torch.i0, "unary", "i0", tol=4)
op("i0e", torch.special.i0e, "unary", "special_i0e", tol=4)
op("i1", torch.special.i1, "unary", "special_i1", tol=4)
op("i1e", torch.special.i1e, "unary", "special_i1e", tol=4)


OPS_BY_NAME = {o.name: o for o in OPS}
assert len(OPS_BY_NAME) == len(OPS)


# ---------------------------------------------------------------------------------- checks

EPS = {torch.float16: 2.0 ** -10, torch.bfloat16: 2.0 ** -7, torch.float32: 2.0 ** -23, torch.float64: 2.0 ** -52}
HALF_TYPES = (torch.float16, torch.bfloat16)


def tolerance(o, dtype, scale):
    """(rtol, atol) for op `o`'s results of `dtype`: o.tol ulps (1 for half types, which both sides
    compute in float32 and round once), plus o.tol ulps of `scale` (the size of the terms that cancel
    in formulas like gelu's x * (1 + erf(x))) and o.atol_eps ulps of 1 (special functions near their
    zeros)."""
    if o.exact:
        return 0.0, 0.0
    eps, n = EPS[dtype], (1 if dtype in HALF_TYPES else o.tol)
    atol = n * torch.finfo(dtype).tiny + o.atol_eps * eps
    if scale is not None:
        atol = atol + n * eps * scale
    return n * eps, atol


FTZ_TYPES = (torch.bfloat16, torch.float32, torch.float64)


def ftz(x):
    """x with denormals replaced by zeros of the same sign, as XLA:CPU reads them (DAZ). bfloat16
    shares float32's exponent range; float16 computes in float32, where its denormals are normal."""
    if isinstance(x, (list, tuple)):
        return type(x)(ftz(v) for v in x)
    if not isinstance(x, torch.Tensor) or x.dtype not in FTZ_TYPES:
        return x
    tiny = torch.finfo(x.dtype).tiny
    return torch.where((x.abs() < tiny) & (x != 0), torch.zeros_like(x).copysign(x), x)


@contextlib.contextmanager
def flush_denormals():
    """CPU eager in XLA:CPU's floating-point environment (MXCSR DAZ and FTZ, this thread only)."""
    assert torch.set_flush_denormal(True)
    try:
        yield
    finally:
        torch.set_flush_denormal(False)


def _matches(a, e, o, scale=None):
    """Elementwise: pjrt value `a` is CPU's `e` (NaN where NaN, the same infinities, equal or within
    tolerance, the same signed zeros). For float32/float64/bfloat16, values below the smallest
    normal count as zeros of either sign: XLA:CPU flushes them."""
    if not e.dtype.is_floating_point:
        return a == e
    rtol, atol = tolerance(o, e.dtype, scale)
    a64, e64 = a.double(), e.double()
    flushed = torch.zeros_like(a64, dtype=torch.bool)
    if e.dtype in FTZ_TYPES:
        tiny = torch.finfo(e.dtype).tiny
        a_den, e_den = (a64.abs() < tiny) & (a64 != 0), (e64.abs() < tiny) & (e64 != 0)
        flushed = a_den | e_den
        a64 = torch.where(a_den, torch.zeros_like(a64), a64)
        e64 = torch.where(e_den, torch.zeros_like(e64), e64)
    diff = (a64 - e64).abs()
    ok = (a64 == e64) | (torch.isnan(a64) & torch.isnan(e64)) | (diff <= atol + rtol * e64.abs())
    if o.signed_zeros:
        ok &= ~((a64 == 0) & (e64 == 0) & ~flushed & (torch.signbit(a64) != torch.signbit(e64)))
    return ok


def _tree(x):
    return torch.utils._pytree.tree_leaves(x)


def references(o, cpu_args):
    """CPU eager's answers beyond the plain call, each an acceptable result elementwise (generated
    lazily, only while mismatches remain):
    - in XLA:CPU's floating-point environment: denormal inputs flushed, DAZ/FTZ set (intermediate
      denormals become zeros: exp(-100.0f) is 0, so inf * exp(-100) is NaN);
    - for float16/bfloat16, computed in float32 (torch's opmath type, what pjrt computes in) and
      rounded once; CPU eager rounds intermediates to the half type in some kernels (sigmoid_backward's
      g * (1 - y) overflows float16) and its paths disagree (log_softmax over the last dim);
    - for elementwise ops, element by element: CPU eager's scalar code path, which handles some
      cases differently from its vectorized path (gelu(inf), NaN in activation backward formulas,
      half-precision rounding divisions, fmod with an overflowing quotient, sinh/cosh near overflow)
      and which is what CPU eager computes for tensors of fewer than 8 elements;
    - o.alt: an op-specific alternative (documented at the op)."""
    floats = any(a.dtype.is_floating_point for a in cpu_args)
    flushed = [ftz(a) for a in cpu_args]
    if floats:
        with flush_denormals():
            yield run(o, flushed)
    half = [a.dtype for a in cpu_args if a.dtype in HALF_TYPES]
    if half:
        up = run(o, [a.float() if a.dtype in HALF_TYPES else a for a in cpu_args])
        yield torch.utils._pytree.tree_map(lambda t: t.to(half[0]) if isinstance(t, torch.Tensor) and t.dtype == torch.float32 else t, up)
    if o.kind in ("unary", "binary", "ternary", "scalar"):
        def scalar_path(args):
            n = args[0].shape[0]
            parts = [run(o, [a[i:i + 1] for a in args]) for i in range(n)]
            return torch.utils._pytree.tree_map(lambda *ts: torch.cat(ts), *parts) if n else run(o, args)
        yield scalar_path(cpu_args)
        if floats:
            with flush_denormals():
                yield scalar_path(flushed)
    if o.alt is not None:
        yield o.alt(*cpu_args)


def assert_same(actual, expected, o, what, more=(), scale=None):
    """`actual` (pjrt) against `expected` (CPU eager): structure, dtypes, shapes, then values; an
    element may match any of the `more` references instead (see references())."""
    actual, expected = _tree(actual), _tree(expected)
    assert len(actual) == len(expected), f"{what}: {len(actual)} results, CPU {len(expected)}"
    for i, (a, e) in enumerate(zip(actual, expected)):
        if not isinstance(e, torch.Tensor):
            assert a == e, f"{what}[{i}]: {a!r} != {e!r}"
            continue
        assert isinstance(a, torch.Tensor) and a.device.type == "pjrt", f"{what}[{i}]: {a!r}"
        assert a.dtype == e.dtype, f"{what}[{i}]: dtype {a.dtype} != {e.dtype}"
        assert a.shape == e.shape, f"{what}[{i}]: shape {tuple(a.shape)} != {tuple(e.shape)}"
    actual = [a.cpu() if isinstance(a, torch.Tensor) else a for a in actual]
    scales = [scale.reshape(e.shape) if scale is not None and isinstance(e, torch.Tensor)
              and scale.numel() == e.numel() else None for e in expected]
    oks = [_matches(a, e, o, sc) if isinstance(e, torch.Tensor) else None
           for a, e, sc in zip(actual, expected, scales)]
    refs = iter(more)
    while not all(ok is None or bool(ok.all()) for ok in oks):
        ref = next(refs, None)
        if ref is None:
            break
        for i, r in enumerate(_tree(ref)):
            if oks[i] is not None:
                oks[i] |= _matches(actual[i], r, o, scales[i])
    for i, (a, e, ok) in enumerate(zip(actual, expected, oks)):
        if ok is None or bool(ok.all()):
            continue
        bad = (~ok).nonzero()[:10].tolist()
        detail = ", ".join(f"{tuple(j)}: pjrt {a[tuple(j)].item()!r} cpu {e[tuple(j)].item()!r}" for j in bad)
        raise AssertionError(f"{what}[{i}]: {int((~ok).sum())} of {ok.numel()} elements differ from CPU eager: "
                             f"{detail}")


def inputs_for(o, dtype):
    if o.kind == "unary":
        return list(o.domain(vec(dtype))) if o.domain else [vec(dtype)]
    if o.kind == "binary":
        a, b = cartesian(dtype)
        if o.domain:
            a, b = o.domain(a, b)
        return [a, b]
    if o.kind == "ternary":
        a, b, c = triples(dtype)
        if o.domain:
            a, b, c = o.domain(a, b, c)
        return [a, b, c]
    if o.kind == "scalar":
        return [vec(dtype)]
    if o.kind == "rows":
        return [rows(dtype)]
    if o.kind == "each":
        return [r.clone() for r in rows(dtype).unbind(0)]
    if o.kind == "norm":
        return [rows(dtype, tiny_row=False)]
    raise ValueError(o.kind)


def run(o, args):
    """o's results for `args`. Calls that differ only in a value (a Python scalar, the row reduced)
    run one by one on pjrt, each synchronized: they are then one compiled graph run many times, where
    traced together they would be one graph of many ops to compile (compiling dominates this file's
    run time)."""
    on_pjrt = args[0].device.type == "pjrt"
    if o.kind == "scalar":
        calls = [lambda s=s: o.fn(args[0], s) for s in python_scalars(o, args[0].dtype)]
    elif o.kind == "each":
        calls = [lambda r=r: o.fn(r) for r in args]
    else:
        return o.fn(*args)
    out = []
    for call in calls:
        out.append(call())
        if on_pjrt:
            torch.pjrt.synchronize()
    return out


def to_pjrt(args):
    return [a.to("pjrt") for a in args]


def sync(out):
    return torch.utils._pytree.tree_map(lambda t: t.cpu() if isinstance(t, torch.Tensor) else t, out)


def check_op(o, dtype, cpu_args):
    """Runs `o` on CPU and pjrt: the same exception type, or the same results and no fallback."""
    try:
        expected = run(o, cpu_args)
        cpu_error = None
    except Exception as e:  # noqa: BLE001 - any CPU error must be matched by type
        cpu_error = e
    if cpu_error is not None:
        with pytest.raises(type(cpu_error)):
            sync(run(o, to_pjrt(cpu_args)))
        return
    torch.pjrt.metrics.reset()
    actual = run(o, to_pjrt(cpu_args))
    fallbacks = torch.pjrt.metrics.fallbacks()
    scale = o.scale(*[a.double() for a in cpu_args]).abs() if o.scale is not None else None
    assert_same(actual, expected, o, f"{o.name}[{NAME.get(dtype, dtype)}]", references(o, cpu_args), scale)
    assert fallbacks == {}, f"fell back to the CPU: {fallbacks}"


def params():
    out = []
    for o in OPS:
        for dtype in ALL:
            out.append(pytest.param(o.name, dtype, id=f"{o.name}-{NAME[dtype]}"))
    return out


@pytest.fixture(autouse=True, scope="module")
def _quiet():
    torch.pjrt.set_fallback_warnings(False)
    yield
    torch.pjrt.set_fallback_warnings(True)


@pytest.mark.parametrize("name,dtype", params())
def test_extremal(name, dtype):
    o = OPS_BY_NAME[name]
    check_op(o, dtype, inputs_for(o, dtype))


# Lowered schemas outside this file's categories (elementwise, reductions, scans, normalization),
# covered by tests/test_lowerings.py and the fuzzer (tests/test_fuzz.py).
OTHER_CATEGORIES = {
    "linear algebra": ["mm", "addmm", "addmv", "baddbmm", "bmm", "mv", "dot"],
    # tests/test_lowerings_algebra.py: factorizations, solves and FFTs against CPU eager, with
    # singular and non-positive-definite inputs; complex numbers with extremal parts.
    "factorizations and solves": ["linalg_cholesky_ex", "cholesky_inverse", "_cholesky_solve_helper",
                                  "linalg_solve_triangular", "triangular_solve", "linalg_lu_factor_ex", "linalg_lu",
                                  "lu_unpack", "linalg_lu_solve", "_linalg_solve_ex", "linalg_inv_ex",
                                  "linalg_householder_product", "linalg_qr", "_linalg_eigh", "linalg_matrix_exp",
                                  "linalg_cross", "vdot", "geqrf", "ormqr"],
    "fft": ["_fft_r2c", "_fft_c2c", "_fft_c2r"],
    "complex numbers": ["complex", "polar", "_conj_physical"],
    "convolution and pooling": ["convolution_overrideable", "convolution_backward_overrideable", "avg_pool2d",
                                "avg_pool2d_backward", "max_pool2d_with_indices", "max_pool2d_with_indices_backward",
                                "_adaptive_avg_pool2d", "_adaptive_avg_pool2d_backward"],
    "indexing and layout": ["cat", "index.Tensor", "_unsafe_index.Tensor", "index_put", "_index_put_impl",
                            "index_select", "gather", "scatter.src", "scatter.value", "scatter.reduce",
                            "scatter.value_reduce", "scatter_add", "flip", "roll", "repeat", "tril", "triu",
                            "constant_pad_nd", "embedding_dense_backward", "arange.start_out"],
    # tests/test_lowerings_nn_factories.py runs these with NaN, +-inf and +-0 inputs (shrinks,
    # log-sigmoid, glu, prelu, the regression losses, cdist/pdist, addbmm's ignored NaN); factories,
    # narrow_copy and the norm overloads (which route to linalg_vector_norm, covered above) have
    # no extremal inputs of their own.
    "activations, losses, distances, factories": [
        "hardshrink", "hardshrink_backward", "softshrink", "softshrink_backward", "log_sigmoid_forward",
        "log_sigmoid_backward", "glu", "glu_backward", "_prelu_kernel", "_prelu_kernel_backward",
        "smooth_l1_loss", "smooth_l1_loss_backward", "huber_loss", "huber_loss_backward", "_cdist_forward",
        "_cdist_backward", "_pdist_forward", "_pdist_backward", "addbmm", "renorm", "norm.Scalar",
        "norm.ScalarOpt_dim", "norm.ScalarOpt_dim_dtype", "norm.ScalarOpt_dtype", "linspace.out",
        "logspace.out", "eye.out", "eye.m_out", "_efficientzerotensor", "narrow_copy", "threshold", "trace",
        "special_log_ndtr", "unfold_backward", "multi_margin_loss", "multi_margin_loss_backward",
        # igamma/igammac and airy_ai on grids with 0, +-inf, negatives and NaN; multilabel margin
        # and hash_tensor on inputs with NaN and infinities.
        "igamma", "igammac", "special_airy_ai", "multilabel_margin_loss_forward", "multilabel_margin_loss_backward",
        "hash_tensor",
        # The orthogonal polynomials: NaN x, NaN/inf/huge degrees in test_orthogonal_polynomials.
        *["special_" + p for p in ["chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v",
                                   "chebyshev_polynomial_w", "shifted_chebyshev_polynomial_t",
                                   "shifted_chebyshev_polynomial_u", "shifted_chebyshev_polynomial_v",
                                   "shifted_chebyshev_polynomial_w", "hermite_polynomial_h", "hermite_polynomial_he",
                                   "laguerre_polynomial_l", "legendre_polynomial_p"]],
        # torch.special's Bessel functions: NaN, +-inf and every branch point in test_bessel_functions.
        *["special_" + b for b in ["bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1", "modified_bessel_i0",
                                   "modified_bessel_i1", "modified_bessel_k0", "modified_bessel_k1",
                                   "scaled_modified_bessel_k0", "scaled_modified_bessel_k1", "spherical_bessel_j0"]],
        "nonzero_static",  # NaN counts as nonzero: test_nonzero_static_needs_no_sync
        # Gathers and sums of rows: nothing extremal of their own (tests: test_embedding_bag*).
        "_embedding_bag", "_embedding_bag_forward_only", "_embedding_bag_dense_backward",
        "_embedding_bag_per_sample_weights_backward",
        # NaN input is an error here, as on the CPU (tests/test_lowerings_nn_factories.py).
        "binary_cross_entropy", "binary_cross_entropy_backward"],
    "classification losses": ["nll_loss_forward", "nll_loss2d_forward", "nll_loss_backward", "nll_loss2d_backward"],
    "recurrent cells and layers": ["_thnn_fused_lstm_cell", "_thnn_fused_lstm_cell_backward_impl",
                                   "_thnn_fused_gru_cell", "_thnn_fused_gru_cell_backward", "mkldnn_rnn_layer",
                                   "mkldnn_rnn_layer_backward"],
    # tests/test_random.py checks their distributions.
    "random numbers": ["uniform", "normal_functional", "normal.Tensor_float", "normal.float_Tensor",
                       "normal.Tensor_Tensor", "log_normal", "exponential", "geometric", "cauchy", "bernoulli",
                       "bernoulli.p", "bernoulli.Tensor", "random", "random.from", "random.to",
                       "randperm.generator_out", "multinomial", "native_dropout", "native_dropout_backward"],
    # tests/test_lowerings_sorting.py (with NaN, infinities, signed zeros and out-of-range indices).
    "search, scatter reductions and masked/indexed writes": [
        "searchsorted.Tensor", "searchsorted.Scalar", "bucketize.Tensor", "bucketize.Scalar", "isin.Tensor_Tensor",
        "isin.Tensor_Scalar", "isin.Scalar_Tensor", "histc", "scatter_reduce.two", "index_reduce", "index_add",
        "index_copy", "index_fill.int_Scalar", "index_fill.int_Tensor", "masked_scatter", "masked_scatter_backward",
        "take", "put", "cumprod_backward"],
    # tests/test_optim_native.py and tests/test_amp_and_checkpoints.py.
    "optimizers and gradient scaling": ["_fused_adam", "_fused_adam.tensor_lr", "_fused_adamw",
                                        "_fused_adamw.tensor_lr", "_fused_sgd", "_fused_sgd.tensor_lr",
                                        "_fused_adagrad", "_amp_foreach_non_finite_check_and_unscale",
                                        "_amp_update_scale"],
    # Padding, pooling, upsampling and sampling: tests/test_lowerings_spatial.py runs them with NaN and
    # infinite inputs (all -inf windows, NaN in windows).
    "spatial": [
    '_adaptive_avg_pool3d', '_adaptive_avg_pool3d_backward', '_upsample_bicubic2d_aa',
    '_upsample_bicubic2d_aa_backward', '_upsample_bilinear2d_aa', '_upsample_bilinear2d_aa_backward',
    '_upsample_nearest_exact1d', '_upsample_nearest_exact1d_backward', '_upsample_nearest_exact2d',
    '_upsample_nearest_exact2d_backward', '_upsample_nearest_exact3d', '_upsample_nearest_exact3d_backward',
    'adaptive_max_pool2d', 'adaptive_max_pool2d_backward', 'adaptive_max_pool3d',
    'adaptive_max_pool3d_backward', 'avg_pool3d', 'avg_pool3d_backward', 'channel_shuffle', 'col2im',
    'fractional_max_pool2d', 'fractional_max_pool2d_backward', 'fractional_max_pool3d',
    'fractional_max_pool3d_backward', 'grid_sampler_2d', 'grid_sampler_2d_backward', 'grid_sampler_3d',
    'grid_sampler_3d_backward', 'im2col', 'max_pool3d_with_indices', 'max_pool3d_with_indices_backward',
    'max_unpool2d', 'max_unpool3d', 'reflection_pad1d', 'reflection_pad1d_backward', 'reflection_pad2d',
    'reflection_pad2d_backward', 'reflection_pad3d', 'reflection_pad3d_backward', 'replication_pad1d',
    'replication_pad1d_backward', 'replication_pad2d', 'replication_pad2d_backward', 'replication_pad3d',
    'replication_pad3d_backward', 'upsample_bicubic2d', 'upsample_bicubic2d_backward', 'upsample_bilinear2d',
    'upsample_bilinear2d_backward', 'upsample_linear1d', 'upsample_linear1d_backward', 'upsample_nearest1d',
    'upsample_nearest1d_backward', 'upsample_nearest2d', 'upsample_nearest2d_backward', 'upsample_nearest3d',
    'upsample_nearest3d_backward', 'upsample_trilinear3d', 'upsample_trilinear3d_backward',
    ],
}
# List ops apply an op lowered (and covered) above to each element (lowering/foreach.cc).
OTHER_PREFIXES = ("_foreach_",)


def test_every_lowered_op_is_covered():
    """Every lowered schema is reached by an op here, or belongs to one of OTHER_CATEGORIES: a new
    elementwise, reduction, scan or normalization lowering must get extremal-value coverage."""
    import torch_pjrt
    lowered = set(torch_pjrt._C._lowered_ops())
    covered = {s for o in OPS for s in o.schemas}
    other = {s for names in OTHER_CATEGORIES.values() for s in names}
    other |= {s for s in lowered if s.startswith(OTHER_PREFIXES)}
    assert covered <= lowered, f"not lowered (stale names): {sorted(covered - lowered)}"
    assert not lowered - covered - other, f"lowered but not covered: {sorted(lowered - covered - other)}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=NAME.get)
def test_layer_norm_of_a_row_whose_variance_overflows(dtype):
    """A row of finite values whose variance overflows the dtype: CPU eager's vectorized loop (rows
    of a vector or more) gives a rstd of 0 and zeros, its scalar loop (shorter rows) NaN; pjrt gives
    zeros at every length, as the vectorized loop does (the fuzzer keeps such groups out of its
    normalizations: fuzz_programs.spread_groups)."""
    big = 1e30 if dtype == torch.float32 else 1e200
    for n in (3, 16):
        x = torch.ones(2, n, dtype=dtype)
        x[:, 1] = big
        got = F.layer_norm(x.to("pjrt"), (n,)).cpu()
        assert torch.equal(got, torch.zeros_like(x)), (n, got)
        if n == 16:
            torch.testing.assert_close(got, F.layer_norm(x, (n,)))


def test_half_precision_convolution_beside_a_nan():
    """CPU eager's bfloat16 conv1d writes NaN into the output left of a NaN input, whose window
    does not hold it (its float32 one does not); pjrt gives float32's result rounded (the fuzzer
    keeps NaN out of half-precision convolutions: fuzz_programs.spatial_expr)."""
    x = torch.tensor([0.25, 7.0, 7.0, 0.0, -100.0, -2.5, 3.0, NAN, 0.0, 0.5]).reshape(1, 1, -1)
    w = torch.tensor([3.0, 1.0, 1.0, 1.0, 1.0]).reshape(1, 1, 5)
    want = F.conv1d(x, w, padding=4).bfloat16()
    got = F.conv1d(x.bfloat16().to("pjrt"), w.bfloat16().to("pjrt"), padding=4).cpu()
    torch.testing.assert_close(got, want, equal_nan=True)
    assert not torch.isnan(got[0, 0, 6]) and torch.isnan(got[0, 0, 7:12]).all()
