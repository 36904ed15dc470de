"""Ops without a lowering run on the CPU: correct results, counted per op, warned about once.
The example is the SVD (aten::_linalg_svd), which XLA cannot compute (docs/ops.md lists why)."""
import warnings

import torch

from helpers import Counters, run_python


def test_unlowered_op_runs_on_cpu_and_is_counted():
    a = torch.rand(5, 3)
    x = a.to("pjrt")
    with Counters() as c, warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        y = torch.linalg.svdvals(x)
        z = torch.linalg.svdvals(x + 1)
    assert y.device.type == "pjrt"
    torch.testing.assert_close(y.cpu(), torch.linalg.svdvals(a))
    torch.testing.assert_close(z.cpu(), torch.linalg.svdvals(a + 1))
    assert c["aten::_linalg_svd"] == 2
    assert c["FallbackOps"] == 2
    assert c["Sync::cpu_fallback"] >= 1
    assert torch.pjrt.metrics.fallbacks()["aten::_linalg_svd"] >= 2
    assert "aten::_linalg_svd" in torch.pjrt.metrics.report()


def test_fallback_warns_once_per_op_and_can_be_silenced():
    out = run_python("""
        import warnings, torch
        warnings.simplefilter("always")
        x = torch.rand(3, 3).to("pjrt")
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            torch.linalg.svdvals(x); torch.linalg.svdvals(x)
        print("warnings", sum("aten::_linalg_svd has no pjrt lowering" in str(m.message) for m in w))
        torch.pjrt.set_fallback_warnings(False)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            torch.linalg.eigvals(x)
        print("silenced", not any("pjrt lowering" in str(m.message) for m in w))
    """).stdout
    assert "warnings 1" in out
    assert "silenced True" in out


def test_fallback_writes_back_into_views():
    a, m = torch.rand(4, 4), torch.rand(3, 3)
    x = a.to("pjrt")
    v = x[1, :3]
    with Counters() as c:
        torch.linalg.svdvals(m.to("pjrt"), out=v)  # no lowering: runs on the CPU, copied back into the view
    assert c["FallbackOps"] == 1
    torch.testing.assert_close(x.cpu()[1, :3], torch.linalg.svdvals(m))
    assert torch.equal(x.cpu()[0], a[0]) and torch.equal(x.cpu()[2:], a[2:]) and x.cpu()[1, 3] == a[1, 3]


def test_every_known_fallback_really_has_no_native_kernel():
    # torch_pjrt.unlowered is the list of ops that take the CPU path on purpose or for now; an op
    # that gains a lowering must leave it (or move to PARTLY_LOWERED, where some arguments still do).
    from torch_pjrt import unlowered
    for op in unlowered.REASONS:
        packet = getattr(torch.ops.aten, op.split("::")[1])
        names = [op if o == "default" else f"{op}.{o}" for o in packet.overloads()]
        has_kernel = any(torch._C._dispatch_has_kernel_for_dispatch_key(n, "PrivateUse1") for n in names)
        assert has_kernel == (op in unlowered.PARTLY_LOWERED), op


def test_report_says_why_a_known_fallback_runs_on_the_cpu():
    torch.pjrt.metrics.reset()
    torch.linalg.svdvals(torch.rand(3, 3).to("pjrt"))
    line = next(ln for ln in torch.pjrt.metrics.report().splitlines() if "aten::_linalg_svd" in ln)
    assert "SVD: StableHLO has no such op" in line
