"""The CUDA sub-plugin: an XLA GPU PJRT plugin from PyPI.

Looks for the plugin library in, in order: ``xla-cuda13-pjrt``, ``xla-cuda12-pjrt`` (install with
``pip install torch_pjrt[cuda]``), and JAX's ``jax-cuda13-pjrt`` / ``jax-cuda12-pjrt``. It is
available only where an NVIDIA GPU is visible, so it never loads CUDA libraries on a CPU machine.
"""

from __future__ import annotations

import glob
import importlib.util
import os
from typing import Any, Dict, List, Optional

from .base import DevicePlugin

# (python package, library file name) pairs, preferred first.
_CANDIDATES = [
    ("xla_plugins.xla_cuda13_pjrt", "xla_gpu_pjrt.so"),
    ("xla_plugins.xla_cuda12_pjrt", "xla_gpu_pjrt.so"),
    ("jax_plugins.xla_cuda13", "xla_cuda_plugin.so"),
    ("jax_plugins.xla_cuda12", "xla_cuda_plugin.so"),
]


def _find_library() -> Optional[str]:
    explicit = os.environ.get("TORCH_PJRT_CUDA_LIBRARY")
    if explicit:
        return explicit
    for package, filename in _CANDIDATES:
        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            spec = None
        if spec is None or not spec.submodule_search_locations:
            continue
        for directory in spec.submodule_search_locations:
            matches = sorted(glob.glob(os.path.join(directory, "*.so")))
            preferred = os.path.join(directory, filename)
            if os.path.exists(preferred):
                return preferred
            if matches:
                return matches[0]
    return None


def _gpu_count() -> int:
    """NVIDIA GPUs visible to the driver, without loading CUDA."""
    gpus = glob.glob("/proc/driver/nvidia/gpus/*")
    if gpus:
        return len(gpus)
    return len(glob.glob("/dev/nvidia[0-9]*"))


def _visible(total: int) -> List[int]:
    raw = os.environ.get("CUDA_VISIBLE_DEVICES")
    if raw is None or raw.strip() == "":
        return list(range(total))
    return [int(x) for x in raw.split(",") if x.strip().isdigit()]


class CudaPlugin(DevicePlugin):
    name = "cuda"
    priority = 100

    def __init__(self):
        self._visible_devices: Optional[List[int]] = None

    def library_path(self) -> str:
        path = _find_library()
        if path is None:
            raise RuntimeError("no CUDA PJRT plugin installed: pip install torch_pjrt[cuda] "
                               "(xla-cuda12-pjrt) or jax-cuda12-pjrt")
        return path

    def is_available(self) -> bool:
        return _find_library() is not None and _gpu_count() > 0

    def unavailable_reason(self) -> Optional[str]:
        if _find_library() is None:
            return "no CUDA PJRT plugin package installed (pip install torch_pjrt[cuda])"
        if _gpu_count() == 0:
            return "no NVIDIA GPU visible (/proc/driver/nvidia/gpus is empty)"
        return None

    def physical_chip_count(self) -> int:
        return _gpu_count()

    def configure_single_process(self) -> None:
        self._visible_devices = None

    def configure_multiprocess(self, local_rank: int, local_world_size: int) -> None:
        # One GPU per local process, unless the launcher already restricted visibility.
        visible = _visible(self.physical_chip_count())
        if local_world_size > 1 and len(visible) >= local_world_size:
            self._visible_devices = [visible[local_rank]]

    def client_create_options(self) -> Dict[str, Any]:
        options: Dict[str, Any] = {
            "platform_name": "cuda",
            # Grow on demand like PyTorch's caching allocator instead of grabbing 75% up front.
            "preallocate": os.environ.get("TORCH_PJRT_CUDA_PREALLOCATE", "0") == "1",
            "allocator": os.environ.get("TORCH_PJRT_CUDA_ALLOCATOR", "bfc"),
            "memory_fraction": float(os.environ.get("TORCH_PJRT_CUDA_MEMORY_FRACTION", "0.9")),
        }
        if self._visible_devices is not None:
            options["visible_devices"] = list(self._visible_devices)
        return options

    @property
    def cross_process_collectives(self) -> bool:
        # XLA's GPU plugin runs NCCL collectives across processes given node_id/num_nodes and the
        # key-value store. Opt-in until this path has run on a multi-GPU machine.
        return os.environ.get("TORCH_PJRT_CUDA_GRAPH_COLLECTIVES", "0") == "1"

    # TF32-class precision is what XLA's GPU compiler uses by default for float32 dots.
    default_matmul_precision = "high"
    amp_dtypes = ("bfloat16", "float16")
