"""The CPU sub-plugin: OpenXLA's CPU PJRT plugin from the ``xla-cpu-pjrt`` wheel.

It is always installed with torch_pjrt and is the default when no accelerator plugin is
available. ``TORCH_PJRT_CPU_DEVICE_COUNT=N`` (or ``set_device_count(N)`` before first use)
exposes N virtual devices, useful for testing multi-device code.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any, Dict, Optional

from .base import DevicePlugin

_device_count_override: Optional[int] = None


def set_device_count(n: int) -> None:
    """Number of CPU devices the client will expose; only before the device is first used."""
    global _device_count_override
    if n < 1:
        raise ValueError(f"the CPU plugin needs at least 1 device, got {n}")
    _device_count_override = int(n)


def _package_dir() -> Optional[str]:
    spec = importlib.util.find_spec("xla_plugins.xla_cpu_pjrt")
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


# XLA:CPU options this plugin needs, read by the plugin only from XLA_FLAGS before its first
# compile. A user's own setting of any of them wins.
_XLA_FLAGS = {
    # Region-based copy insertion (off by default; XLA's own host-offloading client turns it on).
    # Without it, every parameter that a training step both reads in the backward pass and
    # updates in place is copied first: the MLP benchmark copies its 16 MB weight each step and
    # runs ~35% slower with a higher peak RSS (docs/design.md).
    "--xla_cpu_copy_insertion_use_region_analysis": "true",
    # XLA:CPU's "fast" min/max (its default) returns whichever operand comes second when one is
    # NaN, where StableHLO and torch propagate NaN. The exact form is 3-7x slower in reductions,
    # relu and max pooling (softmax's row max over 262k floats: 1.2 ms against 0.16), so it stays
    # fast and the plugin declares nan_propagating_min_max = False: the lowering selects NaNs
    # explicitly (docs/design.md, XLA CPU performance notes).
    "--xla_cpu_enable_fast_min_max": "true",
    # XNNPACK dots are wrong on this build: a dot whose right operand is a parameter keeps that
    # operand packed and reuses it while the parameter's buffer has the same address as on the
    # last call, contents unchecked. A weight updated in place (donation keeps its address) or a
    # new tensor landing on a freed one's address then multiplies by stale values: the MLP's
    # backward used the first step's weight forever. Eigen's dots have no such cache; they cost
    # ~5% on the GPT benchmark and made compiled steps (new weight buffers each step, so XNNPACK
    # repacked every call) 1.6x faster (docs/design.md, "Stale packed weights").
    "--xla_cpu_use_xnnpack": "false",
}


# XLA:CPU's generated code (fusions, reductions) uses 256-bit vectors unless told otherwise, also
# where the CPU has 512-bit ones; its dots are Eigen's, compiled into the plugin for 256-bit
# packets, so only the generated code can use them. On an AVX-512 host (torch's own CPU
# capability, which ATEN_CPU_CAPABILITY can lower) the benchmarks gained in alternating pairs: the
# GPT example 9-10%, the MLP 2-10%, the small CNN 3-15% (docs/design.md, "Vector width").
_AVX512_XLA_FLAGS = {"--xla_cpu_prefer_vector_width": "512"}


def _host_xla_flags() -> Dict[str, str]:
    import torch

    wide = torch.backends.cpu.get_cpu_capability() == "AVX512"
    return {**_XLA_FLAGS, **(_AVX512_XLA_FLAGS if wide else {})}


def _set_xla_flags() -> None:
    flags = os.environ.get("XLA_FLAGS", "")
    for name, value in _host_xla_flags().items():
        if name not in flags:
            flags = (flags + " " + name + "=" + value).strip()
    os.environ["XLA_FLAGS"] = flags


def _usable_cpus() -> int:
    """The CPUs this process may run on: XLA's pool size when nothing else sets it."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


# Marks a PJRT_NPROC that _size_intra_op_pool set (children inherit the environment).
_OWN_PJRT_NPROC = "_TORCH_PJRT_OWN_PJRT_NPROC"


def _size_intra_op_pool() -> None:
    """XLA's worker pool gets no more threads than torch's own intra-op pool.

    XLA's CPU client sizes the pool that runs a program's kernels from ``PJRT_NPROC`` (or
    ``NPROC``), else from the CPUs the process may run on, when the client starts. Torch's thread
    count is what a user sets to share the machine (``torch.set_num_threads``, ``OMP_NUM_THREADS``,
    which torchrun sets to 1 for several processes per host); the host kernels' OpenMP team already
    follows it. A pool larger than it oversubscribes the cores, and on small programs one thread
    is faster (docs/design.md, "XLA's pool size"). A user's own ``PJRT_NPROC``/``NPROC`` wins.
    """
    own = os.environ.get(_OWN_PJRT_NPROC)
    if own is not None and own == os.environ.get("PJRT_NPROC"):
        del os.environ["PJRT_NPROC"]  # set by torch_pjrt in a parent process, not by the user
    if "PJRT_NPROC" in os.environ or "NPROC" in os.environ:
        return
    import torch

    threads = torch.get_num_threads()
    if threads < _usable_cpus():
        os.environ["PJRT_NPROC"] = os.environ[_OWN_PJRT_NPROC] = str(threads)


# The arithmetic (elements computed, multiply-adds for dots) below which a program runs on the
# one-thread client: the tiny transformers' and the MobileNetV3 inference programs of
# bench/models.py (1-43M) ran 7-16% faster on one thread; ViT-tiny's inference pieces (70-77M)
# 12% slower.
_SMALL_PROGRAM_WORK = 50_000_000
# The work per op below which a program that a lazy training step launches (and goes on tracing
# beside) runs on the one-thread client whatever its size: ViT-tiny's forward and backward (0.7M
# per op) and updates (1.4M), MobileNetV3's updates (0.4M) stepped 13-25% faster there; the MLP's
# and the GPT example's forward and backward (64M and 9.9M per op: large dots) at half speed.
_SMALL_PROGRAM_WORK_PER_OP = 4_000_000


def _int_setting(name: str, default: int) -> int:
    raw = os.environ.get(name, str(default))
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {raw!r}") from None


def _xla_pool_size() -> int:
    """The threads of the client XLA starts now (what _size_intra_op_pool left in the environment)."""
    for name in ("PJRT_NPROC", "NPROC"):
        try:
            return int(os.environ[name])
        except (KeyError, ValueError):
            pass
    return _usable_cpus()


def _configure_process() -> None:
    _set_xla_flags()
    _size_intra_op_pool()
    # Device buffers are malloc'ed host memory: keep the large blocks XLA frees after each
    # execution in the heap for the next one (torch_pjrt/csrc/runtime/host_heap.cc says why).
    from torch_pjrt import _C

    _C._keep_freed_blocks_in_heap()


class CpuPlugin(DevicePlugin):
    name = "cpu"
    priority = 0  # the fallback: any available accelerator plugin wins

    def library_path(self) -> str:
        d = _package_dir()
        if d is None:
            raise RuntimeError("the CPU PJRT plugin is not installed: pip install xla-cpu-pjrt")
        return os.path.join(d, "xla_cpu_pjrt.so")

    def is_available(self) -> bool:
        d = _package_dir()
        return d is not None and os.path.exists(os.path.join(d, "xla_cpu_pjrt.so"))

    def unavailable_reason(self) -> Optional[str]:
        if self.is_available():
            return None
        return "package xla-cpu-pjrt is not installed (pip install xla-cpu-pjrt)"

    def device_count(self) -> int:
        if _device_count_override is not None:
            return _device_count_override
        raw = os.environ.get("TORCH_PJRT_CPU_DEVICE_COUNT", "1")
        try:
            n = int(raw)
        except ValueError:
            raise ValueError(f"TORCH_PJRT_CPU_DEVICE_COUNT must be a positive integer, got {raw!r}") from None
        if n < 1:
            raise ValueError(f"TORCH_PJRT_CPU_DEVICE_COUNT must be a positive integer, got {raw!r}")
        return n

    def client_create_options(self) -> Dict[str, Any]:
        # Must be an int64 option: the plugin aborts the process on any other type.
        return {"cpu_device_count": int(self.device_count())}

    def physical_chip_count(self) -> int:
        return 1

    def small_program_client(self) -> Optional[Dict[str, Any]]:
        # Programs of a few hundred small kernels run faster on one thread than on XLA's pool of
        # several (cross-thread hand-offs per kernel); large ones run at half speed on one. A
        # second client with a one-thread pool runs the small ones (docs/design.md, "A second
        # client for small programs"). TORCH_PJRT_SMALL_PROGRAM_WORK sets the size bound (0: no
        # second client), TORCH_PJRT_SMALL_PROGRAM_WORK_PER_OP the training steps' (0: none).
        max_work = _int_setting("TORCH_PJRT_SMALL_PROGRAM_WORK", _SMALL_PROGRAM_WORK)
        max_work_per_op = _int_setting("TORCH_PJRT_SMALL_PROGRAM_WORK_PER_OP", _SMALL_PROGRAM_WORK_PER_OP)
        if max_work <= 0 or _xla_pool_size() <= 1:
            return None
        return {"env": {"PJRT_NPROC": "1"}, "max_work": max_work, "max_work_per_op": max(max_work_per_op, 0)}

    def configure_single_process(self) -> None:
        _configure_process()

    def configure_multiprocess(self, local_rank: int, local_world_size: int) -> None:
        _configure_process()

    # float64 and int64 run natively; the XLA CPU compiler handles every dtype pjrt supports.
    amp_dtypes = ("bfloat16", "float16")
    # XLA:CPU (xla-cpu-pjrt 0.0.1) runs 128x2048 @ (2048x2048).t() in ~22 ms but the same
    # product computed as (w @ x.t()).t() in ~7.5 ms (docs/design.md, XLA CPU notes).
    fast_transposed_matmul = False
    nan_propagating_min_max = False  # with --xla_cpu_enable_fast_min_max (see _XLA_FLAGS)
    # A row sum over [512, 1000] floats took 0.19 ms as a reduction, 0.05 as a matrix-vector
    # product; a bias gradient ([16, 64, 512] summed over (0, 1)) 0.71 ms, 0.13-0.17 as a 2-D
    # reduction behind a barrier (docs/design.md, XLA CPU notes).
    fast_reductions = False
    # XLA:CPU calls libm per element for these: sin over [512, 1000] floats 4.4-4.6 ms against
    # 0.8-1.0 computed in vectorized arithmetic, atan2 over 1M floats 33 ms against eager's 1.7
    # (docs/design.md, XLA CPU notes).
    fast_transcendentals = False
    # XLA's CPU client sets the FTZ and DAZ bits around every execution and in its worker
    # threads (TensorFlow's convention), with no option to turn them off (docs/design.md,
    # "Subnormal floats").
    flushes_denormals = True
    # XLA:CPU's buffers are this process's memory; its transfer to the host is a task that waits
    # behind programs launched after the buffer's (docs/design.md, "Reads of finished buffers").
    host_memory = True
    # A second CPU client costs ~100 MB and ~0.1 s to start; compiling in this process slowed
    # every later step by 15-40% (heap fragmentation, docs/design.md).
    compile_worker = True

    @property
    def host_kernels(self) -> bool:
        # XLA:CPU's Eigen convolutions trail torch's oneDNN ones by 2-50x at real models' sizes
        # (ResNet-18 inference 11 -> 130 steps/s with them); TORCH_PJRT_HOST_KERNELS=0 turns the
        # custom calls off, e.g. to compare (docs/design.md, XLA CPU performance notes).
        return os.environ.get("TORCH_PJRT_HOST_KERNELS", "1") != "0"
