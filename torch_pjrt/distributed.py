"""torch.distributed on pjrt: the ``pjrt`` process-group backend and the process topology.

``init_process_group("pjrt")`` (or ``"cpu:gloo,pjrt:pjrt"``) works with no import of ours: the
backend is registered when ``import torch`` autoloads torch_pjrt. Registering is cheap; nothing
is created until a process group is.

Two paths, chosen by the active plugin's ``cross_process_collectives`` capability:

- **Graph** (plugins that run XLA collectives between processes, e.g. XLA's GPU plugin with
  ``node_id``/``num_nodes``): the client starts with PJRT's key-value callbacks over the default
  group's store, and all-reduce, broadcast, all-gather and reduce-scatter of pjrt tensors become
  ops of the lazy graph (``csrc/distributed/graph_collectives.cc``), so a DDP step stays one
  program, compiled as one replica per process of the group. Other collectives (gather, scatter,
  reduce, all-to-all, send/recv) keep the host path.
- **Host** (every other plugin, including the OpenXLA CPU plugin, which ignores the key-value
  callbacks and so cannot run XLA collectives between processes): each collective copies its pjrt
  tensors to the CPU, runs gloo on the copies over the process group's store and copies the
  results back (``csrc/distributed/host_collectives.cc``), explained once in a warning.

Either way collectives are synchronous from the caller's view (the returned work is complete; in
the graph they run when the graph does) and counted per collective in
``torch.pjrt.metrics.collectives()`` (graph ones as ``graph:<name>``).
"""

from __future__ import annotations

import os
import warnings

BACKEND = "pjrt"
_warned_host_path = False
# (global rank, world size, the default group's store under our prefix): what a cross-process
# plugin's client starts with (backends/registry.py). Set when the default pjrt group is created.
_client_job = None
# Job-wide pjrt device id of every global rank, learned when the default group is created.
_device_ids = None


def register() -> None:
    """Registers the ``pjrt`` backend with torch.distributed (idempotent; called at autoload)."""
    import torch.distributed as dist

    if not dist.is_available() or BACKEND in dist.Backend.backend_list:
        return
    # "cpu" too: a group made with init_process_group("pjrt") also takes CPU tensors (its gloo runs
    # them untouched), as a gloo group would. CPU's default backend stays gloo.
    dist.Backend.register_backend(BACKEND, _create_backend, extended_api=True, devices=["cpu", BACKEND])


def client_job():
    """(global rank, world size, store) a cross-process plugin's client starts with, or None
    before the default pjrt process group exists."""
    return _client_job


def _create_backend(opts, _backend_options):
    """Called by torch.distributed for each process group that uses the ``pjrt`` backend (the
    extended API: ``opts`` also names the group's global ranks)."""
    import torch.distributed as dist

    from . import _C

    if not dist.is_gloo_available():
        raise RuntimeError("the pjrt process-group backend runs collectives through gloo, which "
                           "this torch build lacks; use a torch build with gloo")
    host = dist.ProcessGroupGloo(opts.store, opts.group_rank, opts.group_size, opts.timeout)
    ranks = list(opts.global_ranks_in_group) or list(range(opts.group_size))
    if not _graph_collectives():
        _explain_host_path()
        return _C._host_copy_backend(host)
    if not opts.global_ranks_in_group:  # the default group: the job's store and every device
        _start_client_with_store(opts.store, opts.group_rank, opts.group_size)
    if _device_ids is None:
        raise RuntimeError("a pjrt process group was created before the default one; call "
                           "torch.distributed.init_process_group first")
    return _C._graph_collective_backend(host, [_device_ids[r] for r in ranks], opts.group_rank)


def _graph_collectives() -> bool:
    """Whether the active (or to-be-selected) plugin runs collectives across processes."""
    from .device_module import _active_plugin_capabilities

    return bool(_active_plugin_capabilities().get("cross_process_collectives", False))


def _start_client_with_store(store, rank: int, size: int) -> None:
    """Starts the client with the job's store (a client started earlier could not find its peers:
    backends/registry.py raises then) and learns every rank's job-wide device id."""
    global _client_job, _device_ids
    import torch
    import torch.distributed as dist

    from . import _C

    _client_job = (rank, size, dist.PrefixStore("torch_pjrt/client/", store))
    mine = _C._global_device_id(torch.pjrt.current_device())
    ids = dist.PrefixStore("torch_pjrt/device/", store)
    ids.set(str(rank), str(mine))
    _device_ids = [int(ids.get(str(r))) for r in range(size)]


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
