"""The DevicePlugin base class: how a chip's PJRT plugin becomes the `pjrt` device.

A sub-plugin is a Python class (usually in its own wheel) that tells torch_pjrt where its PJRT
plugin library is, how to create the client, and what the hardware can do. It is registered with
an entry point in the ``torch_pjrt.plugins`` group; ``docs/plugins.md`` is the vendor's guide.

Only the methods below are ever called, and never at ``import torch``: discovery happens on first
use of the device, and ``library_path()`` / ``client_create_options()`` only for the selected
plugin.
"""

from __future__ import annotations

from typing import Any, Dict, FrozenSet, Optional, Tuple


class DevicePlugin:
    """Base class of every torch_pjrt sub-plugin.

    Subclasses override ``library_path`` (required) and whatever else differs from the defaults.
    """

    #: The plugin's name: what ``PJRT_DEVICE=<name>`` selects. Discovery sets it from the entry
    #: point name when a subclass leaves it empty.
    name: str = ""

    #: Higher wins when ``PJRT_DEVICE`` is not set and several plugins are available.
    priority: int = 0

    # ------------------------------------------------------------------ loading

    def library_path(self) -> str:
        """Absolute path of the PJRT plugin shared library (it must export ``GetPjrtApi``)."""
        raise NotImplementedError(f"{type(self).__name__} must implement library_path()")

    def client_create_options(self) -> Dict[str, Any]:
        """Options for ``PJRT_Client_Create``, computed when the client starts.

        Values may be ``bool``, ``int`` (sent as int64), ``float``, ``str`` or a list of ints;
        use exactly the types the plugin reads (some plugins abort on a mismatch).
        """
        return {}

    def is_available(self) -> bool:
        """Whether this plugin can run here. Must be cheap and must not load the library."""
        return True

    def unavailable_reason(self) -> Optional[str]:
        """Why ``is_available()`` is False (shown by ``torch.pjrt.plugins()``)."""
        return None

    # ------------------------------------------------------------------ topology

    def physical_chip_count(self) -> int:
        """Number of chips on this host (before any per-process restriction)."""
        return 1

    def configure_single_process(self) -> None:
        """Called before the client starts when the process runs alone."""

    def configure_multiprocess(self, local_rank: int, local_world_size: int) -> None:
        """Called before the client starts when ``LOCAL_RANK``/``LOCAL_WORLD_SIZE`` are set, so
        the plugin can restrict each process to its chips (visible devices, topology env)."""

    def host_index(self) -> int:
        """Index of this host in a multi-host job."""
        return 0

    def shutdown(self) -> None:
        """Called at interpreter exit after the client is destroyed."""

    # ------------------------------------------------------------------ capabilities
    # Read by torch_pjrt's lowering and AMP code instead of checking device names.

    #: dtypes the hardware computes natively; None means every dtype pjrt tensors can hold.
    supported_dtypes: Optional[FrozenSet[Any]] = None

    #: What happens to a dtype outside ``supported_dtypes``: "error" raises a TypeError naming
    #: the dtype at tensor creation; "downcast" stores float64 as float32 and int64 as int32.
    unsupported_dtype_policy: str = "error"

    #: Gathers/scatters are fast (True) or should be avoided in favour of one-hot matmuls.
    dense_gather: bool = True

    #: Precision of float32 matmuls and convolutions: "highest", "high" or "default"
    #: (as torch.set_float32_matmul_precision).
    default_matmul_precision: str = "highest"

    #: dtypes autocast may use on this device, preferred first.
    amp_dtypes: Tuple[str, ...] = ("bfloat16", "float16")

    def capabilities(self) -> Dict[str, Any]:
        """Every capability as a plain dict (what ``torch.pjrt.capabilities()`` shows)."""
        return {
            "supported_dtypes": None
            if self.supported_dtypes is None
            else sorted(str(d) for d in self.supported_dtypes),
            "unsupported_dtype_policy": self.unsupported_dtype_policy,
            "dense_gather": self.dense_gather,
            "default_matmul_precision": self.default_matmul_precision,
            "amp_dtypes": list(self.amp_dtypes),
        }

    def __repr__(self) -> str:
        return f"<{type(self).__name__} name={self.name!r} priority={self.priority}>"
