"""torch.autocast("pjrt") follows CUDA's op lists and cast policies, with the plugin's AMP dtype."""
import pytest
import torch
from torch import nn

from helpers import assert_close


def test_autocast_default_dtype_is_bfloat16():
    assert torch.get_autocast_dtype("pjrt") == torch.bfloat16
    assert torch.pjrt.get_amp_supported_dtype() == [torch.bfloat16, torch.float16]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_policies_match_cpu_autocast(dtype):
    torch.manual_seed(0)
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    results = {}
    for device in ("cpu", "pjrt"):
        x, y = a.to(device), b.to(device)
        with torch.autocast(device, dtype=dtype):
            mm = x @ y                         # lower_precision_fp
            soft = torch.softmax(mm, dim=-1)   # fp32 (set_opt_dtype): runs in float32
            lin = nn.functional.linear(x, y.t())
            promoted = torch.addcmul(x, x.to(dtype), x)  # promote: the widest input type
            s = mm.sum()                         # fp32_set_opt_dtype
        results[device] = (mm, soft, lin, promoted, s)
    assert [t.dtype for t in results["pjrt"]] == [dtype, torch.float32, dtype, torch.float32, torch.float32]
    for got, want in zip(results["pjrt"], results["cpu"]):  # CPU autocast's lists differ a little
        assert_close(got.float(), want.float(), atol=2e-2, rtol=2e-2)


def test_training_step_under_autocast():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    dev_model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).to("pjrt")
    dev_model.load_state_dict(model.state_dict())
    x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
    for m, device in ((model, "cpu"), (dev_model, "pjrt")):
        with torch.autocast(device, dtype=torch.bfloat16):
            out = m(x.to(device))
            loss = nn.functional.cross_entropy(out, y.to(device))
        assert out.dtype == torch.bfloat16 and loss.dtype == torch.float32
        loss.backward()
    assert dev_model[0].weight.grad.dtype == torch.float32  # master weights stay float32
    assert_close(dev_model[0].weight.grad, model[0].weight.grad, atol=3e-2, rtol=3e-2)


def test_lstm_runs_in_lower_precision_under_autocast():
    """nn.LSTM (one mkldnn_rnn_layer per layer on pjrt, as on the CPU) runs in the autocast dtype
    as CPU autocast runs it: outputs and states in bfloat16, float32 gradients."""
    torch.manual_seed(0)
    cpu = nn.LSTM(16, 12, num_layers=2)
    dev = nn.LSTM(16, 12, num_layers=2).to("pjrt")
    dev.load_state_dict(cpu.state_dict())
    x = torch.randn(5, 3, 16)
    results = []
    for m, device in ((cpu, "cpu"), (dev, "pjrt")):
        try:
            with torch.autocast(device, dtype=torch.bfloat16):
                out, (h, c) = m(x.to(device))
            assert (out.dtype, h.dtype, c.dtype) == (torch.bfloat16,) * 3
        except RuntimeError as e:
            # oneDNN has no bfloat16 LSTM for some CPUs (one without AVX2): CPU eager cannot run
            # it there, so pjrt's answer is compared with the float32 LSTM instead.
            if device != "cpu" or "primitive descriptor" not in str(e):
                raise
            out, (h, c) = m(x)
        out.float().square().sum().backward()
        assert m.weight_ih_l0.grad.dtype == torch.float32
        results.append((out, m.weight_ih_l0.grad))
    for got, want in zip(*reversed(results)):
        assert_close(got.float(), want.float(), atol=3e-2, rtol=3e-2)


def test_binary_cross_entropy_is_banned_like_on_cuda():
    p = torch.rand(4, device="pjrt")
    with torch.autocast("pjrt"):
        with pytest.raises(RuntimeError, match="binary_cross_entropy_with_logits"):
            nn.functional.binary_cross_entropy(p, p)


def test_unsupported_autocast_dtype_warns_and_disables():
    with pytest.warns(UserWarning, match="not supported"):
        with torch.autocast("pjrt", dtype=torch.float32):
            out = torch.ones(2, 2, device="pjrt") @ torch.ones(2, 2, device="pjrt")
    assert out.dtype == torch.float32
