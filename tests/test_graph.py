"""The lazy graph engine: value scalars, sync causes, the pending-size bound, compile caches
(memory LRU, disk, corrupt entries), compile explanations and StableHLO dumps."""
import glob
import os

import pytest
import torch

from helpers import Counters, run_python


def test_value_scalars_never_recompile():
    x = torch.randn(8).to("pjrt")
    for i, s in enumerate([0.5, 1.25, -3.0, 7.0]):
        with Counters() as c:
            y = (x * s + (i + 1)).sum().item()
        torch.testing.assert_close(y, (x.cpu() * s + (i + 1)).sum().item(), rtol=1e-5, atol=1e-5)
        if i > 0:
            assert c["GraphsCompiled"] == 0 and c["CacheHitsMemory"] == 1


def test_ops_dropped_before_a_sync_do_not_change_the_next_graphs_key():
    # Dropped ops held slot and parameter positions until the next sync, and a node's hash is its
    # position: the same computation traced after them compiled again (graph/trace.cc EndIdleEpoch).
    x = torch.randn(8).to("pjrt")
    (x * 1.5 + 2).cpu()  # traced in a clean epoch, compiled
    for s, dropped in ((2.5, lambda: x * 4.0 - 1), (3.5, lambda: torch.randn(3, device="pjrt") * 0.25)):
        dropped()  # traced (a parameter, value scalars, a random draw), then dead
        with Counters() as c:
            got = (x * s + 3).cpu()
        torch.testing.assert_close(got, x.cpu() * s + 3)
        assert c["GraphsCompiled"] == 0 and c["CacheHitsMemory"] == 1


def test_a_dropped_out_of_range_index_still_raises_at_the_next_sync():
    x = torch.arange(5, device="pjrt")
    x[torch.tensor([7], device="pjrt")]  # dead at once; its index check is still pending
    with pytest.raises(IndexError):
        (x + 1).cpu()


def test_one_graph_per_sync_covers_every_live_tensor():
    a = torch.randn(4).to("pjrt")
    b, c2, d = a + 1, a * 2, a - 3
    with Counters() as c:
        b.cpu()  # materializes c2 and d too, in the same execution
        c2.cpu()
        d.cpu()
    assert c["Executions"] == 1


def test_sync_causes_are_counted():
    x = torch.ones(3, device="pjrt")
    with Counters() as c:
        (x + 1).cpu()
        (x + 2).sum().item()
        y = x * 3
        torch.pjrt.synchronize()
        z = x * 4
        print(z)
    assert c["Sync::to_cpu"] == 2 and c["Sync::item"] == 1 and c["Sync::synchronize"] == 1


def test_pending_graph_is_cut_at_the_bound_and_memory_stays_bounded():
    out = run_python("""
        import resource, torch
        torch.pjrt.set_max_pending_nodes(500)
        x = torch.zeros(256, device="pjrt")
        peaks = []
        for i in range(6000):  # never syncs explicitly
            x = x * 0.999 + 1.0
            if i % 1000 == 999:
                peaks.append(torch.pjrt._C._live_nodes())
        c = torch.pjrt.metrics.counters()
        print("cuts", c.get("Sync::graph_too_large", 0), "compiled", c["GraphsCompiled"])
        print("max_live_nodes", max(peaks))
        expected = 0.0
        for i in range(6000):
            expected = expected * 0.999 + 1.0
        print("value_ok", abs(x[0].item() - expected) < 1e-2 * expected)
    """).stdout
    fields = dict(zip(out.split()[::2], out.split()[1::2]))
    assert int(fields["cuts"]) >= 20
    assert int(fields["compiled"]) <= 3  # the cut graphs repeat: cache hits
    assert int(fields["max_live_nodes"]) <= 1100
    assert fields["value_ok"] == "True"


def test_memory_cache_capacity_is_an_lru(tmp_path):
    out = run_python("""
        import torch
        torch.pjrt.set_cache_dir(None)
        torch.pjrt._C._set_cache_size(2)
        for shape in [2, 3, 4]:  # three different graphs
            torch.ones(shape, device="pjrt").sum().item()
        print("cached", torch.pjrt._C._cached_graphs())
    """).stdout
    assert "cached 2" in out


def test_corrupt_disk_entries_are_recompiled_with_a_warning(tmp_path):
    script = """
        import warnings, torch
        warnings.simplefilter("always")
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            r = (torch.arange(6.0, device="pjrt") * 3).sum().item()
        c = torch.pjrt.metrics.counters()
        print("result", r, "compiled", c["GraphsCompiled"], "disk", c["CacheHitsDisk"],
              "corrupt", c["CacheCorruptEntries"], "warned", any("unusable" in str(m.message) for m in w))
    """
    env = {"TORCH_PJRT_CACHE_DIR": str(tmp_path)}
    assert "compiled 1 disk 0" in run_python(script, env=env).stdout
    entries = glob.glob(str(tmp_path / "*.pjrtx"))
    assert entries
    for path in entries:  # truncate every entry
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) // 2)
    out = run_python(script, env=env).stdout
    assert "result 45.0" in out and "corrupt 1" in out and "warned True" in out and "compiled 1" in out
    assert "compiled 0 disk 1" in run_python(script, env=env).stdout  # rewritten entry is good again
    for path in glob.glob(str(tmp_path / "*.pjrtx")):  # garbage of the right size
        size = os.path.getsize(path)
        with open(path, "wb") as f:
            f.write(os.urandom(size))
    out = run_python(script, env=env).stdout
    assert "result 45.0" in out and "corrupt 1" in out


def test_disk_cache_can_be_disabled(tmp_path):
    out = run_python("""
        import torch
        print("dir", torch.pjrt.cache_dir())
        (torch.ones(3, device="pjrt") + 1).cpu()
    """, env={"TORCH_PJRT_DISK_CACHE": "0", "TORCH_PJRT_CACHE_DIR": str(tmp_path)}).stdout
    assert "dir None" in out
    assert not glob.glob(str(tmp_path / "*"))


def test_compile_log_explains_each_compile(tmp_path):
    proc = run_python("""
        import torch
        x = torch.ones(4, device="pjrt")
        torch.pjrt.synchronize()
        (x + 1).cpu()
        (x * 2 + 1).cpu()      # different graph -> explained
        (x + 5).cpu()          # same structure as x + 1 -> no compile
        torch.ones(7, device="pjrt").sum().item()
    """, env={"TORCH_PJRT_LOG_COMPILES": "1", "TORCH_PJRT_DISK_CACHE": "0",
              "TORCH_PJRT_DUMP_DIR": str(tmp_path)})
    err = proc.stderr
    lines = [l for l in err.splitlines() if l.startswith("[torch_pjrt] compiled graph")]
    assert len(lines) == 4, err
    assert "first graph compiled in this process" in err
    assert "differs from cached graph" in err
    assert "<string>:" in err  # the user line that forced the sync
    assert "sync cause: synchronize" in err and "sync cause: to_cpu" in err and "sync cause: item" in err
    assert "at op #0: `mul.Tensor tensor<4xf32>` where it had `add.Tensor tensor<4xf32>`" in err
    dumps = glob.glob(str(tmp_path / "graph_*.mlir"))
    assert len(dumps) == 4
    assert "func.func public @main" in open(dumps[0]).read()


def test_buffers_are_donated_for_in_place_updates():
    w = torch.randn(64, 64).to("pjrt")
    g = torch.randn(64, 64).to("pjrt")
    torch.pjrt.synchronize()
    for _ in range(3):
        with Counters() as c:
            w.sub_(g, alpha=0.1)
            torch.pjrt.synchronize()
        assert c["DonatedBuffers"] == 1
    alias = w.view(-1)  # views share the storage, not the buffer: still donated
    with Counters() as c:
        w.mul_(0.5)
        torch.pjrt.synchronize()
    assert c["DonatedBuffers"] == 1 and alias.shape == (4096,)


def test_donation_does_not_depend_on_whether_the_previous_execution_finished():
    """A program that reads p runs while the next one, which updates p in place, is traced. The
    running program's hold on p's buffer must not stop the donation: the step would otherwise
    compile one program while the device is busy and another when it is idle (seen as random
    recompiles in DDP training, docs/design.md)."""
    w = (torch.randn(1024, 1024) / 32).to("pjrt")  # scaled so the chain stays finite
    p = torch.zeros(8).to("pjrt")
    torch.pjrt.synchronize()
    stream = torch.accelerator.current_stream(w.device)
    launch = lambda: torch.pjrt._C._synchronize(0, "synchronize", False)  # noqa: E731 (no wait)

    def step(wait):
        s = w
        for _ in range(8):
            s = s @ w  # ~17 GFLOP: still running when the next program is traced
        out = s.sum() + p.sum()  # reads p, leaves it alone
        launch()
        if wait:
            torch.pjrt.synchronize()
        busy.append(not stream.query())
        p.add_(1)  # the next program updates p in place: donated when nothing else holds it
        launch()
        return out

    busy = []
    step(wait=True)  # compiles both programs
    with Counters() as c:
        for wait in (False, True, False):
            step(wait)
        torch.pjrt.synchronize()
    assert busy[1:] == [True, False, True]  # the case this test is about did happen
    assert c["GraphsCompiled"] == 0 and c["DonatedBuffers"] == 3, c
    assert torch.equal(p.cpu(), torch.full((8,), 4.0))


def test_execution_is_asynchronous():
    x = (torch.randn(1024, 1024) / 32).to("pjrt")  # scaled so the chain stays finite
    chain = lambda t: t @ t @ t @ t @ t @ t @ t @ t  # ~15 GFLOP: well over 0.1 s on this machine
    chain(x).cpu()  # compiled once, so the launch below is only a launch
    (x + 1).sum().cpu()  # and the tracing below finds its Meta results memoized
    stream = torch.accelerator.current_stream(x.device)
    y = chain(x)
    torch.pjrt._C._synchronize(0, "synchronize", False)  # launch without waiting
    # The device is still computing while Python goes on tracing (a synchronous Execute would
    # have finished before returning, and the stream would be idle here).
    z = (x + 1).sum()
    assert not stream.query()
    torch.pjrt.synchronize()
    assert stream.query()
    torch.testing.assert_close(y.cpu(), chain(x.cpu()), rtol=1e-3, atol=1e-4)
    assert z.item() == pytest.approx((x.cpu() + 1).sum().item(), rel=1e-4)


def test_a_repeated_read_of_unchanged_buffers_cuts_no_graph():
    """transformers checks `attention_mask.all()` in every forward: after the first step, the read
    is answered from the first read's result (the mask's buffer is the same), so the rest of the
    step stays one graph. Written, replaced or random inputs are read afresh."""
    mask_cpu = torch.ones(4, 8, dtype=torch.long)
    mask = mask_cpu.to("pjrt")
    w = torch.randn(8, 8).to("pjrt")

    def step(m):
        h = w * 2
        if not bool(m.bool().all()):  # the model's branch on a value of its input
            h = h.masked_fill(m[:1].bool().logical_not(), 0.0)
        return h.sum()

    expected = (w.cpu() * 2).sum()
    for i in range(3):
        with Counters() as c:
            total = step(mask).item()
        # float32 tolerances: XLA sums the 64 elements in another order than torch (Python
        # floats would get float64's, which that order's rounding exceeds on some draws).
        torch.testing.assert_close(total, expected.item(), rtol=1e-5, atol=1e-6)
        if i == 2:
            assert c["RememberedReads"] >= 1 and c["Executions"] <= 1
    mask[0, 0] = 0  # a new buffer: the read runs again and sees the zero
    mask_cpu[0, 0] = 0
    with Counters() as c:
        assert bool(mask.bool().all()) is False
    assert c["RememberedReads"] == 0
    torch.testing.assert_close(step(mask).item(), (w.cpu() * 2).masked_fill(
        mask_cpu[:1].bool().logical_not(), 0.0).sum().item(), rtol=1e-5, atol=1e-6)
    draws = [torch.rand(3, device="pjrt").sum().item() for _ in range(3)]
    assert len(set(draws)) == 3  # seeds are value scalars: random reads never repeat
    x = torch.zeros(2).to("pjrt")
    for i in range(3):  # same program, new buffers each time
        x = x + 1
        assert x.sum().item() == 2 * (i + 1)


def test_a_scalar_read_in_the_middle_of_a_step_runs_ahead_and_leaves_the_step_one_graph():
    """A step that reads `bool(mask.all())` halfway (transformers' BERT does) computes only that
    value, in a program of its own; the rest of the step stays one graph, so the next step, whose
    mask is a new buffer, compiles nothing. Reads after the step overwrote what they read, copies
    of results and values needing nothing else pending sync everything at once, as before."""
    torch.manual_seed(0)
    w_cpu = torch.randn(8, 8)
    w = w_cpu.to("pjrt")

    def step(m, w):
        h = w * 3 + 1
        if bool(m.bool().all()):  # the host branches on a value of this step's input
            h = h * 2
        w.sub_(0.01 * (h @ h))  # the step's update
        return h.sum()

    for i in range(3):
        mask_cpu = torch.ones(4, 8, dtype=torch.long)
        mask_cpu[0, 0] = min(i, 1)  # step 0 skips the branch, steps 1 and 2 take it
        with Counters() as c:
            total = step(mask_cpu.to("pjrt"), w)
            w_now = w.cpu()
        expected = step(mask_cpu, w_cpu)
        torch.testing.assert_close(total.cpu(), expected)
        torch.testing.assert_close(w_now, w_cpu)
        assert c["ValuesComputedAhead"] == 1 and c["Sync::item"] == 1
        assert c["Executions"] == 2  # the read's program, then the whole step's
        if i == 2:
            assert c["GraphsCompiled"] == 0  # same step graph as step 1, same read program
    with Counters() as c:
        a = w + 1
        assert bool((w > -1e9).all())  # only `a` else pending, but `w` was not overwritten
        w.mul_(0.5)
        assert a.sum().item() == pytest.approx((w_cpu + 1).sum().item(), rel=1e-5)
    assert c["ValuesComputedAhead"] == 1  # the first read; the second reads an overwritten w
    with Counters() as c:
        b = w * 2
        assert bool((b > -1e9).all())  # nothing else pending: a plain sync
    assert c["ValuesComputedAhead"] == 0 and c["Executions"] == 1
