"""Keeps torch's Python Meta kernels from importing ``torch._dynamo`` on the eager path.

torch registers Python references (``torch._refs``) as the Meta kernels of ~250 ATen overloads
(add, mul, comparisons, clamp, where, cat, ...). Those wrapped by
``elementwise_type_promotion_wrapper`` go through ``torch._disable_dynamo``, whose wrapper
imports ``torch._dynamo`` on its first call to build a "dynamo disabled" version of the function
and caches it in the function's ``__dynamo_disable`` attribute. The pjrt device runs Meta kernels
for shapes and dtypes, so the first ``x + 1`` on a pjrt tensor imported all of dynamo (0.5-0.9 s,
more than the rest of the first op). CPU eager never runs these kernels, which is why it never
pays for it.

Disabling dynamo for a call is a no-op while dynamo is not imported: nothing can be tracing. So
each such function gets, in that cache attribute, a stand-in that calls the function directly
until ``torch._dynamo`` is in ``sys.modules`` and from then on builds and uses torch's own
disabled version, exactly what torch's wrapper would have cached. Nothing else changes.
"""

import sys


def _disable_dynamo_code():
    import torch._compile as compile_module
    probe = compile_module._disable_dynamo(lambda: None)
    return probe.__code__


class _DisabledWhenDynamoLoads:
    """What ``torch._disable_dynamo`` caches, built only once ``torch._dynamo`` is imported."""

    __slots__ = ("fn", "recursive", "disabled")

    def __init__(self, fn, recursive):
        self.fn, self.recursive, self.disabled = fn, recursive, None

    def __call__(self, *args, **kwargs):
        if self.disabled is None:
            if "torch._dynamo" not in sys.modules:
                return self.fn(*args, **kwargs)
            import torch._dynamo
            self.disabled = torch._dynamo.disable(self.fn, self.recursive, wrapping=False)
        return self.disabled(*args, **kwargs)


def _wrappers_of(fn, inner_code, depth=0):
    """The ``_disable_dynamo`` wrappers reachable from a Meta kernel (through functools.wraps
    chains and closures, a few levels deep)."""
    if depth > 4 or not callable(fn):
        return
    code = getattr(fn, "__code__", None)
    if code is inner_code:
        yield fn
        return
    wrapped = getattr(fn, "__wrapped__", None)
    if wrapped is not None:
        yield from _wrappers_of(wrapped, inner_code, depth + 1)
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:
            continue
        if getattr(value, "__code__", None) is not None:
            yield from _wrappers_of(value, inner_code, depth + 1)


_installed = False


def install():
    """Gives each dynamo-disabled Python Meta kernel the stand-in. Runs once, at first device use
    (5 ms: never at ``import torch``)."""
    global _installed
    if _installed or "torch._dynamo" in sys.modules:
        return  # torch's own wrappers need nothing once dynamo is loaded
    _installed = True
    from torch._decomp import global_decomposition_table
    inner_code = _disable_dynamo_code()
    for table in global_decomposition_table.values():
        for fn in table.values():
            for wrapper in _wrappers_of(fn, inner_code):
                cells = dict(zip(wrapper.__code__.co_freevars, (c.cell_contents for c in wrapper.__closure__)))
                target = cells.get("fn")
                if target is not None and getattr(target, "__dynamo_disable", None) is None:
                    target.__dynamo_disable = _DisabledWhenDynamoLoads(target, cells.get("recursive", True))
