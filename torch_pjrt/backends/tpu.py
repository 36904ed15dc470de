"""The TPU sub-plugin: libtpu.

Availability is decided from the PCI bus (Google's vendor id 0x1ae0) without loading libtpu:
loading it on a machine without TPUs blocks for minutes polling a cloud metadata server.
"""

from __future__ import annotations

import glob
import importlib.util
import os
from typing import Any, Dict, Optional

from .base import DevicePlugin

GOOGLE_PCI_VENDOR = "0x1ae0"


def _tpu_chips() -> int:
    count = 0
    for vendor in glob.glob("/sys/bus/pci/devices/*/vendor"):
        try:
            with open(vendor) as f:
                if f.read().strip().lower() == GOOGLE_PCI_VENDOR:
                    count += 1
        except OSError:
            continue
    return count


def _find_library() -> Optional[str]:
    explicit = os.environ.get("TPU_LIBRARY_PATH")
    if explicit:
        return explicit
    try:
        spec = importlib.util.find_spec("libtpu")
    except (ImportError, ValueError):
        spec = None
    if spec is not None:
        # The libtpu package knows where its library is (importing it does not load it).
        try:
            import libtpu

            path = libtpu.get_library_path()
            if path and os.path.exists(path):
                return path
        except Exception:  # an old or broken libtpu package: fall back to the conventional paths
            pass
    if spec is not None and spec.submodule_search_locations:
        for directory in spec.submodule_search_locations:
            path = os.path.join(directory, "libtpu.so")
            if os.path.exists(path):
                return path
    for path in ("/lib/libtpu.so", "/usr/lib/libtpu.so", "/usr/local/lib/libtpu.so"):
        if os.path.exists(path):
            return path
    return None


class TpuPlugin(DevicePlugin):
    name = "tpu"
    priority = 200

    def library_path(self) -> str:
        path = _find_library()
        if path is None:
            raise RuntimeError("libtpu is not installed: pip install torch_pjrt[tpu]")
        return path

    def is_available(self) -> bool:
        return _tpu_chips() > 0 and _find_library() is not None

    def unavailable_reason(self) -> Optional[str]:
        if _tpu_chips() == 0:
            return "no TPU chips on the PCI bus (vendor 0x1ae0)"
        if _find_library() is None:
            return "libtpu is not installed (pip install torch_pjrt[tpu])"
        return None

    def physical_chip_count(self) -> int:
        return _tpu_chips()

    def configure_multiprocess(self, local_rank: int, local_world_size: int) -> None:
        # One chip per process, laid out as libtpu expects (the same variables torch_xla sets).
        if local_world_size <= 1:
            return
        os.environ.setdefault("TPU_VISIBLE_CHIPS", str(local_rank))
        os.environ.setdefault("TPU_CHIPS_PER_PROCESS_BOUNDS", "1,1,1")
        os.environ.setdefault("TPU_PROCESS_BOUNDS", f"{local_world_size},1,1")
        os.environ.setdefault("TPU_PROCESS_PORT", str(8476 + local_rank))
        addresses = ",".join(f"localhost:{8476 + i}" for i in range(local_world_size))
        os.environ.setdefault("TPU_PROCESS_ADDRESSES", addresses)
        os.environ.setdefault("CLOUD_TPU_TASK_ID", str(local_rank))

    def client_create_options(self) -> Dict[str, Any]:
        return {}

    # TPUs have no float64 hardware: XLA emulates it (slowly), so it warns instead of failing.
    # int64 is emulated too, but every index tensor is int64, so it counts as supported.
    supported_dtypes = frozenset({"bool", "int8", "int16", "int32", "int64", "uint8", "uint16",
                                  "uint32", "bfloat16", "float16", "float32", "complex64"})
    unsupported_dtype_policy = "warn"
    dense_gather = False
    default_matmul_precision = "default"
    amp_dtypes = ("bfloat16",)
