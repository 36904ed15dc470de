"""Mixed precision and checkpoints like on CUDA: autocast numerics against CPU autocast,
GradScaler with float16 on native unscale/inf-check/update ops with no sync beyond its own,
torch.save/load and safetensors round trips, pinned-memory DataLoaders and asynchronous non_blocking uploads."""
import io
import time

import pytest
import torch

from helpers import Counters


def small_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32),
                               torch.nn.Linear(32, 4))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_autocast_matches_cpu_autocast(dtype):
    model = small_model()
    x = torch.randn(8, 16)
    with torch.autocast("cpu", dtype=dtype):
        want = model(x)
    dev_model = small_model().to("pjrt")
    with torch.autocast("pjrt", dtype=dtype):
        got = dev_model(x.to("pjrt"))
    assert got.dtype == want.dtype == dtype
    torch.testing.assert_close(got.cpu().float(), want.float(), rtol=2e-2, atol=2e-2)


def scaled_training(device, steps=5, fused=False):
    model = small_model().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2, fused=fused)
    scaler = torch.amp.GradScaler(device, init_scale=2.0 ** 14, growth_interval=2)
    x = torch.randn(8, 16).to(device)
    counts = []
    for step in range(steps):
        with Counters() as c:
            opt.zero_grad()
            with torch.autocast(device, dtype=torch.float16):
                loss = model(x).float().square().mean()
            if step == 2:
                loss = loss * float("inf")  # an overflow: the step is skipped, the scale backs off
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            if device == "pjrt":
                torch.pjrt.synchronize()
        counts.append(c)
    return model, scaler, counts


@pytest.mark.parametrize("fused", [False, True])
def test_grad_scaler_float16_matches_cpu_without_extra_syncs(fused):
    cpu_model, cpu_scaler, _ = scaled_training("cpu", fused=fused)
    torch.pjrt.metrics.reset()
    dev_model, dev_scaler, counts = scaled_training("pjrt", fused=fused)
    assert dev_scaler.get_scale() == cpu_scaler.get_scale()
    for a, b in zip(dev_model.parameters(), cpu_model.parameters()):
        torch.testing.assert_close(a.detach().cpu(), b.detach(), rtol=2e-3, atol=2e-3)
    assert torch.pjrt.metrics.fallbacks() == {}
    lowered = torch.pjrt.metrics.lowered()
    assert lowered.get("_amp_foreach_non_finite_check_and_unscale", 0) >= 1
    assert lowered.get("_amp_update_scale", 0) >= 1
    for c in counts[3:]:
        # GradScaler's own found_inf.item() (none with a fused optimizer, which takes found_inf
        # itself) plus our synchronize(): nothing else waits. (The backward launches the forward
        # as it begins, optimizer.step() the pending graph as it begins and its own as it ends,
        # all without waiting; not counted here.)
        launches = ("Sync::backward", "Sync::before_optimizer_step", "Sync::optimizer_step")

        def waits(counters):
            return sum(v for k, v in counters.items() if k.startswith("Sync::") and k not in launches)
        syncs = waits(c.after) - waits(c.before)
        assert syncs <= (1 if fused else 2), syncs


def test_save_and_load_with_map_location_both_ways():
    model = small_model().to("pjrt")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(2, 16).to("pjrt")).sum().backward()
    opt.step()
    view = torch.arange(10.0, device="pjrt")[2:6]
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "view": view}, buf)
    for location, device in ((None, "pjrt"), ("cpu", "cpu"), (torch.device("cpu"), "cpu")):
        buf.seek(0)
        loaded = torch.load(buf, map_location=location)
        assert loaded["view"].device.type == device
        assert loaded["view"].cpu().tolist() == [2.0, 3.0, 4.0, 5.0]
        for k, v in model.state_dict().items():
            assert loaded["model"][k].device.type == device
            assert torch.equal(loaded["model"][k].cpu(), v.cpu())
        assert loaded["opt"]["state"][0]["exp_avg"].device.type == device
    # CPU checkpoint -> pjrt
    cpu_model = small_model()
    buf = io.BytesIO()
    torch.save(cpu_model.state_dict(), buf)
    buf.seek(0)
    state = torch.load(buf, map_location="pjrt")
    assert all(v.device.type == "pjrt" for v in state.values())
    restored = small_model().to("pjrt")
    restored.load_state_dict(state)
    x = torch.randn(3, 16)
    torch.testing.assert_close(restored(x.to("pjrt")).detach().cpu(), cpu_model(x).detach())


def test_safetensors_round_trip(tmp_path):
    safetensors = pytest.importorskip("safetensors.torch")
    tensors = {"w": torch.randn(4, 5).to("pjrt"), "b": torch.arange(3, device="pjrt"),
               "h": torch.ones(2, device="pjrt", dtype=torch.bfloat16)}
    path = tmp_path / "model.safetensors"
    safetensors.save_file(tensors, str(path))
    # safetensors' loader parses device names itself and knows only its own list, so pjrt tensors
    # are loaded on the CPU and moved.
    loaded = {k: v.to("pjrt") for k, v in safetensors.load_file(str(path)).items()}
    for k, v in tensors.items():
        assert loaded[k].dtype == v.dtype and torch.equal(loaded[k].cpu(), v.cpu())
    blob = safetensors.save(tensors)
    assert torch.equal(safetensors.load(blob)["w"], tensors["w"].cpu())


def test_dataloader_pins_memory_with_the_pjrt_allocator():
    data = torch.utils.data.TensorDataset(torch.randn(16, 4), torch.arange(16))
    loader = torch.utils.data.DataLoader(data, batch_size=4, pin_memory=True)
    seen, before = 0, _async_uploads()
    for x, y in loader:
        assert x.is_pinned() and y.is_pinned()
        assert x.data_ptr() % 64 == 0  # the pjrt host allocator: 64-byte aligned for PJRT
        dx = x.to("pjrt", non_blocking=True)
        torch.testing.assert_close(dx.cpu(), x)
        seen += 1
    assert seen == 4 and _async_uploads() == before + 4


def _async_uploads():
    return torch.pjrt.metrics.counters().get("AsyncTransfersToDevice", 0)


def test_non_blocking_copy_from_pinned_memory_is_asynchronous_and_keeps_its_source():
    from torch.multiprocessing.reductions import StorageWeakRef
    expected = torch.arange(1 << 20, dtype=torch.float32)
    src = expected.pin_memory()
    source = StorageWeakRef(src.untyped_storage())
    before = _async_uploads()
    dst = src.to("pjrt", non_blocking=True)
    assert _async_uploads() == before + 1
    del src  # PJRT may still be reading it: the copy holds the storage until it has
    noise = [torch.full((1 << 20,), -1.0).pin_memory() for _ in range(4)]  # would reuse freed memory
    torch.testing.assert_close(dst.cpu(), expected)
    # Released once PJRT is done with it, not when the device tensor dies.
    deadline = time.monotonic() + 5
    while not source.expired() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert source.expired() and dst.device.type == "pjrt"
    del noise


def test_non_blocking_copy_from_pageable_memory_is_synchronous():
    src = torch.randn(64, 3)
    before = _async_uploads()
    dst = src.to("pjrt", non_blocking=True)
    src.zero_()  # allowed: the copy of pageable memory finished inside .to(), as on CUDA
    assert _async_uploads() == before
    assert dst.abs().sum().item() > 0


def test_non_blocking_converting_copy_uploads_its_staging_copy_asynchronously():
    src = torch.randn(4, 5)
    expected = src.double()
    before = _async_uploads()
    dst = torch.empty(4, 5, dtype=torch.float64, device="pjrt")
    dst.copy_(src, non_blocking=True)
    src.fill_(7)  # the float64 staging copy is ours: the caller's tensor is free at once
    assert _async_uploads() == before + 1
    torch.testing.assert_close(dst.cpu(), expected)
