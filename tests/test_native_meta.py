"""Ops whose result shapes come from ATen's C++ Meta kernels (aten/native_meta.cc) instead of
torch's Python references: dtypes, shapes and strides as the CPU gives them (the C++ functions are
the CPU kernels' own meta functions), and no Python Meta kernel on the first ops of a process."""
import warnings

import pytest
import torch
import torch.nn.functional as F

from helpers import DEVICE, Counters, run_python, to_cpu, to_pjrt


def _layouts():
    """Inputs in the layouts where output strides are decided: transposed, channels-last,
    broadcast, and a 0-d CPU tensor as the second operand."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 4, 5, generator=g)
    return {
        "transposed": (x[0, 0].t(), torch.randn(4, generator=g)),
        "channels_last": (x.contiguous(memory_format=torch.channels_last), torch.randn(1, 3, 1, 1, generator=g)),
        "cpu_scalar": (x, torch.tensor(1.5)),
    }


BINARY = {
    "add": lambda a, b: torch.add(a, b, alpha=2), "sub": torch.sub, "mul": torch.mul, "div": torch.div,
    "floor_div": lambda a, b: torch.div(a, b, rounding_mode="floor"), "pow": lambda a, b: a.abs() ** b,
    "maximum": torch.maximum, "fmin": torch.fmin, "atan2": torch.atan2, "remainder": torch.remainder,
    "lt": torch.lt, "eq": torch.eq, "logaddexp": torch.logaddexp, "hypot": torch.hypot,
    "copysign": torch.copysign, "xlogy": torch.xlogy, "lerp": lambda a, b: torch.lerp(a, b, 0.3),
    "where": lambda a, b: torch.where(a > 0, a, b), "addcmul": lambda a, b: torch.addcmul(a, a, b, value=0.5),
}
UNARY = {
    "exp": torch.exp, "log1p": lambda a: torch.log1p(a.abs()), "rsqrt": lambda a: torch.rsqrt(a.abs() + 1),
    "tanh": torch.tanh, "sigmoid": torch.sigmoid, "erf": torch.erf, "round": lambda a: torch.round(a, decimals=1),
    "sign": torch.sign, "signbit": torch.signbit, "neg": torch.neg, "gelu": F.gelu, "silu": F.silu,
    "softplus": F.softplus, "leaky_relu": F.leaky_relu, "elu": F.elu, "clamp": lambda a: a.clamp(-0.5, 0.5),
    "softmax": lambda a: a.softmax(-1), "log_softmax": lambda a: a.log_softmax(0),
    "sum": lambda a: a.sum(-1, keepdim=True), "mean": lambda a: a.mean((0, -1)), "amax": lambda a: a.amax(-1),
    "argmax": lambda a: a.argmax(0), "cumsum": lambda a: a.cumsum(-1), "sort": lambda a: a.sort(dim=-1, stable=True),
    "topk": lambda a: a.topk(2, -1), "tril": lambda a: a.tril(), "norm": lambda a: torch.linalg.vector_norm(a, dim=-1),
    # CPU's kernels write contiguous results whatever the input's layout (aten/meta_overrides.cc,
    # aten/rrelu_kernels.cc): fuzz seeds 5020376 and 5022061 with --focus nn,more,order,index,matmul.
    "logsigmoid": F.logsigmoid, "rrelu_eval": lambda a: F.rrelu(a, training=False),
}


def _check_like_cpu(fn, args):
    expected = fn(*args)
    with Counters() as c:
        got = fn(*to_pjrt(args))
        got_cpu = to_cpu(got)
    assert c["FallbackOps"] == 0
    for e, g, gc in zip(*[x if isinstance(x, tuple) else (x,) for x in (expected, got, got_cpu)]):
        assert (g.dtype, g.shape, g.stride()) == (e.dtype, e.shape, e.stride())
        torch.testing.assert_close(gc, e, equal_nan=True)


@pytest.mark.parametrize("layout", list(_layouts()))
@pytest.mark.parametrize("name", list(BINARY))
def test_binary_ops_have_cpu_dtypes_and_strides(name, layout):
    _check_like_cpu(BINARY[name], _layouts()[layout])


@pytest.mark.parametrize("layout", ["transposed", "channels_last"])
@pytest.mark.parametrize("name", list(UNARY))
def test_unary_and_reduction_ops_have_cpu_dtypes_and_strides(name, layout):
    _check_like_cpu(UNARY[name], _layouts()[layout][:1])


# Activation backwards (grad_output, self): CPU's kernels lay the result out after grad_output where
# the two layouts differ (TensorIterator), as the C++ Meta kernels and aten/meta_overrides.cc do;
# torch's Python Meta kernels for hardtanh/hardswish follow self.
BACKWARD = {
    "hardtanh": lambda g, x: torch.ops.aten.hardtanh_backward(g, x, -0.5, 0.5),
    "hardswish": torch.ops.aten.hardswish_backward, "logit": torch.ops.aten.logit_backward,
    "hardsigmoid": torch.ops.aten.hardsigmoid_backward, "sigmoid": torch.ops.aten.sigmoid_backward,
    "threshold": lambda g, x: torch.ops.aten.threshold_backward(g, x, 0.0),
    # CPU's kernel writes into empty_like(grad_output); torch's Meta kernel follows self.
    "log_sigmoid": lambda g, x: torch.ops.aten.log_sigmoid_backward(g, x, torch.ops.aten.log_sigmoid_forward(x)[1]),
}


LOSS_BACKWARD = {  # CPU's kernels return a contiguous gradient whatever self's layout
    "huber": lambda g, x, t: torch.ops.aten.huber_loss_backward(g, x, t, 1, 0.5),
    "smooth_l1": lambda g, x, t: torch.ops.aten.smooth_l1_loss_backward(g, x, t, 1, 0.5),
    "mse": lambda g, x, t: torch.ops.aten.mse_loss_backward(g, x, t, 1),
}


@pytest.mark.parametrize("name", list(LOSS_BACKWARD))
def test_loss_backwards_are_contiguous_as_on_the_cpu(name):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 3, 2, generator=g).transpose(1, 2)
    _check_like_cpu(LOSS_BACKWARD[name], (torch.tensor(1.0), x, torch.randn(3, 2, 3, generator=g)))


@pytest.mark.parametrize("grad_layout", ["contiguous", "transposed"])
@pytest.mark.parametrize("name", list(BACKWARD))
def test_activation_backwards_have_cpu_strides(name, grad_layout):
    g = torch.Generator().manual_seed(0)
    a = torch.randn(3, 4, generator=g)
    b = torch.randn(4, 3, generator=g).t()
    _check_like_cpu(BACKWARD[name], (a, b) if grad_layout == "contiguous" else (b, a))


@pytest.mark.parametrize("case", ["int_true_div", "int_float_scalar", "bool_add", "int_pow_float", "cmp_mixed"])
def test_type_promotion_matches_cpu(case):
    i = torch.arange(-3, 3)
    fn, args = {
        "int_true_div": (torch.div, (i, torch.tensor(2))),
        "int_float_scalar": (lambda a: a * 2.5, (i,)),
        "bool_add": (torch.add, (i > 0, i < 0)),
        "int_pow_float": (lambda a: a.pow(0.5), (i.abs(),)),
        "cmp_mixed": (torch.ge, (i, torch.tensor(0.5, dtype=torch.float64))),
    }[case]
    _check_like_cpu(fn, args)


# CPU's TensorIterator casts an input of another dtype to a temporary first, laid out densely (an
# expanded dimension as if contiguous), and the result follows the temporary (fuzz seed 1905176).
# The layouts are made on each device: a copy to the device would make them dense.
MIXED_DTYPE_LAYOUTS = {
    "sub_expanded_f32_transposed_f64": (lambda a, b: torch.sub(a.expand(3, 3), b.t()),
                                        (torch.randn(3), torch.randn(3, 3, dtype=torch.float64))),
    "mul_expanded_int_transposed_f32": (lambda a, b: torch.mul(a.expand(3, 3), b.t()),
                                        (torch.arange(3), torch.randn(3, 3))),
    "ge_expanded_f32_transposed_f64": (lambda a, b: torch.ge(a.expand(3, 3), b.t()),
                                       (torch.randn(3), torch.randn(3, 3, dtype=torch.float64))),
    "lt_expanded_int_float_number": (lambda a: torch.lt(a.expand(4, 3).t(), 2.5), (torch.arange(3),)),
    "exp_sliced_int": (lambda a: torch.exp(a.t()[::2]), (torch.arange(12).reshape(3, 4),)),
    "where_expanded_f16_transposed_f32": (lambda a, b: torch.where(b.t() > 0, a.expand(3, 3), b.t()),
                                          (torch.randn(3, dtype=torch.float16), torch.randn(3, 3))),
    "threshold_int_float_number": (lambda a: torch.threshold(a.expand(3, 3).t(), 0.5, 7), (torch.arange(3),)),
    # floor_divide's Meta kernel is a Python reference that laid these out row-major (fuzz seeds 88, 1615).
    "floor_divide_transposed_int_0d_float": (lambda a, b: torch.floor_divide(a.t(), b),
                                             (torch.arange(9, dtype=torch.int32).reshape(3, 3), torch.tensor(7.0))),
    "floor_divide_transposed_f32_expanded_f64": (lambda a, b: torch.floor_divide(a.t(), b.expand(3, 3)),
                                                 (torch.randn(3, 3), torch.randn(3, dtype=torch.float64))),
}


@pytest.mark.parametrize("name", list(MIXED_DTYPE_LAYOUTS))
def test_mixed_dtype_results_follow_cpus_cast_temporaries(name):
    _check_like_cpu(*MIXED_DTYPE_LAYOUTS[name])


@pytest.mark.parametrize("op", [lambda a: torch.ops.aten.fill.Scalar(a, 2), torch.ops.aten.zero], ids=["fill", "zero"])
def test_fill_of_a_non_dense_tensor_keeps_its_dimension_order(op):
    # empty_like(preserve_format) of a non-dense tensor: dense, in the input's dimension order
    _check_like_cpu(lambda a: op(a.t()[::2]), (torch.arange(12.0).reshape(3, 4),))


@pytest.mark.parametrize("op", [torch.logical_xor, torch.logical_and, torch.logical_or])
def test_logical_ops_with_a_broadcast_first_operand_have_cpu_strides(op):
    # torch's Python Meta kernels laid these out row-major; the CPU follows the second operand
    _check_like_cpu(lambda a, b: op(a, b.t()), (torch.tensor([2.0]), torch.arange(6).reshape(2, 3)))
    _check_like_cpu(lambda a, b: op(a.expand(3, 2), b.t()), (torch.tensor([0.0, 1.0]), torch.arange(6).reshape(2, 3)))


@pytest.mark.parametrize("make_out", [lambda d: torch.empty(0, device=d), lambda d: torch.empty(5, 5, device=d)],
                         ids=["empty", "wrong_size"])
def test_a_resized_out_takes_the_results_strides_as_on_the_cpu(make_out):
    def strides(dev):
        a = torch.zeros(2, 3).to(dev).t()
        out = make_out(dev)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # resizing a non-empty out= warns, on both devices
            torch.add(a, a, out=out)
            torch.mul(a, 2, out=out)
        return out.stride()
    assert strides("pjrt") == strides("cpu") == (1, 3)


def test_an_out_of_the_right_size_keeps_its_layout():
    out = torch.empty(3, 2, device="pjrt")
    torch.add(torch.ones(2, 3, device="pjrt").t(), 1, out=out)
    assert out.stride() == (2, 1)


def test_errors_are_cpus():
    a = torch.ones(2, 3)
    with pytest.raises(RuntimeError, match="must match the size"):
        torch.add(a, torch.ones(4)).cpu()
    with pytest.raises(RuntimeError, match="must match the size"):
        torch.add(a.to(DEVICE), torch.ones(4, device=DEVICE)).cpu()
    with pytest.raises(RuntimeError, match="0-dimension value tensor"):
        torch.ones(2, device=DEVICE).fill_(torch.ones(2, device=DEVICE))


def test_matmuls_losses_and_pools_match_cpu():
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(3, 4, generator=g), torch.randn(4, 5, generator=g)
    image = torch.randn(2, 3, 8, 8, generator=g).contiguous(memory_format=torch.channels_last)
    target = torch.tensor([1, 0, 3])
    for fn, args in [
        (torch.mm, (a, b)), (lambda x, y, c: torch.addmm(c, x, y, beta=0.5), (a, b, torch.ones(5))),
        (torch.bmm, (a[None].expand(2, 3, 4), b[None].expand(2, 4, 5))),
        (lambda x, y: torch.cat([x, y.t()[:, :4].double()]), (a, b)),
        (lambda x, t: F.nll_loss(x.log_softmax(-1), t), (a, target)), (F.mse_loss, (a, a.flip(0))),
        (lambda x: F.max_pool2d(x, 2), (image,)), (lambda x: F.avg_pool2d(x, 3, 1, 1), (image,)),
        (lambda x: F.interpolate(x, scale_factor=2), (image,)),
        (lambda x, t: x.gather(1, t[:, None]), (a, target)),
    ]:
        _check_like_cpu(fn, args)


def test_table_covers_the_hot_ops():
    import torch_pjrt
    names = set(torch_pjrt._C._native_meta_ops())
    for op in ["aten::add.Tensor", "aten::mul.Tensor", "aten::fill.Scalar", "aten::sum.dim_IntList",
               "aten::_softmax", "aten::mm", "aten::cat", "aten::gelu", "aten::nll_loss_forward"]:
        assert op in names


def test_first_ops_run_no_python_meta_kernel():
    """torch's Python Meta kernels import sympy (0.25 s) on their first call; the first ops of a
    process (factories, arithmetic, reductions, a linear layer's forward and backward) use the
    C++ ones."""
    out = run_python("""
        import sys, torch
        x = torch.ones(4, 8, device="pjrt", requires_grad=True)
        w = torch.zeros(3, 8, device="pjrt").add_(0.5).requires_grad_()
        y = torch.nn.functional.linear(x * 2 + 1, w).tanh().softmax(-1).sum()
        y.backward()
        print(y.item(), x.grad.sum().item(), "sympy", "sympy" in sys.modules)
    """).stdout
    assert "sympy False" in out, out
