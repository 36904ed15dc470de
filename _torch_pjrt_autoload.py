"""The ``torch.backends`` entry point: ``import torch`` calls `autoload`.

It lives outside the ``torch_pjrt`` package so that torch can ask it without importing the
package: an explicit ``import torch_pjrt`` always registers the pjrt device, while the autoload
decides first.

Why decide: torch makes a registered PrivateUse1 device its one accelerator
(``at::getAccelerator()`` returns it before CUDA, XPU or MPS), and its autograd engine looks for a
node's stream only on that accelerator. Once pjrt is registered, every backward over CUDA tensors
fails with ``opt_ready_stream && opt_parent_stream INTERNAL ASSERT FAILED`` (pytorch/pytorch#161129;
seen on an H200). So where torch has an accelerator of its own in this process, installing
torch_pjrt must not take it away: the autoload stays out unless ``PJRT_DEVICE`` asks for a pjrt
device, and ``import torch_pjrt`` registers explicitly.
"""
import os


def autoload():
    """Registers the pjrt device, unless torch's own accelerator is present and unasked-for."""
    if torch_accelerator_in_use():
        return
    import torch_pjrt  # noqa: F401  (registers; never raises)


def torch_accelerator_in_use():
    """Whether torch was built with an accelerator (CUDA, ROCm, XPU, MPS) that has a device here,
    and no ``PJRT_DEVICE`` asks for a pjrt device instead.

    Asked before pjrt is registered, ``current_accelerator()`` is the compiled-in one and queries
    nothing. The device count is torch's own, which for CUDA asks NVML first and so neither
    initializes CUDA nor poisons a later fork; a CPU build of torch asks nothing at all.
    """
    if os.environ.get("PJRT_DEVICE", "").strip():
        return False
    import torch

    accelerator = torch.accelerator.current_accelerator()
    if accelerator is None or accelerator.type == torch._C._get_privateuse1_backend_name():
        return False  # none, or an out-of-tree one: pjrt takes nothing from torch
    module = getattr(torch, accelerator.type, None)
    try:
        return module is not None and module.device_count() > 0
    except Exception:  # a broken driver is torch's to report, when its device is used
        return False
