"""Random short tensor programs, run on CPU eager and on pjrt and compared.

A program is a list of Python lines over variables v0, v1, ...: inputs made by `mk(...)` (holding
NaN, infinities, signed zeros, large and extreme integer values, in contiguous, transposed, strided,
offset or expanded layouts, 0-d and 0-size shapes included), then 1-6 ops: elementwise math with
broadcasting and Python scalars, reductions and scans, views (slicing, transpose, permute, expand,
view/reshape, select, narrow, unsqueeze, diagonal), in-place updates (add_, mul_, clamp_, copy_,
fill_, zero_, indexed assignment with in-range indices, writes into views), out= writes,
torch.nn.functional ops (losses, normalizations, 1-d convolutions, pooling, interpolation) and
gradients (torch.autograd.grad of one or two differentiable ops on a float leaf). The
generator runs each line on CPU as it writes it, so it knows the shapes and dtypes it works with;
a line that raises on CPU ends the program.

`check(program)` then runs it on pjrt and compares every variable: dtype, shape, strides and
storage offset (see compare()), and values (NaN in the same places, the same infinities, integers
exactly, floats within a small tolerance). Where CPU raised, pjrt must raise the same exception type,
on that line or when its results are read (pjrt runs lazily; some checks happen when the graph is
built).

Used by tests/test_fuzz.py (hypothesis draws the choices) and tests/fuzz_sweep.py (a seeded
random.Random does): the same generator, two sources of choices.
"""
import contextlib
import math
import random
import re
import warnings

import torch
from torch._prims_common import is_non_overlapping_and_dense_or_false as is_non_overlapping_and_dense

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8]
DTYPES = [torch.float32] * 4 + [torch.float64, torch.float16, torch.bfloat16] + [torch.int64, torch.int32] + \
    INTS[2:] + [torch.bool]
NAN, INF = float("nan"), float("inf")
FLOAT_POOL = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, -3.0, 1.5, -2.5, 7.0, 0.25, 100.0, -100.0, 1e4, NAN,
              INF, -INF]
MAX_NUMEL = 256

# CPU errors that pjrt is known not to raise, each a bug outside the lowerings (in
# aten/lowered_kernel.cc, which decides at call time whether an op raises) and reported there: a line
# whose CPU error matches is dropped and another op drawn, so the fuzzer looks for new differences.
# tests/test_fuzz.py::test_known_gaps holds a strict-xfail example of each.
KNOWN_GAPS = {
    "empty reduction (IndexError)": r"Expected reduction dim \d+ to have non-zero size",
}
def int_pool(dtype):
    ii = torch.iinfo(dtype)
    return [v for v in [0, 1, -1, 2, -2, 3, -3, 7, 100, -100, ii.min, ii.max, ii.max - 1, 1000, -1000]
            if ii.min <= v <= ii.max]


def pool(dtype):
    if dtype == torch.bool:
        return [False, True]
    if dtype.is_floating_point:
        return FLOAT_POOL
    return int_pool(dtype)


def reads_itself_reordered(dest, src):
    """Whether writing `dest` in place from `src` reads memory it writes under another layout, which
    CPU eager allows (torch's get_overlap_status finds a full overlap, or cannot tell) and then
    computes in its loop order, reading elements it already wrote (v.mul_(v.mT)). Partial overlaps
    are refused by CPU eager (and by pjrt): those stay."""
    if dest.untyped_storage().data_ptr() != src.untyped_storage().data_ptr() or dest.numel() == 0 or src.numel() == 0:
        return False
    if (dest.shape, dest.stride(), dest.storage_offset()) == (src.shape, src.stride(), src.storage_offset()):
        return False
    if not (is_non_overlapping_and_dense(dest) and is_non_overlapping_and_dense(src)):
        return True
    a0, b0 = dest.data_ptr(), src.data_ptr()
    a1, b1 = a0 + dest.numel() * dest.element_size(), b0 + src.numel() * src.element_size()
    return (a0, a1) == (b0, b1)


def mk(values, shape, dtype, layout, dev):
    """A tensor of `shape` holding `values` (row-major) on `dev`, in `layout`: "c" contiguous, "t"
    transposed (last two dims swapped in memory), "s" strided (every other element of a wider
    buffer), "o" at a storage offset, "e" expanded from its first row (stride 0)."""
    shape = tuple(shape)
    src = torch.tensor(values, dtype=torch.float64 if dtype.is_floating_point else torch.int64)
    src = src.to(dtype) if dtype != torch.bool else src.bool()
    src = src.reshape(shape)
    if layout == "t" and len(shape) >= 2:
        return src.transpose(-1, -2).contiguous().to(dev).transpose(-1, -2)
    if layout == "s" and len(shape) >= 1:
        wide = torch.zeros(shape[:-1] + (2 * shape[-1],), dtype=dtype)
        wide[..., ::2] = src
        return wide.to(dev)[..., ::2]
    if layout == "o" and len(shape) >= 1:
        big = torch.zeros((shape[0] + 1,) + shape[1:], dtype=dtype)
        big[1:] = src
        return big.to(dev)[1:]
    if layout == "e" and len(shape) >= 1 and shape[0] > 1:
        return src[:1].to(dev).expand(shape)
    return src.to(dev)


# ------------------------------------------------------------------------------------ choices

class RandomDraw:
    """Choices from a seeded random.Random (tests/fuzz_sweep.py)."""

    def __init__(self, seed):
        self.rng = random.Random(seed)

    def int(self, lo, hi):
        return self.rng.randint(lo, hi)

    def choice(self, seq):
        return seq[self.rng.randrange(len(seq))]


class HypothesisDraw:
    """Choices drawn by hypothesis (tests/test_fuzz.py): shrinkable toward simpler programs."""

    def __init__(self, data):
        from hypothesis import strategies as st
        self.data, self.st = data, st

    def int(self, lo, hi):
        return self.data.draw(self.st.integers(lo, hi))

    def choice(self, seq):
        return seq[self.data.draw(self.st.integers(0, len(seq) - 1))]


# ------------------------------------------------------------------------------------ generator

UNARY = ["neg", "abs", "exp", "log", "sqrt", "sin", "cos", "tanh", "sigmoid", "floor", "ceil", "round", "trunc",
         "frac", "sign", "reciprocal", "rsqrt", "expm1", "log1p", "log2", "erf", "atan", "asinh", "relu",
         "nan_to_num", "logical_not", "bitwise_not", "isnan", "square", "exp2", "sinh", "cosh", "erfinv", "asin",
         "acos", "atanh", "acosh", "lgamma", "digamma"]
# gelu(+-inf) is NaN in CPU eager's vectorized kernel and +-inf in its scalar one (and pjrt):
# infinities are kept out of the exact gelu (test_extremal checks it against both paths).
# hardtanh's gradient at NaN is 0 in CPU eager's vectorized kernel and the incoming gradient in its
# scalar one (and CUDA's, and pjrt's; seed 1843096): NaN is kept out of it, as out of the shrinks.
ACTIVATIONS = ["F.gelu({x}.nan_to_num(nan=NAN, posinf=1e4, neginf=-1e4))", "F.gelu({x}, approximate='tanh')", "F.silu({x})", "F.mish({x})", "F.elu({x})",
               "F.leaky_relu({x}, 0.2)", "F.softplus({x})", "F.hardtanh({x}.nan_to_num(nan=7.0, posinf=INF, neginf=-INF))",
               "F.hardsigmoid({x})",
               "F.hardswish({x})", "F.selu({x})"]
# elu's, selu's and hardswish's gradients at NaN are NaN in CPU eager's vectorized kernels and the
# incoming gradient in their scalar tails (and CUDA's, and pjrt's; seeds 5042191 and 5042697 with
# --focus grad,nn): gradients through them see no NaN (their forwards still do).
NAN_SPLIT_GRADIENTS = ("F.elu(", "F.selu(", "F.hardswish(")
BINARY = ["add", "sub", "mul", "div", "maximum", "minimum", "atan2", "pow", "eq", "ne", "lt", "le", "gt", "ge",
          "logical_and", "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor", "remainder",
          "fmod", "floor_divide"]
# Less common binary ops (their own kind, so that the main table keeps its weight) and ternary ones.
MORE_BINARY = ["fmax", "fmin", "copysign", "hypot", "logaddexp", "logaddexp2", "xlogy", "heaviside", "nextafter"]
TERNARY = ["clamp", "lerp", "addcmul", "addcdiv"]
SCALAR_OPS = ["+", "-", "*", "/", "**", "==", "<", ">=", "//", "%"]
REDUCTIONS = ["sum", "mean", "amax", "amin", "prod", "var", "std", "logsumexp", "any", "all", "argmax", "argmin",
              "max", "min", "cumsum", "softmax", "log_softmax", "norm", "nansum_like"]
SCALARS = [0, 1, -1, 2, 3, -2, 0.5, -0.0, 2.5, 1e4, NAN, INF, -INF, True, False, 100, -7]
# Gradients (the grad kind): differentiable ops whose backward formulas run as lowered ops.
GRAD_UNARY = ["neg", "abs", "exp", "log", "sqrt", "sin", "cos", "tanh", "sigmoid", "reciprocal", "rsqrt", "expm1",
              "log1p", "log2", "erf", "atan", "asinh", "relu", "square", "exp2", "sinh", "cosh", "erfinv", "asin",
              "acos", "atanh", "acosh", "lgamma", "digamma", "sign", "floor", "frac", "trunc", "nan_to_num",
              "logit", "sinc", "erfc", "deg2rad", "log10", "tan"]
GRAD_BINARY = ["add", "sub", "mul", "div", "pow", "atan2", "maximum", "minimum", "hypot", "xlogy", "fmax", "fmin",
               "copysign", "logaddexp", "logaddexp2", "remainder", "fmod"]
GRAD_REDUCTIONS = ["sum", "mean", "amax", "amin", "prod", "var", "std", "logsumexp", "norm", "softmax",
                   "log_softmax", "cumsum", "cumprod", "logcumsumexp", "max", "min", "sort", "cummax", "nansum"]
GRAD_WEIGHTS = [1.0, -1.0, 0.5, 2.0, -0.25, 0.0, 3.0, -2.0]


class KnownGap(Exception):
    pass


class Gen:
    def __init__(self, draw, focus=()):
        self.d = draw
        self.focus = list(focus)  # op kinds drawn for half of the ops (fuzz_sweep.py --focus)
        self.lines = []
        self.ns = namespace("cpu")
        self.n = 0
        self.error = None  # (line index, exception) of the line that raised on CPU
        self.gaps = []  # known gaps met (and skipped) while generating
        self.snapshots = {}  # line index -> {variable: CPU value before the line}

    # -- helpers
    def new(self):
        name = f"v{self.n}"
        self.n += 1
        return name

    def var(self, pred=None):
        names = [k for k in self.ns if k.startswith("v") and k[1:].isdigit() and isinstance(self.ns[k], torch.Tensor)]
        names.sort(key=lambda k: int(k[1:]))
        if pred is not None:
            names = [k for k in names if pred(self.ns[k])] or names
        return self.d.choice(names)

    def t(self, name):
        return self.ns[name]

    def emit(self, line):
        """Runs `line` on CPU; a line that raises ends the program (a known gap: see KNOWN_GAPS)."""
        self.lines.append(line)
        # The values the line reads, for explained_by_inputs (later lines may write them in place).
        self.snapshots[len(self.lines) - 1] = {
            v: self.ns[v].clone() for v in re.findall(r"\bv\d+\b", line.split("=", 1)[-1])
            if isinstance(self.ns.get(v), torch.Tensor)}
        try:
            with quiet():
                exec(line, self.ns)
        except Exception as e:  # noqa: BLE001 - pjrt must raise the same type
            gap = next((k for k, p in KNOWN_GAPS.items() if re.search(p, str(e))), None)
            if gap is not None:
                self.lines.pop()
                self.gaps.append(gap)
                raise KnownGap() from None
            self.error = (len(self.lines) - 1, e)
            return False
        return True

    def shape_like(self, base):
        """A shape broadcastable with `base`: drops leading dims, sets some to 1."""
        k = self.d.int(0, len(base))
        s = list(base[len(base) - k:])
        return [1 if self.d.int(0, 3) == 0 else x for x in s]

    def scalar(self):
        return self.d.choice(SCALARS)

    def dim(self, t):
        return self.d.int(-max(t.dim(), 1), max(t.dim(), 1) - 1)

    # -- inputs
    def make_input(self, shape):
        dtype = self.d.choice(DTYPES)
        p = pool(dtype)
        n = math.prod(shape)
        values = [self.d.choice(p) for _ in range(n)]
        layout = self.d.choice(["c", "c", "c", "t", "s", "o", "e"])
        if dtype == torch.bool:
            lit = "[" + ", ".join(str(bool(v)) for v in values) + "]"
        elif dtype.is_floating_point:
            lit = "[" + ", ".join(fmt(v) for v in values) + "]"
        else:
            lit = "[" + ", ".join(str(int(v)) for v in values) + "]"
        name = self.new()
        return self.emit(f"{name} = mk({lit}, {tuple(shape)}, torch.{str(dtype)[6:]}, {layout!r}, dev)")

    # -- one op
    def op(self):
        """Emits one op (or two lines: a helper tensor and the op); False once a line raised."""
        for _ in range(8):
            mark, n = len(self.lines), self.n
            try:
                return self.one_op()
            except KnownGap:
                # Undo the op's earlier lines (a helper tensor); their variables stay but are harmless.
                del self.lines[mark:]
                for k in [f"v{i}" for i in range(n, self.n)]:
                    self.ns.pop(k, None)
                self.n = n
        return True

    def one_op(self):
        if self.focus and self.d.int(0, 1):
            return getattr(self, "op_" + self.d.choice(self.focus))()
        kind = self.d.choice(["unary", "unary", "act", "binary", "binary", "scalar", "reduce", "reduce", "view",
                              "view", "view", "inplace", "inplace", "setitem", "out", "where", "cat", "cast",
                              "index", "matmul", "clone", "more", "order", "grad", "grad", "nn"])
        return getattr(self, "op_" + kind)()

    def op_unary(self):
        x = self.var()
        return self.emit(f"{self.new()} = torch.{self.d.choice(UNARY)}({x})")

    def op_act(self):
        x = self.var(lambda t: t.is_floating_point())
        return self.emit(f"{self.new()} = " + self.d.choice(ACTIVATIONS).format(x=x))

    def int_divisor(self, b, op):
        """int32/int64 min // -1 kills CPU eager with SIGFPE, and a zero divisor raises (on pjrt
        when the graph runs; tests/test_correctness.py covers it) and would end most programs
        early: integer divisors are made >= 1."""
        if op in ("div", "remainder", "fmod", "floor_divide", "/", "//", "%"):
            return f"{b}.clamp(min=1)" if not self.t(b).is_floating_point() else b
        return b

    def op_binary(self):
        a, b = self.var(), self.var()
        op = self.d.choice(BINARY)
        ta, tb = self.t(a), self.t(b)
        if op in ("div",) and self.d.int(0, 1):
            mode = self.d.choice(["'floor'", "'trunc'"])
            b2 = f"{b}.clamp(min=1)" if not (ta.is_floating_point() or tb.is_floating_point()) else b
            return self.emit(f"{self.new()} = torch.div({a}, {b2}, rounding_mode={mode})")
        if op in ("remainder", "fmod", "floor_divide", "div") and not (ta.is_floating_point() or tb.is_floating_point()):
            b = f"{b}.clamp(min=1)"
        if op == "pow" and not (ta.is_floating_point() or tb.is_floating_point()):
            b = f"{b}.clamp(0, 70)"  # negative integer powers raise on CPU only when the exponent is a Python int
        return self.emit(f"{self.new()} = torch.{op}({a}, {b})")

    def op_more(self):
        a, b = self.var(), self.var()
        if self.d.int(0, 1):
            return self.emit(f"{self.new()} = torch.{self.d.choice(MORE_BINARY)}({a}, {b})")
        c = self.var()
        op = self.d.choice(TERNARY)
        if op == "clamp":  # tensor bounds, either may be left out
            lo, hi = self.d.choice([(b, c), (b, "None"), ("None", c)])
            return self.emit(f"{self.new()} = torch.clamp({a}, {lo}, {hi})")
        if op == "lerp":
            weight = self.d.choice([c, fmt(self.d.choice([0.0, 0.25, 0.5, 1.0, -1.5, 2.0, NAN]))])
            return self.emit(f"{self.new()} = torch.lerp({a}, {b}, {weight})")
        value = fmt(self.d.choice([1, 2, -1, 0.5, 0, -0.0, 1e4, NAN, INF]))
        return self.emit(f"{self.new()} = torch.{op}({a}, {b}, {c}, value={value})")

    def op_order(self):
        """Sorting, scans with indices, scatters with a reduction and data-dependent shapes. Sorts are
        stable (the order of ties is otherwise unspecified) and topk is compared by its values."""
        x = self.var()
        t = self.t(x)
        n = self.new()
        d = self.dim(t)
        k = self.d.choice(["sort", "argsort", "cummax", "cummin", "topk", "scatter_reduce", "take", "nonzero",
                           "masked_select", "unique", "index_put"])
        if k in ("sort", "argsort"):
            desc = self.d.choice([True, False])
            if k == "argsort":
                return self.emit(f"{n} = torch.argsort({x}, dim={d}, descending={desc}, stable=True)")
            m = self.new()
            return self.emit(f"{n}, {m} = torch.sort({x}, dim={d}, descending={desc}, stable=True)")
        if k in ("cummax", "cummin"):
            m = self.new()
            return self.emit(f"{n}, {m} = torch.{k}({x}, {d})")
        if k == "topk":
            size = t.shape[d] if t.dim() else 1
            return self.emit(f"{n} = torch.topk({x}, {self.d.int(0, size)}, dim={d}, "
                             f"largest={self.d.choice([True, False])}).values")
        if k == "nonzero":
            return self.emit(f"{n} = torch.nonzero({x})")
        if k == "masked_select":
            return self.emit(f"{n} = torch.masked_select({x}, {x} > 0)")
        if k == "unique":
            return self.emit(f"{n} = torch.unique({x}, sorted=True)")
        if t.numel() == 0:
            return self.emit(f"{n} = {x}.clone()")
        flat = [self.d.int(0, t.numel() - 1) for _ in range(self.d.int(1, 5))]
        if k == "take":
            return self.emit(f"{n} = torch.take({x}, torch.tensor({flat}, device=dev))")
        if k == "index_put":
            src = self.var()
            return self.emit(f"{n} = {x}.flatten().index_put((torch.tensor({flat}, device=dev),), "
                             f"{src}.flatten()[:1].to({x}.dtype), accumulate={self.d.choice([True, False])})"
                             if self.t(src).numel() else f"{n} = {x}.clone()")
        if t.dim() == 0:
            return self.emit(f"{n} = {x}.clone()")
        shape = list(t.shape)
        idx = [self.d.int(0, shape[d] - 1) for _ in range(math.prod(shape))]
        reduce = self.d.choice(["sum", "prod", "amax", "amin", "mean"])
        return self.emit(f"{n} = {x}.scatter_reduce({d}, torch.tensor({idx}, device=dev).view({tuple(shape)}), "
                         f"{x}.flip({d}), {reduce!r}, include_self={self.d.choice([True, False])})")

    def op_scalar(self):
        x = self.var()
        op = self.d.choice(SCALAR_OPS)
        s = self.scalar()
        t = self.t(x)
        integral = not t.is_floating_point()
        if op in ("/", "//", "%") and integral and not isinstance(s, float) and s in (0, -1, False):
            s = 3  # integer division by zero raises (test_correctness.py covers it); min // -1 is SIGFPE on CPU
        if op == "**" and integral and not isinstance(s, float) and s < 0:
            s = 2  # integers to negative integer powers raise on CPU
        if self.d.int(0, 3) == 0 and not (integral and op in ("/", "//", "%", "**")):
            return self.emit(f"{self.new()} = {fmt(s)} {op} {x}")  # the tensor on the right
        return self.emit(f"{self.new()} = {x} {op} {fmt(s)}")

    def op_reduce(self):
        x = self.var()
        t = self.t(x)
        r = self.d.choice(REDUCTIONS)
        d = self.dim(t)
        keep = self.d.choice([True, False])
        n = self.new()
        if r in ("sum", "mean", "amax", "amin", "logsumexp"):
            dims = self.d.choice([f"{d}", "()", f"({d},)", f"[{d}, {self.dim(t)}]"]) if r != "logsumexp" else f"{d}"
            if r in ("sum", "mean") and self.d.int(0, 2) == 0:
                dt = self.d.choice(["torch.float64", "torch.float32", "torch.int64"])
                if dt != "torch.int64" and not t.is_floating_point() and t.dtype != torch.bool:
                    x = f"{x}.clamp(-1000, 1000)"  # exact in float sums (see op_cast)
                if dt == "torch.int64" and t.is_floating_point():
                    x = f"{x}.nan_to_num(0.0, 100.0, -100.0).clamp(-100, 100)"  # float -> int of inf is undefined
                return self.emit(f"{n} = {x}.{r}({dims}, keepdim={keep}, dtype={dt})")
            return self.emit(f"{n} = {x}.{r}({dims}, keepdim={keep})")
        if r in ("any", "all", "prod", "argmax", "argmin"):
            if self.d.int(0, 2) == 0:
                return self.emit(f"{n} = {x}.{r}()")
            return self.emit(f"{n} = {x}.{r}({d}, keepdim={keep})")
        if r in ("max", "min"):
            if self.d.int(0, 2) == 0:
                return self.emit(f"{n} = {x}.{r}()")
            m = self.new()
            return self.emit(f"{n}, {m} = {x}.{r}({d}, keepdim={keep})")
        if r in ("var", "std"):
            c = self.d.choice([0, 1, 2])
            return self.emit(f"{n} = {x}.{r}({self.d.choice([d, None])}, correction={c}, keepdim={keep})")
        if r == "cumsum":
            return self.emit(f"{n} = {x}.cumsum({d})")
        if r in ("softmax", "log_softmax"):
            return self.emit(f"{n} = torch.{r}({x}, {d})")
        if r == "norm":
            o = self.d.choice([2, 1, 0, "float('inf')", "-float('inf')", 3])
            return self.emit(f"{n} = torch.linalg.vector_norm({x}, {o}, {self.d.choice([d, None])}, {keep})")
        return self.emit(f"{n} = {x}.nan_to_num().sum({d})")

    def op_view(self):
        x = self.var()
        t = self.t(x)
        n = self.new()
        r = t.dim()
        kinds = ["unsqueeze", "reshape", "flatten"]
        if r >= 1:
            kinds += ["slice", "slice", "narrow", "select", "flip_view", "expand", "unbind"]
        if r >= 2:
            kinds += ["transpose", "transpose", "permute", "diagonal", "t"]
        k = self.d.choice(kinds)
        d = self.d.int(0, max(r, 1) - 1)
        if k == "unsqueeze":
            return self.emit(f"{n} = {x}.unsqueeze({self.d.int(-r - 1, r)})")
        if k == "reshape":
            shapes = [[-1]]
            if t.numel() > 0:
                m = t.numel()
                shapes += [[m, 1], [1, m]] + [[a, m // a] for a in (2, 3, 4) if m % a == 0]
            s = self.d.choice(shapes)
            meth = self.d.choice(["reshape", "view"])
            return self.emit(f"{n} = {x}.{meth}({tuple(s)})")
        if k == "flatten":
            return self.emit(f"{n} = {x}.flatten()")
        size = t.shape[d]
        if k == "slice":
            start = self.d.int(0, size)
            stop = self.d.int(start, size)
            step = self.d.int(1, 3)
            idx = ", ".join([":"] * d + [f"{start}:{stop}:{step}"])
            return self.emit(f"{n} = {x}[{idx}]")
        if k == "narrow":
            start = self.d.int(0, size)
            return self.emit(f"{n} = {x}.narrow({d}, {start}, {self.d.int(0, size - start)})")
        if k == "select":
            if size == 0:
                return self.emit(f"{n} = {x}.narrow({d}, 0, 0)")
            return self.emit(f"{n} = {x}.select({d}, {self.d.int(-size, size - 1)})")
        if k == "flip_view":
            return self.emit(f"{n} = {x}.movedim({d}, -1)")
        if k == "expand":
            shape = list(t.shape)
            ones = [i for i, s in enumerate(shape) if s == 1]
            if ones:
                shape[self.d.choice(ones)] = self.d.int(0, 3)
            if self.d.int(0, 1):
                shape = [self.d.int(1, 2)] + shape
            return self.emit(f"{n} = {x}.expand({tuple(shape)})")
        if k == "unbind":
            if size == 0:
                return self.emit(f"{n} = {x}.unsqueeze(0)")
            return self.emit(f"{n} = {x}.unbind({d})[{self.d.int(0, size - 1)}]")
        if k == "transpose":
            return self.emit(f"{n} = {x}.transpose({d}, {self.d.int(-r, r - 1)})")
        if k == "permute":
            perm = list(range(r))
            for i in range(r - 1, 0, -1):
                j = self.d.int(0, i)
                perm[i], perm[j] = perm[j], perm[i]
            return self.emit(f"{n} = {x}.permute({tuple(perm)})")
        if k == "diagonal":
            return self.emit(f"{n} = {x}.diagonal({self.d.int(-1, 1)}, 0, 1)")
        return self.emit(f"{n} = {x}.t()" if r == 2 else f"{n} = {x}.mT")

    def op_inplace(self):
        x = self.var()
        t = self.t(x)
        k = self.d.choice(["add_", "mul_", "sub_", "clamp_", "copy_", "fill_", "zero_", "neg_", "div_", "view_add_",
                           "abs_", "clamp_min_"])
        if k in ("add_", "mul_", "sub_", "div_"):
            other = self.var(lambda o: not reads_itself_reordered(t, o)) if self.d.int(0, 1) else fmt(self.scalar())
            if other[:1] == "v" and reads_itself_reordered(t, self.t(other)):
                other = fmt(self.scalar())
            if k == "div_" and not t.is_floating_point() and other[:1] != "v":
                other = "2"
            if k == "div_" and other[:1] == "v" and not self.t(other).is_floating_point():
                other = f"{other}.clamp(min=1)"
            if k in ("add_", "sub_") and self.d.int(0, 3) == 0 and other[:1] == "v":
                return self.emit(f"{x}.{k}({other}, alpha={self.d.choice([2, -1, 0.5])})")
            return self.emit(f"{x}.{k}({other})")
        if k == "clamp_":
            lo, hi = sorted([self.d.choice([-2, -1, 0, 1, 2.5]), self.d.choice([-1, 0, 1, 3, 100])])
            form = self.d.choice([f"{lo}, {hi}", f"min={lo}", f"max={hi}"])
            return self.emit(f"{x}.clamp_({form})")
        if k in ("clamp_min_", "copy_"):
            src = self.var(lambda o: not reads_itself_reordered(t, o))
            if reads_itself_reordered(t, self.t(src)):
                return self.emit(f"{x}.fill_({fmt(self.scalar())})")
            if k == "clamp_min_":
                return self.emit(f"{x}.clamp_(min={src})")
            return self.emit(f"{x}.copy_({self.source_for(t, src)})")
        if k == "fill_":
            return self.emit(f"{x}.fill_({fmt(self.scalar())})")
        if k == "view_add_":
            if t.dim() >= 1 and t.shape[0] > 0:
                i = self.d.int(0, t.shape[0] - 1)
                return self.emit(f"{x}[{i}].add_({fmt(self.scalar())})")
            return self.emit(f"{x}.add_(1)")
        return self.emit(f"{x}.{k}()")

    def source_for(self, dest, src):
        """`src` as a value to store into `dest`: float values going into an integer tensor are made
        finite and in range first (float -> int of NaN, inf or out-of-range values is undefined in
        C++: CPU eager returns whatever the instruction does)."""
        if dest.dtype != torch.bool and not dest.is_floating_point() and self.t(src).is_floating_point():
            return f"{src}.nan_to_num(0.0, 100.0, -100.0).clamp(-100, 100)"
        return src

    def op_setitem(self):
        x = self.var()
        t = self.t(x)
        value = self.var(lambda o: not reads_itself_reordered(t, o)) if self.d.int(0, 1) else fmt(self.scalar())
        src = self.t(value) if value[:1] == "v" else None
        if src is not None:
            value = fmt(self.scalar()) if reads_itself_reordered(t, src) else self.source_for(t, value)
        if t.numel() == 1 and value in self.ns and isinstance(self.t(value), torch.Tensor) and \
                self.t(value).untyped_storage().data_ptr() == t.untyped_storage().data_ptr():
            value = fmt(self.scalar())  # one element onto itself: CPU raises or not by the value's rank
        if t.dim() == 0:
            return self.emit(f"{x}[...] = {value}")
        size = t.shape[0]
        k = self.d.choice(["int", "slice", "list", "mask"])
        if size == 0 or k == "slice":
            start = self.d.int(0, size)
            return self.emit(f"{x}[{start}:{self.d.int(start, size)}] = {value}")
        if k == "int":
            return self.emit(f"{x}[{self.d.int(-size, size - 1)}] = {value}")
        if k == "list":
            idx = [self.d.int(-size, size - 1) for _ in range(self.d.int(1, 3))]
            return self.emit(f"{x}[torch.tensor({idx}, device=dev)] = {value}")
        if value[:1] == "v" and src.numel() == 1 and src.dtype != t.dtype:
            # CPU eager fills a mask from a one-element CPU tensor (0-d or not: seed 1106821) as
            # from a Python number and raises where it overflows the destination; CUDA and pjrt
            # convert it as a tensor.
            value = fmt(self.scalar())
        return self.emit(f"{x}[{x} != {x}] = {value}" if t.is_floating_point() else f"{x}[{x} > 0] = {value}")

    def op_out(self):
        """An out= write into an existing tensor (not aliasing the inputs) of the result's shape or
        of another one (the op resizes it: CPU eager gives it the strides its TensorIterator
        picks), or into a new torch.empty of the result's shape or of no elements, of the result's
        dtype or another one (a reduction then accumulates in the out= dtype). Left out: out=
        aliasing an input (torch resizes `out` before it reads the input, so what happens is an
        accident of ordering: sum(x, 1, out=x) raises IndexError on CPU)."""
        a, b = self.var(), self.var()
        op = self.d.choice(["add", "mul", "sub", "maximum", "eq", "sum", "neg", "exp", "clamp", "cumsum", "prod"])
        if op in ("sum", "cumsum", "prod"):
            call = f"torch.{op}({a}, {self.dim(self.t(a))}{{out}})"
        elif op in ("neg", "exp"):
            call = f"torch.{op}({a}{{out}})"
        elif op == "clamp":
            call = f"torch.clamp({a}, -1, 2{{out}})"
        else:
            call = f"torch.{op}({a}, {b}{{out}})"
        try:
            with quiet():
                result = eval(call.format(out=""), dict(self.ns))
        except Exception:  # noqa: BLE001 - the functional form raises: emit it to match the error
            return self.emit(f"{self.new()} = " + call.format(out=""))
        storage = {self.t(v).untyped_storage().data_ptr() for v in (a, b)}
        resize = self.d.int(0, 3) == 0
        candidates = sorted((k for k, v in tensors(self.ns).items()
                             if v.untyped_storage().data_ptr() not in storage
                             and (resize or v.shape == result.shape)), key=lambda k: int(k[1:]))
        if candidates and self.d.int(0, 1):
            out = self.d.choice(candidates)
        else:
            out = self.new()
            dt = "torch." + str(result.dtype)[6:]
            if self.d.int(0, 1):
                dt = self.d.choice(["torch.float32", "torch.float64", "torch.int64", "torch.bool", "torch.float16"])
            shape = (0,) if resize else tuple(result.shape)
            if not self.emit(f"{out} = torch.empty({shape}, dtype={dt}, device=dev)"):
                return False
        return self.emit(call.format(out=f", out={out}"))

    def op_where(self):
        c, a, b = self.var(), self.var(), self.var()
        k = self.d.choice(["where", "where_scalar", "masked_fill", "lerp", "addcmul"])
        n = self.new()
        if k == "where":
            return self.emit(f"{n} = torch.where({c} > 0, {a}, {b})")
        if k == "where_scalar":
            return self.emit(f"{n} = torch.where({c} > 0, {a}, {fmt(self.scalar())})")
        if k == "masked_fill":
            return self.emit(f"{n} = {a}.masked_fill({c} > 0, {fmt(self.scalar())})")
        if k == "lerp":
            return self.emit(f"{n} = torch.lerp({a}, {b}, {self.d.choice(['0.25', '0.75', c])})")
        return self.emit(f"{n} = torch.addcmul({a}, {b}, {c}, value={self.d.choice([1, 2, -0.5])})")

    def op_cat(self):
        a, b = self.var(), self.var()
        t = self.t(a)
        n = self.new()
        if self.d.int(0, 2) == 0:
            return self.emit(f"{n} = torch.stack([{a}, {b}], {self.d.int(0, t.dim())})")
        return self.emit(f"{n} = torch.cat([{a}, {b}, {a}], {self.dim(t)})")

    def op_cast(self):
        x = self.var()
        t = self.t(x)
        dt = self.d.choice(["torch.float32", "torch.float64", "torch.float16", "torch.bfloat16", "torch.bool",
                            "torch.int64", "torch.int32", "torch.int8", "torch.uint8"])
        n = self.new()
        if not t.is_floating_point() and t.dtype != torch.bool and dt in ("torch.float32", "torch.float64",
                                                                         "torch.float16", "torch.bfloat16"):
            # Integers beyond 2**24 convert to float32 inexactly, and later sums of them depend on
            # the summation order (legitimately different): converted values stay within +-1000.
            return self.emit(f"{n} = {x}.clamp(-1000, 1000).to({dt})")
        if t.is_floating_point() and dt not in ("torch.float32", "torch.float64", "torch.float16",
                                                "torch.bfloat16", "torch.bool"):
            # float -> int of NaN, infinities or out-of-range values is undefined in C++ (torch's CPU
            # result is whatever the instruction returns): only finite in-range values are cast.
            return self.emit(f"{n} = {x}.nan_to_num(0.0, 100.0, -100.0).clamp(-100, 100).to({dt})")
        return self.emit(f"{n} = {x}.to({dt})")

    def op_index(self):
        x = self.var()
        t = self.t(x)
        n = self.new()
        if t.dim() == 0 or t.numel() == 0:
            return self.emit(f"{n} = {x}.flip(0) if {x}.dim() else {x}.clone()")
        d = self.d.int(0, t.dim() - 1)
        size = t.shape[d]
        if size == 0:
            return self.emit(f"{n} = {x}.roll(1, {d})")
        idx = [self.d.int(0, size - 1) for _ in range(self.d.int(1, 4))]
        k = self.d.choice(["index_select", "getitem", "gather", "flip", "roll", "repeat", "tril", "pad",
                           "scatter_add"])
        if k == "index_select":
            return self.emit(f"{n} = {x}.index_select({d}, torch.tensor({idx}, device=dev))")
        if k == "getitem":
            sel = ", ".join([":"] * d + [f"torch.tensor({idx}, device=dev)"])
            return self.emit(f"{n} = {x}[{sel}]")
        if k == "gather":
            shape = list(t.shape)
            shape[d] = len(idx)
            m = math.prod(shape)
            vals = [self.d.int(0, size - 1) for _ in range(m)]
            return self.emit(f"{n} = {x}.gather({d}, torch.tensor({vals}, device=dev).view({tuple(shape)}))")
        if k == "scatter_add":
            return self.emit(f"{n} = {x}.index_add({d}, torch.tensor({idx}, device=dev), "
                             f"{x}.index_select({d}, torch.tensor({idx}, device=dev)))")
        if k == "flip":
            return self.emit(f"{n} = {x}.flip({d})")
        if k == "roll":
            return self.emit(f"{n} = {x}.roll({self.d.int(-3, 3)}, {d})")
        if k == "repeat":
            return self.emit(f"{n} = {x}.repeat({', '.join(str(self.d.int(1, 2)) for _ in range(t.dim()))})")
        if k == "tril" and t.dim() >= 2:
            return self.emit(f"{n} = {x}.tril({self.d.int(-1, 1)})")
        return self.emit(f"{n} = F.pad({x}, ({self.d.int(0, 2)}, {self.d.int(-1, 1)}), value={fmt(self.scalar())})"
                         if t.is_floating_point() else f"{n} = F.pad({x}, (1, 0))")

    def op_matmul(self):
        a = self.var(lambda t: t.is_floating_point() and t.dim() >= 1)
        t = self.t(a)
        n = self.new()
        k = t.shape[-1] if t.dim() >= 1 else 1
        m = self.d.int(1, 3)
        w = self.new()
        vals = [self.d.choice([0.5, -1.0, 2.0, 0.0, 1.0, -0.25]) for _ in range(k * m)]
        layout = self.d.choice(["c", "t"])
        if not self.emit(f"{w} = mk([{', '.join(fmt(v) for v in vals)}], ({k}, {m}), {dtype_str(t)}, {layout!r}, dev)"):
            return False
        fn = "torch.mm" if t.dim() == 2 and self.d.int(0, 1) else "torch.matmul"
        return self.emit(f"{n} = {fn}({a}, {w})")

    def op_grad(self):
        """A gradient: a float32/float64 leaf made from a variable, one or two differentiable ops on
        it (other variables may take part), and torch.autograd.grad of the result with random
        weights (a plain sum would hide permutation errors). The leaf stays a variable, so later
        ops may use it (in place on it raises on CPU, and must on pjrt)."""
        x = self.var(lambda t: t.dtype in (torch.float32, torch.float64))
        t = self.t(x)
        if t.dtype not in (torch.float32, torch.float64):
            x = f"{x}.float()" if t.dtype != torch.float64 else x
        leaf = self.new()
        if not self.emit(f"{leaf} = {x}.detach().requires_grad_()"):
            return False
        expr = self.grad_expr(leaf)
        if self.d.int(0, 2) == 0:
            expr = self.grad_expr(f"({expr})")
        try:  # the result's shape and dtype, for the weights (a line that raises keeps any weights)
            with quiet():
                y = eval(expr, dict(self.ns))
        except Exception:  # noqa: BLE001 - the grad line raises on CPU: pjrt must raise the same type
            y = self.t(leaf)
        if not isinstance(y, torch.Tensor) or not y.is_floating_point():
            y = self.t(leaf)
        w = [self.d.choice(GRAD_WEIGHTS) for _ in range(y.numel())]
        weights = f"mk([{', '.join(fmt(v) for v in w)}], {tuple(y.shape)}, {dtype_str(y)}, 'c', dev)"
        return self.emit(f"{self.new()} = torch.autograd.grad({expr}, {leaf}, {weights}, allow_unused=True)[0]")

    def grad_expr(self, x):
        """One differentiable op on the expression `x` (its CPU value tells shapes)."""
        try:
            with quiet():
                t = eval(x, dict(self.ns))
        except Exception:  # noqa: BLE001 - `x` raises on CPU: the grad line will
            return x
        other = lambda: self.var(lambda u: u.is_floating_point())  # noqa: E731
        d = self.dim(t)
        k = self.d.choice(["unary", "unary", "act", "binary", "binary", "scalar", "reduce", "reduce", "where",
                           "ternary", "index", "matmul", "nn"])
        if k == "unary":
            return f"torch.{self.d.choice(GRAD_UNARY)}({x})"
        if k == "act":
            act = self.d.choice(ACTIVATIONS)
            if act.startswith(NAN_SPLIT_GRADIENTS):
                x = f"{x}.nan_to_num(nan=7.0, posinf=INF, neginf=-INF)"
            return act.format(x=x)
        if k == "binary":
            a, b = (x, other()) if self.d.int(0, 1) else (other(), x)
            return f"torch.{self.d.choice(GRAD_BINARY)}({a}, {b})"
        if k == "scalar":
            s = fmt(self.d.choice([2, 3, 0.5, -1, 2.5, 0, -0.5, 1e4]))
            return self.d.choice([f"{x} ** {s}", f"{s} ** {x}", f"{x} * {s}", f"{x} / {s}", f"{s} / {x}",
                                  f"{x} - {s}"])
        if k == "where":
            return f"torch.where({other()} > 0, {x}, {other()})"
        if k == "ternary":
            lo, hi = self.d.choice([(fmt(-1.0), fmt(2.0)), (other(), "None"), ("None", other()), (other(), other())])
            return self.d.choice([f"torch.clamp({x}, {lo}, {hi})", f"torch.lerp({x}, {other()}, 0.25)",
                                  f"torch.lerp({other()}, {x}, {other()})", f"torch.addcmul({x}, {other()}, {x})",
                                  f"torch.addcdiv({other()}, {x}, {other()}, value=0.5)"])
        if k == "reduce":
            r = self.d.choice(GRAD_REDUCTIONS)
            if r in ("max", "min"):
                return f"{x}.{r}({d}).values" if t.dim() else f"{x}.{r}()"
            if r == "sort":
                return f"torch.sort({x}, dim={d}, descending={self.d.choice([True, False])}, stable=True).values"
            if r == "cummax":
                return f"torch.cummax({x}, {d}).values"
            if r in ("softmax", "log_softmax", "cumsum", "cumprod", "logcumsumexp", "logsumexp"):
                return f"torch.{r}({x}, {d})"
            if r in ("var", "std"):
                return f"{x}.{r}({d}, correction={self.d.choice([0, 1])})"
            if r == "norm":
                p = self.d.choice(["2", "1", "3", "float('inf')", "0.5"])
                return f"torch.linalg.vector_norm({x}, {p}, {self.d.choice([d, None])})"
            return f"{x}.{r}({self.d.choice([d, '()'])})" if r != "prod" else f"{x}.prod({d})"
        if k == "index" and t.dim() and t.shape[d] > 0:
            idx = [self.d.int(0, t.shape[d] - 1) for _ in range(self.d.int(1, 4))]
            return self.d.choice([f"{x}.index_select({d}, torch.tensor({idx}, device=dev))", f"{x}.flip({d})",
                                  f"{x}.roll(1, {d})", f"{x}.transpose(0, {d}) * 1", f"{x}.narrow({d}, 0, 1)",
                                  f"{x}.repeat_interleave(2, {d})", f"{x}[..., ::2]",
                                  f"{x}.unsqueeze(0).expand(2, *{x}.shape) * 1"])
        if k == "matmul" and t.dim() >= 1:
            n = t.shape[-1]
            w = [self.d.choice(GRAD_WEIGHTS) for _ in range(n * 2)]
            return f"{x} @ mk([{', '.join(fmt(v) for v in w)}], ({n}, 2), {dtype_str(t)}, 't', dev)"
        if k == "nn" and t.dim() >= 1:
            return self.nn_expr(x, t, other)
        return f"torch.tanh({x})"

    def nn_expr(self, x, t, other):
        """A torch.nn.functional op on the float expression `x` (value `t`, at least 1-d): losses,
        activations, normalizations, and [N, C, L] convolutions, pooling and interpolation."""
        d = self.dim(t)
        n = t.shape[-1]
        # The shrinks' and relu6's (hardtanh's) gradient at NaN is 0 in CPU eager's vectorized kernel
        # and the incoming gradient in its scalar one (and CUDA's, and pjrt's): NaN is kept out of them.
        # NaN is kept out of the ops whose gradient at NaN CPU eager's vectorized and scalar kernels
        # disagree on (celu: seed 5053720 with --focus binary,scalar,more,out,index; see above).
        no_nan = f"{x}.nan_to_num(nan=7.0, posinf=INF, neginf=-INF)"
        # A normalization of a (nearly) constant group is rounding noise times 1/sqrt(eps): CPU
        # eager computes x * invstd - mean * invstd unfused (+2^-11 for a row of 94s), pjrt fused
        # (-2^-11), both of an exact 0. Such groups are kept out of the normalizations.
        norms = [f"F.layer_norm({x}, {x}.shape[-1:])"] if n == 0 or spread_groups(t.reshape(-1, n)) else []
        exprs = norms + [f"F.normalize({x}, dim={d})", f"F.mse_loss({x}, {other()})",
                 f"F.smooth_l1_loss({x}, {other()})", f"F.binary_cross_entropy_with_logits({x}, {other()}.sigmoid())",
                 f"F.pad({x}, (1, 2))", f"F.huber_loss({x}, {other()}, delta=0.5)", f"F.log_softmax({x}, {d}).exp()",
                 f"F.softmin({x}, {d})", f"F.logsigmoid({x})", f"F.softsign({x})", f"F.tanhshrink({x})",
                 f"F.celu({no_nan}, 0.5)", f"F.relu6({no_nan})", f"F.softshrink({no_nan}, 0.5)", f"F.hardshrink({no_nan}, 0.5)",
                 f"F.threshold({x}, 0.5, -2.0)", f"F.rrelu({x}, training=False)",
                 f"F.kl_div({x}, {other()}, reduction='batchmean', log_target=True)",
                 f"F.cosine_similarity({x}, {other()}, dim={d})", f"F.l1_loss({x}, {other()}, reduction='sum')",
                 f"F.soft_margin_loss({x}, {other()}.sign())"]
        if t.dim() >= 2 and n > 0:
            targets = [self.d.int(0, n - 1) for _ in range(t.shape[0])]
            exprs += [f"F.cross_entropy({x}.flatten(1, -1)[:, :{n}], torch.tensor({targets}, device=dev), "
                      f"label_smoothing={self.d.choice([0.0, 0.1])})",
                      f"F.nll_loss({x}.flatten(1, -1)[:, :{n}], torch.tensor({targets}, device=dev))",
                      f"F.prelu({x}, mk([0.25], (1,), {dtype_str(t)}, 'c', dev))"]
            if spread_groups(t.flatten(1)):
                exprs.append(f"F.group_norm({x}, 1)")
            if (t.shape[0] > 1 or t.dim() > 2) and spread_groups(t.transpose(0, 1).flatten(1)):
                exprs.append(f"F.batch_norm({x}, None, None, training=True)")
        if t.numel() > 0 and self.d.int(0, 1 if t.dim() == 3 else 2) == 0:
            # [N, C, L] ops: half of a 3-d tensor's draws, a third of others', on their elements as
            # one row (rank-3 tensors are rare)
            if t.dim() != 3:
                x, t = f"{x}.reshape(1, 1, -1)", t.reshape(1, 1, -1)
            return self.spatial_expr(x, t)
        return self.d.choice(exprs)

    def spatial_expr(self, x, t):
        """A 1-d convolution, pooling, interpolation or instance norm of `x`, [N, C, L] with L > 0."""
        c, n = t.shape[1], t.shape[-1]
        k = self.d.int(1, n)
        w = [self.d.choice(GRAD_WEIGHTS) for _ in range(2 * c * k)]
        weight = f"mk([{', '.join(fmt(v) for v in w)}], (2, {c}, {k}), {dtype_str(t)}, 'c', dev)"
        # CPU eager's float16/bfloat16 convolution gives NaN beside an infinite input where its
        # float32 and float64 ones (and pjrt's) give +-inf, and NaN in an output next to a NaN
        # input whose window does not hold it (seed 1964141): both are kept out of those.
        conv_in = f"{x}.nan_to_num(nan=0.0).clamp(-1e4, 1e4)" if t.dtype in (torch.float16, torch.bfloat16) else x
        exprs = [f"F.conv1d({conv_in}, {weight}, padding={self.d.int(0, k - 1)}, stride={self.d.int(1, 2)})",
                 f"F.avg_pool1d({x}, {k}, stride={self.d.int(1, 2)})",
                 f"F.max_pool1d({x}, {k}, stride={self.d.int(1, 2)})",
                 f"F.adaptive_avg_pool1d({x}, {self.d.int(1, 3)})",
                 f"F.interpolate({x}, scale_factor=2, mode={self.d.choice(['nearest', 'linear'])!r})"]
        if spread_groups(t.reshape(-1, n)):
            exprs.append(f"F.instance_norm({x})")
        return self.d.choice(exprs)

    def op_nn(self):
        """A torch.nn.functional op, forward only (the grad kind takes the same ops' gradients)."""
        x = self.var(lambda t: t.is_floating_point() and t.dim() >= 1)
        t = self.t(x)
        if not t.is_floating_point() or t.dim() == 0:
            raise KnownGap()  # no float tensor of rank >= 1 yet: draw another op
        other = lambda: self.var(lambda u: u.is_floating_point())  # noqa: E731
        return self.emit(f"{self.new()} = {self.nn_expr(x, t, other)}")

    def op_clone(self):
        x = self.var()
        # No .contiguous() (clone(memory_format=contiguous_format)), and clone() only of contiguous
        # tensors: clone's memory_format bug, being fixed elsewhere, lets a clone() of a transposed
        # tensor decide the strides of later contiguous clones of that layout, so a later
        # reshape/flatten (which clones) fails with "view size is not compatible".
        k = "clone()" if self.t(x).is_contiguous() and self.d.int(0, 1) else "detach()"
        return self.emit(f"{self.new()} = {x}.{k}")


def spread_groups(groups):
    """Whether every row of `groups` (one normalization group each) has at least two values and
    a spread above a thousandth of its magnitude, or a value that is not finite; and no row of
    finite values whose variance overflows the dtype: CPU eager's normalizations give NaN for such
    a row in their scalar loop (rows shorter than a vector: 3 doubles, 7 floats here) and zeros in
    their vectorized one (a rstd of 0), pjrt zeros (seed 1957454)."""
    g = groups.double()
    if g.dim() != 2 or g.numel() == 0:
        return g.dim() == 2  # no group has a value: nothing to normalize
    if g.shape[1] < 2:
        return False
    spread = g.amax(1) - g.amin(1)
    finite = torch.isfinite(g).all(1)
    overflows = finite & (spread > math.sqrt(torch.finfo(groups.dtype).max / g.shape[1]))
    return bool(((~finite | (spread > 1e-3 * g.abs().amax(1))) & ~overflows).all())


def dtype_str(t):
    return "torch." + str(t.dtype)[6:]


def fmt(v):
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "NAN"
        if math.isinf(v):
            return "INF" if v > 0 else "-INF"
        return repr(v)
    return str(v)


def namespace(dev):
    import torch.nn.functional as F
    return {"torch": torch, "F": F, "mk": mk, "dev": dev, "NAN": NAN, "INF": INF}


def flushes_denormals():
    return bool(torch.pjrt.capabilities().get("flushes_denormals"))


def flushed(t):
    """`t` with its subnormal floats replaced by zeros of the same sign: what a plugin that
    `flushes_denormals` reads and writes. (torch.set_flush_denormal(True) is not that model: CPU
    eager's vectorized fmod computes exactly on subnormals even then.)"""
    if not isinstance(t, torch.Tensor) or not t.is_floating_point():
        return t
    return torch.where(t.abs() < torch.finfo(t.dtype).tiny, t * 0, t)


@contextlib.contextmanager
def flushing_denormals(on):
    """CPU eager with FTZ/DAZ set (torch.set_flush_denormal) while `on`."""
    if not on:
        yield
        return
    torch.set_flush_denormal(True)
    try:
        yield
    finally:
        torch.set_flush_denormal(False)


@contextlib.contextmanager
def quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


class Program:
    def __init__(self, lines, cpu_ns, error, gaps=()):
        self.lines, self.cpu_ns, self.error, self.gaps = lines, cpu_ns, error, list(gaps)
        self.snapshots = {}

    def source(self):
        return "\n".join(self.lines)


def generate(draw, max_ops=6, focus=()):
    """A program from `draw`'s choices, run on CPU as it is built; `focus` names op kinds (the
    `op_*` methods of Gen, e.g. "out") that half of the ops are drawn from."""
    g = Gen(draw, focus)
    rank = draw.int(0, 3)
    base = [draw.choice([1, 2, 3, 4, 2, 3, 0]) for _ in range(rank)]
    if math.prod(base) > 64:
        base = [min(s, 2) for s in base]
    ok = True
    for i in range(draw.int(1, 3)):
        shape = base if i == 0 else g.shape_like(base)
        try:
            if not g.make_input(shape):
                ok = False
                break
        except KnownGap:
            continue
    n_ops = draw.int(1, max_ops)
    while ok and n_ops > 0:
        n_ops -= 1
        ok = g.op()
        if ok:
            big = [k for k, v in g.ns.items() if isinstance(v, torch.Tensor) and v.numel() > MAX_NUMEL]
            if big:
                ok = False
    p = Program(g.lines, g.ns, g.error, g.gaps)
    p.snapshots = {i: v for i, v in g.snapshots.items() if i < len(g.lines)}
    return p


# ------------------------------------------------------------------------------------ checking

class Mismatch(AssertionError):
    pass


class ValueMismatch(Mismatch):
    pass


MUTATING = re.compile(r"\.\w+_\(|\]\s*=[^=]|out=")


def written_storage(program, line):
    """Storages (CPU run) a line writes in place: `vX.op_(...)`, `vX[...] = ...`, `out=vX`."""
    targets = []
    m = re.match(r"\s*(v\d+)(\.\w+_\(|\[)", line)
    if m and MUTATING.search(line):
        targets.append(m.group(1))
    targets += re.findall(r"out=(v\d+)", line)
    return {program.cpu_ns[v].untyped_storage().data_ptr() for v in targets if v in program.cpu_ns}


def explained_by_inputs(program, dev_t, name):
    """Whether pjrt's value of `name` is one CPU eager's kernel computes from the line's inputs, for
    the variable made by a pure assignment:
    - from pjrt's own input values (the difference came in with inputs that matched within
      tolerance, and the line amplified it: fmod(x, x) is NaN for x == 0 and 0 for a tiny x);
    - for half types, in float32 and rounded once (pjrt's opmath; CPU eager rounds intermediates to
      the half type in some kernels: bfloat16 logsumexp([0, -3]) is 0.0459 there, 0.0486 exact);
    - with subnormal floats read and written as zero, where the plugin declares
      `flushes_denormals` (fmod(0, 3.7e-44) is then NaN), also inside the line's kernels (CPU
      eager under torch.set_flush_denormal: a gradient's intermediate 0.5 ** 126 * log(0.5));
    - for sums, within ulps of the sum of the magnitudes (the rounding of a sum depends on its
      order, and XLA's and CPU eager's orders differ).
    The inputs are pjrt's final values if nothing is written in place after the line, else CPU's
    values from before the line. A variable last written by an in-place method call
    (`v5.div_(v1)`) is recomputed from CPU's values before that call, with subnormals flushed."""
    updates = [i for i, line in enumerate(program.lines) if re.match(rf"\s*{name}\.\w+_\(", line)]
    if updates and explained_update(program, dev_t, name, updates[-1]):
        return True
    defining = [i for i, line in enumerate(program.lines) if re.match(rf"\s*({name}\s*=|{name}\s*,|.*,\s*{name}\s*=)", line)]
    outs = [i for i, line in enumerate(program.lines) if re.search(rf"out={name}\b", line)]
    if outs and defining and outs[-1] > defining[-1]:
        return explained_out(program, dev_t, name, outs[-1])
    if len(defining) != 1:
        return False
    i = defining[0]
    line = program.lines[i]
    if MUTATING.search(line):
        return False
    names = re.findall(r"\bv\d+\b", line.split("=", 1)[1])
    written_later = set().union(*(written_storage(program, later) for later in program.lines[i + 1:]))
    snap = program.snapshots.get(i, {})
    inputs = {}
    for v in names:
        # An input overwritten later has only CPU's value from before the line; the others keep
        # pjrt's own (seed 1892880: cat of a flushed subnormal and of heaviside's answer to it).
        overwritten = v in program.cpu_ns and program.cpu_ns[v].untyped_storage().data_ptr() in written_later
        if overwritten and v in snap:
            inputs[v] = snap[v]
        elif not overwritten and v in dev_t:
            inputs[v] = dev_t[v].detach().cpu().requires_grad_(dev_t[v].requires_grad)
        else:
            return False
    ftz = flushes_denormals()
    for upcast, flush, flush_within in ((False, False, False), (True, False, False), (False, ftz, False),
                                        (False, ftz, ftz)):
        ns = namespace("cpu")
        for v, value in inputs.items():
            value = flushed(value) if flush else value
            ns[v] = value.float() if upcast and value.dtype in (torch.float16, torch.bfloat16) else value
        try:
            with quiet(), flushing_denormals(flush_within):
                exec(line, ns)
            result = ns[name].to(dev_t[name].dtype)
            compare(name, dev_t[name], flushed(result) if flush else result, line, strides=False)
            return True
        except Exception:  # noqa: BLE001
            continue
    reduction = re.search(r"\.(sum|mean|cumsum|logsumexp|var|std|prod)\(|torch\.(matmul|mm|sum|linalg)", line)
    if reduction and dev_t[name].is_floating_point():
        ns, mag = namespace("cpu"), namespace("cpu")
        for v, value in inputs.items():
            ns[v] = value.double() if value.is_floating_point() else value
            mag[v] = value.double().abs() if value.is_floating_point() else value
        try:
            with quiet():
                exec(line, ns)
                exec(line, mag)
            exact, bound = ns[name].double(), mag[name].double().abs()
            got = dev_t[name].detach().cpu().double()
            rtol = TOL[dev_t[name].dtype][0]
            ok = (got == exact) | (torch.isnan(got) & torch.isnan(exact)) | ((got - exact).abs() <= rtol * bound)
            return bool(ok.all())
        except Exception:  # noqa: BLE001
            return False
    return False


def explained_out(program, dev_t, name, i):
    """Whether line i, an out= call writing `name` that nothing writes over later, gives pjrt's
    value of `name` from pjrt's own values of its inputs (a comparison of values that matched
    within tolerance, eq(v2, v0, out=v6), flips)."""
    line = program.lines[i]
    names = set(re.findall(r"\bv\d+\b", line)) - {name}
    storages = {program.cpu_ns[v].untyped_storage().data_ptr() for v in names | {name} if v in program.cpu_ns}
    if any(written_storage(program, later) & storages for later in program.lines[i + 1:]) or \
            any(v not in dev_t for v in names):
        return False
    values = {v: dev_t[v].detach().cpu() for v in names}
    values[name] = torch.empty(0, dtype=dev_t[name].dtype)
    return recomputes(line, name, values, dev_t)


def recomputes(line, name, values, dev_t, result=lambda t: t):
    """Whether CPU eager running `line` on `values` gives pjrt's value of `name` (after `result`)."""
    ns = namespace("cpu")
    ns.update(values)
    try:
        with quiet():
            exec(line, ns)
        compare(name, dev_t[name], result(ns[name]), line, strides=False)
        return True
    except Exception:  # noqa: BLE001
        return False


def explained_update(program, dev_t, name, i):
    """Whether line i, an in-place method call on `name` that nothing writes over later, gives
    pjrt's value from CPU's values before it with subnormal floats flushed (`flushes_denormals`)."""
    if not flushes_denormals():
        return False
    line = program.lines[i]
    storage = program.cpu_ns[name].untyped_storage().data_ptr()
    if any(storage in written_storage(program, later) for later in program.lines[i + 1:]):
        return False
    snap = program.snapshots.get(i, {})
    names = set(re.findall(r"\bv\d+\b", line))
    if any(v not in snap for v in names):
        return False
    if recomputes(line, name, {v: flushed(snap[v].clone()) for v in names}, dev_t, flushed):
        return True
    # Also from pjrt's own values of the inputs nothing writes from this line on (seed 1913636:
    # `v2.sub_(lgamma(v2))` where v2 held a subnormal gradient; pjrt's lgamma of the flushed zero
    # is inf, CPU's of the subnormal 99.5).
    written = set().union(*(written_storage(program, later) for later in program.lines[i:]))
    own = {v: dev_t[v].detach().cpu() if v in dev_t and program.cpu_ns[v].untyped_storage().data_ptr() not in written
           else flushed(snap[v].clone()) for v in names}
    return recomputes(line, name, own, dev_t, flushed)


# Loose enough for the few-ulp differences between XLA's and CPU eager's math functions once a later
# op amplifies them a little (CPU eager's vectorized erf is off by 1e-4 relative in gelu(-3));
# test_extremal.py checks each op's accuracy. Differences a discontinuous op amplifies further
# (fmod(x, x) of a tiny x, floor of a value near an integer) are recomputed from pjrt's own inputs
# (see explained_by_inputs).
TOL = {torch.float32: (5e-4, 1e-5), torch.float64: (1e-9, 1e-12), torch.float16: (4e-3, 1e-4),
       torch.bfloat16: (3e-2, 1e-3)}


def tensors(ns):
    return {k: v for k, v in ns.items() if k.startswith("v") and k[1:].isdigit() and isinstance(v, torch.Tensor)}


def significant_strides(t):
    """Strides of the dims with more than one element: torch leaves the strides of size-1 dims
    unspecified (its CPU kernels and Meta functions pick different ones), and an empty tensor has
    no layout to compare."""
    if t.numel() == 0:
        return None
    return tuple(s for s, n in zip(t.stride(), t.shape) if n > 1)


def compare(name, a, e, line, strides=True, tol=(0.0, 0.0)):
    """pjrt tensor `a` against CPU tensor `e`; floats within TOL of their dtype or `tol`, if looser."""
    where = f"{name} (after: {line})"
    # Read without autograd: .cpu() and .double() would rebuild the grad_fn of a view whose base
    # was modified in place, which raises for some views (unbind's) on both devices.
    a, e = a.detach(), e.detach()
    if a.device.type != "pjrt":
        raise Mismatch(f"{where}: on {a.device}, not pjrt")
    if a.dtype != e.dtype:
        raise Mismatch(f"{where}: dtype {a.dtype} != CPU {e.dtype}")
    if a.shape != e.shape:  # a value difference for data-dependent shapes (nonzero of a flushed subnormal)
        raise ValueMismatch(f"{where}: shape {tuple(a.shape)} != CPU {tuple(e.shape)}")
    if strides and significant_strides(a) != significant_strides(e):
        raise Mismatch(f"{where}: strides {a.stride()} != CPU {e.stride()} (shape {tuple(e.shape)})")
    if e.numel() > 0 and a.storage_offset() != e.storage_offset():
        raise Mismatch(f"{where}: storage offset {a.storage_offset()} != CPU {e.storage_offset()}")
    ac = a.cpu()
    if not e.dtype.is_floating_point:
        if not torch.equal(ac, e):
            raise ValueMismatch(f"{where}: values differ:\npjrt {ac}\ncpu  {e}")
        return
    rtol, atol = max(TOL[e.dtype][0], tol[0]), max(TOL[e.dtype][1], tol[1])
    a64, e64 = ac.double(), e.double()
    ok = (a64 == e64) | (torch.isnan(a64) & torch.isnan(e64)) | ((a64 - e64).abs() <= atol + rtol * e64.abs())
    if not bool(ok.all()):
        raise ValueMismatch(f"{where}: values differ at {(~ok).nonzero()[:6].tolist()}:\npjrt {ac}\ncpu  {e}")


def run_pjrt(program, context=contextlib.nullcontext):
    """Runs the program's lines on pjrt, each inside `context()`; returns (namespace, error) like the
    CPU run."""
    ns = namespace("pjrt")
    stop = len(program.lines) if program.error is None else program.error[0] + 1
    for i, line in enumerate(program.lines[:stop]):
        try:
            with quiet(), context():
                exec(line, ns)
        except Exception as e:  # noqa: BLE001
            return ns, (i, e)
    return ns, None


def check(program, context=contextlib.nullcontext):
    """Raises Mismatch (with the program's source) where pjrt differs from CPU eager (its lines run
    inside `context()` on pjrt)."""
    try:
        _check(program, context)
    except Mismatch as m:
        raise Mismatch(f"{m}\n--- program ---\n{program.source()}") from None
    finally:
        deferred_error()  # a failed check still pending must not surface in the next program


def deferred_error():
    """The error of a check pjrt makes when the pending graph runs (an index bound), if any."""
    try:
        torch.pjrt.synchronize()
    except Exception as e:  # noqa: BLE001
        return e
    return None


def _check(program, context):
    ns, err = run_pjrt(program, context)
    if program.error is not None:
        i, cpu_e = program.error
        if err is None:
            # pjrt is lazy: checks made when the graph is built or run surface when results are read.
            try:
                for t in tensors(ns).values():
                    t.cpu()
                torch.pjrt.synchronize()
            except Exception as e:  # noqa: BLE001
                err = (i, e)
        if err is None:
            raise Mismatch(f"line {i} raised {type(cpu_e).__name__} on CPU ({cpu_e}), not on pjrt")
        if err[0] == i and type(err[1]) is not type(cpu_e) and type(deferred_error()) is type(cpu_e):
            # pjrt found CPU's error too, in a check made when the graph runs, after torch raised
            # another error on the same line (autograd's check of grad_outputs' shape)
            return
        if err[0] != i or type(err[1]) is not type(cpu_e):
            raise Mismatch(f"line {err[0]} raised {type(err[1]).__name__} on pjrt ({str(err[1])[:300]}); CPU raised "
                           f"{type(cpu_e).__name__} on line {i} ({str(cpu_e)[:300]})")
        return
    if err is not None:
        i, e = err
        raise Mismatch(f"line {i} raised {type(e).__name__} on pjrt only: {str(e)[:500]}")
    cpu_t, dev_t = tensors(program.cpu_ns), tensors(ns)
    if set(cpu_t) != set(dev_t):
        raise Mismatch(f"variables differ: {sorted(set(cpu_t) ^ set(dev_t))}")
    last = {}
    for i, line in enumerate(program.lines):
        for name in cpu_t:
            if name in line:
                last[name] = line
    # Values flow between dtypes (a float32 result stored into a float64 out=): every float is
    # compared within the tolerance of the least precise float type in the program.
    floats = [TOL[t.dtype] for t in cpu_t.values() if t.is_floating_point()]
    tol = (max(r for r, _ in floats), max(a for _, a in floats)) if floats else (0.0, 0.0)
    try:
        for name in sorted(cpu_t, key=lambda k: int(k[1:])):
            try:
                compare(name, dev_t[name], cpu_t[name], last.get(name, "?"), tol=tol)
            except ValueMismatch:
                if not explained_by_inputs(program, dev_t, name):
                    raise
    except Mismatch:
        raise
    except Exception as e:  # noqa: BLE001 - reading a pjrt result raised
        raise Mismatch(f"reading results raised {type(e).__name__} on pjrt: {str(e)[:500]}") from None
