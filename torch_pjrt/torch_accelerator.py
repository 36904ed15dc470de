"""Living beside torch's own accelerator (CUDA, ROCm, XPU, MPS) in one process.

Registering pjrt makes it torch's current accelerator, and torch's autograd engine then finds no
stream for nodes on its own accelerator: any backward over CUDA tensors fails with an internal
assert that names nothing a user can act on (pytorch/pytorch#161129). The autoload therefore stays
out where torch's accelerator has devices (``_torch_pjrt_autoload.py``); after an explicit
``import torch_pjrt`` the failure is re-raised with its cause and the fix.
"""
import functools

_ENGINE_ASSERT = "opt_ready_stream && opt_parent_stream"


def compiled_in_accelerator():
    """torch's own accelerator type (``"cuda"``, ``"xpu"``, ...) or None. Asked before pjrt is
    registered: afterwards torch answers pjrt."""
    import torch
    accelerator = torch.accelerator.current_accelerator()
    return None if accelerator is None else accelerator.type


def explain(error, accelerator):
    """The error to raise for a backward that failed with `error`: a clear one for the engine's
    stream assert, else `error` itself."""
    if not isinstance(error, RuntimeError) or _ENGINE_ASSERT not in str(error):
        return error
    return RuntimeError(
        f"backward over {accelerator} tensors fails while the pjrt device is registered: torch "
        f"makes a registered PrivateUse1 device its current accelerator, and its autograd engine "
        f"then finds no {accelerator} streams (pytorch/pytorch#161129). Run {accelerator} training "
        f"in a process that does not import torch_pjrt (with {accelerator} devices present, "
        f"`import torch` alone does not load it unless PJRT_DEVICE is set), or train on "
        f"device='pjrt' instead.")


def explain_backward_failures(accelerator):
    """Wraps torch's engine entry (both names torch itself patches: torch.compiler does the same)
    so the stream assert arrives as `explain`'s error. Costs one Python call per backward."""
    import torch.autograd
    import torch.autograd.graph as graph

    run_backward = graph._engine_run_backward
    if getattr(run_backward, "_torch_pjrt", False):
        return

    @functools.wraps(run_backward)
    def _engine_run_backward(*args, **kwargs):
        try:
            return run_backward(*args, **kwargs)
        except RuntimeError as e:
            explained = explain(e, accelerator)
            if explained is e:
                raise
            raise explained from e

    _engine_run_backward._torch_pjrt = True
    graph._engine_run_backward = _engine_run_backward
    torch.autograd._engine_run_backward = _engine_run_backward
