"""The DevicePlugin base class: how a chip's PJRT plugin becomes the `pjrt` device.

A sub-plugin is a Python class (usually in its own wheel) that tells torch_pjrt where its PJRT
plugin library is, how to create the client, and what the hardware can do. It is registered with
an entry point in the ``torch_pjrt.plugins`` group; ``docs/plugins.md`` is the vendor's guide.

Only the methods below are ever called, and never at ``import torch``: discovery happens on first
use of the device, and ``library_path()`` / ``client_create_options()`` only for the selected
plugin.
"""

from __future__ import annotations

import os
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

    def small_program_client(self) -> Optional[Dict[str, Any]]:
        """A second client for small programs, or None (the default): one client runs everything.

        Returns ``{"env": {name: value}, "max_work": n}``: the second client starts with those
        environment variables set (and the old values back afterwards), and every program whose
        arithmetic is below ``n`` runs on it (elements computed, a dot or convolution counting its
        multiply-adds). An optional ``"max_work_per_op": m`` also sends there every program that a
        lazy training step launches and goes on tracing beside (at ``backward()``, as
        ``optimizer.step()`` begins and as it ends) whose arithmetic per op is below ``m``. Only for
        ``host_memory`` plugins: each client's programs read the other's buffers as views of the
        same memory. Called when the client starts; never in a job that runs collectives across
        processes.
        """
        return None

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
        """Index of this host in a multi-host job: torchrun's node rank (``GROUP_RANK``) unless
        the plugin knows better (a TPU slice's worker id)."""
        return int(os.environ.get("GROUP_RANK", "0"))

    def distributed_client_options(self, process_index: int, process_count: int) -> Dict[str, Any]:
        """Extra ``PJRT_Client_Create`` options when the plugin runs collectives across processes
        (``cross_process_collectives``) in a job of ``process_count`` processes: by default the
        ``node_id``/``num_nodes`` that XLA's GPU plugins read. The client also gets PJRT's
        key-value callbacks over torch.distributed's store."""
        return {"node_id": process_index, "num_nodes": process_count}

    def shutdown(self) -> None:
        """Called at interpreter exit after the client is destroyed."""

    # ------------------------------------------------------------------ capabilities
    # Read by torch_pjrt's lowering and AMP code instead of checking device names.

    #: dtypes the hardware computes natively, as ``torch.dtype`` objects or their names
    #: ("float32"); None means every dtype pjrt tensors can hold.
    supported_dtypes: Optional[FrozenSet[Any]] = None

    #: What happens to a dtype outside ``supported_dtypes`` when a tensor of it is created on the
    #: device: "error" raises a TypeError naming the dtype, the plugin and the fix; "warn" warns
    #: once per dtype and lets the plugin's compiler emulate it (e.g. float64 on TPU).
    unsupported_dtype_policy: str = "error"

    #: True when gathers and scatters are fast. False makes row lookups (``index_select``,
    #: embedding forward and backward) one-hot matmuls, which matrix units run well.
    dense_gather: bool = True

    #: Precision of floating-point matmuls and convolutions: "highest", "high" or "default"
    #: (the names of ``torch.set_float32_matmul_precision``; sent as StableHLO's HIGHEST, HIGH
    #: and DEFAULT precision attributes). None leaves the compiler's default.
    default_matmul_precision: Optional[str] = None

    #: False when the compiler runs ``x @ w.t()`` (a 2-D dot contracting the right operand's
    #: minor dimension: every ``nn.Linear``) much slower than other layouts; the lowering then
    #: computes ``(w @ x.t()).t()`` when ``w`` is the larger operand.
    fast_transposed_matmul: bool = True

    #: False when the compiler's maximum/minimum (elementwise, in reductions, windows and
    #: scatters) may return a number where an operand is NaN. The lowering then selects the NaN
    #: explicitly, so torch.maximum, amax, relu and max pooling still propagate it.
    nan_propagating_min_max: bool = True

    #: False when the compiler's reductions run well below memory speed. The lowering then
    #: computes long float sums over the trailing dimensions (softmax and cross entropy over a
    #: vocabulary) as matrix-vector products with a ones vector, and keeps reductions over
    #: leading dimensions (a linear layer's bias gradient) two-dimensional behind an
    #: optimization barrier.
    fast_reductions: bool = True

    #: False when the compiler computes float32 sin, cos, tan, atan2 (and asin, acos, atan,
    #: which it expands into atan2), pow, remainder (fmod) and log1p with a scalar library call
    #: per element. The
    #: lowering then computes them, for float32 tensors of 1024 elements or more, in float64
    #: arithmetic the compiler vectorizes (argument reduction and polynomials), rounded once.
    fast_transcendentals: bool = True

    #: True when the plugin runs XLA collectives between processes (given the key-value store
    #: and ``distributed_client_options``): the ``pjrt`` process group then puts all-reduce,
    #: broadcast, all-gather and reduce-scatter into the lazy graph, so a DDP step stays one
    #: program. False (the CPU plugin, which ignores the key-value callbacks): they run through
    #: gloo on host copies.
    cross_process_collectives: bool = False

    #: True when device memory is host memory, so torch's own CPU kernels can run on a program's
    #: buffers: float32 convolutions (forward and backward) become XLA FFI custom calls to ATen's
    #: oneDNN convolution inside the compiled program. Needs the plugin's PJRT FFI extension.
    host_kernels: bool = False

    #: True when the plugin's device buffers are plain memory of this process (the CPU plugin).
    #: A read of a finished buffer (``.item()``, ``.cpu()``, the index checks' results) then
    #: copies its bytes directly: the plugin's own transfer runs as a task that queues behind
    #: programs launched later, so a training step's loss, read while the backward and the
    #: optimizer's programs ran, waited for both.
    host_memory: bool = False

    #: True when programs may be compiled in a second process with its own client of the same
    #: plugin (a compile worker) and loaded here from the serialized executable. Compiling in
    #: the process that runs the graphs fragmented its heap and slowed every later step by
    #: 15-40% on the CPU plugin; the worker also takes the compiler's peak memory. Needs
    #: executable serialization and a plugin that can start a second client on the machine
    #: (not a GPU plugin that reserves the device's memory). ``TORCH_PJRT_COMPILE_WORKER=0``
    #: turns it off.
    compile_worker: bool = False

    #: True when the plugin's programs treat subnormal floats as zero, read and written (what
    #: ``torch.set_flush_denormal(True)`` does on the CPU; CPU eager keeps them by default): then
    #: ``x > 0`` is False for x = 1e-40, and ``torch.fmod(1, 1e-40)`` is NaN. A property of the
    #: compiler's runtime that no lowering can undo; declared so that users and tests can know it.
    flushes_denormals: bool = False

    #: dtypes autocast may use on this device, preferred first (the first is autocast's default).
    amp_dtypes: Tuple[str, ...] = ("bfloat16", "float16")

    def capabilities(self) -> Dict[str, Any]:
        """Every capability as a plain dict (what ``torch.pjrt.capabilities()`` shows)."""
        return {
            "supported_dtypes": None
            if self.supported_dtypes is None
            else sorted(dtype_name(d) for d in self.supported_dtypes),
            "unsupported_dtype_policy": self.unsupported_dtype_policy,
            **{name: getattr(self, name) for name in _BOOLEAN_CAPABILITIES},
            "default_matmul_precision": self.default_matmul_precision,
            "amp_dtypes": [dtype_name(d) for d in self.amp_dtypes],
            "cross_process_collectives": bool(self.cross_process_collectives),
            "host_kernels": bool(self.host_kernels),
            "host_memory": bool(self.host_memory),
            "compile_worker": bool(self.compile_worker),
            "flushes_denormals": bool(self.flushes_denormals),
        }

    def runtime_capabilities(self) -> Dict[str, str]:
        """The capabilities the C++ runtime reads, as strings; raises ValueError on a bad value."""
        return capability_strings(self.name, self.capabilities())

    def __repr__(self) -> str:
        return f"<{type(self).__name__} name={self.name!r} priority={self.priority}>"


_POLICIES = ("error", "warn")
# Capabilities that are plain booleans, True by default (sent to the runtime as "1"/"0").
_BOOLEAN_CAPABILITIES = ("dense_gather", "fast_transposed_matmul", "nan_propagating_min_max", "fast_reductions",
                         "fast_transcendentals")
_PRECISIONS = ("highest", "high", "default")


def dtype_name(dtype: Any) -> str:
    """'float32' for torch.float32, 'torch.float32' or 'float32'; ValueError for anything else."""
    import torch

    name = str(dtype)
    name = name[len("torch."):] if name.startswith("torch.") else name
    if not isinstance(getattr(torch, name, None), torch.dtype):
        raise ValueError(f"{dtype!r} is not a torch dtype")
    return str(getattr(torch, name)).replace("torch.", "")  # canonical: 'float' -> 'float32'


def capability_strings(plugin: str, caps: Dict[str, Any]) -> Dict[str, str]:
    """Validates a capabilities dict (as ``DevicePlugin.capabilities()`` returns) and encodes it
    for the C++ runtime. Errors name the plugin and the bad value."""
    out: Dict[str, str] = {}
    try:
        supported = caps.get("supported_dtypes")
        if supported is not None:
            out["supported_dtypes"] = ",".join(sorted({dtype_name(d) for d in supported}))
        policy = caps.get("unsupported_dtype_policy", "error")
        if policy not in _POLICIES:
            raise ValueError(f"unsupported_dtype_policy must be one of {_POLICIES}, got {policy!r}")
        out["unsupported_dtype_policy"] = policy
        for name in _BOOLEAN_CAPABILITIES:
            out[name] = "1" if caps.get(name, True) else "0"
        precision = caps.get("default_matmul_precision")
        if precision is not None:
            if precision not in _PRECISIONS:
                raise ValueError(f"default_matmul_precision must be one of {_PRECISIONS} or None, "
                                 f"got {precision!r}")
            out["matmul_precision"] = precision
        amp = [dtype_name(d) for d in caps.get("amp_dtypes", ())]
        bad = [d for d in amp if d not in ("bfloat16", "float16")]
        if bad:
            raise ValueError(f"amp_dtypes may hold bfloat16 and float16 only, got {bad}")
        out["amp_dtypes"] = ",".join(amp)
        out["host_kernels"] = "1" if caps.get("host_kernels", False) else "0"
        out["host_memory"] = "1" if caps.get("host_memory", False) else "0"
    except ValueError as e:
        raise ValueError(f"sub-plugin '{plugin}' declares an invalid capability: {e}") from None
    return out
