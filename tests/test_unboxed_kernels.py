"""The generic kernel's unboxed entry (aten/lowered_kernel.cc, UnboxedLoweredKernel): functional ops
returning one tensor, with the commonest argument shapes, are traced on arguments they borrow, so
a tensor Python holds is neither kept alive nor released by the call."""
import gc
import sys
import weakref

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from helpers import Counters

HOT = ["aten::mul.Tensor", "aten::add.Tensor", "aten::sub.Tensor", "aten::div.Tensor", "aten::neg",
       "aten::mm", "aten::pow.Tensor_Scalar", "aten::rsqrt", "aten::addmm", "aten::_softmax",
       "aten::_softmax_backward_data", "aten::mean.dim", "aten::sum.dim_IntList", "aten::glu",
       "aten::lerp.Tensor", "aten::gelu", "aten::gelu_backward"]


def pjrt_kernel_line(op):
    lines = [l for l in torch._C._dispatch_dump(op).splitlines() if l.startswith("PrivateUse1")]
    assert lines, f"{op} has no pjrt kernel"
    return lines[0]


@pytest.mark.parametrize("op", HOT)
def test_hot_ops_have_an_unboxed_pjrt_kernel(op):
    assert "unboxed" in pjrt_kernel_line(op)


def test_in_place_and_out_variants_stay_boxed():
    # They write their arguments (aliased in the schema): only the functional form borrows.
    for op in ["aten::mul_.Tensor", "aten::mul.out"]:
        assert "unboxed" not in pjrt_kernel_line(op)


def every_unboxed_form(x, y):
    return [x * y, x + y, x - y, torch.neg(x), torch.mm(x, y), x.pow(2.0), x.add(1.5, alpha=2), x * 0.5,
            torch.addmm(x, x, y, beta=0.5), torch.softmax(x, -1), x.mean(1, keepdim=True),
            x.sum((0, 1), dtype=torch.float64), torch.nn.functional.glu(torch.cat([x, y]), 0), torch.lerp(x, y, x),
            torch.nn.functional.gelu(x, approximate="tanh")]


def test_results_match_cpu_and_the_native_path_ran():
    x, y = torch.randn(3, 3), torch.randn(3, 3)
    with Counters() as c:
        got = [r.cpu() for r in every_unboxed_form(x.to("pjrt"), y.to("pjrt"))]
    for g, want in zip(got, every_unboxed_form(x, y)):
        torch.testing.assert_close(g, want)
    assert c["FallbackOps"] == 0 and c["GraphsCompiled"] >= 1


def test_borrowed_inputs_keep_their_reference_counts():
    # A reference the call kept would show as one more on the Python object (its C++ count above
    # one increfs it); one it dropped would free a tensor Python still holds.
    x, y = torch.randn(3, 3, device="pjrt"), torch.randn(3, 3, device="pjrt")
    before = sys.getrefcount(x), sys.getrefcount(y)
    for _ in range(100):
        every_unboxed_form(x, y)
    assert (sys.getrefcount(x), sys.getrefcount(y)) == before
    torch.testing.assert_close((x * y).cpu(), x.cpu() * y.cpu())


def test_an_input_is_freed_once_python_drops_it():
    x = torch.randn(4, device="pjrt")
    gone = weakref.ref(x)
    y = x * 2 + x
    del x
    gc.collect()
    assert gone() is None
    assert y.cpu().shape == (4,)


def test_a_failing_call_releases_nothing():
    a, b = torch.randn(3, device="pjrt"), torch.randn(4, device="pjrt")
    before = sys.getrefcount(a), sys.getrefcount(b)
    for _ in range(3):
        with pytest.raises(RuntimeError, match="must match the size"):
            a + b
    assert (sys.getrefcount(a), sys.getrefcount(b)) == before
    torch.testing.assert_close((a + 1).cpu(), a.cpu() + 1)


def test_softmax_backward_matches_cpu():
    # _softmax_backward_data (tensors, an int and a ScalarType) runs in the autograd engine.
    x = torch.randn(4, 5)
    xp = x.to("pjrt").requires_grad_()
    x.requires_grad_()
    (torch.softmax(xp, -1) * torch.arange(5.0, device="pjrt")).sum().backward()
    (torch.softmax(x, -1) * torch.arange(5.0)).sum().backward()
    torch.testing.assert_close(xp.grad.cpu(), x.grad)


def test_boxed_callers_reach_the_same_kernel():
    class Passthrough(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    x = torch.randn(2, 2)
    with Passthrough():
        got = (x.to("pjrt") * 3 - 1).cpu()
    torch.testing.assert_close(got, x * 3 - 1)
