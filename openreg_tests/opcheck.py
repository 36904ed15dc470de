"""Checks PyTorch's OpInfo database on pjrt against CPU eager, for `sweep.py` (the full sweep that
writes docs/ops.md and docs/ops.json) and its harness tests (test_opcheck.py). The CI's OpInfo
tests are test_ops.py, which runs in-process with torch's own device-generic machinery; this module
goes wider (every dtype, extremal values, in-place, out=, gradients) and isolates crashes.

Every case runs in a worker subprocess, so a crash (segfault, abort) or a hang in one op is
recorded as that op's result and never stops the caller: the worker is restarted, the crashed
request is split into its (kind, dtype) parts to find which one crashed, and the rest goes on.

A *request* is one OpInfo with its dtypes, kinds and sample limits. Kinds:

- ``forward``: the op on the first samples, compared with CPU eager through the sample's
  ``output_process_fn_grad`` (as PyTorch's test_compare_cpu and test_ops.py: eigenvector signs are
  not unique); CPU raising means pjrt must raise the same exception type. A floating sample of a
  reduced precision (float16, bfloat16, float32, complex64) that CPU and pjrt disagree on is judged
  against the float64 (complex128) CPU computation cast back, as test_ops.py does for float32
  (CPU's own low-precision answer is then out of tolerance, e.g. matrix_exp of ~1e5 entries);
- ``extremal``: the first sample with NaN, +inf and -inf written into its floating tensors;
- ``inplace``: ``op.inplace_variant`` (must mutate and return its pjrt input);
- ``out``: ``op(..., out=...)`` (must write into and return the given tensors);
- ``grad``: ``torch.autograd.grad`` of sum_i <w_i, out_i> (fixed random weights w_i; a plain
  sum would hide permutation errors) with respect to every input requiring grad.

Per sample the worker reports ``pass`` (with the ops that fell back to the CPU, from
``torch.pjrt.metrics.fallbacks()``), ``fail`` (first line of the error or the mismatch), ``skip``
(with why) or, from the caller, ``crash``. The items of one (op, dtype) are traced together and
synced once (a compile per dtype instead of per sample); any item that fails in such a batch is
rerun alone, so its result never depends on the other items.
"""

from __future__ import annotations

import collections
import itertools
import json
import math
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback

import torch

from plugin_dtypes import is_unsupported_dtype_error

KINDS = ("forward", "extremal", "inplace", "out", "grad")

# Every dtype a pjrt tensor can hold, in report order.
PJRT_DTYPES = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint16,
               torch.uint32, torch.uint64, torch.float16, torch.bfloat16, torch.float32, torch.float64,
               torch.complex64, torch.complex128, torch.float8_e4m3fn, torch.float8_e5m2)
# dtypes OpInfos declare that a pjrt tensor cannot hold (creating one raises a TypeError by design).
EXCLUDED_DTYPES = {
    torch.complex32: "no PJRT element type for complex32 (chalf)",
    torch.float8_e4m3fnuz: "the fnuz float8 variants have no pjrt mapping",
    torch.float8_e5m2fnuz: "the fnuz float8 variants have no pjrt mapping",
}
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
GRAD_DTYPES = (torch.float32, torch.float64)
DTYPE_BY_NAME = {str(d).removeprefix("torch."): d for d in PJRT_DTYPES + tuple(EXCLUDED_DTYPES)}


def dtype_name(d: torch.dtype) -> str:
    return str(d).removeprefix("torch.")


# Ops whose values are random or uninitialized: only shapes and dtypes are compared, and no gradients.
# The same list as test_ops.py's NONDETERMINISTIC: pjrt draws random numbers from its own generator
# (same seed, same numbers, as on CUDA, but not the CPU's numbers; tests/test_random.py checks their
# distributions). Samples with a nonzero dropout_p (scaled_dot_product_attention) are left out of
# every kind, as in test_ops.py.
NONDETERMINISTIC = {"empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided", "empty_permuted",
                    "bernoulli", "normal", "uniform", "rand_like", "randn_like", "randint_like", "multinomial",
                    "nn.functional.dropout", "nn.functional.dropout2d", "nn.functional.dropout3d",
                    "nn.functional.alpha_dropout", "nn.functional.feature_alpha_dropout",
                    "nn.functional.rrelu", "randint", "randn", "rand", "normal.number_mean",
                    "nn.functional.multi_head_attention_forward", "torch.empty", "cauchy", "exponential",
                    "geometric", "log_normal", "nn.functional.fractional_max_pool2d",
                    "nn.functional.fractional_max_pool3d", "svd_lowrank", "pca_lowrank"}

# Ops whose CPU eager kernel itself crashes on NaN/inf input: no extremal-value case.
NO_EXTREMAL = {
    "linalg.eigvals": "CPU eager segfaults (oneMKL ?GEBAL: 'Parameter 3 was incorrect') on a matrix with NaN/inf",
}

# Differences by design, each with its reason and the text its error contains (None: any error; a
# tuple: any of these), shown in docs/ops.md: test_ops.py's EXPECTED_FAILURES, and complex(half).
BY_DESIGN = {
    "sparse.sampled_addmm": ("sparse layouts are not supported by pjrt tensors", None),
    "sparse.mm.reduce": ("sparse layouts are not supported by pjrt tensors", None),
    "to_sparse": ("sparse layouts are not supported by pjrt tensors", None),
    "chalf": ("complex32 cannot be held by a pjrt tensor (TypeError by design)", "ComplexHalf"),
    "complex": ("complex(float16, float16) is complex32, which a pjrt tensor cannot hold (TypeError by design)",
                "ComplexHalf"),
    "as_strided.partial_views": ("the sample views a larger CPU storage at an offset; moving it to any device "
                                 "copies only the view, so storage offsets refer to other elements (as with CUDA)",
                                 None),
    "mode": ("CPU eager's mode sorts with std::sort and operator<, which NaN breaks (no strict weak ordering), so "
             "its answer for a slice with NaN depends on where the NaN stood (insertion sort never moves an element "
             "past it); pjrt orders NaN last, as torch.sort does", "NaN pattern differs"),
    "tensor_split": ("the sample passes its split indices as a CPU tensor, which moving every sample tensor to "
                     "pjrt moves too; tensor_split rejects that (as it does for CUDA tensors)",
                     "to be on cpu"),
}


def by_design(key, error):
    """The reason a failure of `key` with `error` is by design, or None."""
    reason, text = BY_DESIGN.get(key, (None, None))
    texts = (text,) if isinstance(text, str) else text
    if reason and (text is None or (error and any(t in error for t in texts))):
        return reason
    return None


# Sample limits per kind (the first n samples of `op.sample_inputs`, seed 0): "forward" per dtype name,
# "*" for the dtypes not named. float32 forward runs as many samples as test_ops.py (MAX_SAMPLES).
SWEEP_LIMITS = {"forward": {"float32": 4, "*": 2}, "extremal": 1, "inplace": 2, "out": 2, "grad": 2}


def limit(limits, kind, dtype):
    n = limits.get(kind, 0)
    if isinstance(n, dict):
        n = n.get(dtype, n.get("*", 0))
    return n


# Tolerances by result dtype (rtol, atol); integers and bools are exact.
FORWARD_TOL = {torch.float16: (2e-3, 1e-3), torch.bfloat16: (1.6e-2, 1e-2), torch.float32: (1e-4, 1e-4),
               torch.float64: (1e-7, 1e-7), torch.complex64: (1e-4, 1e-4), torch.complex128: (1e-7, 1e-7),
               torch.float8_e4m3fn: (0.125, 1e-2), torch.float8_e5m2: (0.25, 1e-2)}
GRAD_TOL = {torch.float16: (1e-2, 1e-2), torch.bfloat16: (5e-2, 5e-2), torch.float32: (1e-3, 1e-3),
            torch.float64: (1e-6, 1e-6), torch.complex64: (1e-3, 1e-3), torch.complex128: (1e-6, 1e-6)}


def op_key(op) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


_OPS = None


def all_ops():
    """op key -> OpInfo, in op_db order."""
    global _OPS
    if _OPS is None:
        from torch.testing._internal.common_methods_invocations import op_db
        _OPS = {op_key(op): op for op in op_db}
    return _OPS


def is_nondeterministic(op) -> bool:
    return op_key(op) in NONDETERMINISTIC or op.name in NONDETERMINISTIC


def op_dtypes(op):
    """(dtypes pjrt runs, dtypes the op supports on the CPU that pjrt cannot hold)."""
    supported = op.supported_dtypes("cpu")
    return ([d for d in PJRT_DTYPES if d in supported], [d for d in EXCLUDED_DTYPES if d in supported])


def plan(op, dtypes=None, kinds=KINDS):
    """The (kind, dtype name) cases that apply to `op`, restricted to `dtypes` (names) and `kinds`."""
    runnable, _ = op_dtypes(op)
    if dtypes is not None:
        runnable = [d for d in runnable if dtype_name(d) in dtypes]
    nondet = is_nondeterministic(op)
    cases = []
    for d in runnable:
        name = dtype_name(d)
        if "forward" in kinds:
            cases.append(("forward", name))
        if "extremal" in kinds and d in FLOAT_DTYPES and not nondet and op_key(op) not in NO_EXTREMAL:
            cases.append(("extremal", name))
        if "inplace" in kinds and op.inplace_variant is not None:
            cases.append(("inplace", name))
        if "out" in kinds and op.supports_out:
            cases.append(("out", name))
        if ("grad" in kinds and op.supports_autograd and d in GRAD_DTYPES and not nondet
                and d in op.supported_backward_dtypes("cpu")):
            cases.append(("grad", name))
    return cases


# ---------------------------------------------------------------------------------------------
# Comparison


def first_line(e: BaseException) -> str:
    lines = [ln for ln in str(e).splitlines() if ln.strip()]
    return f"{type(e).__name__}: {lines[0][:240] if lines else ''}"


def _tensor_mismatch(a: torch.Tensor, e: torch.Tensor, tol, exact_values=True) -> str | None:
    if a.dtype != e.dtype:
        return f"dtype {a.dtype} vs CPU {e.dtype}"
    if a.shape != e.shape:
        return f"shape {tuple(a.shape)} vs CPU {tuple(e.shape)}"
    if not exact_values:
        return None
    if a.layout != torch.strided or e.layout != torch.strided:
        return None if a.layout == e.layout else f"layout {a.layout} vs CPU {e.layout}"
    rtol, atol = tol.get(e.dtype, (0.0, 0.0))
    try:
        torch.testing.assert_close(a, e, rtol=rtol, atol=atol, equal_nan=True, check_device=False,
                                   check_stride=False)
        return None
    except AssertionError:
        pass
    a = a.resolve_conj().resolve_neg()
    e = e.resolve_conj().resolve_neg()
    if e.dtype == torch.bool or not (e.is_floating_point() or e.is_complex()):
        diff = a != e
        if not diff.any():
            return None
        idx = tuple(int(i) for i in diff.nonzero()[0])
        return f"{int(diff.sum())} of {e.numel()} values differ, e.g. at {idx}: {a[idx].item()} vs CPU {e[idx].item()}"
    wide = torch.complex128 if e.is_complex() else torch.float64
    a64, e64 = a.to(wide), e.to(wide)
    nan_a, nan_e = a64.isnan(), e64.isnan()
    if (nan_a != nan_e).any():
        idx = tuple(int(i) for i in (nan_a != nan_e).nonzero()[0])
        return f"NaN pattern differs, e.g. at {idx}: {a[idx].item()} vs CPU {e[idx].item()}"
    fin = torch.isfinite(e64) & torch.isfinite(a64)
    inf_bad = (~fin & ~nan_e) & (a64 != e64)
    if inf_bad.any():
        idx = tuple(int(i) for i in inf_bad.nonzero()[0])
        return f"infinity differs, e.g. at {idx}: {a[idx].item()} vs CPU {e[idx].item()}"
    err = (a64 - e64).abs().where(fin, 0)
    bad = err > atol + rtol * e64.abs()
    if not bad.any():
        return None  # assert_close refused the comparison (it takes no tolerance for float8), the values agree
    idx = tuple(int(i) for i in bad.nonzero()[0])
    return (f"{int(bad.sum())} of {e.numel()} values differ (rtol={rtol:g}, atol={atol:g}), max |diff| "
            f"{err.max().item():.3g}, e.g. at {idx}: {a[idx].item():.6g} vs CPU {e[idx].item():.6g}")


def mismatch(actual, expected, tol, exact_values=True) -> str | None:
    """None when `actual` (already on the CPU) matches `expected`, else a one-line description."""
    a_leaves, a_spec = torch.utils._pytree.tree_flatten(actual)
    e_leaves, e_spec = torch.utils._pytree.tree_flatten(expected)
    if len(a_leaves) != len(e_leaves):
        return f"{len(a_leaves)} outputs vs CPU {len(e_leaves)}"
    for i, (a, e) in enumerate(zip(a_leaves, e_leaves)):
        where = f"output {i}: " if len(e_leaves) > 1 else ""
        if isinstance(e, torch.Tensor):
            if not isinstance(a, torch.Tensor):
                return f"{where}{type(a).__name__} vs CPU tensor"
            m = _tensor_mismatch(a, e, tol, exact_values)
            if m:
                return where + m
        elif isinstance(e, float) and isinstance(a, float):
            if exact_values and not (a == e or (math.isnan(a) and math.isnan(e)) or
                                     math.isclose(a, e, rel_tol=1e-6, abs_tol=1e-6)):
                return f"{where}{a} vs CPU {e}"
        elif type(a) is not type(e):
            return f"{where}{type(a).__name__} vs CPU {type(e).__name__}"
        elif exact_values and a != e:
            return f"{where}{a!r} vs CPU {e!r}"
    return None


# ---------------------------------------------------------------------------------------------
# Running cases (in the worker)


def _tree_map(f, x):
    return torch.utils._pytree.tree_map(f, x)


def to_cpu(x):
    return _tree_map(lambda t: t.cpu() if isinstance(t, torch.Tensor) else t, x)


def on_device(sample, device, keep_grad=False):
    """`sample` with its tensors moved to `device` (aliases stay aliases) and factories told to
    create there. With keep_grad, tensors requiring grad become leaves on the device."""
    memo = {}

    def move(t):
        if not isinstance(t, torch.Tensor):
            return t
        if id(t) not in memo:
            m = t.detach().to(device)
            if keep_grad and t.requires_grad:
                m.requires_grad_()
            memo[id(t)] = (t, m)
        return memo[id(t)][1]

    moved = sample.transform(move)
    if "device" in moved.kwargs:
        moved.kwargs = dict(moved.kwargs, device=device)
    return moved


def with_extremal_values(sample):
    """The sample with NaN, +inf, -inf written at the first elements of each floating tensor, or
    None when it has no floating tensor."""
    changed = []

    def f(t):
        if not isinstance(t, torch.Tensor) or not t.is_floating_point() or t.numel() == 0:
            return t
        v = t.detach().clone(memory_format=torch.contiguous_format)
        flat = v.view(-1)
        for i, x in enumerate((math.nan, math.inf, -math.inf)[:flat.numel()]):
            flat[i] = x
        changed.append(True)
        return v

    s = sample.transform(f)
    return s if changed else None


def _grown(before, after):
    return {k: v - before.get(k, 0) for k, v in after.items() if v > before.get(k, 0)}


def fallbacks():
    """CPU fallback calls per op (``aten::sort``, a custom op's ``mylib::op``)."""
    return torch.pjrt.metrics.fallbacks()


def lowered():
    """Ops traced natively per lowering (schema name)."""
    return torch.pjrt.metrics.lowered()


class _Call:
    __slots__ = ("value", "error")

    def __init__(self, fn):
        self.value = self.error = None
        try:
            self.value = fn()
        except Exception as e:  # recorded: compared with the other side's outcome
            self.error = e


def _raised_alike(cpu_error, dev: _Call, readback):
    """CPU raised: pjrt must raise the same exception type, at the call or when its result is read."""
    err = dev.error
    if err is None:
        try:
            readback()
        except Exception as e:
            err = e
    if err is None:
        return f"CPU raised {first_line(cpu_error)}, pjrt accepted the sample"
    if type(err) is not type(cpu_error):
        return f"CPU raised {type(cpu_error).__name__}, pjrt {first_line(err)}"
    return None


# Reduced-precision dtypes judged against a wider CPU computation when CPU and pjrt disagree.
WIDER = {torch.float16: torch.float64, torch.bfloat16: torch.float64, torch.float32: torch.float64,
         torch.complex64: torch.complex128}
REFERENCE_NOTE = "matches the float64 computation"


def widened(sample, dtype):
    """A copy of `sample` with its `dtype` tensors in float64 (complex128), or None when `dtype` has
    no wider reference or the sample has no such tensor. Storages are widened whole, and each tensor
    keeps its sizes, strides and storage offset in its widened storage (tensors sharing a storage
    share the widened one), so storage-level ops (as_strided) compute the same thing."""
    wide = WIDER.get(dtype)
    if wide is None:
        return None
    storages = {}

    def f(t):
        if not isinstance(t, torch.Tensor) or t.dtype != dtype or t.layout != torch.strided:
            return t
        st = t.untyped_storage()
        key = (st.data_ptr(), st.nbytes())
        if key not in storages:
            flat = torch.empty(0, dtype=dtype).set_(st, 0, (st.nbytes() // t.element_size(),), (1,))
            storages[key] = flat.detach().to(wide)
        return storages[key].as_strided(t.shape, t.stride(), t.storage_offset())

    s = sample.transform(f)
    return s if storages else None


def narrowed(x, dtype):
    """`x` (a reference result) with float64 tensors cast back to `dtype` (to float32 for complex64)
    and complex128 ones to complex64."""
    real = torch.float32 if dtype.is_complex else dtype

    def f(t):
        if isinstance(t, torch.Tensor):
            if t.dtype == torch.float64:
                return t.to(real)
            if t.dtype == torch.complex128:
                return t.to(torch.complex64)
        return t

    return _tree_map(f, x)


# Ops whose index outputs are not unique when the input has equal elements (sort and argsort unless
# stable=True, topk, kthvalue): a pjrt result that CPU disagrees with is accepted when its values
# equal CPU's and its indices point at those values (distinct indices for sort and topk). The
# OpInfo samples cast a permutation of 0..7999 to each dtype, which makes ties in the narrow ones.
TIES_NOTE = "tied elements in another valid order"
TIES_OPS = ("sort", "argsort", "topk", "kthvalue")


def _arg(sample, pos, name, default):
    if name in sample.kwargs:
        return sample.kwargs[name]
    return sample.args[pos] if len(sample.args) > pos else default


def ties_only(key, sample, actual, expected, tol):
    """None when `actual` differs from `expected` only by the order of tied elements (for the ops
    above), else a description of what is wrong with it."""
    x = sample.input
    if key in ("sort", "argsort"):
        if _arg(sample, 2, "stable", False):
            return "stable sort"
        dim, per_slice = _arg(sample, 0, "dim", -1), True
    elif key == "topk":
        dim, per_slice = _arg(sample, 1, "dim", -1), True
    elif key == "kthvalue":
        dim, per_slice = _arg(sample, 1, "dim", -1), False
    else:
        return "not an op with tied indices"
    if not isinstance(x, torch.Tensor) or x.dim() == 0:
        return "0-d input"
    if key == "argsort":
        idx, e_idx = actual, expected
        values, e_values = x.gather(dim, idx), x.gather(dim, e_idx)
    else:
        (values, idx), (e_values, e_idx) = actual[:2], expected[:2]
    m = mismatch(values, e_values, tol)
    if m:
        return "values: " + m
    keepdim = per_slice or _arg(sample, 3, "keepdim", False)
    pointed = x.gather(dim, idx if keepdim else idx.unsqueeze(dim))
    m = mismatch(pointed if keepdim else pointed.squeeze(dim), values, tol)
    if m:
        return "indices do not point at the values: " + m
    if per_slice and idx.numel() and idx.shape[dim] > 1:
        s = idx.sort(dim).values
        if (s.narrow(dim, 1, s.shape[dim] - 1) == s.narrow(dim, 0, s.shape[dim] - 1)).any():
            return "repeated indices"
    return None


class Item:
    """One sample of one case: traced (CPU reference and pjrt call), then finished (read back and
    compared) after the whole batch was traced."""

    def __init__(self, op, kind, dtype, index, device):
        self.op, self.kind, self.dtype, self.index, self.device = op, kind, dtype, index, device
        self.result = None

    def record(self, status, error=None, fallbacks=None, note=None):
        r = {"kind": self.kind, "dtype": dtype_name(self.dtype), "sample": self.index, "status": status}
        if error:
            r["error"] = error
        if fallbacks:
            r["fallbacks"] = fallbacks
        if note:
            r["note"] = note
        return r

    def trace(self, sample):
        try:
            self.finish = getattr(self, "_trace_" + self.kind)(sample)
        except Exception as e:  # a harness error is this item's failure, never the batch's
            self.result = self.record("fail", "harness: " + first_line(e))

    def done(self):
        if self.result is None:
            try:
                self.result = self.finish()
            except Exception as e:
                self.result = self.record("fail", first_line(e))
        return self.result

    def _device_call(self, fn):
        before = fallbacks()
        call = _Call(fn)
        self.fallbacks = _grown(before, fallbacks())
        return call

    def _finish_values(self, cpu, dev, read_actual, expected_fn, tol, exact=True, check=None, reference=None,
                       ties=None):
        """`reference`: None, or a function computing the expected result in float64 (cast back),
        which decides when CPU's own result and pjrt's disagree. `ties`: the CPU sample, for the ops
        whose indices of tied elements are not unique (TIES_OPS)."""
        fb = self.fallbacks
        if cpu.error is not None:
            m = _raised_alike(cpu.error, dev, read_actual)
            return self.record("fail", m, fb) if m else self.record("pass", fallbacks=fb, note="error matches CPU")
        if dev.error is not None:
            if is_unsupported_dtype_error(dev.error):
                return self.record("skip", note="a dtype the active plugin does not support")
            return self.record("fail", first_line(dev.error), fb)
        if check is not None:
            m = check()
            if m:
                return self.record("fail", m, fb)
        try:
            actual = read_actual()
        except Exception as e:
            return self.record("fail", first_line(e), fb)
        expected = expected_fn()
        m = mismatch(actual, expected, tol, exact)
        if m and exact and ties is not None:
            try:
                wrong = ties_only(op_key(self.op), ties, actual, expected, tol)
            except Exception as e:  # a result the check cannot read: the mismatch stands
                wrong = first_line(e)
            if wrong is None:
                return self.record("pass", fallbacks=fb, note=f"{TIES_NOTE}; CPU comparison: {m}")
        if m and exact and reference is not None:
            try:
                ref = reference()
            except Exception:  # no reference: the mismatch with CPU stands
                ref = None
            if ref is not None and mismatch(actual, ref, tol, exact) is None:
                return self.record("pass", fallbacks=fb,
                                   note=f"{REFERENCE_NOTE}; CPU {dtype_name(self.dtype)} does not: {m}")
        return self.record("fail", "mismatch: " + m, fb) if m else self.record("pass", fallbacks=fb)

    def _trace_forward(self, sample):
        op = self.op
        moved = on_device(sample, self.device)  # before the CPU call, which may mutate the sample
        wide = widened(sample, self.dtype)
        cpu = _Call(lambda: op(sample.input, *sample.args, **sample.kwargs))
        dev = self._device_call(lambda: op(moved.input, *moved.args, **moved.kwargs))
        exact = not is_nondeterministic(op)
        # The sample's own view of its results, as PyTorch's test_compare_cpu compares them
        # (|eigenvectors| for eigh, whose signs are not unique).
        view = sample.output_process_fn_grad
        reference = (lambda: narrowed(view(op(wide.input, *wide.args, **wide.kwargs)), self.dtype)) if wide else None
        ties = sample if op_key(op) in TIES_OPS else None
        return lambda: self._finish_values(cpu, dev, lambda: view(to_cpu(dev.value)), lambda: view(cpu.value),
                                           FORWARD_TOL, exact, reference=reference, ties=ties)

    _trace_extremal = _trace_forward

    def _trace_inplace(self, sample):
        op, variant = self.op, self.op.inplace_variant
        moved = on_device(sample, self.device)
        wide = widened(sample, self.dtype)
        cpu = _Call(lambda: variant(sample.input, *sample.args, **sample.kwargs))
        dev = self._device_call(lambda: variant(moved.input, *moved.args, **moved.kwargs))

        def check():
            if dev.value is not moved.input:
                return "the in-place variant did not return its input"

        def reference():
            if wide is None or wide.input.dtype not in (torch.float64, torch.complex128):
                return None
            variant(wide.input, *wide.args, **wide.kwargs)
            return narrowed(wide.input, self.dtype)

        exact = not is_nondeterministic(op)
        return lambda: self._finish_values(cpu, dev, lambda: to_cpu(moved.input), lambda: sample.input,
                                           FORWARD_TOL, exact, check, reference)

    def _trace_out(self, sample):
        op = self.op
        moved = on_device(sample, self.device)
        wide = widened(sample, self.dtype)
        cpu = _Call(lambda: op(sample.input, *sample.args, **sample.kwargs))
        if cpu.error is not None:
            self.fallbacks = {}
            return lambda: self.record("skip", note="CPU rejects the sample")
        expected = cpu.value
        if isinstance(expected, torch.Tensor):
            tensors = [expected]
        elif isinstance(expected, (tuple, list)) and expected and all(isinstance(t, torch.Tensor) for t in expected):
            tensors = list(expected)
        else:
            self.fallbacks = {}
            return lambda: self.record("skip", note="non-tensor output")
        single = isinstance(expected, torch.Tensor)
        # CPU's own out= call says whether out= is accepted at all (if not, pjrt must raise the same
        # exception type) and what it returns: the given tensors, or None (ops writing a list).
        cpu_outs = [torch.empty_like(t) for t in tensors]
        cpu_out = _Call(lambda: op(sample.input, *sample.args, **sample.kwargs,
                                   out=cpu_outs[0] if single else tuple(cpu_outs)))
        outs = [torch.empty_like(t, device=self.device) for t in tensors]
        out = outs[0] if single else tuple(outs)
        ptrs = [t.data_ptr() for t in outs]
        dev = self._device_call(lambda: op(moved.input, *moved.args, **moved.kwargs, out=out))

        def check():
            if cpu_out.value is None:
                if dev.value is not None:
                    return "out= variant returned a value where CPU returns None"
            else:
                returned = [dev.value] if isinstance(dev.value, torch.Tensor) else list(dev.value)
                if len(returned) != len(outs) or any(r is not o for r, o in zip(returned, outs)):
                    return "out= variant did not return the given out tensors"
            if [t.data_ptr() for t in outs] != ptrs:
                return "out= tensors were reallocated instead of written in place"

        exact = not is_nondeterministic(op)
        view = sample.output_process_fn_grad  # compared as in forward
        actual = lambda: view(to_cpu(outs[0]) if single else type(expected)(to_cpu(outs)))
        wanted = lambda: view(expected)
        reference = (lambda: narrowed(view(op(wide.input, *wide.args, **wide.kwargs)), self.dtype)) if wide else None
        ties = sample if op_key(op) in TIES_OPS else None
        return lambda: self._finish_values(cpu_out, dev, actual, wanted, FORWARD_TOL, exact, check, reference, ties)

    def _trace_grad(self, sample):
        op = self.op
        leaves = [t for t in torch.utils._pytree.tree_leaves((sample.input, sample.args, sample.kwargs))
                  if isinstance(t, torch.Tensor) and t.requires_grad]
        leaves = list({id(t): t for t in leaves}.values())
        if not leaves:
            self.fallbacks = {}
            return lambda: self.record("skip", note="no input requires grad")
        moved = on_device(sample, self.device, keep_grad=True)
        dev_leaves = [t for t in torch.utils._pytree.tree_leaves((moved.input, moved.args, moved.kwargs))
                      if isinstance(t, torch.Tensor) and t.requires_grad]
        dev_leaves = list({id(t): t for t in dev_leaves}.values())
        gen = torch.Generator().manual_seed(1234)
        weights = []

        def grads(s, inputs):
            out = op.gradcheck_wrapper(op.get_op(), s.input, *s.args, **s.kwargs)
            out = s.output_process_fn_grad(out)
            outs = [t for t in torch.utils._pytree.tree_leaves(out)
                    if isinstance(t, torch.Tensor) and t.requires_grad and (t.is_floating_point() or t.is_complex())]
            if not weights:
                weights.extend(torch.randn(t.shape, dtype=t.dtype, generator=gen) for t in outs)
            if len(weights) != len(outs):
                raise RuntimeError(f"{len(outs)} differentiable outputs vs CPU {len(weights)}")
            if not outs:
                return None
            # Each weight on its output's device (to(device="cpu") has CPU outputs from pjrt inputs).
            return torch.autograd.grad(outs, inputs, [w.to(o.device) for w, o in zip(weights, outs)],
                                       allow_unused=True)

        cpu = _Call(lambda: grads(sample, leaves))
        dev = self._device_call(lambda: grads(moved, dev_leaves))

        def finish():
            if cpu.error is None and cpu.value is None:
                return self.record("skip", note="no differentiable outputs", fallbacks=self.fallbacks)
            fill = lambda gs, ls: [g if g is not None else torch.zeros_like(t) for g, t in zip(gs, ls)]
            return self._finish_values(cpu, dev, lambda: to_cpu(fill(dev.value, dev_leaves)),
                                       lambda: fill(cpu.value, leaves), GRAD_TOL)

        return finish


def make_samples(op, kind, dtype, n):
    """The first `n` samples of `kind` (a fresh, seeded generation: the same on every call)."""
    if n <= 0:
        return []
    torch.manual_seed(0)
    if kind == "grad":
        gen = op.sample_inputs("cpu", dtype, requires_grad=True)
    else:
        gen = op.sample_inputs("cpu", dtype)
    gen = (s for s in gen if not s.kwargs.get("dropout_p"))  # random, as in test_ops.py
    if kind == "inplace":
        gen = (s for s in gen if not s.broadcasts_input)
    if kind == "extremal":
        first = next(iter(gen), None)
        s = with_extremal_values(first) if first is not None else None
        return [s] if s is not None else []
    return list(itertools.islice(gen, n))


def run_batch(items_and_samples):
    for item, sample in items_and_samples:
        item.trace(sample)
    return [item.done() for item, _ in items_and_samples]


def _rerun(op, entries, results, device, split):
    """Reruns the failed items of a multi-item batch: grouped by `split` first (if given), then alone,
    so an item's result never depends on the other items of its batch."""
    failed = [j for j, r in enumerate(results) if r["status"] == "fail"]
    if len(entries) <= 1 or not failed:
        return results
    groups = collections.defaultdict(list)
    for j in failed:
        groups[split(entries[j][0]) if split else j].append(j)
    for js in groups.values():
        fresh = []
        for j in js:
            item = entries[j][0]
            sample = make_samples(op, item.kind, item.dtype, item.index + 1)[item.index]
            fresh.append((Item(op, item.kind, item.dtype, item.index, device), sample))
        again = run_batch(fresh)
        again = _rerun(op, fresh, again, device, None) if split else again
        for j, r in zip(js, again):
            results[j] = r
    return results


def run_case_group(op, cases, limits, device):
    """Runs the (kind, dtype) `cases` as one batch (one trace, one sync); failed items are rerun by
    dtype, then alone."""
    batch = []
    skipped = []
    for kind, dname in cases:
        dtype = DTYPE_BY_NAME[dname]
        try:
            samples = make_samples(op, kind, dtype, limit(limits, kind, dname))
        except Exception as e:
            skipped.append({"kind": kind, "dtype": dname, "sample": 0, "status": "fail",
                            "error": "sample generation: " + first_line(e)})
            continue
        if not samples:
            skipped.append({"kind": kind, "dtype": dname, "sample": 0, "status": "skip",
                            "note": "no samples" if kind != "extremal" else "no floating tensor"})
        for i, s in enumerate(samples):
            batch.append((Item(op, kind, dtype, i, device), s))
    results = run_batch(batch)
    return skipped + _rerun(op, batch, results, device, lambda item: item.dtype)


def run_request(req, device="pjrt"):
    """Runs one request in this process: {"op": key, "dtypes": [names] | None, "kinds": [...],
    "limits": {...}, "batch": "op" | "dtype"} -> {"op", "items": [...], "lowered": {...}, "seconds"}.
    batch "op" (default) traces all of the op's forward-like cases as one graph and its gradients as
    another; "dtype" syncs once per dtype."""
    start = time.perf_counter()
    op = all_ops()[req["op"]]
    cases = plan(op, req.get("dtypes"), req.get("kinds", KINDS))
    limits = req.get("limits", SWEEP_LIMITS)
    per_dtype = req.get("batch", "op") == "dtype"
    before = lowered()
    items = []
    groups = collections.defaultdict(list)
    for kind, dname in cases:
        groups[(dname if per_dtype else "", kind == "grad")].append((kind, dname))
    for group in groups.values():
        items.extend(run_case_group(op, group, limits, device))
    return {"op": req["op"], "items": items, "lowered": _grown(before, lowered()),
            "seconds": round(time.perf_counter() - start, 3)}


def worker_main():
    """Serves requests, one JSON line each on stdin, answering one JSON line each on the original
    stdout; anything else written to stdout (by torch, warnings, C++) goes to stderr."""
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    import warnings
    warnings.simplefilter("ignore")
    torch.pjrt.set_fallback_warnings(False)
    all_ops()
    proto.write(json.dumps({"ready": os.getpid()}) + "\n")
    for line in sys.stdin:
        req = json.loads(line)
        test = req.get("selftest")  # for test_opcheck.py: a crash or a hang (in requests for one dtype only)
        if test and req.get("selftest_dtype") in (None, *(req.get("dtypes") or ())):
            if test == "abort":
                os.abort()
            if test == "hang":
                time.sleep(3600)
        print(f"[opcheck worker] {req['op']} {req.get('dtypes') or ''} {req.get('kinds') or ''}",
              file=sys.stderr, flush=True)
        try:
            res = run_request(req)
        except Exception:
            res = {"op": req["op"], "error": traceback.format_exc()}
        proto.write(json.dumps(res) + "\n")


# ---------------------------------------------------------------------------------------------
# The caller's side: workers and crash isolation


class WorkerDied(Exception):
    pass


class Worker:
    """One worker subprocess; restarted on demand after it died."""

    def __init__(self, log_dir=None, niceness=0, env=None):
        self.log_dir = log_dir or tempfile.mkdtemp(prefix="opcheck_")
        self.niceness, self.env = niceness, env
        self.proc = None
        self.starts = 0
        self.buf = b""

    def _start(self):
        self.starts += 1
        self.log_path = os.path.join(self.log_dir, f"worker{id(self) % 10000}_{self.starts}.log")
        self.log = open(self.log_path, "wb")
        nice = self.niceness
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, env=self.env,
                                     preexec_fn=(lambda: os.nice(nice)) if nice else None)
        self.buf = b""
        ready = self._read_line(600)
        if "ready" not in ready:
            raise WorkerDied("worker did not start")

    def _read_line(self, timeout):
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise WorkerDied(f"timed out after {timeout:.0f} s")
            r, _, _ = select.select([fd], [], [], min(left, 5))
            if r:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    rc = self.proc.wait()
                    self.proc = None
                    raise WorkerDied(self._death(rc))
                self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def _death(self, rc):
        why = (f"killed by {signal.Signals(-rc).name}" if rc < 0 and -rc in signal.valid_signals()
               else f"exited with status {rc}")
        try:
            self.log.flush()
            with open(self.log_path, "rb") as f:
                f.seek(max(0, os.path.getsize(self.log_path) - 8192))
                tail = [ln.strip() for ln in f.read().decode(errors="replace").splitlines()]
            tail = [ln for ln in tail if ln and not ln.startswith("[opcheck worker]")]
            if tail:
                why += ": " + tail[-1][:300]
        except OSError:
            pass
        return why

    def kill(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def request(self, req, timeout):
        if self.proc is None:
            self._start()
        try:
            self.proc.stdin.write((json.dumps(req) + "\n").encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            rc = self.proc.wait()
            self.proc = None
            raise WorkerDied(self._death(rc))
        res = self._read_line(timeout)
        if "error" in res:
            raise RuntimeError(f"opcheck worker failed on {req['op']}:\n{res['error']}")
        return res

    def close(self):
        if self.proc is not None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=30)
            except Exception:
                self.kill()
            self.proc = None


def crashed_items(req, why):
    op = all_ops()[req["op"]]
    return [{"kind": k, "dtype": d, "sample": 0, "status": "crash", "error": why}
            for k, d in plan(op, req.get("dtypes"), req.get("kinds", KINDS))]


def run_isolated(worker, req, timeout=300):
    """Runs `req` in `worker`; if the worker dies, reruns each (kind, dtype) part alone so that only
    the parts that crash are recorded as crashed."""
    start = time.perf_counter()
    try:
        return worker.request(req, timeout)
    except WorkerDied as e:
        first = str(e)
    op = all_ops()[req["op"]]
    parts = plan(op, req.get("dtypes"), req.get("kinds", KINDS))
    items, native = [], collections.Counter()
    if len(parts) <= 1:
        items = crashed_items(req, first)
    else:
        for kind, dname in parts:
            sub = dict(req, dtypes=[dname], kinds=[kind])
            try:
                r = worker.request(sub, timeout)
                items.extend(r["items"])
                native.update(r["lowered"])
            except WorkerDied as e:
                items.extend(crashed_items(sub, str(e)))
    return {"op": req["op"], "items": items, "lowered": dict(native),
            "seconds": round(time.perf_counter() - start, 3), "crashed": first}


class Checker:
    """Runs requests for many ops on `jobs` workers, in a given order, computing ahead: `get(key)`
    returns that op's result (computing it now if it was not scheduled). Used by the sweep."""

    def __init__(self, limits, jobs=1, dtypes=None, kinds=KINDS, timeout=300, niceness=0, log_dir=None,
                 on_result=None):
        self.limits, self.dtypes, self.kinds, self.timeout = limits, dtypes, kinds, timeout
        self.log_dir = log_dir or tempfile.mkdtemp(prefix="opcheck_")
        self.workers = [Worker(self.log_dir, niceness) for _ in range(jobs)]
        self.on_result = on_result
        self.lock = threading.Condition()
        self.queue = collections.deque()
        self.results = {}
        self.running = set()
        self.threads = []
        self.closed = False

    def request(self, key):
        return {"op": key, "dtypes": self.dtypes, "kinds": list(self.kinds), "limits": self.limits}

    def schedule(self, keys):
        with self.lock:
            for k in keys:
                if k not in self.results and k not in self.running and k not in self.queue:
                    self.queue.append(k)
            self.lock.notify_all()
        self._ensure_threads()

    def _ensure_threads(self):
        if not self.threads:
            for w in self.workers:
                t = threading.Thread(target=self._loop, args=(w,), daemon=True)
                t.start()
                self.threads.append(t)

    def _loop(self, worker):
        while True:
            with self.lock:
                while not self.queue and not self.closed:
                    self.lock.wait()
                if self.closed:
                    return
                key = self.queue.popleft()
                self.running.add(key)
            try:
                res = run_isolated(worker, self.request(key), self.timeout)
            except Exception as e:
                res = {"op": key, "items": crashed_items(self.request(key), f"harness error: {first_line(e)}"),
                       "lowered": {}, "seconds": 0, "crashed": traceback.format_exc()}
            if self.on_result:
                self.on_result(res)
            with self.lock:
                self.running.discard(key)
                self.results[key] = res
                self.lock.notify_all()

    def get(self, key):
        with self.lock:
            if key not in self.results and key not in self.running:
                if key in self.queue:
                    self.queue.remove(key)
                self.queue.appendleft(key)
                self.lock.notify_all()
        self._ensure_threads()
        with self.lock:
            while key not in self.results:
                self.lock.wait()
            return self.results[key]

    def wait_all(self):
        with self.lock:
            while self.queue or self.running:
                self.lock.wait()

    def close(self):
        with self.lock:
            self.closed = True
            self.lock.notify_all()
        for w in self.workers:
            w.close()


# ---------------------------------------------------------------------------------------------
# Judging results


def summarize(items):
    """One case's verdict from its items: (status, fallbacks {aten op: count}, first error).
    status: native, fallback, fails, crashed or skipped."""
    fb = collections.Counter()
    for it in items:
        fb.update(it.get("fallbacks", {}))
    for it in items:
        if it["status"] in ("fail", "crash"):
            return ("crashed" if it["status"] == "crash" else "fails"), dict(fb), it["error"]
    if not any(it["status"] == "pass" for it in items):
        notes = sorted({it.get("note", "") for it in items})
        return "skipped", dict(fb), "; ".join(n for n in notes if n)
    return ("fallback" if fb else "native"), dict(fb), None


if __name__ == "__main__":
    if sys.argv[1:] == ["--worker"]:
        worker_main()
    else:
        sys.exit("opcheck.py is a module (the worker runs it with --worker); see sweep.py")
