"""``torch.compile(..., backend="pjrt")``: trace a graph once, then replay its executable.

Dynamo finds this backend through the ``torch_dynamo_backends`` entry point, so no import of ours
is needed. AOTAutograd turns each Dynamo graph into functional ATen graphs (forward, backward, or
one inference graph) whose parameters and buffers are inputs. Each such graph becomes a
:class:`CapturedGraph`:

* its first call for an input signature runs the graph on the pjrt tensors (an ordinary lazy
  trace) and ends with one sync that records the program, which parameter is which input, which
  result is which output and where the random ops' seeds sit (``graph/capture.h``);
* later calls skip tracing: the inputs' buffers go straight to the cached executable, the
  default generator supplies fresh seeds, and the outputs are rebuilt with the first call's views.

A graph whose first call cannot be replayed (an op without a lowering ran on the CPU, it returned
a CPU tensor, took a CPU tensor...) is split: the nodes that fell back run eagerly and each
remaining partition is captured on its own. What cannot be captured at all keeps tracing on every
call, which is correct and merely slower; ``TORCH_PJRT_LOG_COMPILES=1`` says why.

Executables are the lazy path's: a captured graph compiles through the same memory and disk caches.
"""

from __future__ import annotations

import itertools
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch
import torch.fx
from functorch.compile import make_boxed_func
from torch.utils import _pytree as pytree

from . import _C
from .metrics import DYNAMO_PREFIX, fallbacks

__all__ = ["pjrt_backend", "CapturedGraph"]

def _count(name: str, by: int = 1) -> None:
    _C._increment_counter(DYNAMO_PREFIX + name, by)


def _log(message: str) -> None:
    if _C._log_compiles():
        print(f"[torch_pjrt] torch.compile: {message}", file=sys.stderr)


def _signature(args: Sequence[Any]) -> tuple:
    """What a capture depends on besides buffer contents: tensor metadata and other values."""
    key = []
    for a in args:
        if isinstance(a, torch.Tensor):
            key.append((a.device, a.dtype, tuple(a.shape), a.stride(), a.storage_offset()))
        else:
            key.append(a)
    return tuple(key)


class CapturedGraph:
    """One AOTAutograd graph, captured on its first call per input signature and replayed after."""

    def __init__(self, gm: torch.fx.GraphModule, name: str, may_split: bool = True):
        # AOTAutograd passes the arguments as one list. An instance attribute, because AOTAutograd
        # wraps the backward with functools.wraps, which copies __dict__ only.
        self._boxed_call = True
        self.gm = gm
        self.name = name
        self.may_split = may_split
        # signature -> a captured call, a split module, or why neither (then every call traces)
        self._calls: Dict[tuple, Any] = {}
        # The capture the last call replayed: tried first, without a signature (its replay checks
        # the tensors' metadata in C++; building the signature in Python cost ~0.35 ms per call
        # of GPT's 54-input forward).
        self._last: Optional[_Replayable] = None

    def __call__(self, args: List[Any]) -> Any:
        args = list(args)
        tried = self._last if self._last is not None and self._last.same_constants(args) else None
        if tried is not None:
            outputs = tried.replay(args)
            if outputs is not None:
                return outputs
        key = _signature(args)
        entry = self._calls.get(key)
        if isinstance(entry, _Replayable):
            outputs = entry.replay(args) if entry is not tried else None  # not twice
            if outputs is not None:
                self._last = entry
                return outputs
        elif isinstance(entry, torch.nn.Module):
            return entry(*args)
        elif entry is not None:
            _count("traced_calls")
            return self.gm(*args)
        return self._first_call(key, args)

    def _first_call(self, key: tuple, args: List[Any]) -> Any:
        if not _capturable_inputs(args):
            return self._keep_tracing(key, "it takes a CPU tensor that is not a 0-d scalar", self.gm(*args))
        positions = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
        fallbacks_before = fallbacks()
        start, tensors = _C._capture_begin([args[i] for i in positions])
        for i, t in zip(positions, tensors):
            args[i] = t
        out = self.gm(*args)
        leaves, spec = pytree.tree_flatten(out)
        call, reason = _C._capture_finish(start, tensors, [v for v in leaves if isinstance(v, torch.Tensor)])
        if call is not None:
            self._calls[key] = self._last = _Replayable(call, leaves, spec, args)
            _log(f"captured {self.name}: {call.traced_ops} traced ops, replayed as one execution")
            return out
        fell_back = {op for op, n in fallbacks().items() if n > fallbacks_before.get(op, 0)}
        split = _split(self.gm, lambda node: _op_name(node.target) not in fell_back, self.name) \
            if fell_back and self.may_split else None
        if split is not None:
            self._calls[key] = split
            _log(f"split {self.name} around {', '.join(sorted(fell_back))} (CPU fallbacks); "
                 f"each part between them is captured")
            return out
        return self._keep_tracing(key, reason, out)

    def _keep_tracing(self, key: tuple, reason: str, out: Any) -> Any:
        self._calls[key] = reason
        _log(f"{self.name} is traced on every call: {reason}")
        return out


class _Replayable:
    """A captured call plus how to rebuild the graph's output structure around its tensors."""

    def __init__(self, call, leaves: List[Any], spec, args: List[Any]):
        self.call = call
        self.spec = spec
        # The arguments that are not tensors (the C++ replay checks the tensors), by position.
        self.arg_constants = [(i, a) for i, a in enumerate(args) if not isinstance(a, torch.Tensor)]
        self.num_args = len(args)
        # Per output leaf: its index among the tensor outputs, or -1 and its constant value.
        self.positions, n = [], 0
        for v in leaves:
            self.positions.append(n if isinstance(v, torch.Tensor) else -1)
            n += isinstance(v, torch.Tensor)
        self.constants = [None if isinstance(v, torch.Tensor) else v for v in leaves]
        # AOTAutograd's graphs return a flat list or tuple, mostly of tensors: rebuilt without
        # pytree (~5% of a 200-output replay).
        self.flat = spec.type in (list, tuple) and all(c.is_leaf() for c in spec.children())
        self.only_tensors = self.positions == list(range(len(leaves)))

    def same_constants(self, args: List[Any]) -> bool:
        return len(args) == self.num_args and all(
            type(args[i]) is type(a) and args[i] == a for i, a in self.arg_constants)

    def replay(self, args: List[Any]) -> Any:
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        outputs = _C._replay(self.call, tensors)
        if outputs is None:  # other buffer layouts or aliasing than the capture saw
            return None
        if not self.only_tensors:
            outputs = [outputs[i] if i >= 0 else c for i, c in zip(self.positions, self.constants)]
        if self.flat:
            return outputs if self.spec.type is list else tuple(outputs)
        return pytree.tree_unflatten(outputs, self.spec)


class _CapturedPart(torch.nn.Module):
    """A partition of a split graph, called like the submodule it replaces."""

    def __init__(self, captured: CapturedGraph):
        super().__init__()
        self.captured = captured

    def forward(self, *args: Any) -> Any:
        return self.captured(list(args))


def _capturable_inputs(args: List[Any]) -> bool:
    """pjrt tensors and 0-d CPU tensors (an optimizer's step counts: the capture uploads them)."""
    return all(a.device.type == "pjrt" or (a.device.type == "cpu" and a.dim() == 0)
               for a in args if isinstance(a, torch.Tensor))


def _op_name(target: Any) -> Optional[str]:
    return target._schema.name if isinstance(target, torch._ops.OpOverload) else None


def _on_pjrt(node: torch.fx.Node) -> bool:
    """Whether a node computes pjrt tensors (by its fake value); CPU work stays out of captures."""
    values = [v for v in pytree.tree_leaves(node.meta.get("val")) if isinstance(v, torch.Tensor)]
    return all(v.device.type == "pjrt" for v in values)


def _split(gm: torch.fx.GraphModule, supported: Callable[[torch.fx.Node], bool],
           name: str) -> Optional[torch.fx.GraphModule]:
    """`gm` with every maximal run of `supported` nodes fused into a captured part; the other
    nodes run as they are (eagerly, on the pjrt device's CPU fallback or on the CPU)."""
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    from torch.fx.passes.operator_support import OperatorSupport

    class Lowered(OperatorSupport):
        def is_node_supported(self, submodules, node: torch.fx.Node) -> bool:
            return node.op == "call_function" and supported(node)

    partitioner = CapabilityBasedPartitioner(gm, Lowered(), allows_single_node_partition=True)
    partitions = partitioner.propose_partitions()
    if not partitions:
        return None
    split = partitioner.fuse_partitions(partitions)
    for part_name, part in list(split.named_children()):
        if isinstance(part, torch.fx.GraphModule):
            _count("partitions")
            setattr(split, part_name, _CapturedPart(CapturedGraph(part, f"{name}/{part_name}", may_split=False)))
    return split


def _compile_graph(gm: torch.fx.GraphModule, example_inputs: List[Any]) -> Callable:
    _count("graphs")
    name = f"graph {next(_graph_numbers)}"
    if all(_on_pjrt(n) for n in gm.graph.nodes if n.op == "call_function"):
        return CapturedGraph(gm, name)
    # Mixed graphs (an optimizer's CPU step counts): the CPU nodes run eagerly between captures.
    split = _split(gm, _on_pjrt, name)
    _log(f"{name} computes CPU tensors too: its pjrt parts are captured, the CPU nodes run eagerly")
    return make_boxed_func(split) if split is not None else CapturedGraph(gm, name, may_split=False)


_graph_numbers = itertools.count(1)  # names graphs in compile logs


def _device_interface():
    """What Dynamo asks an accelerator (current device, synchronize...), answered by torch.pjrt."""
    from torch._dynamo.device_interface import DeviceInterface

    pjrt = torch.pjrt

    class PjrtInterface(DeviceInterface):
        device = pjrt.device

        class Worker:
            @staticmethod
            def set_device(device: int) -> None:
                pjrt.set_device(device)

            @staticmethod
            def current_device() -> int:
                return pjrt.current_device()

            @staticmethod
            def get_device_properties(device=None) -> Any:
                return pjrt.platform()

        current_device = staticmethod(pjrt.current_device)
        set_device = staticmethod(pjrt.set_device)
        device_count = staticmethod(pjrt.device_count)
        is_available = staticmethod(pjrt.is_available)
        synchronize = staticmethod(pjrt.synchronize)
        memory_allocated = staticmethod(pjrt.memory_allocated)

        exchange_device = staticmethod(_C._exchange_device)
        maybe_exchange_device = staticmethod(_C._exchange_device)

        @staticmethod
        def get_device_properties(device=None) -> Any:
            return pjrt.platform()

        @staticmethod
        def get_raw_stream(device_idx: int) -> int:
            return 0

        @staticmethod
        def is_bf16_supported(including_emulation: bool = False) -> bool:
            return True

        @staticmethod
        def get_compute_capability(device=None) -> str:
            return ""

        @staticmethod
        def is_triton_capable(device=None) -> bool:
            return False

    return PjrtInterface


def _register_device_interface() -> None:
    from torch._dynamo.device_interface import device_interfaces, register_interface_for_device
    if "pjrt" not in device_interfaces:
        register_interface_for_device("pjrt", _device_interface())


def pjrt_backend(gm: torch.fx.GraphModule, example_inputs: List[Any], **options: Any) -> Callable:
    """The ``pjrt`` backend of ``torch.compile``."""
    from torch._dynamo.backends.common import aot_autograd

    _register_device_interface()
    # Input mutations stay in inference graphs (an optimizer's parameter updates): the capture
    # writes the new buffers into the inputs' storages instead of AOTAutograd copying each back.
    return aot_autograd(fw_compiler=_compile_graph, bw_compiler=_compile_graph,
                        inference_compiler=_compile_graph,
                        keep_inference_input_mutations=True)(gm, example_inputs)
