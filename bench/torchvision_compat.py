"""Lets `import torchvision` (and so `import timm`) work next to the CPU build of torch.

PyPI's torchvision wheels are CUDA builds: their C++ extension links libtorch_cuda.so, which the
CPU torch does not have, so torchvision skips loading it. Everything else in torchvision is pure
Python and works, except that torchvision/_meta_registrations.py calls
`torch.library.register_fake("torchvision::nms")` (and "qnms") unconditionally, which raises
"operator torchvision::nms does not exist" when the extension did not load; that breaks
`import timm` (it imports torchvision.ops.misc) and some `transformers` imports.

Defining those two op schemas (no kernels) before torchvision is imported is enough, with torch's
public `torch.library` API and no patching: the import then succeeds, and only torchvision's
compiled ops (nms, roi_align, deform_conv2d, image decoding) stay unavailable, which timm's
classification models never call. Call `ensure_torchvision_importable()` before anything imports
torchvision.
"""
import importlib.util
import os
import sys

_LIBS = []  # a torch.library.Library removes its definitions when it is garbage-collected


def ensure_torchvision_importable() -> bool:
    """True if torchvision is installed (and now importable), False if it is absent."""
    if "torchvision" in sys.modules:
        return True
    spec = importlib.util.find_spec("torchvision")
    if spec is None:
        return False
    import torch

    try:
        torch.ops.load_library(os.path.join(list(spec.submodule_search_locations)[0], "_C.so"))
        return True  # a torchvision built for this torch
    except (OSError, ImportError, RuntimeError):
        pass
    if hasattr(torch.ops.torchvision, "nms"):
        return True
    lib = torch.library.Library("torchvision", "FRAGMENT")
    for op in ("nms", "qnms"):  # the schemas of torchvision's own C++ registrations
        lib.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _LIBS.append(lib)
    return True
