"""No silent wrong answers: regressions for every mismatch an outside review found, each compared
with CPU eager (default dtype, memory formats, NaN and infinities, out-of-range indices, sizes
past 16 bits, threads, errors found after launch, compile logging on the autograd thread)."""
import inspect
import math
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from helpers import Counters, run_python

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")


def same(actual, expected):
    """Equal dtype, shape and values, NaN where the CPU has NaN."""
    actual = actual.cpu()
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    torch.testing.assert_close(actual, expected, equal_nan=True, rtol=0, atol=0)


# ---------------------------------------------------------------------------------- default dtype

@pytest.mark.parametrize("first,second", [(torch.float32, torch.float64), (torch.float64, torch.float32)])
def test_default_dtype_reaches_every_result(first, second):
    old = torch.get_default_dtype()
    try:
        for dtype in (first, second):  # the same program twice: memoized shapes must not leak
            torch.set_default_dtype(dtype)
            same(torch.arange(4, device="pjrt") * 0.5, torch.arange(4) * 0.5)
            same(torch.ones(3, device="pjrt", dtype=torch.int64) / 2, torch.ones(3, dtype=torch.int64) / 2)
            same(torch.full((2,), 3, device="pjrt") + 0.25, torch.full((2,), 3) + 0.25)
    finally:
        torch.set_default_dtype(old)


# ---------------------------------------------------------------------------------- memory formats

def test_clone_honours_its_memory_format_whatever_came_first():
    x = torch.randn(2, 3, 4, 5)
    d = x.to("pjrt")
    for fmt in (torch.contiguous_format, torch.channels_last, torch.contiguous_format, torch.channels_last):
        got, want = d.clone(memory_format=fmt), x.clone(memory_format=fmt)
        assert got.stride() == want.stride(), fmt
        same(got, want)
    # view(-1) needs a contiguous layout: it fails exactly where the CPU fails.
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        x.clone(memory_format=torch.channels_last).view(-1)
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        d.clone(memory_format=torch.channels_last).view(-1)
    same(d.clone().view(-1), x.view(-1))


@pytest.mark.parametrize("size,fmt", [((2, 3, 4, 5, 6), torch.channels_last_3d), ((2, 3, 4, 5), torch.channels_last),
                                      ((2, 3, 4, 5), torch.contiguous_format)])
def test_empty_with_memory_format_has_cpu_strides(size, fmt):
    assert torch.empty(size, memory_format=fmt, device="pjrt").stride() == torch.empty(size, memory_format=fmt).stride()


def test_memory_format_of_the_wrong_rank_raises_like_cpu():
    for fmt in (torch.channels_last, torch.channels_last_3d):
        with pytest.raises(RuntimeError) as cpu:
            torch.empty(2, 3, 4, memory_format=fmt)
        with pytest.raises(RuntimeError) as dev:
            torch.empty(2, 3, 4, memory_format=fmt, device="pjrt")
        assert str(dev.value) == str(cpu.value)


# ---------------------------------------------------------------------------------- NaN and inf

NAN_GRID = torch.tensor([[1, math.nan, 3], [math.inf, -math.inf, 0], [2, 5, -1]])


@pytest.mark.parametrize("name,fn", [
    ("max", lambda t: t.max()), ("min", lambda t: t.min()),
    ("amax", lambda t: t.amax(1)), ("amin", lambda t: t.amin(1)), ("amax0", lambda t: t.amax(0)),
    ("max.dim", lambda t: t.max(1).values), ("min.dim", lambda t: t.min(0).values),
    ("argmax", lambda t: t.argmax(1)), ("argmin", lambda t: t.argmin(0)),
    ("maximum", lambda t: torch.maximum(t, t.flip(0))), ("maximum swapped", lambda t: torch.maximum(t.flip(0), t)),
    ("minimum", lambda t: torch.minimum(t, t.flip(1))), ("minimum swapped", lambda t: torch.minimum(t.flip(1), t)),
    ("sign", lambda t: t.sign()), ("clamp", lambda t: t.clamp(0, 2)), ("relu", lambda t: t.relu()),
    ("max_pool", lambda t: torch.nn.functional.max_pool1d(t[None], 2)),
    ("softmax", lambda t: t.softmax(1)), ("cummax-free sum", lambda t: t.sum(0)),
])
def test_nan_and_infinities_propagate_like_cpu(name, fn):
    same(fn(NAN_GRID.to("pjrt")), fn(NAN_GRID))


def test_sign_of_signed_zero_and_nan():
    x = torch.tensor([math.nan, -0.0, 0.0, -2.0, math.inf, -math.inf])
    got = x.to("pjrt").sign().cpu()
    same(got, x.sign())
    assert not torch.signbit(got[1])  # torch: sign(-0.0) is +0.0


# ---------------------------------------------------------------------------------- index bounds

OUT_OF_RANGE = [
    ("index", "aten::index.Tensor", lambda x, i: x[i]),
    ("index negative", "aten::index.Tensor", lambda x, i: x[-i - 2]),
    ("index_select", "aten::index_select", lambda x, i: x.index_select(0, i)),
    ("gather", "aten::gather", lambda x, i: x.gather(0, i)),
    ("scatter", "aten::scatter", lambda x, i: x.clone().scatter_(0, i, 1.0)),
    ("scatter_add", "aten::scatter_add", lambda x, i: x.clone().scatter_add_(0, i, torch.ones_like(x[:1]))),
    ("index_put", "aten::index_put", lambda x, i: x.clone().index_put_((i,), torch.tensor(1.0, device=x.device))),
    ("setitem", "aten::index_put", lambda x, i: x.clone().__setitem__(i, 2.0)),
    ("embedding", "aten::index_select", lambda x, i: torch.nn.functional.embedding(i[None], x[:, None])),
]


@pytest.mark.parametrize("name,op,fn", OUT_OF_RANGE, ids=[c[0] for c in OUT_OF_RANGE])
def test_out_of_range_index_raises_cpus_error_type_naming_op_and_line(name, op, fn):
    x = torch.arange(5.0)
    bad = torch.tensor([7])
    with pytest.raises((IndexError, RuntimeError)) as cpu:
        fn(x, bad)  # the CPU refuses too: RuntimeError for gather and scatter, IndexError for the rest
    d, i = x.to("pjrt"), bad.to("pjrt")
    with Counters() as c:
        result = fn(d, i)  # traced: no sync per indexing op, the check runs inside the graph
        other = d * 2
    assert c["Executions"] == 0
    with pytest.raises(type(cpu.value)) as info:
        result.cpu() if result is not None else torch.pjrt.synchronize()
    message = str(info.value)
    assert "is out of bounds for dimension 0 with size 5" in message
    assert op in message
    assert f"traced at {__file__}:{fn.__code__.co_firstlineno} in <lambda>" in message  # the line of the op
    same(other, x * 2)  # values that do not depend on the bad index are unaffected


def test_in_range_indices_including_negative_ones_work():
    x = torch.arange(5.0)
    i = torch.tensor([0, 4, -5, -1])
    same(x.to("pjrt")[i.to("pjrt")], x[i])
    same(x.to("pjrt").index_select(0, torch.tensor([4, 0], device="pjrt")), x.index_select(0, torch.tensor([4, 0])))


def test_values_computed_from_a_bad_index_stay_poisoned():
    d = torch.arange(5.0, device="pjrt")
    bad = d[torch.tensor([9], device="pjrt")]
    spoiled = bad + 1
    fine = d + 1
    torch.pjrt.metrics.reset()
    with pytest.raises(IndexError, match="index 9 is out of bounds"):
        torch.pjrt.synchronize()
    for t in (bad, spoiled):
        with pytest.raises(IndexError, match="index 9 is out of bounds"):
            t.cpu()
    # Traced from a poisoned value after the failure: the error follows it.
    with pytest.raises(IndexError, match="index 9 is out of bounds"):
        (spoiled * 3).cpu()
    same(fine, torch.arange(5.0) + 1)
    torch.pjrt.synchronize()  # reported once: the device keeps working


def test_a_bad_index_found_at_the_next_sync_spoils_what_was_traced_from_it_meanwhile():
    d = torch.arange(5.0, device="pjrt")
    spoiled = d[torch.tensor([5], device="pjrt")]
    torch.pjrt._C._synchronize(0, "other", False)  # launched, not waited for
    later = spoiled * 2  # traced from a buffer whose check has not been read yet
    fine = d - 1
    with pytest.raises(IndexError):
        fine.cpu()  # the next sync point reports it...
    with pytest.raises(IndexError):
        later.cpu()  # ...and what was computed from the bad value is not returned
    same(fine, torch.arange(5.0) - 1)


def test_a_repeated_bad_read_raises_its_own_error_at_its_own_read():
    # The read memo answered the second, identical read with the first one's poisoned buffer (the
    # first error and line) and left the second check pending: it raised at the next, unrelated sync.
    d = torch.arange(5.0, device="pjrt")
    bad = torch.tensor([7], device="pjrt")
    for _ in range(2):
        result, line = d[bad], inspect.currentframe().f_lineno
        with pytest.raises(IndexError, match=f"traced at {__file__}:{line} "):
            result.cpu()
    same(d + 1, torch.arange(5.0) + 1)


def test_a_check_names_the_users_line_past_torchs_own_frames():
    # F.embedding traces index_select from torch/nn/functional.py: the message skips torch's
    # frames (and torch_pjrt's) and names the caller's line.
    weight = torch.randn(5, 3, device="pjrt")
    bad = torch.tensor([9], device="pjrt")
    result, line = torch.nn.functional.embedding(bad, weight), inspect.currentframe().f_lineno
    with pytest.raises(IndexError, match=f"traced at {__file__}:{line} in test_a_check_names"):
        result.cpu()


def test_max_unpool_indices_outside_the_output_plane_raise():
    # They were dropped (the scatter ignored them); CPU raises "Found an invalid max index".
    y = torch.ones(1, 1, 2, 2)
    for bad in (16, -1):
        i = torch.tensor([[[[0, 1], [2, bad]]]])
        with pytest.raises(RuntimeError, match="invalid max index"):
            F.max_unpool2d(y, i, 2, output_size=(4, 4))
        result = F.max_unpool2d(y.to("pjrt"), i.to("pjrt"), 2, output_size=(4, 4))
        with pytest.raises(RuntimeError, match=f"index {bad} is out of bounds for 16 elements in aten::max_unpool2d"):
            result.cpu()
    i = torch.tensor([[[[0, 1], [2, 15]]]])
    same(F.max_unpool2d(y.to("pjrt"), i.to("pjrt"), 2, output_size=(4, 4)), F.max_unpool2d(y, i, 2, output_size=(4, 4)))


def test_masked_scatter_with_too_short_a_source_raises():
    # The last source element repeated; CPU raises. The mask broadcast to self's shape counts.
    mask = torch.tensor([True, False, True])
    for self_shape, source_len, ok in (((2, 3), 3, False), ((2, 3), 4, True), ((3,), 1, False), ((0, 3), 1, True)):
        fn = lambda d: torch.zeros(self_shape, device=d).masked_scatter(mask.to(d), torch.arange(float(source_len), device=d))
        if ok:
            same(fn("pjrt"), fn("cpu"))
            continue
        with pytest.raises(RuntimeError, match="^Number of elements of source < number of ones in mask$"):
            fn("cpu")
        with pytest.raises(RuntimeError, match="^Number of elements of source < number of ones in mask$"):
            fn("pjrt").cpu()


# masked_select and nonzero's out= variants (kernels of their own, outside the lowering table) wrote
# a result that overlaps an input, or of another dtype, where CPU refuses.
DATA_DEPENDENT_OUT_REFUSALS = {
    "masked_select out is self": lambda d: (lambda x: torch.masked_select(x, x > 0, out=x))(torch.ones(4, device=d)),
    "masked_select out is mask": lambda d: (lambda m: torch.masked_select(m, m, out=m))(
        torch.ones(4, dtype=torch.bool, device=d)),
    "masked_select out partly self": lambda d: (lambda x: torch.masked_select(x[:4], x[:4] > 0, out=x[2:]))(
        torch.ones(8, device=d)),
    "masked_select out is self, mask broadcast": lambda d: (
        lambda x: torch.masked_select(x, torch.ones(2, 4, dtype=torch.bool, device=d), out=x))(torch.ones(4, device=d)),
    "masked_select out dtype": lambda d: torch.masked_select(
        torch.ones(4, device=d), torch.ones(4, device=d) > 0, out=torch.zeros(4, dtype=torch.long, device=d)),
    "nonzero out is self": lambda d: (lambda x: torch.nonzero(x, out=x))(torch.ones(4, 1, dtype=torch.long, device=d)),
}


@pytest.mark.parametrize("name", DATA_DEPENDENT_OUT_REFUSALS)
def test_data_dependent_out_variants_refuse_what_the_cpu_refuses(name):
    fn = DATA_DEPENDENT_OUT_REFUSALS[name]
    with pytest.raises(RuntimeError) as on_cpu:
        fn("cpu")
    with pytest.raises(RuntimeError) as on_pjrt:
        fn("pjrt").cpu()
    assert str(on_pjrt.value).split(".")[0] == str(on_cpu.value).split(".")[0]


def test_data_dependent_out_variants_write_beside_their_inputs():
    # Disjoint views of one storage are no overlap.
    def fn(d):
        x = torch.arange(8.0, device=d)
        torch.masked_select(x[:4], x[:4] > 1, out=x[4:6])
        return x
    same(fn("pjrt"), fn("cpu"))


def test_histc_refuses_a_range_that_is_not_finite():
    # With min == max (the default) the range is the data's: CPU refuses NaN and infinity there, and
    # an infinite min or max given. pjrt counted the finite values.
    nan, inf = math.nan, math.inf
    for data, lo, hi in (([1.0, nan], 0, 0), ([1.0, inf], 0, 0), ([-inf, 1.0], 0, 0), ([1.0, nan], 1, 1),
                         ([1.0, 2.0], 0, inf)):
        with pytest.raises(RuntimeError, match="is not finite"):
            torch.histc(torch.tensor(data), bins=4, min=lo, max=hi)
        with pytest.raises(RuntimeError, match="is not finite"):
            torch.histc(torch.tensor(data, device="pjrt"), bins=4, min=lo, max=hi).cpu()
    # An explicit range ignores NaN and what lies outside it; a constant input widens by one.
    for data, lo, hi in (([1.0, nan], 0, 4), ([1.0, inf, -inf], 0, 4), ([3.0, 3.0], 0, 0), ([], 0, 0)):
        x = torch.tensor(data)
        same(torch.histc(x.to("pjrt"), bins=4, min=lo, max=hi), torch.histc(x, bins=4, min=lo, max=hi))


# ---------------------------------------------------------------------------------- integer division

INTEGER_DIVISIONS = [
    ("floor_divide", lambda a, b: a // b),
    ("div floor", lambda a, b: torch.div(a, b, rounding_mode="floor")),
    ("div trunc", lambda a, b: torch.div(a, b, rounding_mode="trunc")),
    ("remainder", lambda a, b: a % b),
    ("fmod", torch.fmod),
    ("floor_divide_", lambda a, b: a.clone().floor_divide_(b)),
    ("remainder out=", lambda a, b: torch.remainder(a, b, out=torch.empty(3, dtype=torch.int64, device=a.device))),
    ("uint8", lambda a, b: a.to(torch.uint8) // b.to(torch.uint8)),
]


@pytest.mark.parametrize("name,fn", INTEGER_DIVISIONS, ids=[c[0] for c in INTEGER_DIVISIONS])
def test_integer_division_by_zero_raises_zero_division_error(name, fn):
    a, b = torch.tensor([5, -3, 7]), torch.tensor([1, 0, 2])
    with pytest.raises(RuntimeError, match="^ZeroDivisionError$"):
        fn(a, b)
    # A device divisor is checked when the graph runs (XLA's integer division gave -1 or the
    # dividend): the read raises, naming the op and the line.
    result = fn(a.to("pjrt"), b.to("pjrt"))
    with pytest.raises(RuntimeError, match="^ZeroDivisionError: an integer division by zero in aten::") as info:
        result.cpu()
    assert f"traced at {__file__}:" in str(info.value)
    same(a.to("pjrt") + 1, a + 1)  # reported once: the next sync is clean
    # A number or a CPU scalar is checked at the call, as the CPU does.
    for zero in (torch.tensor(0),) if name == "uint8" else (0, torch.tensor(0)):
        with pytest.raises(RuntimeError, match="^ZeroDivisionError$"):
            fn(a.to("pjrt"), zero)
    same(fn(a.to("pjrt"), torch.tensor([1, 2, -3], device="pjrt")), fn(a, torch.tensor([1, 2, -3])))


def test_divisions_that_the_cpu_does_not_refuse_are_not_checked():
    a, z = torch.tensor([5, -3, 7]), torch.tensor([0, 0, 0])
    cases = [
        lambda a, z: a / z,  # true division: a float result
        lambda a, z: torch.div(a, z),
        lambda a, z: a // z.double(),  # promoted to a float type
        lambda a, z: a // 0.0,
        lambda a, z: torch.remainder(a.float(), z),
        lambda a, z: a[:0] // z[:1],  # empty: CPU's loop never runs
        lambda a, z: a[:0] // 0,
    ]
    for fn in cases:
        torch.pjrt.metrics.reset()
        same(fn(a.to("pjrt"), z.to("pjrt")), fn(a, z))
        assert torch.pjrt.metrics.fallbacks() == {}
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        torch.remainder(5, z)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        torch.remainder(5, z.to("pjrt")).cpu()


# ---------------------------------------------------------------------------------- sizes

def test_cat_of_more_than_65535_tensors():
    # List lengths and offsets were 16 bits and wrapped silently. Empty parts keep the compiled
    # program small (they are skipped); the real ones are spread past the 16-bit boundary.
    parts = [torch.full((2,), float(i)) if i % 9000 == 0 or i == 69999 else torch.empty(0) for i in range(70000)]
    d = [p.to("pjrt") for p in parts]
    same(torch.cat(d), torch.cat(parts))
    assert torch.cat(d).shape == (2 * 9,)


# ---------------------------------------------------------------------------- weights at reused addresses

def close(actual, expected):
    torch.testing.assert_close(actual.cpu(), expected, rtol=1e-4, atol=1e-3)


def test_matmul_by_a_weight_updated_in_place():
    # XLA:CPU's XNNPACK dots kept a parameter right operand packed while its buffer address was
    # unchanged: after an in-place update (donation keeps the address) the product used the old
    # weight (off by ~100 here), and a training step's backward used the first step's weights.
    a, w = torch.randn(128, 1024), torch.randn(1024, 1024)
    da, dw = a.to("pjrt"), w.to("pjrt")
    for _ in range(3):
        close(da @ dw, a @ w)
        dw.add_(1)  # its own program, as an optimizer step is
        torch.pjrt.synchronize()
        w.add_(1)


def test_matmul_by_new_weights_on_freed_buffers():
    # The same cache, reached through the allocator: a new weight of the same size lands on the
    # address of one just freed (it did by the sixth weight here).
    a = torch.randn(64, 1024)
    da = a.to("pjrt")
    for _ in range(20):
        w = torch.randn(1024, 1024)
        dw = w.to("pjrt")
        close(da @ dw, a @ w)
        del dw
        torch.pjrt.synchronize()


# ---------------------------------------------------------------------------------- threads

def test_first_tensor_and_is_initialized_from_two_threads_do_not_deadlock():
    code = """
        import threading, torch
        stop = False
        def poll():
            while not stop:
                torch.pjrt.is_initialized()
        t = threading.Thread(target=poll)
        t.start()
        x = torch.ones(2, device="pjrt") + 1
        print(x.cpu().tolist())
        stop = True
        t.join()
    """
    for _ in range(3):
        out = run_python(code, timeout=120).stdout
        assert out.strip() == "[2.0, 2.0]"


# ---------------------------------------------------------------------------------- errors after launch

def test_an_execution_failing_after_launch_is_reported_once_and_spoils_nothing_else(tmp_path):
    import xla_plugins.xla_cpu_pjrt as pkg

    include = os.path.join(list(pkg.__path__)[0], "include")
    shim = tmp_path / "libfaulty.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-I", include, os.path.join(FIXTURES, "faulty_pjrt_plugin.c"),
                    "-o", str(shim), "-ldl", "-lpthread"], check=True)
    out = run_python("""
        import time, torch
        a = torch.ones(3, device="pjrt") + 1
        torch.pjrt._C._synchronize(0, "other", False)  # launched; its completion reports a fault
        time.sleep(0.3)
        b = torch.ones(3, device="pjrt") * 3
        torch.pjrt._C._synchronize(0, "other", False)  # launching this one retires the first
        print("b", b.cpu().tolist())
        try:
            torch.pjrt.synchronize()
            print("no error")
        except RuntimeError as e:
            print("error", "device execution failed" in str(e))
        torch.pjrt.synchronize()
        print("then fine")
    """, env={"TORCH_PJRT_PLUGIN_LIBRARY": str(shim), "TORCH_PJRT_DISK_CACHE": "0",
              "FAULTY_PJRT_REAL": os.path.join(list(pkg.__path__)[0], "xla_cpu_pjrt.so"),
              "FAULTY_PJRT_FAIL_EXECUTION": "1"}).stdout
    assert out.split("\n")[:3] == ["b [3.0, 3.0, 3.0]", "error True", "then fine"], out


# ---------------------------------------------------------------------------------- compile logging

@pytest.mark.parametrize("engine_threads", [False, True])
def test_compile_logging_never_changes_what_backward_does(engine_threads):
    out = run_python(f"""
        import torch
        torch.pjrt.set_fallback_warnings(False)
        x = torch.randn(8, 8, device="pjrt", requires_grad=True)
        # pjrt backwards run in the calling thread; torch's default runs them on the autograd
        # engine's device thread, which has no Python frames
        torch.autograd.set_multithreading_enabled({engine_threads})
        torch.pjrt.set_max_pending_nodes(3)  # compiles forced inside the backward
        y = (x.sin().cos() * 2).exp()
        y = torch.nn.functional.logsigmoid(y)  # no lowering: a CPU fallback inside backward
        y.sum().backward()
        print("grad", tuple(x.grad.cpu().shape))
    """, env={"TORCH_PJRT_LOG_COMPILES": "1", "TORCH_PJRT_DISK_CACHE": "0"})
    assert "grad (8, 8)" in out.stdout
    # the log says where the compile came from
    if engine_threads:
        assert "autograd engine" in out.stderr
    else:
        assert "forced at <string>:11 in <module>" in out.stderr  # the backward() line
