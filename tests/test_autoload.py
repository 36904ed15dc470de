"""The pjrt device comes with `import torch` alone, through the torch.backends entry point."""
from helpers import run_python


def test_autoload_in_fresh_process():
    out = run_python("""
        import sys, torch
        x = torch.ones(2, device="pjrt")
        assert "torch_pjrt" in sys.modules  # loaded by torch itself, not by us
        print(x.device, x.cpu().tolist())
    """).stdout
    assert "pjrt:0 [1.0, 1.0]" in out


def test_autoload_can_be_disabled():
    out = run_python("""
        import sys, torch
        assert "torch_pjrt" not in sys.modules
        try:
            torch.ones(2, device="pjrt")
        except RuntimeError as e:
            print("refused:", e)
        import torch_pjrt  # an explicit import still registers the device
        print(torch.ones(2, device="pjrt").cpu().tolist())
    """, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}).stdout
    assert "refused:" in out
    assert "[1.0, 1.0]" in out


def test_import_loads_no_plugin_and_starts_no_client():
    out = run_python("""
        import torch
        maps = open("/proc/self/maps").read()
        print("plugin_loaded", "xla_cpu_pjrt" in maps)
        print("client", torch.pjrt.is_initialized())
        print("available", torch.pjrt.is_available())  # decided without loading the library
        print("plugin_loaded_after_is_available", "xla_cpu_pjrt" in open("/proc/self/maps").read())
        torch.zeros(1, device="pjrt")
        print("client_after_use", torch.pjrt.is_initialized())
    """).stdout
    assert "plugin_loaded False" in out
    assert "client False" in out
    assert "available True" in out
    assert "plugin_loaded_after_is_available False" in out
    assert "client_after_use True" in out


def test_backend_is_renamed_and_module_registered():
    out = run_python("""
        import torch
        print(torch._C._get_privateuse1_backend_name(), hasattr(torch, "pjrt"))
        print(torch.device("pjrt:1").type)
    """).stdout
    assert "pjrt True" in out
    assert "pjrt" in out.splitlines()[1]


def test_default_device_count_is_one():
    out = run_python("""
        import torch
        print("count", torch.pjrt.device_count())
    """, env={"TORCH_PJRT_CPU_DEVICE_COUNT": "1"}).stdout
    assert "count 1" in out


def test_broken_torch_pjrt_registration_never_breaks_import_torch():
    # A PrivateUse1 backend already claimed by someone else: we warn, torch still imports.
    out = run_python("""
        import warnings
        warnings.simplefilter("always")
        import torch
        torch.utils.rename_privateuse1_backend("other")
        import importlib, torch_pjrt
        torch_pjrt._registered = False
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            torch_pjrt._register_or_warn()
        print("warned", any("could not register" in str(x.message) for x in w))
    """, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}).stdout
    assert "warned True" in out


def test_eager_ops_never_import_dynamo_or_inductor():
    """torch's Python Meta kernels for ~130 elementwise ops import torch._dynamo on their first
    call (torch._disable_dynamo); the pjrt device runs Meta kernels, CPU eager never does.
    torch_pjrt/_dynamo_free_meta.py keeps that import from happening. Parameters are updated by
    hand: torch.optim's constructor imports dynamo itself, on the CPU too."""
    out = run_python("""
        import sys, torch
        import torch.nn as nn, torch.nn.functional as F
        dev = "pjrt"
        m = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(8 * 4 * 4, 10)).to(dev)
        x = torch.randn(4, 3, 8, 8, device=dev)
        target = torch.randint(0, 10, (4,), device=dev)
        for _ in range(2):
            loss = F.cross_entropy(m(x), target)
            loss.backward()
            with torch.no_grad():
                for p in m.parameters():
                    p.sub_(p.grad * 0.1)
                    p.grad = None
        q = torch.randn(2, 4, 8, 16, device=dev)
        attention = F.scaled_dot_product_attention(q, q, q, is_causal=True)
        normed = F.gelu(nn.LayerNorm(4).to(dev)(nn.Embedding(10, 4).to(dev)(target)))
        with torch.autocast("pjrt"):
            scores = (q @ q.transpose(-1, -2)).softmax(-1)
        mixed = torch.where(q > 0, q, q * 2).clamp(-1, 1).cumsum(-1).sort(-1).values.pow(2).eq(1)
        shaped = [torch.cat([q, q]).unique(), q[q > 0], torch.topk(q, 2).values, q.flip(0).remainder(3)]
        for t in [loss, attention, normed, scores, mixed] + shaped:
            t.cpu()
        print("dynamo", "torch._dynamo" in sys.modules, "inductor", "torch._inductor" in sys.modules)
    """).stdout
    assert "dynamo False inductor False" in out


def test_backward_threads_change_only_in_threads_that_make_pjrt_tensors():
    out = run_python("""
        import threading, torch
        torch.ones(2, requires_grad=True).sum().backward()
        print("cpu only", torch._C._is_multithreading_enabled(), torch.pjrt.is_initialized())
        torch.zeros(1, device="pjrt")
        print("after pjrt", torch._C._is_multithreading_enabled())
        seen = {}
        def other():
            seen["before"] = torch._C._is_multithreading_enabled()
            y = torch.ones(2, device="pjrt:1", requires_grad=True)
            seen["after"] = torch._C._is_multithreading_enabled()
            (y * 2).sum().backward()
            seen["grad"] = y.grad.cpu().tolist()
        t = threading.Thread(target=other)
        t.start()
        t.join()
        print("other thread", seen)
    """, env={"TORCH_PJRT_CPU_DEVICE_COUNT": "2"}).stdout
    # A CPU backward neither starts the device nor changes torch's autograd threading.
    assert "cpu only True False" in out
    assert "after pjrt False" in out
    # Nor a thread's that has not made a pjrt tensor yet; one that has runs its backward itself
    # (also on a second device, whose autograd worker the CPU backward did not size for).
    assert "other thread {'before': True, 'after': False, 'grad': [2.0, 2.0]}" in out


# torch with an accelerator of its own, faked on this CPU build: a compiled-in CUDA with one device.
FAKE_TORCH_CUDA = """
    import torch
    torch.accelerator.current_accelerator = lambda check_available=False: torch.device("cuda")
    torch.cuda.device_count = lambda: 1
"""


def test_autoload_leaves_torchs_own_accelerator_alone():
    """Registering pjrt makes it torch's accelerator, and torch's autograd then fails on every
    CUDA backward (pytorch/pytorch#161129): where CUDA has devices, the autoload stays out."""
    out = run_python(FAKE_TORCH_CUDA + """
    import sys, _torch_pjrt_autoload
    _torch_pjrt_autoload.autoload()  # what `import torch` calls
    print("registered", "torch_pjrt" in sys.modules, torch._C._get_privateuse1_backend_name())
    """, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0", "PJRT_DEVICE": ""}).stdout
    assert "registered False privateuseone" in out


def test_autoload_registers_beside_torchs_accelerator_when_asked():
    for env, how in [({"PJRT_DEVICE": "cpu"}, "_torch_pjrt_autoload.autoload()"),
                     ({"PJRT_DEVICE": ""}, "import torch_pjrt")]:
        out = run_python(FAKE_TORCH_CUDA + f"""
    import _torch_pjrt_autoload
    {how}
    print("registered", torch.ones(2, device="pjrt").cpu().tolist())
    """, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0", **env}).stdout
        assert "registered [1.0, 1.0]" in out, how


def test_autoload_on_torch_without_accelerator_asks_for_no_device_count():
    out = run_python("""
    import torch
    asked = []
    torch.cuda.device_count = lambda: asked.append(1) or 0
    import _torch_pjrt_autoload
    print("in use", _torch_pjrt_autoload.torch_accelerator_in_use(), "asked", len(asked))
    """, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0", "PJRT_DEVICE": ""}).stdout
    assert "in use False asked 0" in out


def test_backward_stream_assert_beside_torchs_accelerator_is_explained():
    """After an explicit import beside CUDA, the engine's internal assert (raised here by a
    Function standing in for the CUDA node) becomes an error naming the cause and the fix; other
    errors and ordinary backwards are untouched."""
    out = run_python(FAKE_TORCH_CUDA + """
    import torch_pjrt

    class Fails(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, message):
            ctx.message = message
            return x * 2
        @staticmethod
        def backward(ctx, grad):
            raise RuntimeError(ctx.message)

    x = torch.ones(2, requires_grad=True)
    for message in ["opt_ready_stream && opt_parent_stream INTERNAL ASSERT FAILED", "other"]:
        try:
            Fails.apply(x, message).sum().backward()
        except RuntimeError as e:
            print(message[:5], "->", str(e).split(":")[0], "| cause kept", e.__cause__ is not None)
    (torch.ones(2, device="pjrt", requires_grad=True) * 3).sum().backward()
    print("grad", torch.autograd.grad((x * 3).sum(), x)[0].tolist())
    """, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}).stdout
    assert "opt_r -> backward over cuda tensors fails while the pjrt device is registered | cause kept True" in out
    assert "other -> other | cause kept False" in out
    assert "grad [3.0, 3.0]" in out
