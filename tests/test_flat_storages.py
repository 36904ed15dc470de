"""A storage's device array is 1-D, and an in-place update of storages (an optimizer step) is
emitted as 1-D loops: XLA:CPU left elementwise loops over tensors with short trailing dims (a 3x3
convolution weight's) unvectorized, 2-3x slower (docs/design.md, "Flat storages"). Results match
the CPU, parameters and state are still donated, and steps share one program."""
import pytest
import torch

from helpers import Counters, dumped_text, dumping_graphs

SHAPES = [(16, 8, 3, 3), (16,), (10, 16 * 9)]


def conv_shaped_step(device, make_opt, steps):
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s).to(device)) for s in SHAPES]
    grads = [torch.randn(s) for s in SHAPES]
    opt = make_opt(params)
    per_step = []
    for i in range(steps):
        with Counters() as c:
            for p, g in zip(params, grads):
                p.grad = (g * (i + 1)).to(device)
            opt.step()
            if device == "pjrt":
                torch.pjrt.synchronize()
        per_step.append(c)
    return [p.detach().cpu() for p in params], per_step


OPTIMIZERS = {
    "adamw": lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1),
    "sgd-momentum": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_an_optimizer_step_over_conv_weights_matches_cpu_in_place(name):
    want, _ = conv_shaped_step("cpu", OPTIMIZERS[name], 4)
    got, per_step = conv_shaped_step("pjrt", OPTIMIZERS[name], 4)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    for c in per_step[2:]:
        # One program for every later step, and each parameter and its state written over its
        # old buffer (the 1-D result has the 1-D parameter's type).
        assert c["GraphsCompiled"] == 0 and c["Executions"] == 1
        assert c["DonatedBuffers"] >= 2 * len(SHAPES)


def test_the_update_of_a_conv_weight_is_emitted_in_1d(tmp_path):
    w = torch.nn.Parameter(torch.randn(16, 8, 3, 3).to("pjrt"))
    opt = torch.optim.AdamW([w], lr=0.01)
    w.grad = torch.randn(16, 8, 3, 3).to("pjrt")
    with dumping_graphs(tmp_path):  # the first step's program, which every later step replays
        opt.step()
        torch.pjrt.synchronize()
    w.grad = torch.randn(16, 8, 3, 3).to("pjrt")
    with Counters() as c:
        opt.step()
        torch.pjrt.synchronize()
    assert c["GraphsCompiled"] == 0 and c["CacheHitsMemory"] == 1
    text = dumped_text(tmp_path)
    # The parameter and AdamW's state are 1-D arrays, and the ops that read them run in 1-D: the
    # square root and division of the update, the average's interpolation (a select). What reads
    # only the gradient (its square) or the scalars may stay 4-D: XLA fuses it into the 1-D loop.
    lines = [l for l in text.splitlines() if "= stablehlo." in l]
    for op in ("sqrt", "divide"):
        uses = [l for l in lines if f"= stablehlo.{op} " in l]
        assert uses and all("16x8x3x3" not in l and "1152x" in l for l in uses), (op, uses)
    assert any("= stablehlo.select " in l and "tensor<1152xf32>" in l for l in lines)
    outputs = text.split("-> (")[1].split(")")[0]
    assert outputs.count("tensor<1152xf32>") == 3  # the parameter and two state arrays


def test_a_4d_storage_reads_back_in_every_layout():
    x = torch.randn(2, 3, 4, 5)
    d = x.to("pjrt") * 1  # a program result: the storage's array is 1-D
    torch.testing.assert_close(d.cpu(), x)
    torch.testing.assert_close(d.permute(0, 2, 3, 1).cpu(), x.permute(0, 2, 3, 1))
    torch.testing.assert_close(d[:, 1:, ::2].cpu(), x[:, 1:, ::2])
    torch.testing.assert_close(d.view(6, 20).t().cpu(), x.view(6, 20).t())
    cl = (x.to("pjrt", memory_format=torch.channels_last) * 1)
    assert cl.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(cl.cpu(), x)
    d.add_(1)  # an in-place update of the 1-D storage through its 4-D tensor
    torch.testing.assert_close(d.cpu(), x + 1)
