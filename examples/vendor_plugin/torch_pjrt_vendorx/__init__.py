"""The 'vendorx' sub-plugin: what a hardware vendor ships to put its chip behind ``device="pjrt"``.

VendorX is pretend hardware: it runs on OpenXLA's CPU PJRT plugin, but with its own name, client
options, topology and capabilities, so everything a real vendor plugin does can be tried on any
machine. A real plugin changes ``library_path()`` to its own PJRT library and the capabilities to
what its chip does. Nothing here is imported at ``import torch``; torch_pjrt loads it on first use
of the device.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any, Dict, Optional

import torch
from torch_pjrt.backends import DevicePlugin

#: Chips on one VendorX host (a real plugin would count them, e.g. from /sys or its driver).
CHIPS_PER_HOST = 2


def _library() -> Optional[str]:
    """Where the PJRT library is, found without loading it."""
    explicit = os.environ.get("VENDORX_LIBRARY_PATH")
    if explicit:
        return explicit
    spec = importlib.util.find_spec("xla_plugins.xla_cpu_pjrt")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(list(spec.submodule_search_locations)[0], "xla_cpu_pjrt.so")
    return path if os.path.exists(path) else None


class VendorXPlugin(DevicePlugin):
    name = "vendorx"
    # Above the CPU plugin (0), below the built-in accelerators: once installed, VendorX is the
    # default pjrt device unless PJRT_DEVICE names another plugin.
    priority = 50

    # ---- capabilities: torch_pjrt's lowering and AMP code read these, never the plugin's name.
    # No float64 or complex128 hardware: creating such a tensor is a TypeError naming the fix.
    supported_dtypes = frozenset({torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32,
                                  torch.int64, torch.float16, torch.bfloat16, torch.float32,
                                  torch.complex64})
    unsupported_dtype_policy = "error"
    # Gathers are slow on VendorX's matrix engine: row lookups become one-hot matmuls.
    dense_gather = False
    # float32 matmuls may use the chip's reduced-precision passes (like TF32).
    default_matmul_precision = "high"
    # Autocast runs in bfloat16 only.
    amp_dtypes = ("bfloat16",)

    def __init__(self) -> None:
        self._chips = CHIPS_PER_HOST

    # ---- loading
    def library_path(self) -> str:
        path = _library()
        if path is None:
            raise RuntimeError("the VendorX runtime is missing: pip install xla-cpu-pjrt")
        return path

    def is_available(self) -> bool:
        return _library() is not None

    def unavailable_reason(self) -> Optional[str]:
        return None if self.is_available() else "VendorX runtime (xla-cpu-pjrt) is not installed"

    def client_create_options(self) -> Dict[str, Any]:
        # Computed when the client starts, after configure_*(): the CPU plugin reads an int64.
        return {"cpu_device_count": int(self._chips)}

    # ---- topology
    def physical_chip_count(self) -> int:
        return CHIPS_PER_HOST

    def configure_single_process(self) -> None:
        self._chips = int(os.environ.get("VENDORX_VISIBLE_CHIPS", CHIPS_PER_HOST))

    def configure_multiprocess(self, local_rank: int, local_world_size: int) -> None:
        # One chip per process when a launcher (torchrun) starts one process per chip.
        self._chips = 1 if local_world_size > 1 else CHIPS_PER_HOST

    def host_index(self) -> int:
        return int(os.environ.get("VENDORX_HOST_INDEX", "0"))

    def shutdown(self) -> None:
        pass  # a real plugin might release a driver handle here
