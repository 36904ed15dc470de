"""A lazy training step's programs compile on threads of their own while the step goes on
(graph::BackgroundCompiles, docs/design.md "Compiling while the step goes on"): the forward's
program compiles while the backward is traced, and the backward's in a second compile worker
beside it. Launches whose program is still compiling wait for it on the launch thread
(runtime/launch_queue.h), and their results are buffers whose handles come with the launch.
What must hold: the same results as compiling before each launch, metrics that count every
compile once the step is traced, errors where they were, and two workers side by side."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from torch_pjrt import _C

WIDTH = 64


def model(device, depth):
    torch.manual_seed(0)
    layers = [nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.LayerNorm(WIDTH), nn.GELU()) for _ in range(depth)]
    return nn.Sequential(*layers, nn.Linear(WIDTH, 10)).to(device)


def train(device, depth, steps=3):
    m = model(device, depth)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(8, WIDTH, generator=g).to(device), torch.randint(0, 10, (8,), generator=g).to(device)
    losses = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return [float(v) for v in losses], [p.detach().cpu() for p in m.parameters()]


@pytest.fixture
def background(request):
    was = _C._background_compiles()
    _C._set_background_compiles(request.param)
    yield request.param
    _C._set_background_compiles(was)


# A depth no other test traces, per run, so that the step's programs miss the memory cache.
_DEPTHS = iter(range(7, 40))


@pytest.mark.parametrize("background", [True, False], indirect=True)
def test_training_steps_equal_cpu_with_and_without_background_compiles(background):
    depth = next(_DEPTHS)
    losses, params = train("pjrt", depth)
    cpu_losses, cpu_params = train("cpu", depth)
    torch.testing.assert_close(losses, cpu_losses, rtol=1e-5, atol=1e-5)
    for p, q in zip(params, cpu_params):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("background", [True], indirect=True)
def test_a_convolutional_step_equals_cpu(background):
    # Programs calling host kernels (torch's convolution inside the program) compile in the
    # background too; their queued launch frees this thread's OpenMP team first.
    channels = next(_DEPTHS)  # a width no other test traces: the step's programs are new

    def run(device):
        torch.manual_seed(0)
        net = nn.Sequential(nn.Conv2d(3, channels, 3, padding=1), nn.ReLU(), nn.Conv2d(channels, 4, 3),
                            nn.AdaptiveAvgPool2d(1), nn.Flatten()).to(device)
        opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
        x = torch.randn(2, 3, 12, 12, generator=torch.Generator().manual_seed(2)).to(device)
        losses = []
        for _ in range(2):
            opt.zero_grad(set_to_none=True)
            loss = net(x).square().mean()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses, [p.detach().cpu() for p in net.parameters()]

    losses, params = run("pjrt")
    cpu_losses, cpu_params = run("cpu")
    torch.testing.assert_close(losses, cpu_losses, rtol=1e-5, atol=1e-6)
    for p, q in zip(params, cpu_params):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("background", [True], indirect=True)
def test_metrics_count_background_compiles_before_anything_is_read(background):
    depth = next(_DEPTHS)
    names = ("GraphsLowered", "GraphsCompiled", "CacheHitsDisk")
    m = model("pjrt", depth)
    before = {n: torch.pjrt.metrics.counter(n) for n in names}
    # The forward launches as the backward begins, its program still compiling when backward()
    # returns (it reads the parameters and the input, and donates nothing, so its launch waits for
    # the compile on the launch thread). Reading the metrics waits for it, so every program lowered
    # is counted as compiled or loaded from the disk cache.
    m(torch.randn(8, WIDTH, device="pjrt")).square().mean().backward()
    new = {n: torch.pjrt.metrics.counter(n) - before[n] for n in names}
    assert new["GraphsLowered"] == 1, "the forward's program"
    assert new["GraphsCompiled"] + new["CacheHitsDisk"] == 1


def run_script(body, **env):
    code = textwrap.dedent("""
        import os, time, warnings
        import torch
        from torch_pjrt import _C
        import sys; sys.path.insert(0, {test_dir!r})
        from test_background_compiles import train
        """).format(test_dir=os.path.dirname(__file__)) + textwrap.dedent(body)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TORCH_PJRT_DISK_CACHE": "0", **env})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_a_training_steps_programs_compile_in_two_workers_side_by_side():
    # The forward's program (tens of KB of StableHLO) is still compiling when the backward's
    # launch comes, so the backward's starts a second worker.
    out = run_script("""
        losses, _ = train("pjrt", 6, steps=2)
        status = _C._compile_worker_status()
        print("workers", status["workers"], "compiled", torch.pjrt.metrics.counter("GraphsCompiled"))
        """)
    assert "workers 2" in out
    foreground = run_script("""
        losses, _ = train("pjrt", 6, steps=2)
        print("workers", _C._compile_worker_status()["workers"])
        """, TORCH_PJRT_BACKGROUND_COMPILES="0")
    assert "workers 1" in foreground


def test_a_process_may_exit_while_its_programs_compile():
    out = run_script("""
        m = __import__("test_background_compiles").model("pjrt", 6)
        opt = torch.optim.AdamW(m.parameters())
        m(torch.randn(8, 64, device="pjrt")).sum().backward()
        opt.step()  # its launches wait on the launch thread for programs still compiling
        print("done")
        """)
    assert "done" in out


def test_an_out_of_range_index_in_a_first_step_raises_where_it_did():
    # The forward's index checks (cross entropy's targets) are settled at the updates' launch,
    # which then waits for the forward's program to compile and run.
    out = run_script("""
        import torch.nn.functional as F
        from test_background_compiles import model
        m = model("pjrt", 5)
        opt = torch.optim.AdamW(m.parameters())
        x, y = torch.randn(8, 64, device="pjrt"), torch.full((8,), 99, device="pjrt")
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        try:
            opt.step()
            print("no error at the step")
        except IndexError as e:
            print("IndexError at the step:", "out of bounds" in str(e) or "range" in str(e))
        """)
    assert "IndexError at the step: True" in out, out
