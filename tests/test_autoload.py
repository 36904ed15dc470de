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
