"""PyTorch's OptimizerInfo database run on the pjrt device: every optimizer and each of its
configurations from `optim_db` takes the same steps on pjrt and on the CPU."""

import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_optimizers import optim_db, optims
from torch.testing._internal.common_utils import TestCase, run_tests

from plugin_dtypes import is_unsupported_dtype_error

torch.pjrt.set_fallback_warnings(False)

STEPS = 3


def run(optim_cls, kwargs, device):
    torch.manual_seed(0)
    # Muon only takes 2-D parameters; the others get a bias too.
    weight = torch.randn(5, 4, dtype=torch.float32).to(device).requires_grad_()
    bias = torch.randn(5, dtype=torch.float32).to(device).requires_grad_()
    x = torch.randn(8, 4).to(device)
    target = torch.randn(8, 5).to(device)
    params = [weight] if optim_cls.__name__ == "Muon" else [weight, bias]
    opt = optim_cls(params, **kwargs)

    def closure():
        # A well-conditioned least-squares loss: second-order methods (LBFGS) branch on loss
        # comparisons, and an ill-conditioned loss would amplify rounding differences.
        opt.zero_grad()
        loss = ((torch.nn.functional.linear(x, weight, bias) - target) ** 2).mean()
        loss.backward()
        return loss

    for _ in range(STEPS):
        if optim_cls.__name__ == "LBFGS":
            opt.step(closure)
        else:
            closure()
            opt.step()
    return [p.detach().cpu() for p in params]


class TestPjrtOptimizers(TestCase):
    @optims(optim_db, dtypes=[torch.float32])
    def test_steps_match_cpu(self, device, dtype, optim_info):
        inputs = optim_info.optim_inputs_func(device=device)
        for optim_input in inputs:
            kwargs = dict(optim_input.kwargs)
            if kwargs.get("fused") or kwargs.get("capturable"):
                continue  # fused/capturable kernels are CUDA-specific implementations
            if optim_info.optim_cls.__name__ == "SparseAdam":
                continue  # needs sparse gradients
            expected = run(optim_info.optim_cls, kwargs, "cpu")
            try:
                actual = run(optim_info.optim_cls, kwargs, device)
            except TypeError as e:
                if is_unsupported_dtype_error(e):
                    continue  # this configuration needs a dtype the active plugin refuses
                raise
            for a, e in zip(actual, expected):
                self.assertEqual(a, e, atol=1e-4, rtol=1e-4, msg=f"{optim_info.optim_cls.__name__} {kwargs}")


instantiate_device_type_tests(TestPjrtOptimizers, globals(), only_for=("pjrt",))

if __name__ == "__main__":
    run_tests()
