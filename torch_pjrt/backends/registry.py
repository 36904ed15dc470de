"""Discovery and selection of sub-plugins.

Every ``torch_pjrt.plugins`` entry point in the environment is a candidate; so is a bare library
named by ``TORCH_PJRT_PLUGIN_LIBRARY`` (for vendors testing a build). ``PJRT_DEVICE=<name>``
picks one; otherwise available plugins are tried from the highest priority down. A plugin that
fails to import, to report availability, or to start is reported once and skipped; nothing here
runs at ``import torch``.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import sys
import threading
import traceback
import warnings
from typing import Dict, List, Optional

from .base import DevicePlugin

ENTRY_POINT_GROUP = "torch_pjrt.plugins"

_lock = threading.RLock()
_records: Optional[Dict[str, "PluginRecord"]] = None
_active: Optional[str] = None


@dataclasses.dataclass
class PluginRecord:
    """What discovery learned about one sub-plugin."""

    name: str
    source: str  # "module:Class" of the entry point, or the library path
    plugin: Optional[DevicePlugin]
    error: Optional[str] = None  # why it could not even be loaded
    available: bool = False
    reason: Optional[str] = None  # why it is not available

    def describe(self) -> str:
        if self.error:
            return f"{self.name}: broken ({self.error})"
        if not self.available:
            return f"{self.name}: unavailable ({self.reason or 'no reason given'})"
        return f"{self.name}: available (priority {self.plugin.priority})"


class PathPlugin(DevicePlugin):
    """A plugin given only by its library path (``TORCH_PJRT_PLUGIN_LIBRARY``), with optional
    JSON client options in ``TORCH_PJRT_PLUGIN_OPTIONS`` and capabilities (the names of
    ``DevicePlugin``'s capability attributes) in ``TORCH_PJRT_PLUGIN_CAPABILITIES``."""

    priority = 1000  # naming a library explicitly beats every installed plugin

    def __init__(self, name: str, path: str, options: Dict, capabilities: Optional[Dict] = None):
        self.name = name
        self._path = path
        self._options = options
        known = DevicePlugin().capabilities()  # the capability attributes, one list (base.py)
        for key, value in (capabilities or {}).items():
            if key not in known:
                raise ValueError(f"unknown capability {key!r}; known: {', '.join(known)}")
            if isinstance(value, list):  # JSON lists: the tuple/frozenset attributes
                value = frozenset(value) if key == "supported_dtypes" else tuple(value)
            setattr(self, key, value)

    def library_path(self) -> str:
        return self._path

    def client_create_options(self):
        return dict(self._options)

    def is_available(self) -> bool:
        return os.path.exists(self._path)

    def unavailable_reason(self) -> Optional[str]:
        return None if self.is_available() else f"no file at {self._path}"


def _warn(message: str) -> None:
    warnings.warn(f"torch_pjrt: {message}", RuntimeWarning, stacklevel=3)


def _check_availability(record: PluginRecord) -> None:
    try:
        record.available = bool(record.plugin.is_available())
        if not record.available:
            record.reason = record.plugin.unavailable_reason() or "is_available() returned False"
    except Exception as e:  # a plugin's own bug must not take the device down
        record.available = False
        record.error = f"is_available() raised {type(e).__name__}: {e}"
        _warn(f"sub-plugin '{record.name}' ({record.source}) is skipped: {record.error}")


def _load_entry_points() -> Dict[str, PluginRecord]:
    from importlib.metadata import entry_points

    records: Dict[str, PluginRecord] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        name = ep.name
        source = ep.value
        if name in records:
            _warn(f"two sub-plugins are named '{name}' ({records[name].source} and {source}); "
                  f"keeping the first")
            continue
        try:
            obj = ep.load()
            plugin = obj() if isinstance(obj, type) else obj
            if not isinstance(plugin, DevicePlugin):
                raise TypeError(f"{source} is not a torch_pjrt.backends.DevicePlugin")
            if not plugin.name:
                plugin.name = name
            record = PluginRecord(name=name, source=source, plugin=plugin)
            _check_availability(record)
        except Exception as e:
            detail = "".join(traceback.format_exception_only(type(e), e)).strip()
            record = PluginRecord(name=name, source=source, plugin=None, error=detail)
            _warn(f"sub-plugin '{name}' ({source}) failed to load and is skipped: {detail}")
        records[name] = record
    return records


def _path_plugin() -> Optional[PluginRecord]:
    path = os.environ.get("TORCH_PJRT_PLUGIN_LIBRARY")
    if not path:
        return None
    name = os.environ.get("TORCH_PJRT_PLUGIN_NAME", "custom")
    parsed = {}
    for var, what in (("TORCH_PJRT_PLUGIN_OPTIONS", "client options"),
                      ("TORCH_PJRT_PLUGIN_CAPABILITIES", "capabilities")):
        raw = os.environ.get(var, "")
        try:
            value = json.loads(raw) if raw else {}
            if not isinstance(value, dict):
                raise ValueError("must be a JSON object")
        except ValueError as e:
            error = f"{var} is not a JSON object of {what}: {e}"
            _warn(f"plugin library {path} is skipped: {error}")
            return PluginRecord(name=name, source=path, plugin=None, error=error)
        parsed[var] = value
    try:
        plugin = PathPlugin(name, path, parsed["TORCH_PJRT_PLUGIN_OPTIONS"],
                            parsed["TORCH_PJRT_PLUGIN_CAPABILITIES"])
    except ValueError as e:
        error = f"TORCH_PJRT_PLUGIN_CAPABILITIES: {e}"
        _warn(f"plugin library {path} is skipped: {error}")
        return PluginRecord(name=name, source=path, plugin=None, error=error)
    record = PluginRecord(name=name, source=path, plugin=plugin)
    _check_availability(record)
    return record


def discover(refresh: bool = False) -> Dict[str, PluginRecord]:
    """All sub-plugins found in this environment, by name."""
    global _records
    with _lock:
        if _records is None or refresh:
            records = _load_entry_points()
            extra = _path_plugin()
            if extra is not None:
                records[extra.name] = extra
            _records = records
        return _records


def requested_name() -> Optional[str]:
    name = os.environ.get("PJRT_DEVICE", "").strip()
    return name.lower() or None


def candidates() -> List[PluginRecord]:
    """Plugins to try, in order. With PJRT_DEVICE set, exactly that one (or an error)."""
    records = discover()
    wanted = requested_name()
    if wanted is not None:
        matches = [r for k, r in records.items() if k.lower() == wanted]
        listing = "; ".join(r.describe() for r in records.values()) or "none installed"
        if not matches:
            raise RuntimeError(f"PJRT_DEVICE={wanted!r} names no installed torch_pjrt sub-plugin. "
                               f"Found: {listing}")
        record = matches[0]
        if record.error or not record.available:
            raise RuntimeError(f"PJRT_DEVICE={wanted!r} selects a plugin that cannot run here: "
                               f"{record.describe()}. Available: "
                               + (", ".join(r.name for r in records.values() if r.available and not r.error)
                                  or "none"))
        return [record]
    usable = [r for r in records.values() if r.available and not r.error]
    if not usable:
        listing = "; ".join(r.describe() for r in records.values()) or "none installed"
        raise RuntimeError("no usable torch_pjrt sub-plugin: " + listing)
    return sorted(usable, key=lambda r: -r.plugin.priority)


def _local_topology():
    rank = os.environ.get("LOCAL_RANK")
    size = os.environ.get("LOCAL_WORLD_SIZE")
    if rank is None or size is None:
        return None
    return int(rank), int(size)


def candidate_config(index: int) -> Optional[Dict]:
    """What the C++ runtime needs to start candidate ``index`` (best first), or None past the last.

    The runtime asks candidate by candidate until one starts, so only a candidate that is about
    to be started is configured: ``configure_single_process``/``configure_multiprocess`` set
    process-wide state (XLA_FLAGS, TPU_* variables) that must not leak from a plugin that is not
    used. Called on first device use, never at ``import torch``, with no runtime lock held.
    """
    # XLA plugins log INFO lines through absl on stderr; keep warnings and errors only.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    records = candidates()
    if index >= len(records):
        return None
    record = records[index]
    strict = requested_name() is not None
    plugin = record.plugin
    # Raised, never skipped: falling back to another plugin would hide a misordered script.
    job = _cross_process_job(record.name, plugin)
    try:
        topology = _local_topology()
        if topology is None:
            plugin.configure_single_process()
        else:
            plugin.configure_multiprocess(*topology)
        config = {
            "name": record.name,
            "library_path": str(plugin.library_path()),
            "options": dict(plugin.client_create_options()),
            "capabilities": plugin.runtime_capabilities(),
            "strict": strict,
        }
        worker = _compile_worker_command(plugin)
        if worker is not None:
            config["compile_worker"] = worker
        small = plugin.small_program_client() if job is None else None
        if small is not None:
            config["small_program_client"] = small
        if job is not None:
            rank, size, store = job
            config["options"].update(plugin.distributed_client_options(rank, size))
            config["kv_store"] = store
    except Exception as e:
        message = f"{type(e).__name__}: {e}"
        if strict:
            raise RuntimeError(f"sub-plugin '{record.name}' could not be configured: {message}") from e
        _warn(f"sub-plugin '{record.name}' is skipped: configuring it raised {message}")
        return {"name": record.name, "skip": f"sub-plugin '{record.name}' could not be configured: {message}",
                "strict": strict}
    # If this candidate fails to start, the next one's configuration sets the default again.
    _set_autocast_default(config["capabilities"])
    return config


# The compile worker's interpreter: no site packages, no torch; it runs the worker library's
# entry point on the protocol's file descriptors and exits when the requests end.
_WORKER_CODE = "import ctypes, os, sys; os._exit(ctypes.CDLL(sys.argv[1]).torch_pjrt_compile_worker_main(3, 4))"


def _compile_worker_command(plugin: DevicePlugin) -> Optional[List[str]]:
    """The command that starts a compile worker (torch_pjrt/csrc/runtime/compile_worker.h) for
    a plugin declaring ``compile_worker``, unless ``TORCH_PJRT_COMPILE_WORKER=0``."""
    if not plugin.compile_worker or os.environ.get("TORCH_PJRT_COMPILE_WORKER", "1") == "0":
        return None
    spec = importlib.util.find_spec("torch_pjrt._compile_worker")
    if spec is None or not spec.origin:
        return None  # a build without the worker library: compile in this process
    return [sys.executable, "-I", "-S", "-c", _WORKER_CODE, spec.origin]


def _cross_process_job(name: str, plugin: DevicePlugin):
    """(rank, world size, store) when ``plugin`` runs collectives across the processes of a job
    of several, else None. Its client needs torch.distributed's store to find its peers, so the
    process group must exist before the device is first used."""
    from .. import distributed

    if not plugin.cross_process_collectives:
        return None
    job = distributed.client_job()
    size = distributed.world_size()
    if job is None and size > 1:
        raise RuntimeError(
            f"the pjrt device (plugin '{name}') was used before torch.distributed.init_process_group "
            f"in a job of {size} processes (WORLD_SIZE={size}). Plugin '{name}' runs collectives "
            f"across processes, and its client needs the process group's store to find its peers "
            f"when it starts: call torch.distributed.init_process_group(\"pjrt\") (or "
            f"\"cpu:gloo,pjrt:pjrt\") before creating any pjrt tensor in each process.")
    return job


def _set_autocast_default(capabilities: Dict[str, str]) -> None:
    """Makes autocast's default dtype on pjrt one the selected plugin supports, unless the user
    already chose a supported one."""
    import torch

    names = [n for n in capabilities.get("amp_dtypes", "").split(",") if n]
    if not names:
        return
    current = str(torch.get_autocast_dtype("pjrt")).replace("torch.", "")
    if current not in names:
        torch.set_autocast_dtype("pjrt", getattr(torch, names[0]))


def plugin(name: Optional[str]) -> Optional[DevicePlugin]:
    record = discover().get(name)
    return record.plugin if record else None
