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
import torch.nn.functional as F
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st

import fuzz_programs as FP

torch.pjrt.set_fallback_warnings(False)


@settings(max_examples=1500, derandomize=True, database=None, deadline=None,
          phases=[Phase.generate, Phase.shrink], suppress_health_check=list(HealthCheck))
@given(st.data())
def test_programs_match_cpu(data):
    FP.check(FP.generate(FP.HypothesisDraw(data)))


@settings(max_examples=300, derandomize=True, database=None, deadline=None,
          phases=[Phase.generate, Phase.shrink], suppress_health_check=list(HealthCheck))
@given(st.data())
def test_programs_launched_in_pieces_match_cpu(data):
    # Without autograd the trace is launched in pieces as it is traced (graph/trace.h
    # PipelinedLaunchDue); with a first piece of one op node the cuts fall after op nodes 1, 2 and 4,
    # inside these short programs, between a view and its write, an out= and its read, and so on
    # (8443 programs of tests/fuzz_sweep.py's seeds run this way made 10470 cuts, 0 mismatches;
    # tests/test_pipelined_launch.py asserts the cuts themselves).
    program = FP.generate(FP.HypothesisDraw(data))
    assume("grad" not in program.source())  # autograd's programs are never cut
    default = torch.pjrt.pipelined_launch_nodes()
    torch.pjrt.set_pipelined_launch_nodes(1)
    try:
        FP.check(program, context=torch.no_grad)
    finally:
        torch.pjrt.set_pipelined_launch_nodes(default)


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


def copy_onto_same_data_expanded(dev):
    x = on(dev, torch.tensor([1.0, 2.0])).expand(3, 2)
    x.copy_(x.detach())
    x.permute(0, 1).copy_(x)
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
    # copy_ between views of the same data returns at once, before the overlap checks: an expanded
    # tensor copied onto itself raised "more than one element ..." (seeds 505076, 507203).
    "copy_onto_same_data_expanded": copy_onto_same_data_expanded,
    # XLA's simplifier turned multiply(convert(bool), x) into select(bool, x, 0): False * inf was 0,
    # not NaN (seed 701028: bool // -0.0).
    "bool_times_non_finite": lambda dev: [
        on(dev, torch.tensor([False, True, False])).float() * on(dev, torch.tensor([float("inf"), 2.0, float("nan")])),
        on(dev, torch.tensor([False, True])) // -0.0,
        on(dev, torch.tensor([False, True])).half() * float("-inf")],
    # Dtype rules the Meta kernels leave out, raised by CPU eager's kernels (seeds 900237, 900494).
    "addcdiv_bool_divisors": lambda dev: torch.addcdiv(on(dev, torch.tensor([1, 2], dtype=torch.int32)),
                                                       on(dev, torch.tensor([True, False])),
                                                       on(dev, torch.tensor([1, 2], dtype=torch.int32)), value=2),
    # XLA's simplifier rewrote log(pow(a, b)) as b * log|a| and log(exp(a)) as a (seed 1001394:
    # log(pow(-1., -1.)) was -0.0, not NaN); overflow and underflow too.
    "log_of_pow_and_exp": lambda dev: [
        torch.log(torch.pow(on(dev, torch.tensor([-1.0, -2.0, 10.0, 10.0, 0.0, 1.0])),
                            on(dev, torch.tensor([-1.0, 3.0, 50.0, -50.0, 2.0, 0.5])))),
        torch.log(torch.exp(on(dev, torch.tensor([100.0, -200.0, 0.0, float("nan"), float("inf")])))),
        torch.log(on(dev, torch.tensor([-8.0, 1.0])) ** 0.5)],
    # ... and where the power is exactly 1: log(pow(1., -inf)) gave NaN (-inf * log 1), as did
    # pow(0 / inf / NaN, 0) (seed 1408491: xlogy(True, True ** -inf)).
    "log_of_pow_one": lambda dev: [
        torch.log(torch.pow(on(dev, torch.tensor([1.0, 1.0, 0.0, float("inf"), float("nan"), -1.0])),
                            on(dev, torch.tensor([-float("inf"), float("inf"), 0.0, 0.0, 0.0, float("inf")])))),
        torch.xlogy(on(dev, torch.tensor(True)), on(dev, torch.tensor(True)) ** -float("inf"))],
    # gelu's CDF is 0 and 1 beyond |x| = 5.7 (seed 1006845: gelu(100.) was 99.99998, cast to 99).
    "gelu_saturates": lambda dev: [F.gelu(on(dev, torch.tensor([100.0, 7.5, -7.5, -1e38, 1e38]))),
                                   F.gelu(on(dev, torch.tensor([100.0], dtype=torch.bfloat16))).to(torch.uint8)],
    # XLA:CPU lost the sign of a bfloat16 converted from an integer where copysign's bit operations
    # were fused with what followed (seed 1109337: copysign(bf16, int16).clamp(max=0) gave 0).
    "copysign_bfloat16_by_integers": lambda dev: torch.copysign(
        on(dev, torch.tensor([0.0, float("inf"), -100.0, 1.5], dtype=torch.bfloat16)),
        on(dev, torch.tensor([-100, -1000, 5, -32768], dtype=torch.int16))).clamp(max=0),
    "heaviside_mixed_dtypes": lambda dev: torch.heaviside(on(dev, torch.tensor([1.5, 0.0])),
                                                          on(dev, torch.tensor([1, 2]))),
    # hardswish's gradient at NaN is the incoming gradient in CPU's kernels (seed 1303516).
    "hardswish_backward_nan": lambda dev: torch.ops.aten.hardswish_backward(
        on(dev, torch.tensor([2.0, -1.0, 2.0, 2.0, 2.0])),
        on(dev, torch.tensor([float("nan"), -3.0, 3.0, 1.5, float("-inf")]))),
    # huber_loss has self's dtype, a float64 target included (CPU's kernel writes into a tensor like
    # self; torch's Meta kernel promoted: seed 1600209).
    "huber_loss_keeps_self_dtype": lambda dev: [
        F.huber_loss(on(dev, torch.tensor([[0.5, -3.0, 2.0]])), on(dev, torch.tensor([[1.0], [0.1]], dtype=torch.float64)),
                     delta=0.5, reduction=r) for r in ("none", "sum")],
    # nll_loss's class targets are checked (an out-of-range target picked nothing: a loss of 0;
    # seeds 1601196, 1601346), ignore_index exempt; an empty float target raises as on the CPU.
    "nll_loss_target_out_of_range": lambda dev: F.nll_loss(on(dev, torch.zeros(2, 3)), on(dev, torch.tensor([5, 1]))),
    "nll_loss_no_classes": lambda dev: F.cross_entropy(on(dev, torch.zeros(2, 0)), on(dev, torch.tensor([0, 0]))),
    "nll_loss2d_target_out_of_range": lambda dev: F.nll_loss(on(dev, torch.zeros(1, 3, 2, 2)),
                                                             on(dev, torch.tensor([[[0, 3], [1, 2]]]))),
    "nll_loss_ignore_index": lambda dev: [
        F.nll_loss(on(dev, torch.arange(6.0).reshape(2, 3)), on(dev, torch.tensor([-100, 1]))),
        F.nll_loss(on(dev, torch.arange(6.0).reshape(2, 3)), on(dev, torch.tensor([7, 2])), ignore_index=7)],
    "nll_loss_empty_float_target": lambda dev: F.nll_loss(on(dev, torch.zeros(0, 4)), on(dev, torch.tensor([]))),
    # add/sub/rsub of a float16/bfloat16 tensor read a Python number and alpha rounded to its dtype,
    # as CPU eager's kernels do (seed 1604329: bfloat16 -9984 + 10000.0 is 0, was 16); mul and div
    # read the number as given. 320 elements: CPU eager's vectorized loop (its scalar tail rounds
    # alpha * number to the half type first, float16 -0.1 + 0.3 * 0.1 differs by an ulp).
    "half_add_rounds_python_numbers": lambda dev: [
        f(on(dev, torch.tensor([-9984.0, 1.0, 3.0, -0.1, 77.7], dtype=dt).repeat(64)))
        for dt in (torch.bfloat16, torch.float16)
        for f in (lambda x: x + 10000.0, lambda x: x - 77.7, lambda x: 0.1 - x, lambda x: torch.add(x, 0.1, alpha=0.3),
                  lambda x: x + torch.tensor(1 / 3), lambda x: x * 0.1, lambda x: x / 77.7)],
    # addcmul/addcdiv cast an int64 tensor to the float16 common dtype first: 9.2e18 is inf there
    # (seed 1834236: inf + (-inf) is NaN on the CPU, inf here).
    "addcmul_int64_beside_half": lambda dev: [
        f(on(dev, torch.tensor([float("inf"), 100.0] * 2, dtype=torch.float16)), on(dev, torch.tensor([3.0, 5.0, 7.0, 1.0], dtype=torch.float16)),
          on(dev, torch.tensor([-9223372036854775808, 9223372036854775807, 70000, 3])), value=2)
        for f in (torch.addcmul, torch.addcdiv)],
    # Batch norm of a half type's constant channel is 0 on the CPU; the folded x * alpha + beta,
    # contracted by XLA into an FMA, left beta's rounding behind (seed 1824739: 0.082 for 10000).
    "batch_norm_half_constant_channel": lambda dev: [
        torch.nn.functional.batch_norm(on(dev, torch.full((1, 2, n), 10000.0, dtype=dt)), None, None, training=True)
        for dt in (torch.float16, torch.bfloat16) for n in (4, 35)],
    # A p-norm over one element is |x| on the CPU (its loop works in double there; seed 3316: a
    # float32 9.2e18 cubed overflowed to inf).
    "vector_norm_of_one_element": lambda dev: [
        torch.linalg.vector_norm(on(dev, torch.tensor([[9.2e18], [5.0], [-3e38], [0.0]])), p, dim=1)
        for p in (3, 0.5, -1, 4)],
    # nansum over an empty dim list kept the input's shape (torch's Meta kernel) where CPU reduces
    # every dim (seed 1300522).
    "nansum_empty_dims": lambda dev: [torch.nansum(on(dev, torch.tensor([[1.0, float("nan"), 3.0]])), (), **kw)
                                      for kw in ({}, {"keepdim": True}, {"dtype": torch.float64})],
}


@pytest.mark.parametrize("name", sorted(REGRESSIONS))
def test_fuzz_regressions(name):
    both(REGRESSIONS[name])


# XLA:CPU compiled exp of a value its simplifier folded to a NaN constant (`(0 * s) / 0` becomes
# `s * nan`) to a kernel without its store, so the output was uninitialized memory (fuzz seed
# 1904083; the emitter's ExpPassingNaN, docs/design.md "Where XLA's semantics are not torch's").
@pytest.mark.parametrize("op", [torch.exp, torch.expm1, torch.sinh, torch.cosh, torch.nn.functional.elu,
                                torch.nn.functional.selu, torch.nn.functional.softplus],
                         ids=["exp", "expm1", "sinh", "cosh", "elu", "selu", "softplus"])
def test_exp_of_a_folded_nan_is_nan(op):
    # 4099 elements: the uninitialized output was a fresh 16 KB block, which an earlier test is most
    # unlikely to have left all NaN.
    zeros = torch.ones(4099, device="pjrt")
    zeros.zero_()  # a constant in the program
    got = op((zeros * -0.0) / zeros).cpu()  # -0.0 is a value scalar: a program input
    assert torch.isnan(got).all(), got[~torch.isnan(got)][:4]


# ------------------------------------------------------------------------------------ known gaps

def gap(reason):
    return pytest.mark.xfail(reason=reason, strict=True)


LOWERED_KERNEL = "aten/lowered_kernel.cc (call-time checks of lowered ops)"


# ------------------------------------------------------------------- call-time checks (aten/cpu_probe.h)
# Differences the fuzzer found in what raises, fixed by probing CPU eager's checks at call time.

def raised(program, dev):
    """(exception type, first line of its message) that `program(dev)` raises, or None."""
    try:
        result = program(dev)
        if isinstance(result, torch.Tensor):
            result.cpu()
    except Exception as e:  # noqa: BLE001 - comparing whatever CPU raises
        return type(e), str(e).splitlines()[0]
    return None


CALL_TIME_CHECKS = {
    "dtype": lambda d: torch.abs(torch.tensor([True], device=d)),
    "internal overlap": lambda d: torch.zeros(1, device=d).expand(3).add_(1),
    "partial overlap": lambda d: (lambda x: x.mul_(x[1]))(torch.tensor([1, 2], dtype=torch.uint8, device=d)),
    "out= dtype": lambda d: torch.neg(torch.tensor([1], dtype=torch.int16, device=d),
                                      out=torch.empty(0, dtype=torch.float16, device=d)),
    "scalar range after an in-range call": lambda d: (lambda x: (x.masked_fill(x > 1, 0.5),
                                                                 x.masked_fill(x > 1, float("inf"))))(
        torch.tensor([1, 2], dtype=torch.int32, device=d))[1],
    "in-place result type": lambda d: torch.tensor([2, 3], dtype=torch.int16, device=d).mul_(torch.tensor(2.5)),
    "scalar range of a later integral argument": lambda d: torch.addcmul(
        torch.tensor([True], device=d), torch.tensor([255], dtype=torch.uint8, device=d),
        torch.tensor([True], device=d), value=-0.5),
    # Found by the sweep of 2026-11-26 (seeds 50000-53000): fmod_, clamp_.Tensor and ~30 more in-place
    # ops have Python Meta kernels that resize self instead of refusing; the write then failed to
    # compile, or (ldexp_, an out= write into an input) silently resized self.
    "in-place broadcast of self": lambda d: torch.zeros(2, 1, device=d).clamp_(min=torch.zeros(2, 3, device=d)),
    "in-place broadcast of an empty self": lambda d: torch.zeros(0, 1, device=d).fmod_(torch.ones(0, 3, device=d)),
    "out= tensor that is an input, broadcast": lambda d: torch.zeros(2, 1, device=d).ldexp_(torch.ones(2, 3, device=d)),
    "copy_ into an expanded tensor": lambda d: torch.zeros(1, device=d).expand(2).copy_(torch.ones(2, device=d)),
    "copy_ into a partly overlapping tensor": lambda d: (lambda a: a[1:].copy_(a[:3]))(torch.arange(4.0, device=d)),
    "copy_ broadcast into an empty tensor": lambda d: torch.zeros(0, 1, device=d).copy_(torch.zeros(0, 3, device=d)),
    "index_put_ of its own values (mask)": lambda d: (lambda v: v.__setitem__(v != v, v))(
        torch.tensor([1.0, float("nan")], device=d)),
    "index_put_ of its own values (indices)": lambda d: (lambda v: v.__setitem__(torch.tensor([0, 1], device=d), v))(
        torch.tensor([1.0, 2.0], device=d)),
    "index_put_ of its own values (empty)": lambda d: (lambda v: v.__setitem__(v != v, v))(
        torch.zeros(4, 0, 1, device=d)),
    "index_put_ of its own values (expanded)": lambda d: (lambda v: v.__setitem__(torch.tensor([0, 2], device=d), v))(
        torch.tensor([True, False], device=d).expand(3, 2)),
    "bernoulli_ with probabilities broadcasting self": lambda d: torch.zeros(2, 1, device=d).bernoulli_(
        torch.full((2, 3), 0.5, device=d)),
}


@pytest.mark.parametrize("name", CALL_TIME_CHECKS)
def test_call_time_check_raises_like_cpu(name):
    want = raised(CALL_TIME_CHECKS[name], "cpu")
    assert want is not None
    assert raised(CALL_TIME_CHECKS[name], "pjrt") == want


# Numbers that a Meta kernel (or CPU's kernel) checks: found 2026-11-28 by OpInfo's error inputs
# run after other tests. The Meta cache keyed value Scalars by kind only, so after a valid call an
# invalid number took the cached result and was never checked.
CHECKED_NUMBERS = {
    "softshrink lambd": lambda d, v: F.softshrink(torch.linspace(-2, 2, 5, device=d), v),
    "renorm maxnorm": lambda d, v: torch.renorm(torch.ones(2, 3, device=d), 2.0, 0, v),
    "histc min <= max": lambda d, v: torch.histc(torch.linspace(-2, 2, 5, device=d), bins=3, min=v, max=1.0),
    "smooth_l1_loss beta": lambda d, v: F.smooth_l1_loss(torch.ones(3, device=d), torch.zeros(3, device=d), beta=v),
}


@pytest.mark.parametrize("name", CHECKED_NUMBERS)
def test_a_checked_number_is_checked_after_a_valid_call(name):
    fn = CHECKED_NUMBERS[name]
    fn("pjrt", 0.5).cpu()  # valid: its Meta result is cached
    want = raised(lambda d: fn(d, 2.0 if name.startswith("histc") else -0.5), "cpu")
    assert want is not None
    assert raised(lambda d: fn(d, 2.0 if name.startswith("histc") else -0.5), "pjrt") == want
    torch.pjrt.metrics.reset()
    torch.testing.assert_close(fn("pjrt", 0.25).cpu(), fn("cpu", 0.25))  # a new valid number: no fallback
    assert torch.pjrt.metrics.fallbacks() == {}


def test_call_time_checks_allow_what_cpu_allows():
    """The probes refuse only what CPU refuses: full overlap in place, mm into an overlapping out=,
    index_put_ into an expanded tensor, an empty integer softmax, in-range numbers."""
    # mm into an out= that overlaps its inputs has no defined value: CPU kernels differ by machine
    # (one that reads what it already wrote gives [[2, 3], [3, 5]] here, others [[2, 2], [2, 2]]);
    # pjrt computes the product of the inputs as they were.
    overlapping_mm = lambda d: (lambda a: torch.mm(a[:2, :2], a[:2, :2], out=a[1:3, 1:3]))(torch.ones(4, 4, device=d))
    assert raised(overlapping_mm, "cpu") is None
    torch.testing.assert_close(overlapping_mm("pjrt").cpu(), torch.full((2, 2), 2.0))
    programs = [
        lambda d: (lambda a: a.add_(a))(torch.arange(6.0, device=d)),
        lambda d: torch.zeros(3, device=d).expand(3, 3).index_put_((torch.tensor([0], device=d),),
                                                                   torch.tensor(1.0, device=d)),
        lambda d: torch.softmax(torch.ones(0, 3, dtype=torch.int32, device=d), 1),
        lambda d: torch.ones(3, dtype=torch.int8, device=d).masked_fill(torch.tensor([True, False, True], device=d), 100),
        lambda d: (lambda b: b[:4].add_(b[4:]))(torch.arange(8.0, device=d)),
        # A written tensor read again: TensorIterator accepts it (the verdict is kept per op, so
        # the second call must not take the first one's answer for another op).
        lambda d: (lambda a: a.mul_(a).mul_(a.view(6)).addcmul_(a, a))(torch.arange(6.0, device=d)),
        lambda d: (lambda a: torch.mul(a, torch.ones(2, 3, device=d), out=torch.zeros(2, 1, device=d)))(
            torch.ones(2, 1, device=d)),  # out= not read: resized (with torch's warning), as on the CPU
        # A 0-d value written into a view of itself: CPU indexing fills (no copy, no overlap check).
        lambda d: (lambda x: x.view(1, 1).__setitem__(slice(0, 1), x) or x)(torch.tensor(-2.0, device=d)),
    ]
    for program in programs:
        assert raised(program, "cpu") is None
        torch.pjrt.metrics.reset()
        torch.testing.assert_close(program("pjrt").cpu(), program("cpu"))
        assert torch.pjrt.metrics.fallbacks() == {}


def _inplace_binary_overloads():
    """Every in-place aten overload taking (self, other Tensor) and nothing else required."""
    found = []
    for name in dir(torch.ops.aten):
        if not name.endswith("_") or name.startswith("_"):
            continue
        packet = getattr(torch.ops.aten, name)
        for overload in packet.overloads():
            args = getattr(packet, overload)._schema.arguments
            if (len(args) >= 2 and args[0].alias_info is not None and args[0].alias_info.is_write
                    and str(args[1].type) == "Tensor" and all(a.has_default_value() for a in args[2:])):
                found.append(f"{name}.{overload}")
    return found


_NOISE_GAP = pytest.mark.xfail(strict=True, reason="rrelu_with_noise_'s noise shape check is CPU-only; torch sizes "
                                                   "the noise itself wherever it calls the op")


@pytest.mark.parametrize("shapes", [((2, 1), (2, 3)), ((0, 1), (0, 3))], ids=["broadcast", "empty"])
@pytest.mark.parametrize("name", [pytest.param(n, marks=_NOISE_GAP) if n.startswith("rrelu_with_noise_") else n
                                  for n in _inplace_binary_overloads()])
def test_inplace_op_refuses_to_reshape_self_like_cpu(name, shapes):
    """self [2, 1] written with [2, 3]: CPU refuses, whatever the op's Meta kernel does."""
    packet, overload = name.split(".")
    op = getattr(getattr(torch.ops.aten, packet), overload)
    program = lambda d: op(torch.full(shapes[0], 0.5, device=d), torch.full(shapes[1], 0.25, device=d))
    assert raised(program, "pjrt") == raised(program, "cpu")


@gap("empty reduction: min(dim) over an empty dim raises IndexError on CPU; the lowering can only raise when the "
     "graph runs, which surfaces as RuntimeError")
def test_known_gap_empty_reduction_index_error():
    with pytest.raises(IndexError):
        torch.zeros(0, device="pjrt").min(0)[0].cpu()


def test_lowering_checks_raise_at_the_call():
    """A check a lowering makes (torch's, which only the CPU kernel makes) is raised when the op is
    traced, also on empty tensors (nothing is lowered for them), never at a later, unrelated sync."""
    calls = [
        lambda d: torch.zeros(0, 2, dtype=torch.bfloat16, device=d).index_put_(
            (torch.tensor([0], device=d)[:0],), torch.zeros(0, 2, dtype=torch.bool, device=d)),
        lambda d: torch.zeros(4, device=d).index_put_((torch.tensor([0, 1, 2], device=d),), torch.zeros(5, device=d)),
        lambda d: torch.tensor([1, 2], device=d).var(),
        lambda d: torch.zeros(0, dtype=torch.int64, device=d).var(),
        lambda d: torch.relu(torch.tensor([True], device=d)),
        lambda d: torch.zeros(0, dtype=torch.int64, device=d).pow(-1),
    ]
    for call in calls:
        with pytest.raises(RuntimeError) as cpu:
            call("cpu")
        with pytest.raises(RuntimeError) as pjrt:
            call("pjrt")  # no read: raised by the call itself
        assert str(pjrt.value).splitlines()[0] == str(cpu.value).splitlines()[0]
        (torch.ones(2, device="pjrt") + 1).cpu()  # and the next sync is clean


@gap("denormals: XLA:CPU's client runs executables with flush-to-zero and denormals-are-zero set "
     "(runtime/plugin, not a lowering); CPU eager keeps denormals")
def test_known_gap_denormals_are_flushed():
    x = torch.tensor([1e-40, -1e-40], dtype=torch.float32)
    assert torch.equal((x.to("pjrt") * 1).cpu(), x * 1)
    assert torch.equal((x.to("pjrt") > 0).cpu(), x > 0)
