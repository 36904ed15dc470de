"""Host kernels (capability `host_kernels`, the CPU plugin): float32 convolutions run as torch's own
CPU convolution inside the compiled program, through XLA FFI custom calls
(csrc/host_kernels/). The results are eager's; the XLA convolution lowering stays for other
dtypes and plugins, and is still tested here with the capability switched off."""
import glob
import os
import subprocess
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(__file__)


def test_cpu_plugin_declares_host_kernels():
    assert torch.pjrt.capabilities()["host_kernels"] is True


def test_convolutions_run_as_host_kernels_and_equal_eager(tmp_path):
    torch.pjrt.synchronize()
    torch.pjrt.set_dump_dir(str(tmp_path))
    try:
        torch.manual_seed(0)
        x = torch.randn(2, 3, 10, 9, requires_grad=True)
        w = torch.randn(6, 3, 3, 3, requires_grad=True)
        b = torch.randn(6, requires_grad=True)
        y = F.conv2d(x, w, b, stride=2, padding=1)
        (y * y).sum().backward()
        xp, wp, bp = (t.detach().to("pjrt").requires_grad_() for t in (x, w, b))
        yp = F.conv2d(xp, wp, bp, stride=2, padding=1)
        (yp * yp).sum().backward()
        results = [t.cpu() for t in (yp, xp.grad, wp.grad, bp.grad)]
    finally:
        torch.pjrt.set_dump_dir(None)
    # The very kernels eager runs: the convolution and its gradients agree to rounding.
    for got, want in zip(results, (y, x.grad, w.grad, b.grad)):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-5)
    text = "".join(open(p).read() for p in glob.glob(os.path.join(tmp_path, "*.mlir")))
    assert "stablehlo.custom_call @torch_pjrt_conv(" in text
    assert "stablehlo.custom_call @torch_pjrt_conv_backward(" in text
    assert "stablehlo.convolution" not in text
    assert not any("convolution" in name for name in torch.pjrt.metrics.fallbacks())


def test_half_precision_convolutions_keep_the_xla_lowering(tmp_path):
    torch.pjrt.synchronize()
    torch.pjrt.set_dump_dir(str(tmp_path))
    try:
        x, w = torch.randn(1, 2, 6, 6), torch.randn(3, 2, 3, 3)
        got = F.conv2d(x.to("pjrt", torch.bfloat16), w.to("pjrt", torch.bfloat16)).float().cpu()
    finally:
        torch.pjrt.set_dump_dir(None)
    torch.testing.assert_close(got, F.conv2d(x, w), rtol=0.05, atol=0.1)
    text = "".join(open(p).read() for p in glob.glob(os.path.join(tmp_path, "*.mlir")))
    assert "stablehlo.convolution" in text and "torch_pjrt_conv" not in text


def test_xla_convolution_lowering_without_host_kernels():
    """TORCH_PJRT_HOST_KERNELS=0: the convolution tests pass through XLA's convolution."""
    env = dict(os.environ, TORCH_PJRT_HOST_KERNELS="0")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:logging", "-p", "no:cacheprovider",
                           os.path.join(HERE, "test_lowerings.py"), "-k", "conv"],
                          capture_output=True, text=True, env=env, timeout=600, cwd=HERE)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert " passed" in proc.stdout
    probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.pjrt.capabilities()['host_kernels'])"],
                           capture_output=True, text=True, env=env, timeout=120)
    assert probe.stdout.strip() == "False", probe.stdout + probe.stderr
