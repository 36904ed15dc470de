"""``torch.pjrt``: the device module, shaped like ``torch.cuda`` where that makes sense.

Devices, synchronization, random state, memory statistics, AMP dtypes, which sub-plugin is active,
compile-cache and debugging settings, and ``metrics``.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Dict, List, Optional, Union

import torch

from . import _C
from . import metrics  # noqa: F401  (torch.pjrt.metrics)
from .distributed import global_rank, local_rank, local_world_size, world_size  # noqa: F401
from .backends import registry

_DeviceLike = Union[torch.device, str, int, None]

__all__ = [
    "is_available", "device_count", "current_device", "set_device", "device", "synchronize",
    "manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed", "get_rng_state",
    "set_rng_state", "get_rng_state_all", "set_rng_state_all", "get_amp_supported_dtype",
    "is_initialized", "init", "memory_allocated", "max_memory_allocated", "memory_reserved",
    "max_memory_reserved",
    "reset_peak_memory_stats", "memory_stats", "plugin", "platform", "plugins", "capabilities",
    "metrics", "metrics_report", "set_fallback_warnings", "cache_dir", "set_cache_dir",
    "set_log_compiles", "set_dump_dir", "set_max_pending_nodes", "max_pending_nodes",
    "set_pipelined_launch_nodes", "pipelined_launch_nodes", "set_launch_forward_at_backward",
    "launch_forward_at_backward",
    "Stream", "Event", "current_stream", "default_stream", "stream", "set_stream",
    "global_rank", "world_size", "local_rank", "local_world_size", "host_index",
    "PJRTGraph", "graph", "is_current_stream_capturing",
]


def _index(device: _DeviceLike, optional: bool = True) -> int:
    """Device index from an int, "pjrt:1", torch.device, or None (the current device)."""
    if device is None:
        return current_device()
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "pjrt":
            raise ValueError(f"expected a pjrt device, got {device}")
        return current_device() if device.index is None else device.index
    if isinstance(device, int):
        return device
    raise TypeError(f"expected a device index, a device string or torch.device, got {type(device).__name__}")


# ---------------------------------------------------------------------------------- devices

def is_available() -> bool:
    """Whether some sub-plugin can run here (does not load any PJRT library)."""
    if _C._client_started():
        return True  # asked every optimizer step (torch.accelerator): skip the plugin search
    try:
        return bool(registry.candidates())
    except RuntimeError:
        return False


def is_initialized() -> bool:
    """Whether the PJRT client has been started."""
    return _C._client_started()


_NO_INDUCTOR = ("torch.compile's default backend (inductor) has no code generator for pjrt "
                "tensors: use torch.compile(model, backend=\"pjrt\"), which compiles the graph "
                "with the pjrt device's own compiler")


class _NoInductorCodegen(type):
    """What inductor finds when it asks torch.pjrt for its code generators: any use raises."""

    def __getattr__(cls, name):
        raise RuntimeError(_NO_INDUCTOR)

    def __call__(cls, *args, **kwargs):
        raise RuntimeError(_NO_INDUCTOR)


# Inductor's backend registration looks these up on the device module (torch.utils.
# backend_registration._get_custom_mod_func); it stops at the first use, before any lowering.
_INDUCTOR_CODEGEN_NAMES = ("Scheduling", "PythonWrapperCodegen", "CppWrapperCodegen", "WrapperFxCodegen")


def __getattr__(name: str):
    # torch.cuda-style flag read by torch.utils.checkpoint (and fork_rng helpers) to decide whether
    # a device's RNG state must be saved and restored; live, like torch.cuda._initialized.
    if name == "_initialized":
        return is_initialized()
    if name in _INDUCTOR_CODEGEN_NAMES:
        return _NoInductorCodegen(name, (), {})
    raise AttributeError(f"module 'torch.pjrt' has no attribute '{name}'")


def init() -> None:
    """Starts the PJRT client now (it otherwise starts on first device use)."""
    _C._device_count()


def device_count() -> int:
    """Number of pjrt devices; 0 when no sub-plugin can run. Starts the client."""
    if not is_available():
        return 0
    try:
        return _C._device_count()
    except RuntimeError:
        return 0


def current_device() -> int:
    return _C._current_device()


def set_device(device: _DeviceLike) -> None:
    """Sets the current pjrt device (where tensors created with device="pjrt" go)."""
    index = _index(device)
    if index < 0:
        return
    _C._set_device(index)


class device:
    """Context manager that changes the current pjrt device; a negative index or None is a no-op."""

    def __init__(self, device: _DeviceLike):
        self.idx = -1 if device is None else _index(device)
        self.prev_idx = -1

    def __enter__(self):
        self.prev_idx = _C._exchange_device(self.idx)

    def __exit__(self, *exc):
        _C._set_device(self.prev_idx)
        return False


def synchronize(device: _DeviceLike = None) -> None:
    """Runs everything traced so far on the device and waits for it to finish."""
    _C._synchronize(_index(device), "synchronize", True)


# ---------------------------------------------------------------------------------- streams
# PJRT gives no stream control: a device runs its executions in order, so each device has one
# stream and every Stream is it. Waits between streams are then already satisfied; recording an
# Event launches the pending graph, so the event marks the work before it as started. These are
# torch.Stream/torch.Event (the device's guard implements them), shaped like torch.cuda's for code
# that asks the device module (FSDP2, torch.distributed, AMP utilities).

class Stream(torch.Stream):
    """``torch.pjrt.Stream(device=None, priority=0)``: the device's one stream."""

    def __new__(cls, device: _DeviceLike = None, priority: int = 0, **kwargs):
        return super().__new__(cls, device=torch.device("pjrt", _index(device)), priority=priority)


class Event(torch.Event):
    """``torch.pjrt.Event(enable_timing=False, blocking=False, interprocess=False)``."""

    def __new__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        return super().__new__(cls, device=torch.device("pjrt", current_device()),
                               enable_timing=enable_timing, blocking=blocking, interprocess=interprocess)


def current_stream(device: _DeviceLike = None) -> torch.Stream:
    return torch.accelerator.current_stream(torch.device("pjrt", _index(device)))


def default_stream(device: _DeviceLike = None) -> torch.Stream:
    return current_stream(device)


@contextlib.contextmanager
def stream(s: Optional[torch.Stream]):
    """Makes ``s`` the current stream inside the block (None: no change), as torch.cuda.stream."""
    if s is None:
        yield
        return
    previous = torch.accelerator.current_stream(s.device)
    torch.accelerator.set_stream(s)
    try:
        yield
    finally:
        torch.accelerator.set_stream(previous)


def set_stream(s: torch.Stream) -> None:
    torch.accelerator.set_stream(s)


# ---------------------------------------------------------------------------------- graphs
# torch.accelerator.Graph on pjrt (docs/design.md "Device graphs") under torch.cuda's names.

class PJRTGraph(torch.accelerator.Graph):
    """``torch.pjrt.PJRTGraph()``, torch.cuda.CUDAGraph's counterpart: a capture traces the region
    once into one program without applying it; ``replay()`` runs that program on the same tensors."""


class graph:
    """``with torch.pjrt.graph(g):`` captures the block into ``g``, as torch.cuda.graph does.
    ``pool``, ``stream`` and ``capture_error_mode`` are accepted for code written for CUDA: PJRT
    owns the buffers, a device has one stream, and any sync inside the block raises."""

    def __init__(self, pjrt_graph: torch.accelerator.Graph, pool=None, stream=None,
                 capture_error_mode: str = "global"):
        self.pjrt_graph = pjrt_graph

    def __enter__(self):
        synchronize()
        self.pjrt_graph.capture_begin()

    def __exit__(self, *exc_info):
        self.pjrt_graph.capture_end()


def is_current_stream_capturing() -> bool:
    """Whether a graph is being captured on the current pjrt device."""
    return _C._capturing_graph(current_device())


# ---------------------------------------------------------------------------------- random

def _is_in_bad_fork() -> bool:
    return False


def manual_seed(seed: int) -> None:
    _C._manual_seed(current_device(), int(seed))


def manual_seed_all(seed: int) -> None:
    _C._manual_seed_all(int(seed))


def seed() -> None:
    _C._seed(current_device())


def seed_all() -> None:
    s = _C._seed(current_device())
    _C._manual_seed_all(s)


def initial_seed() -> int:
    return _C._initial_seed(current_device())


def get_rng_state(device: _DeviceLike = "pjrt") -> torch.Tensor:
    """The generator state of a pjrt device as a uint8 CPU tensor (seed and offset)."""
    state = _C._get_rng_state(_index(device))
    return torch.frombuffer(bytearray(state), dtype=torch.uint8)


def set_rng_state(new_state: torch.Tensor, device: _DeviceLike = "pjrt") -> None:
    data = new_state.to(torch.uint8).contiguous().cpu().numpy().tobytes()
    _C._set_rng_state(_index(device), data)


def get_rng_state_all() -> List[torch.Tensor]:
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states) -> None:
    for i, state in enumerate(new_states):
        set_rng_state(state, i)


# ---------------------------------------------------------------------------------- amp

def get_amp_supported_dtype() -> List[torch.dtype]:
    """dtypes autocast may use on the active plugin."""
    names = _active_plugin_capabilities().get("amp_dtypes", ["bfloat16", "float16"])
    return [getattr(torch, n) for n in names]


# ---------------------------------------------------------------------------------- memory

def memory_stats(device: _DeviceLike = None) -> Dict[str, int]:
    """allocated: bytes of live pjrt storages; reserved: bytes of materialized device buffers
    (a donated buffer counts once, as the output that reuses its memory)."""
    return dict(_C._memory_stats(_index(device)))


def memory_allocated(device: _DeviceLike = None) -> int:
    return memory_stats(device)["allocated_bytes.current"]


def max_memory_allocated(device: _DeviceLike = None) -> int:
    return memory_stats(device)["allocated_bytes.peak"]


def max_memory_reserved(device: _DeviceLike = None) -> int:
    """Peak bytes of device buffers since the last reset_peak_memory_stats."""
    return memory_stats(device)["reserved_bytes.peak"]


def memory_reserved(device: _DeviceLike = None) -> int:
    return memory_stats(device)["reserved_bytes.current"]


def reset_peak_memory_stats(device: _DeviceLike = None) -> None:
    _C._reset_peak_memory(_index(device))


# ---------------------------------------------------------------------------------- plugins

def plugin() -> str:
    """Name of the active sub-plugin (starts the client)."""
    return _C._platform_info()["plugin"]


def platform() -> Dict[str, Any]:
    """The active plugin, its PJRT platform name and version, device kind and count."""
    return dict(_C._platform_info())


def plugins() -> Dict[str, Dict[str, Any]]:
    """Every discovered sub-plugin with its availability (loads no library)."""
    out = {}
    for name, record in registry.discover().items():
        out[name] = {
            "source": record.source,
            "available": record.available and not record.error,
            "reason": record.error or record.reason,
            "priority": record.plugin.priority if record.plugin else None,
        }
    return out


def host_index() -> int:
    """Index of this host in a multi-host job, as the active (or to-be-selected) plugin says."""
    p = registry.plugin(_active_plugin_name())
    return p.host_index() if p is not None else 0


def _active_plugin_name() -> Optional[str]:
    if _C._client_started():
        return _C._platform_info()["plugin"]
    try:
        return registry.candidates()[0].name
    except RuntimeError:
        return None


def _active_plugin_capabilities() -> Dict[str, Any]:
    p = registry.plugin(_active_plugin_name())
    return p.capabilities() if p is not None else {}


def capabilities() -> Dict[str, Any]:
    """Capabilities of the active (or to-be-selected) sub-plugin."""
    return _active_plugin_capabilities()


# ---------------------------------------------------------------------------------- settings

def metrics_report() -> str:
    return metrics.report()


def set_fallback_warnings(enabled: bool) -> None:
    """Whether the first CPU fallback of each op warns (default on)."""
    _C._set_fallback_warnings(bool(enabled))


def cache_dir() -> Optional[str]:
    """The persistent compile cache directory, or None when disabled."""
    return _C._cache_dir() or None


def set_cache_dir(path: Optional[str]) -> None:
    """Where compiled graphs persist across processes; None disables the disk cache."""
    _C._set_cache_dir("" if path is None else os.fspath(path))


def set_log_compiles(enabled: bool) -> None:
    """Explain every compile on stderr (as TORCH_PJRT_LOG_COMPILES=1)."""
    _C._set_log_compiles(bool(enabled))


def set_dump_dir(path: Optional[str]) -> None:
    """Write the StableHLO of every compiled graph to `path` (as TORCH_PJRT_DUMP_DIR)."""
    if path:
        os.makedirs(path, exist_ok=True)
    _C._set_dump_dir("" if path is None else os.fspath(path))


def max_pending_nodes() -> int:
    return _C._max_pending_nodes()


def set_max_pending_nodes(n: int) -> None:
    """Largest trace (in ops) before it is synced automatically, bounding memory."""
    _C._set_max_pending_nodes(int(n))


def pipelined_launch_nodes() -> int:
    return _C._pipelined_launch_nodes()


def set_pipelined_launch_nodes(n: int) -> None:
    """Ops in the first piece of a pipelined inference trace (0: off; default 100). Under
    ``torch.no_grad()`` or ``torch.inference_mode()`` the pending trace is launched in pieces as it
    is traced, without waiting, so the device runs its start while the rest is traced; each later
    piece is as long as the pieces before it together."""
    if int(n) < 0:
        raise ValueError(f"pipelined_launch_nodes must be >= 0 (0 turns pipelining off), got {n}")
    _C._set_pipelined_launch_nodes(int(n))


def launch_forward_at_backward() -> bool:
    return _C._backward_launch()


def set_launch_forward_at_backward(on: bool) -> None:
    """Whether a training step's forward is launched as its backward begins (default True): the
    device runs the forward while the backward is traced, and the loss can be read without
    waiting for the backward's and the optimizer's programs. False keeps the forward and backward
    one program, launched as ``optimizer.step()`` begins."""
    _C._set_backward_launch(bool(on))


# ---------------------------------------------------------------------------------- internals

# Check errors and compile logs name the innermost frame outside these directories (see
# csrc/python/user_frame.cc).
_C._set_source_location_skip([os.path.dirname(torch.__file__), os.path.dirname(__file__), "<frozen"])


def _shutdown() -> None:
    _C._shutdown()
    for record in registry.discover().values() if registry._records is not None else []:
        if record.plugin is not None:
            try:
                record.plugin.shutdown()
            except Exception:
                pass
