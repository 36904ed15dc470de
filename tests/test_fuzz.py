"""Differential fuzzing: random short programs (tests/fuzz_programs.py) run on pjrt and on CPU eager
must agree in values, dtypes, shapes, strides and raised exception types.

CI runs a bounded, derandomized set (no example database, so every run checks the same programs).
The long sweep is `tests/fuzz_sweep.py` (see docs/fuzz.md), over the same generator.

test_known_gaps holds one strict-xfail example of each difference the fuzzer knows about and steers
around (fuzz_programs.KNOWN_GAPS), none of which a lowering can fix; test_fuzz_regressions holds the
bugs the fuzzer found that were fixed.
"""
import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import fuzz_programs as FP

torch.pjrt.set_fallback_warnings(False)


@settings(max_examples=1500, derandomize=True, database=None, deadline=None,
          phases=[Phase.generate, Phase.shrink], suppress_health_check=list(HealthCheck))
@given(st.data())
def test_programs_match_cpu(data):
    FP.check(FP.generate(FP.HypothesisDraw(data)))


def on(dev, t):
    return t.to(dev)


# ------------------------------------------------------------------------------------ regressions

def both(fn):
    """fn(dev) on CPU and pjrt: results equal (NaN-aware), or both raise the same exception type."""
    try:
        expected = fn("cpu")
    except Exception as e:  # noqa: BLE001
        with pytest.raises(type(e)):
            torch.utils._pytree.tree_map(lambda t: t.cpu() if isinstance(t, torch.Tensor) else t, fn("pjrt"))
        return
    actual = fn("pjrt")
    torch.testing.assert_close(torch.utils._pytree.tree_map(lambda t: t.cpu(), actual), expected, equal_nan=True,
                               atol=0, rtol=0)


def index_put_into_expanded(dev):
    base = on(dev, torch.tensor([-1000, 100], dtype=torch.int32))
    view = base[:1].expand(2)
    view[on(dev, torch.tensor([0]))] = -2  # writes the element both aliases share
    return base, view


def index_put_dtype_mismatch(dev):
    x = on(dev, torch.zeros(3, dtype=torch.bfloat16))
    x[on(dev, torch.tensor([1]))] = on(dev, torch.tensor([True]))
    return x


def index_put_shape_mismatch(dev):
    x = on(dev, torch.zeros(3, 2))
    x[on(dev, torch.tensor([1]))] = on(dev, torch.ones(3, 2))
    return x


REGRESSIONS = {
    # A CPU fallback whose first tensor argument is a CPU scalar returned its result on the CPU.
    "fallback_result_device": lambda dev: 0 // on(dev, torch.tensor([1.0, 2.0], dtype=torch.bfloat16)),
    # softmax of a 0-d tensor was 1 whatever the input (NaN and inf give NaN).
    "softmax_0d": lambda dev: [torch.softmax(on(dev, torch.tensor(v)), 0) for v in (1.5, float("nan"), float("inf"))],
    "log_softmax_0d": lambda dev: [torch.log_softmax(on(dev, torch.tensor(v)), 0) for v in (1.5, float("nan"))],
    # Writing through one alias of an expanded tensor lost the write (the last alias was stored).
    "index_put_into_expanded": index_put_into_expanded,
    # max()/min() of an empty tensor returned -inf/inf instead of raising.
    "max_of_empty": lambda dev: on(dev, torch.zeros(0)).max(),
    "min_of_empty": lambda dev: on(dev, torch.zeros(0, 3)).min(),
    # index_put with mismatched dtypes or unbroadcastable values wrote (or failed to compile).
    "index_put_dtype_mismatch": index_put_dtype_mismatch,
    "index_put_shape_mismatch": index_put_shape_mismatch,
    # Subtraction with a bool Python number, relu and argmax of bools: CPU raises, pjrt computed.
    "rsub_bool_scalar": lambda dev: True - on(dev, torch.tensor([1.0, 2.0])),
    "sub_bool_scalar": lambda dev: on(dev, torch.tensor([1.0, 2.0])) - True,
    "relu_bool": lambda dev: torch.relu(on(dev, torch.tensor([True, False]))),
    "argmax_bool": lambda dev: on(dev, torch.tensor([True, False])).argmax(),
    "var_int": lambda dev: on(dev, torch.tensor([1, 2, 3])).var(),
    "pow_int_negative_exponent": lambda dev: on(dev, torch.tensor([2, 3])) ** -1,
    # False * inf is NaN (XLA rewrote convert(pred) * x into select(pred, x, 0)).
    "bool_times_inf": lambda dev: on(dev, torch.tensor([False, True])) * float("inf"),
    "bool_div_zero": lambda dev: on(dev, torch.tensor([False, True])) / 0,
    # Integer pow by squaring over every exponent bit (XLA's looked at 6 bits: 3 ** 64 was 1).
    "int_pow_large_exponent": lambda dev: torch.pow(on(dev, torch.tensor([3, -7, 2], dtype=torch.int32)),
                                                    on(dev, torch.tensor([64, 100, 31], dtype=torch.int32))),
    "abs_uint8": lambda dev: torch.abs(on(dev, torch.tensor([0, 200, 255], dtype=torch.uint8))),
}


@pytest.mark.parametrize("name", sorted(REGRESSIONS))
def test_fuzz_regressions(name):
    both(REGRESSIONS[name])


# ------------------------------------------------------------------------------------ known gaps

def gap(reason):
    return pytest.mark.xfail(reason=reason, strict=True)


LOWERED_KERNEL = "aten/lowered_kernel.cc (call-time checks of lowered ops)"


@gap(f"dtype check: CPU kernels raise NotImplementedError for dtypes they lack; {LOWERED_KERNEL} checks none")
def test_known_gap_dtype_check():
    with pytest.raises(NotImplementedError):
        torch.abs(torch.tensor([True], device="pjrt")).cpu()


@gap(f"internal overlap: in-place writes into expanded tensors raise on CPU; {LOWERED_KERNEL} does not check")
def test_known_gap_internal_overlap():
    x = torch.zeros(1, device="pjrt").expand(3)
    with pytest.raises(RuntimeError):
        x.add_(1)


@gap(f"partial overlap: an out= that overlaps an input raises on CPU; {LOWERED_KERNEL} does not check")
def test_known_gap_partial_overlap():
    x = torch.tensor([1, 2], dtype=torch.uint8, device="pjrt")
    with pytest.raises(RuntimeError):
        x.mul_(x[1])


@gap(f"out= dtype: torch.neg(int16, out=float16) raises 'Found dtype Half but expected Short' on CPU; {LOWERED_KERNEL} "
     "converts")
def test_known_gap_out_dtype():
    with pytest.raises(RuntimeError):
        torch.neg(torch.tensor([1], dtype=torch.int16, device="pjrt"),
                  out=torch.empty(0, dtype=torch.float16, device="pjrt"))


@gap(f"scalar range: {LOWERED_KERNEL} memoizes Meta results by the kind of a value Scalar, so the range check of "
     "the first call is skipped for later values (masked_fill(int32, inf) after masked_fill(int32, 0.5))")
def test_known_gap_scalar_range():
    x = torch.tensor([1, 2], dtype=torch.int32, device="pjrt")
    x.masked_fill(x > 1, 0.5)
    with pytest.raises(RuntimeError):
        x.masked_fill(x > 1, float("inf")).cpu()


@gap(f"in-place result type: int16.mul_(0-d float tensor) raises on CPU (Float can't be cast to Short); "
     f"{LOWERED_KERNEL} casts")
def test_known_gap_inplace_result_type():
    x = torch.tensor([2, 3], dtype=torch.int16, device="pjrt")
    with pytest.raises(RuntimeError):
        x.mul_(torch.tensor(2.5))


@gap("empty reduction: min(dim) over an empty dim raises IndexError on CPU; the lowering can only raise when the "
     "graph runs, which surfaces as RuntimeError")
def test_known_gap_empty_reduction_index_error():
    with pytest.raises(IndexError):
        torch.zeros(0, device="pjrt").min(0)[0].cpu()


@gap("lowering-time checks on empty tensors: nothing is lowered for a result without elements, so a check made in a "
     "lowering (index_put's dtypes, var of integers) never runs")
def test_known_gap_lowering_checks_on_empty_tensors():
    x = torch.zeros(0, 2, dtype=torch.bfloat16, device="pjrt")
    with pytest.raises(RuntimeError):
        x[torch.tensor([0], device="pjrt")[:0]] = torch.zeros(0, 2, dtype=torch.bool, device="pjrt")
        x.cpu()


@gap(f"out= resize strides: an out= tensor the op resizes gets its TensorIterator's strides on CPU (the inputs' "
     f"layout); {LOWERED_KERNEL} resizes it contiguously")
def test_known_gap_out_resize_strides():
    def strides(dev):
        a = torch.zeros(2, 3).to(dev).t()
        out = torch.empty(0, device=dev)
        torch.add(a, a, out=out)
        return out.stride()
    assert strides("pjrt") == strides("cpu")


@gap(f"reduction into a wider out=: torch.sum(bfloat16, out=float32) accumulates in float32 on CPU; {LOWERED_KERNEL} "
     "reduces in bfloat16 and converts")
def test_known_gap_reduction_out_dtype():
    def total(dev):
        out = torch.empty((), device=dev)
        torch.sum(torch.full((3,), 3.34375, dtype=torch.bfloat16, device=dev), 0, out=out)
        return out.item()
    assert total("pjrt") == total("cpu")


@gap("Meta strides: torch's Meta kernel of logical_xor/logical_and with a broadcast first operand gives other strides "
     "than its CPU kernel, and pjrt takes result strides from Meta kernels")
def test_known_gap_meta_strides():
    def strides(dev):
        a = torch.arange(6).reshape(2, 3).to(dev).t()
        return torch.logical_xor(torch.tensor([2.0], device=dev), a).stride()
    assert strides("pjrt") == strides("cpu")


@gap("integer division by zero raises on CPU (a data-dependent check: it needs the values, like the out-of-range "
     "index checks being added to aten/lowered_kernel.cc and graph/)")
def test_known_gap_integer_division_by_zero():
    with pytest.raises(RuntimeError):
        torch.div(torch.tensor([1], device="pjrt"), torch.tensor([0], device="pjrt"), rounding_mode="floor").cpu()


@gap("denormals: XLA:CPU's client runs executables with flush-to-zero and denormals-are-zero set "
     "(runtime/plugin, not a lowering); CPU eager keeps denormals")
def test_known_gap_denormals_are_flushed():
    x = torch.tensor([1e-40, -1e-40], dtype=torch.float32)
    assert torch.equal((x.to("pjrt") * 1).cpu(), x * 1)
    assert torch.equal((x.to("pjrt") > 0).cpu(), x > 0)
