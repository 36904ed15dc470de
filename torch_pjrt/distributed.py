"""torch.distributed on pjrt: the ``pjrt`` process-group backend and the process topology.

``init_process_group("pjrt")`` (or ``"cpu:gloo,pjrt:pjrt"``) works with no import of ours: the
backend is registered when ``import torch`` autoloads torch_pjrt. Registering is cheap; nothing
is created until a process group is.

Every plugin today runs collectives on the host: each collective copies its pjrt tensors to the
CPU, runs gloo on the copies over the process group's store and copies the results back
(``csrc/distributed/host_collectives.cc``). That is correct on every plugin, including the OpenXLA
CPU plugin, which ignores PJRT's cross-process key-value callbacks and so cannot run XLA
collectives between processes. Collectives are synchronous (the returned work is complete) and
counted per collective in ``torch.pjrt.metrics.collectives()``.
"""

from __future__ import annotations

import os
import warnings

BACKEND = "pjrt"
_warned_host_path = False


def register() -> None:
    """Registers the ``pjrt`` backend with torch.distributed (idempotent; called at autoload)."""
    import torch.distributed as dist

    if not dist.is_available() or BACKEND in dist.Backend.backend_list:
        return
    # "cpu" too: a group made with init_process_group("pjrt") also takes CPU tensors (its gloo runs
    # them untouched), as a gloo group would. CPU's default backend stays gloo.
    dist.Backend.register_backend(BACKEND, _create_backend, devices=["cpu", BACKEND])


def _create_backend(store, group_rank: int, group_size: int, timeout):
    """Called by torch.distributed for each process group that uses the ``pjrt`` backend."""
    import torch.distributed as dist

    from . import _C

    if not dist.is_gloo_available():
        raise RuntimeError("the pjrt process-group backend runs collectives through gloo, which "
                           "this torch build lacks; use a torch build with gloo")
    _explain_host_path()
    host = dist.ProcessGroupGloo(store, group_rank, group_size, timeout)
    return _C._host_copy_backend(host)


def _explain_host_path() -> None:
    global _warned_host_path
    if _warned_host_path:
        return
    _warned_host_path = True
    warnings.warn("torch_pjrt: collectives on pjrt tensors run through gloo on host copies (one "
                  "copy to and from the CPU per collective, each a sync of pending work); "
                  "counted in torch.pjrt.metrics.collectives()", UserWarning, stacklevel=3)


# ------------------------------------------------------------------------------------ topology
# What torchrun (or another launcher) says about this process. Before init_process_group, and in a
# process that never calls it, these read the launcher's environment.

def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not an integer (set by the launcher, e.g. torchrun)") from None


def global_rank() -> int:
    """This process's rank among all processes (``RANK``; 0 when not launched as a group)."""
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else _env_int("RANK", 0)


def world_size() -> int:
    """Number of processes (``WORLD_SIZE``; 1 when not launched as a group)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    return _env_int("WORLD_SIZE", 1)


def local_rank() -> int:
    """This process's rank on its host (``LOCAL_RANK``)."""
    return _env_int("LOCAL_RANK", 0)


def local_world_size() -> int:
    """Number of processes on this host (``LOCAL_WORLD_SIZE``)."""
    return _env_int("LOCAL_WORLD_SIZE", 1)
