"""torch_pjrt: PyTorch's ``pjrt`` device.

Installed with pip, this package is loaded by ``import torch`` itself (a ``torch.backends`` entry
point, ``_torch_pjrt_autoload.py``), so ``torch.ones(2, device="pjrt")`` needs no import of ours;
where torch has its own accelerator with devices (CUDA, ROCm, XPU, MPS), only an explicit
``import torch_pjrt`` or ``PJRT_DEVICE`` registers it, as registering takes that accelerator's
autograd away (``torch_accelerator.py``). Ops on pjrt tensors are
recorded into a lazy graph, lowered to StableHLO and compiled by the PJRT plugin of the active
sub-plugin (see ``torch_pjrt.backends``).

Registration is cheap on purpose: it loads our extension (kernel registrations only) and renames
the PrivateUse1 backend. No PJRT plugin is loaded and no client is created until first use.
"""

__version__ = "0.1.0"

_registered = False
_registration_error = None
# Whether optimizer.step() launches the pending forward and backward as it begins (see
# _launch_after_optimizer_steps); bench/launch.py turns it off to time the one-program step.
_launch_before_optimizer_step = True


def _register():
    """Registers the pjrt device with torch. Idempotent."""
    global _registered
    if _registered:
        return
    import atexit

    import torch

    if _registered:  # importing torch autoloaded us, which registered (`import torch_pjrt` first)
        return
    from . import _C
    from . import device_module
    from . import torch_accelerator

    own_accelerator = torch_accelerator.compiled_in_accelerator()  # before pjrt takes its place
    current = torch._C._get_privateuse1_backend_name()
    if current == "privateuseone":
        torch.utils.rename_privateuse1_backend("pjrt")
    elif current != "pjrt":
        raise RuntimeError(f"the PrivateUse1 backend is already taken by {current!r}; torch_pjrt "
                           f"cannot register the pjrt device in this process")
    if not hasattr(torch, "pjrt"):
        torch._register_device_module("pjrt", device_module)
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True)
    _C._set_candidate_provider(_start_candidate)
    _C._register_graph_impl()  # torch.accelerator.Graph (needs the device's name)
    # XLA hardware prefers bfloat16 (torch's default for a PrivateUse1 device is float16); the
    # selected plugin's first AMP dtype replaces it when the device starts, if it differs.
    torch.set_autocast_dtype("pjrt", torch.bfloat16)
    _print_through_cpu()
    _launch_after_optimizer_steps()
    _register_distributed_backend()
    from . import rnn
    rnn.register()
    if own_accelerator is not None:
        torch_accelerator.explain_backward_failures(own_accelerator)
    atexit.register(device_module._shutdown)
    _registered = True


def _start_candidate(index):
    """The C++ runtime's question at first device use: how to start candidate ``index``. The
    first question is also the moment to prepare what the eager path needs from Python."""
    from . import _dynamo_free_meta
    from .backends import registry
    _dynamo_free_meta.install()
    return registry.candidate_config(index)


def _is_fake(tensor) -> bool:
    """FakeTensors (torch.compile, opcheck) have no values: torch prints them itself."""
    from torch._subclasses.fake_tensor import FakeTensor
    return isinstance(tensor, FakeTensor)


def _print_through_cpu():
    """Formats pjrt tensors from one CPU copy, as torch does for xla/lazy tensors.

    torch's formatter runs many small ops and reads elements one at a time; on a lazy device each
    read would be a sync. One copy to the CPU makes printing a single sync.
    """
    import torch
    import torch._tensor_str as tensor_str

    original = tensor_str._str
    if getattr(original, "_torch_pjrt", False):
        return

    def _str(self, *, tensor_contents=None):
        if (tensor_contents is None and isinstance(self, torch.Tensor)
                and self.device.type == "pjrt" and self.layout == torch.strided
                and not torch._C._functorch.is_functorch_wrapped_tensor(self)
                and not _is_fake(self)):
            prefix = "tensor(" if type(self) in (torch.Tensor, torch.nn.Parameter) else f"{type(self).__name__}("
            with torch.no_grad():
                host = self.detach().to("cpu")
            if host.numel() > 0 or host.dim() != 1:
                tensor_contents = tensor_str._tensor_str(host, len(prefix))
        return original(self, tensor_contents=tensor_contents)

    _str._torch_pjrt = True
    tensor_str._str = _str


def _launch_after_optimizer_steps():
    """Ends the lazy graph at every optimizer step that updates pjrt parameters, in two launches.

    A training loop that does not read a value each step (logging every N steps) would otherwise
    trace step after step into one graph until the pending-node bound cuts it at an arbitrary
    point, and every cut graph is new: compiles instead of one cached step graph. Launching at
    the end of ``optimizer.step()`` (asynchronously: nothing waits) keeps the same programs every
    step. The forward and backward launch as the step begins (also without waiting), so they run
    while the updates are traced and the updates run while the next forward is traced: the real
    models' lazy steps, whose tracing takes as long as their execution, got 12-22% faster
    (docs/design.md, "The optimizer step as a program of its own"). During a device-graph capture
    ``_C._launch_before_optimizer_step`` splits the region only where host kernels make up much of
    the backward.

    During the step (``_set_in_optimizer_step``), zero-filled storages are read as device buffers:
    optimizer state made in the first step (Adam's ``zeros_like(param)``) is then a graph input
    as in every later step, so the first and later steps compile one graph, not two. And the
    step's trace, made under no_grad, is not launched in pieces as inference is: its updates stay
    one program.
    """
    def begin(optimizer, args, kwargs):
        if torch.compiler.is_compiling():
            return
        _check_capturable(optimizer)
        if _launch_before_optimizer_step:
            for index in _pjrt_devices(optimizer):
                _C._launch_before_optimizer_step(index)
        _C._set_in_optimizer_step(True)

    def launch(optimizer, args, kwargs):
        if torch.compiler.is_compiling():  # a compiled step launches its own graph
            return
        _C._set_in_optimizer_step(False)
        for index in _pjrt_devices(optimizer):
            _C._synchronize(index, "optimizer_step", False)

    import torch
    from . import _C
    from torch.optim.optimizer import (  # autoload runs mid-`import torch`
        register_optimizer_step_post_hook, register_optimizer_step_pre_hook)
    register_optimizer_step_pre_hook(begin)
    register_optimizer_step_post_hook(launch)


def _pjrt_devices(optimizer):
    """The indices of the pjrt devices holding `optimizer`'s parameters."""
    return {p.device.index for group in optimizer.param_groups for p in group["params"] if p.device.type == "pjrt"}


def _check_capturable(optimizer):
    """torch's own check for CUDA/XPU graphs, for pjrt: an optimizer whose state lives on the CPU
    (``capturable=False``: Adam's step count) computes its bias corrections on the host, and a
    graph's replays would repeat the captured step's values."""
    if not _C._capturing_graph(-1) or all(group.get("capturable", True) for group in optimizer.param_groups):
        return
    if any(_C._capturing_graph(index) for index in _pjrt_devices(optimizer)):
        raise RuntimeError(
            f"Attempting PJRT graph capture of step() for an instance of {type(optimizer).__name__} "
            "but param_groups' capturable is False.")


def _register_distributed_backend():
    """``init_process_group("pjrt")`` with no import of ours (torch_pjrt/distributed.py)."""
    from . import distributed
    distributed.register()


def _register_or_warn():
    """Registers at import. Never raises: ``import torch`` may be what imports us, and a failure
    here must not break torch."""
    global _registration_error
    try:
        _register()
    except Exception as e:  # pragma: no cover - exercised by tests in a subprocess
        import warnings

        _registration_error = e
        warnings.warn(f"torch_pjrt could not register the pjrt device: {type(e).__name__}: {e}. "
                      f"Disable autoloading with TORCH_DEVICE_BACKEND_AUTOLOAD=0.", RuntimeWarning)


# Importing the package registers the device, whether `import torch` autoloaded it or the user
# imported it (e.g. with TORCH_DEVICE_BACKEND_AUTOLOAD=0, or beside torch's own CUDA).
_register_or_warn()
