"""torch.pjrt (the device module), generated methods and torch.accelerator on pjrt."""
import pytest
import torch

from helpers import Counters


def test_availability_and_devices():
    assert torch.pjrt.is_available()
    assert torch.pjrt.device_count() == 4  # conftest asks the CPU plugin for 4 devices
    assert torch.pjrt.is_initialized()


def test_current_device_and_context_manager():
    assert torch.pjrt.current_device() == 0
    torch.pjrt.set_device(2)
    try:
        assert torch.pjrt.current_device() == 2
        assert torch.ones(1, device="pjrt").device == torch.device("pjrt:2")
        with torch.pjrt.device(1):
            assert torch.pjrt.current_device() == 1
            assert torch.empty(1, device="pjrt").device.index == 1
        assert torch.pjrt.current_device() == 2
        torch.pjrt.set_device("pjrt:3")
        assert torch.pjrt.current_device() == 3
    finally:
        torch.pjrt.set_device(0)


def test_bad_device_index_is_a_clear_error():
    with pytest.raises(RuntimeError, match="pjrt device index 7 is out of range.*4 device"):
        torch.ones(2, device="pjrt:7")
    with pytest.raises(RuntimeError, match="out of range"):
        torch.pjrt.set_device(9)


def test_synchronize_runs_pending_work():
    x = torch.ones(3, device="pjrt") * 2
    with Counters() as c:
        torch.pjrt.synchronize()
    assert c["Executions"] == 1
    assert c["Sync::synchronize"] == 1
    with Counters() as c:
        torch.pjrt.synchronize()  # nothing pending
    assert c["Executions"] == 0
    assert x.cpu().tolist() == [2.0, 2.0, 2.0]


def test_seeds_and_rng_state():
    torch.pjrt.manual_seed(123)
    assert torch.pjrt.initial_seed() == 123
    state = torch.pjrt.get_rng_state()
    assert state.dtype == torch.uint8 and state.numel() == 16
    torch.pjrt.manual_seed(5)
    torch.pjrt.set_rng_state(state)
    assert torch.pjrt.initial_seed() == 123
    torch.manual_seed(77)  # torch's global seeding reaches every pjrt generator
    assert all(torch.pjrt.get_rng_state(i)[:8].view(torch.int64).item() == 77 for i in range(4))
    torch.pjrt.manual_seed_all(9)
    assert [s[:8].view(torch.int64).item() for s in torch.pjrt.get_rng_state_all()] == [9, 9, 9, 9]
    g = torch.Generator(device="pjrt")
    g.manual_seed(42)
    assert g.initial_seed() == 42 and g.device.type == "pjrt"


def test_amp_dtypes():
    assert torch.bfloat16 in torch.pjrt.get_amp_supported_dtype()


def test_plugin_and_platform_info():
    assert torch.pjrt.plugin() == "cpu"
    info = torch.pjrt.platform()
    assert info["platform_name"] == "cpu" and info["device_count"] == 4
    assert info["pjrt_api_version"].startswith("0.")
    plugins = torch.pjrt.plugins()
    assert plugins["cpu"]["available"] is True
    assert "cuda" in plugins and plugins["cuda"]["available"] is False
    assert "tpu" in plugins and plugins["tpu"]["available"] is False


def test_generated_methods():
    x = torch.ones(2)
    y = x.pjrt()
    assert y.is_pjrt and not x.is_pjrt
    assert y.device == torch.device("pjrt:0")
    assert x.pjrt(1).device == torch.device("pjrt:1")
    m = torch.nn.Linear(2, 2).pjrt()
    assert m.weight.device.type == "pjrt"
    s = torch.UntypedStorage(8).pjrt()
    assert s.is_pjrt and s.device.type == "pjrt"


def test_accelerator_api():
    assert torch.accelerator.current_accelerator() == torch.device("pjrt")
    assert torch.accelerator.device_count() == 4
    torch.accelerator.set_device_index(1)
    try:
        assert torch.accelerator.current_device_index() == 1
    finally:
        torch.accelerator.set_device_index(0)
    x = torch.randn(16).to("pjrt") + 1
    with Counters() as c:
        torch.accelerator.synchronize()
    assert c["Executions"] == 1 and c["Sync::accelerator_synchronize"] == 1


def test_memory_stats():
    torch.pjrt.synchronize()
    base = torch.accelerator.memory_allocated(0)
    torch.pjrt.reset_peak_memory_stats(0)
    x = torch.empty(1024, device="pjrt")  # 4 KiB
    assert torch.accelerator.memory_allocated(0) == base + 4096
    assert torch.pjrt.memory_allocated(0) == base + 4096
    del x
    assert torch.accelerator.memory_allocated(0) == base
    assert torch.accelerator.max_memory_allocated(0) >= base + 4096
    y = torch.ones(256, device="pjrt")
    torch.pjrt.synchronize()
    assert torch.pjrt.memory_reserved(0) >= 1024
    del y


def test_a_finished_programs_last_arguments_are_freed_by_later_launches():
    # A program holds its arguments until it is retired: a later launch retires it and hands its
    # buffers to a thread that frees them (off the tracing thread); the memory statistics wait for
    # that thread, so they count the buffers gone as soon as a launch has retired the program.
    x = torch.randn(1 << 18).to("pjrt")  # 1 MiB
    torch.pjrt.synchronize()
    with_x = torch.pjrt.memory_reserved(0)
    total = (x * 2).sum()
    del x  # the buffer's last holder is now the program that reads it
    total.item()
    for _ in range(50):  # tiny launches until one finds that program finished
        (torch.ones(4, device="pjrt") + 1).cpu()
        if torch.pjrt.memory_reserved(0) <= with_x - (1 << 20) + 64:
            break
    assert torch.pjrt.memory_reserved(0) <= with_x - (1 << 20) + 64


def test_events_and_streams():
    start = torch.Event(device="pjrt", enable_timing=True)
    end = torch.Event(device="pjrt", enable_timing=True)
    start.record()
    x = torch.randn(64, 64).to("pjrt")
    (x @ x).sum()
    end.record()
    end.synchronize()
    assert start.query() and end.query()
    assert start.elapsed_time(end) >= 0
    s = torch.Stream(device="pjrt")
    s.synchronize()
