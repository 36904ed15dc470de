"""``torch.pjrt.metrics``: what the device did.

Counters: graphs compiled, cache hits (memory, disk), StableHLO lowerings, executions (of which
``SmallProgramExecutions`` ran on the small programs' one-thread client), donated
buffers, transfers (count and bytes, both ways), CPU fallbacks per op (``<namespace>::<op>``: ``aten::nonzero``, a custom op's ``mylib::op``), syncs by
cause (``Sync::<cause>``), nodes traced, reads answered by an earlier read's result without a
sync (``RememberedReads``), small reads computed alone with the trace left uncut
(``ValuesComputedAhead``), results of host kernels (torch's CPU kernels inside programs) computed in
the program's buffer or copied there (``HostKernelResultsInPlace``, ``HostKernelResultsCopied``),
max poolings lowered ahead of the batch norm and ReLU that made their input
(``MaxPoolsMovedFirst``, counted per program lowered). Timers: compile, lowering, execute launch,
transfers, sync.
"""

from __future__ import annotations

from typing import Dict, Tuple

from . import _C, unlowered

__all__ = ["counters", "timers", "counter", "fallbacks", "lowered", "syncs", "dynamo", "collectives",
           "report", "reset"]

# Prefixes of the named counters: one source of truth for this module and the tests. Every other
# name with "::" counts CPU fallbacks of one op, named by its namespace ("aten::", "mylib::").
SYNC_PREFIX = "Sync::"       # syncs per cause
LOWERED_PREFIX = "Lowered::"  # ops traced natively, per lowering (schema name)
DYNAMO_PREFIX = "Dynamo::"    # torch.compile backend: graphs, partitions, calls traced again
COLLECTIVES_PREFIX = "Collectives::"  # collectives on pjrt tensors run through host copies
_PREFIXES = (SYNC_PREFIX, LOWERED_PREFIX, DYNAMO_PREFIX, COLLECTIVES_PREFIX)


def _is_fallback(name: str) -> bool:
    return "::" in name and not name.startswith(_PREFIXES)


def _with_prefix(prefix: str) -> Dict[str, int]:
    """The counters named `prefix` + name, by name."""
    return {k[len(prefix):]: v for k, v in counters().items() if k.startswith(prefix)}


def counters() -> Dict[str, int]:
    """Every counter by name."""
    return dict(_C._counters())


def counter(name: str) -> int:
    """One counter (0 if it never moved)."""
    return counters().get(name, 0)


def timers() -> Dict[str, Tuple[int, float, float]]:
    """name -> (count, total seconds, max seconds)."""
    return {k: (c, total / 1e9, mx / 1e9) for k, (c, total, mx) in _C._timers().items()}


def fallbacks() -> Dict[str, int]:
    """CPU fallback calls per op, e.g. {"aten::nonzero": 3, "mylib::op": 1}."""
    return {k: v for k, v in counters().items() if _is_fallback(k)}


def lowered() -> Dict[str, int]:
    """Ops traced natively per lowering (schema name, in-place and out= variants counted with
    their functional op), e.g. {"add.Tensor": 12}."""
    return _with_prefix(LOWERED_PREFIX)


def dynamo() -> Dict[str, int]:
    """The torch.compile backend's counters: ``graphs`` (AOT graphs handed to it: one per Dynamo
    graph and graph break, forward and backward separately, again on every recompile),
    ``partitions`` (captured pieces of graphs split around CPU fallbacks), ``traced_calls`` (calls
    that traced instead of replaying). Replays and captures are the ``GraphReplays`` and
    ``GraphsCaptured`` counters."""
    return _with_prefix(DYNAMO_PREFIX)


def collectives() -> Dict[str, int]:
    """Collectives on pjrt tensors that ran on host copies (the ``pjrt`` process-group backend),
    per collective, e.g. {"allreduce": 12, "broadcast": 4}."""
    return _with_prefix(COLLECTIVES_PREFIX)


def syncs() -> Dict[str, int]:
    """Syncs by cause, e.g. {"item": 10, "to_cpu": 1}."""
    return _with_prefix(SYNC_PREFIX)


def reset() -> None:
    _C._reset_metrics()


def report() -> str:
    """A readable summary of every counter and timer."""
    lines = ["torch_pjrt metrics", "  counters:"]
    c = counters()
    for name in sorted(k for k in c if "::" not in k):
        lines.append(f"    {name:<28} {c[name]}")
    sync = syncs()
    if sync:
        lines.append("  syncs by cause:")
        for name, v in sorted(sync.items()):
            lines.append(f"    {name:<28} {v}")
    fb = fallbacks()
    lines.append("  CPU fallbacks:" + ("" if fb else " none"))
    for name, v in sorted(fb.items(), key=lambda kv: -kv[1]):
        why = unlowered.reason(name)
        lines.append(f"    {name:<28} {v}" + (f"  ({why})" if why else ""))
    lines.append("  timers (count, total, max):")
    for name, (count, total, mx) in sorted(timers().items()):
        if count:
            lines.append(f"    {name:<28} {count:>6}  {total * 1e3:10.2f} ms  {mx * 1e3:8.2f} ms")
    return "\n".join(lines)
