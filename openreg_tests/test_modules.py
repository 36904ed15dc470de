"""PyTorch's ModuleInfo database run on the pjrt device: every module in `module_db` is built on the
CPU, copied to pjrt, and its forward pass (and, in training mode, the gradients of its parameters
and inputs) compared with CPU eager."""

import copy

import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_modules import module_db, modules
from torch.testing._internal.common_utils import TestCase, run_tests

from plugin_dtypes import is_unsupported_dtype_error

torch.pjrt.set_fallback_warnings(False)

MAX_INPUTS = 3
# Modules whose output depends on random state (dropout and friends): compared in eval mode only.
RANDOM_IN_TRAINING = {"nn.Dropout", "nn.Dropout1d", "nn.Dropout2d", "nn.Dropout3d", "nn.AlphaDropout",
                      "nn.FeatureAlphaDropout", "nn.RReLU", "nn.TransformerEncoderLayer",
                      "nn.TransformerDecoderLayer", "nn.TransformerEncoder", "nn.Transformer",
                      "nn.MultiheadAttention"}


def to(device, x):
    return torch.utils._pytree.tree_map(lambda t: t.to(device) if isinstance(t, torch.Tensor) else t, x)


def copy_to(device, x):
    """Leaf copies on `device` that require grad where the originals do."""
    def f(t):
        if isinstance(t, torch.Tensor):
            return t.detach().to(device).requires_grad_(t.requires_grad)
        return t
    return torch.utils._pytree.tree_map(f, x)


def flat_tensors(x):
    return [t for t in torch.utils._pytree.tree_leaves(x) if isinstance(t, torch.Tensor)]


class TestPjrtModules(TestCase):
    @modules(module_db, allowed_dtypes=(torch.float32,))
    def test_forward_backward_match_cpu(self, device, dtype, module_info, training):
        if training and module_info.name in RANDOM_IN_TRAINING:
            self.skipTest("random in training mode")
        inputs = module_info.module_inputs_func(module_info, device="cpu", dtype=dtype, requires_grad=training,
                                                training=training)
        compared = unsupported = 0
        for module_input in inputs[:MAX_INPUTS]:
            if module_input.forward_input is None:
                continue
            try:
                self.compare_one(module_info, module_input, device, dtype, training)
                compared += 1
            except TypeError as e:
                if not is_unsupported_dtype_error(e):
                    raise
                unsupported += 1
        if unsupported and not compared:
            self.skipTest("every input needs a dtype the active plugin does not support")

    def compare_one(self, module_info, module_input, device, dtype, training):
        args, kwargs = module_input.constructor_input.args, module_input.constructor_input.kwargs
        torch.manual_seed(0)
        cpu_module = module_info.module_cls(*args, **kwargs).to(dtype).train(training)
        fwd_args = copy_to("cpu", module_input.forward_input.args)
        fwd_kwargs = module_input.forward_input.kwargs
        if any(isinstance(p, torch.nn.parameter.UninitializedParameter) for p in cpu_module.parameters()):
            with torch.no_grad():  # lazy modules: materialize on the CPU so both start equal
                cpu_module(*copy_to("cpu", fwd_args), **fwd_kwargs)
        pjrt_module = copy.deepcopy(cpu_module).to(device)
        expected = cpu_module(*fwd_args, **fwd_kwargs)
        dev_args = copy_to(device, fwd_args)
        actual = pjrt_module(*dev_args, **to(device, fwd_kwargs))
        self.assertEqual(to("cpu", actual), expected, atol=1e-4, rtol=1e-4)
        if not training:
            return
        outs_cpu = [t for t in flat_tensors(expected) if t.requires_grad]
        outs_dev = [t for t in flat_tensors(actual) if t.requires_grad]
        if not outs_cpu:
            return
        sum(o.sum() for o in outs_cpu).backward()
        sum(o.sum() for o in outs_dev).backward()
        for (name, p), q in zip(cpu_module.named_parameters(), pjrt_module.parameters()):
            if p.grad is not None:
                self.assertEqual(q.grad.cpu(), p.grad, atol=1e-3, rtol=1e-3, msg=f"grad of {name}")
        for a, b in zip(flat_tensors(fwd_args), flat_tensors(dev_args)):
            if a.grad is not None:
                self.assertEqual(b.grad.cpu(), a.grad, atol=1e-3, rtol=1e-3, msg="input grad")


instantiate_device_type_tests(TestPjrtModules, globals(), only_for=("pjrt",))

if __name__ == "__main__":
    run_tests()
