"""Host kernels (capability `host_kernels`, the CPU plugin): float32 convolutions and 2-d max
pooling run as torch's own CPU kernels inside the compiled program, through XLA FFI custom calls
(csrc/host_kernels/). The results are eager's; the XLA lowerings stay for other dtypes and
plugins, and are still tested here with the capability switched off."""
import copy
import os
import subprocess
import sys

import pytest
import torch
import torch_pjrt
import torch.nn.functional as F
from helpers import Counters, dumped_text, dumping_graphs, step_launches

HERE = os.path.dirname(__file__)


def test_cpu_plugin_declares_host_kernels():
    assert torch.pjrt.capabilities()["host_kernels"] is True


def test_convolutions_run_as_host_kernels_and_equal_eager(tmp_path):
    torch.pjrt.synchronize()
    with dumping_graphs(tmp_path):
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
    # The very kernels eager runs: the convolution and its gradients agree to rounding.
    for got, want in zip(results, (y, x.grad, w.grad, b.grad)):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-5)
    text = dumped_text(tmp_path)
    assert "stablehlo.custom_call @torch_pjrt_conv(" in text
    assert "stablehlo.custom_call @torch_pjrt_conv_backward(" in text
    assert "stablehlo.convolution" not in text
    # Channels-last activations travel as a fixed memory layout of their [N, C, H, W] shape (no
    # transposes, which left XLA's fusions unpartitioned), and every host call pins its layouts.
    assert "operand_layouts = [dense<[1, 3, 2, 0]> : tensor<4xindex>" in text
    assert text.count("stablehlo.custom_call @torch_pjrt_conv") == text.count("result_layouts = [")
    assert "stablehlo.transpose" not in text
    assert not any("convolution" in name for name in torch.pjrt.metrics.fallbacks())


def test_max_pooling_backward_runs_as_a_host_kernel_and_equals_eager(tmp_path):
    torch.pjrt.synchronize()
    x = torch.randn(2, 3, 11, 10)
    x[0, 0, 2, 3], x[1, 2, 5, 5] = float("nan"), -float("inf")
    results = []
    with dumping_graphs(tmp_path):
        for kwargs in (dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=3, stride=1, padding=1, dilation=2),
                       dict(kernel_size=2, stride=2, ceil_mode=True)):
            xp = x.to("pjrt").requires_grad_()
            yp, ip = F.max_pool2d(xp, return_indices=True, **kwargs)
            (yp * torch.arange(yp.numel(), device="pjrt").view_as(yp)).sum().backward()
            xc = x.clone().requires_grad_()
            yc, ic = F.max_pool2d(xc, return_indices=True, **kwargs)
            (yc * torch.arange(yc.numel()).view_as(yc)).sum().backward()
            results.append(((yp.cpu(), ip.cpu(), xp.grad.cpu()), (yc, ic, xc.grad)))
    for got, want in results:
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True)
    text = dumped_text(tmp_path)
    # The forward is XLA's: a maximum over the window taps' slices (lowering/pooling.cc).
    assert "stablehlo.custom_call @torch_pjrt_max_pool2d(" not in text
    assert "stablehlo.custom_call @torch_pjrt_max_pool2d_backward(" in text
    assert "reduce_window" not in text


WHERE_KERNELS_RUN = """
import glob, time, torch, torch.nn.functional as F

def kernel_thread_alive():
    return any(open(p).read().strip() == "pjrt_hostkern" for p in glob.glob("/proc/self/task/*/comm"))

def conv(n, c, size):
    x, w = torch.randn(n, c, size, size), torch.randn(c, c, 3, 3)
    got = F.conv2d(x.to("pjrt"), w.to("pjrt"), padding=1).cpu()
    alive = kernel_thread_alive()  # read before the CPU comparison, milliseconds after the kernel
    torch.testing.assert_close(got, F.conv2d(x, w, padding=1), rtol=1e-5, atol=1e-4)
    return alive

def large_convs():  # 2 * 2*32*32 * 64*64*3*3 = 151M flops each: the kernel thread and its OpenMP team
    return any([conv(2, 64, 32) for _ in range(5)])

print(conv(2, 8, 8))  # 2 * 2*8*8 * 8*8*3*3 = 147k flops: inline on XLA's worker
print(large_convs())
time.sleep(0.5)
print(kernel_thread_alive())  # idle: the thread and its team have exited
print(large_convs())  # and a new one serves the next kernels
"""


def test_small_kernels_run_inline_and_large_ones_on_the_kernel_thread():
    # Inline: no hand-off and no OpenMP team spinning beside XLA's threads (MobileNetV3's
    # convolutions); large ones keep both cores. Both give eager's results. An idle kernel thread
    # exits, so that its OpenMP team does not slow the process's CPU eager ops (libgomp stops
    # spinning once it manages more threads than there are cores; host_kernels.cc).
    proc = subprocess.run([sys.executable, "-c", WHERE_KERNELS_RUN], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["False", "True", "False", "True"], proc.stdout


# The subprocesses decide whether there is a team to test: the parent's thread count may have been
# lowered by an earlier test in the same worker (PyTorch's common_nn sets 1 and restores it only
# when the test gets to its end).
ONE_THREAD_SKIP = """
if torch.get_num_threads() < 2:
    print("one OpenMP thread")
    raise SystemExit
"""


def run_with_a_team(script):
    """`script`'s output, run in a fresh process; skips the test where it has one OpenMP thread."""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    if proc.stdout.strip() == "one OpenMP thread":
        pytest.skip("one OpenMP thread: no team")
    return proc.stdout

CALLER_TEAM = """
import os, torch, torch.nn.functional as F
""" + ONE_THREAD_SKIP + """

def threads():
    return set(os.listdir("/proc/self/task"))

def pjrt_conv():  # 151M flops: on the kernel thread
    x, w = torch.randn(2, 64, 32, 32, device="pjrt"), torch.randn(64, 64, 3, 3, device="pjrt")
    return F.conv2d(x, w, padding=1).sum().item()  # a scalar read: no CPU op on the result

pjrt_conv()  # XLA's and the kernel thread's threads exist from here on
before = threads()
x = torch.randn(1 << 22)
(x * 2).sum()  # parallelized with OpenMP: this thread's team starts
team = threads() - before
print(len(team))
pjrt_conv()
print(len(team & threads()))
"""


def test_launching_host_kernels_frees_the_callers_openmp_team():
    # A team left on the launching thread by CPU work (building the model, preparing batches)
    # beside the kernel thread's team made libgomp stop spinning, and every host kernel handed off
    # through futexes: ConvNeXt-atto training 40-42 -> 26-28 ms per step (runtime/openmp.h).
    out = run_with_a_team(CALLER_TEAM)
    started, left = (int(n) for n in out.split())
    assert started >= 1 and left == 0, out


IDLE_TEAM_CPU = """
import os, time, torch, torch.nn.functional as F
""" + ONE_THREAD_SKIP + """

def kernel_team_cpu_seconds():  # the kernel thread and its OpenMP workers (they inherit its name)
    total = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                if f.read().strip() != "pjrt_hostkern":
                    continue
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])  # nanoseconds on a CPU
        except OSError:
            pass
    return total / 1e9

def pjrt_conv():  # 151M flops: the kernel thread and its team (new inputs: no result is reused)
    x, w = torch.randn(2, 64, 32, 32, device="pjrt"), torch.randn(64, 64, 3, 3, device="pjrt")
    return F.conv2d(x, w, padding=1).sum().item()

for _ in range(3):
    pjrt_conv()
spent = []
for _ in range(5):
    pjrt_conv()
    before = kernel_team_cpu_seconds()
    time.sleep(0.04)  # idle, but shorter than the 50 ms after which the thread exits
    spent.append(kernel_team_cpu_seconds() - before)
print(sum(spent))
"""


def test_the_kernel_threads_team_sleeps_between_jobs():
    # libgomp's workers spin for milliseconds after a parallel region; beside XLA's threads on two
    # cores that spin took the core the program's fusions needed (ViT-tiny inference lost ~45% of
    # its CPU samples to it). After kTeamSpin (0.3 ms) the team waits asleep: five idle 40 ms
    # windows after a convolution cost its threads ~1 ms of CPU time (spinning: ~5 ms each here).
    out = run_with_a_team(IDLE_TEAM_CPU)
    assert float(out) < 0.01, out


ONE_THREAD_TEAM = """
import os, torch, torch.nn.functional as F
torch.set_num_threads(1)
x, w = torch.randn(2, 64, 32, 32, device="pjrt"), torch.randn(64, 64, 3, 3, device="pjrt")
F.conv2d(x, w, padding=1).sum().item()  # 151M flops: on the kernel thread
names = [open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")]
print(names.count("pjrt_hostkern"))
"""


def test_the_kernel_thread_follows_torch_set_num_threads():
    # The kernel thread sizes its OpenMP team as torch's own threads do: one thread, no workers.
    proc = subprocess.run([sys.executable, "-c", ONE_THREAD_TEAM], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["1"], proc.stdout


def test_half_precision_convolutions_keep_the_xla_lowering(tmp_path):
    torch.pjrt.synchronize()
    with dumping_graphs(tmp_path):
        x, w = torch.randn(1, 2, 6, 6), torch.randn(3, 2, 3, 3)
        got = F.conv2d(x.to("pjrt", torch.bfloat16), w.to("pjrt", torch.bfloat16)).float().cpu()
    torch.testing.assert_close(got, F.conv2d(x, w), rtol=0.05, atol=0.1)
    text = dumped_text(tmp_path)
    assert "stablehlo.convolution" in text and "torch_pjrt_conv" not in text


def test_xla_lowerings_without_host_kernels():
    """TORCH_PJRT_HOST_KERNELS=0: the convolution and 1-d/2-d max-pooling tests pass through the
    XLA lowerings (3-d and fractional pooling have no host kernel: their lowering is the same)."""
    env = dict(os.environ, TORCH_PJRT_HOST_KERNELS="0")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:logging", "-p", "no:cacheprovider",
                           os.path.join(HERE, "test_lowerings.py"), os.path.join(HERE, "test_lowerings_spatial.py"),
                           "-k", "(conv or max_pool) and not max_pool3d and not fractional"],
                          capture_output=True, text=True, env=env, timeout=600, cwd=HERE)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert " passed" in proc.stdout
    probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.pjrt.capabilities()['host_kernels'])"],
                           capture_output=True, text=True, env=env, timeout=120)
    assert probe.stdout.strip() == "False", probe.stdout + probe.stderr


def host_calls(text, target):
    """The dumped custom-call lines of `target`."""
    return [line for line in text.splitlines() if f"stablehlo.custom_call @{target}(" in line]


def test_activations_travel_channels_last(tmp_path):
    """The max pooling backward and convolutions whose activations outweigh their weight pass
    their [N, C, H, W] activations as [N, H, W, C] arrays (channels_last = 1): torch's CPU max
    pooling is 12-15x faster on that layout and oneDNN skips its reorders, and XLA cancels the
    transposes between two such calls. A convolution with a larger weight keeps NCHW. Results equal eager's, forward
    and backward, with NCHW and channels-last inputs, grouped and transposed convolutions."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=2), torch.nn.ReLU(),
        torch.nn.ConvTranspose2d(8, 4, 2, stride=2), torch.nn.Conv2d(4, 64, 1),
        torch.nn.AdaptiveAvgPool2d(2), torch.nn.Conv2d(64, 64, 3, padding=1))  # the last: weight-heavy
    inputs = [torch.randn(2, 3, 24, 20), torch.randn(2, 3, 24, 20).contiguous(memory_format=torch.channels_last)]
    torch.pjrt.synchronize()
    with dumping_graphs(tmp_path):
        for x in inputs:
            want = net(x.requires_grad_())
            (want * want).sum().backward()
            want_grads = [x.grad] + [p.grad.clone() for p in net.parameters()]
            net.zero_grad()
            dev_net = copy.deepcopy(net).to("pjrt")
            xp = x.detach().to("pjrt").requires_grad_()
            got = dev_net(xp)
            (got * got).sum().backward()
            got_grads = [xp.grad] + [p.grad for p in dev_net.parameters()]
            torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)
            for g, w in zip(got_grads, want_grads):
                torch.testing.assert_close(g.cpu(), w, rtol=1e-4, atol=1e-4)
            assert got.is_contiguous(memory_format=torch.channels_last) == want.is_contiguous(
                memory_format=torch.channels_last)
    text = dumped_text(tmp_path)
    calls = host_calls(text, "torch_pjrt_max_pool2d_backward")
    assert calls and all("channels_last = 1" in c for c in calls)
    for target in ("torch_pjrt_conv", "torch_pjrt_conv_backward"):
        calls = host_calls(text, target)
        # Per graph: the first four convolutions channels-last, the weight-heavy last one not.
        assert sum("channels_last = 1" in c for c in calls) == 4 * sum("channels_last" not in c for c in calls) > 0


def test_channels_last_convolutions_compute_in_the_programs_buffers():
    """A channels-last convolution's output, and its input gradient, are allocated by torch in the
    program's result buffer (host_kernels/result_buffers.h): nothing is copied after the kernel.
    The NCHW convolution (oneDNN computes it in a blocked layout) and the weight gradients are
    copied. Results equal eager's."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(8, 8, 3, padding=1),
        torch.nn.AdaptiveAvgPool2d(4), torch.nn.Conv2d(8, 64, 3, padding=1))  # the last: weight-heavy, NCHW
    x = torch.randn(2, 3, 16, 16)
    dev_net = copy.deepcopy(net).to("pjrt")
    xp = x.to("pjrt")
    torch.pjrt.synchronize()
    with torch.no_grad(), Counters() as inference:
        got = dev_net(xp).cpu()
    torch.testing.assert_close(got, net(x), rtol=1e-5, atol=1e-5)
    assert (inference["HostKernelResultsInPlace"], inference["HostKernelResultsCopied"]) == (2, 1)

    with Counters() as training:
        dev_net(xp).square().sum().backward()
        grads = [p.grad.cpu() for p in dev_net.parameters()]
    net(x).square().sum().backward()
    for g, want in zip(grads, [p.grad for p in net.parameters()]):
        torch.testing.assert_close(g, want, rtol=1e-4, atol=1e-4)
    # In place: both channels-last outputs and the second one's input gradient (the first one's
    # input needs none). Copied: the NCHW output and its input gradient, and three weight gradients.
    assert (training["HostKernelResultsInPlace"], training["HostKernelResultsCopied"]) == (3, 5)


def test_a_temporary_that_takes_a_result_buffer_leaves_the_result_copied():
    """oneDNN's channels-last convolution first copies its weight to channels-last; here that copy
    has exactly the output's size (64x4x3x3 = 6x6x64), so it takes the offered buffer, the output is
    allocated elsewhere and copied in afterwards. The result is still eager's."""
    torch.manual_seed(0)
    x, w = torch.randn(1, 4, 48, 48), torch.randn(64, 4, 3, 3)
    torch.pjrt.synchronize()
    with Counters() as c:
        got = F.conv2d(x.to("pjrt"), w.to("pjrt"), stride=8, padding=1).cpu()
    torch.testing.assert_close(got, F.conv2d(x, w, stride=8, padding=1), rtol=1e-5, atol=1e-5)
    assert (c["HostKernelResultsInPlace"], c["HostKernelResultsCopied"]) == (0, 1)


def test_a_kernel_whose_raw_allocation_meets_a_result_buffer_runs_again_without_it():
    """oneDNN takes its temporaries through Allocator::raw_allocate, whose memory the allocator's
    raw deleter frees: a result buffer refuses that (an error inside the kernel) rather than being
    freed as heap memory. The kernel then runs again without the buffers and its result is copied,
    and results of that size are not offered again. Stand-in kernels (result_buffers.h): each
    fills a result with a value, one of them after a raw allocation of the result's size."""
    in_place = torch.zeros(1000)
    with Counters() as c:
        torch_pjrt._C._compute_into_for_test(in_place, 7.0, False)
    assert torch.equal(in_place, torch.full((1000,), 7.0))
    assert (c["HostKernelResultsInPlace"], c["HostKernelResultsCopied"]) == (1, 0)

    colliding = torch.zeros(1001)  # a size of its own: the sizes given up on are the process's
    with Counters() as c:
        torch_pjrt._C._compute_into_for_test(colliding, 3.0, True)
        torch_pjrt._C._compute_into_for_test(colliding, 5.0, False)
    assert torch.equal(colliding, torch.full((1001,), 5.0))
    assert (c["HostKernelResultsInPlace"], c["HostKernelResultsCopied"]) == (0, 2)


# The optimizer step after a convolutional backward (graph/executor.h, LaunchBeforeOptimizerStep).
def conv_net():
    # No bias before the batch norm: its gradient is rounding noise, which AdamW scales to +-lr.
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1, bias=False), torch.nn.BatchNorm2d(16), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
        torch.nn.Linear(16, 5))


def mostly_dense_net():
    """One small convolution ahead of a deep stack of linear layers (a ViT's patch embedding)."""
    layers = [torch.nn.Conv2d(3, 8, 4, stride=4), torch.nn.Flatten()]
    layers += [m for _ in range(12) for m in (torch.nn.Linear(32, 32), torch.nn.LayerNorm(32), torch.nn.GELU())]
    return torch.nn.Sequential(*layers, torch.nn.Linear(32, 5))


def training(make_net, device, capturable=False):
    """A net and its AdamW training step (returning the loss) on a fixed random batch."""
    torch.manual_seed(0)
    net = make_net().to(device)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-2, capturable=capturable)
    x, y = torch.randn(4, 3, 8, 8).to(device), torch.randint(0, 5, (4,)).to(device)

    def step():
        opt.zero_grad()
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        return loss
    return net, step


def train_steps(make_net, device, steps):
    """Losses, parameters and per-step counters of `training`'s steps."""
    net, step = training(make_net, device)
    losses, counters = [], []
    for _ in range(steps):
        with Counters() as c:
            loss = step()
            if device == "pjrt":
                torch.pjrt.synchronize()
        losses.append(loss.item())
        counters.append(c)
    return losses, [p.detach().cpu() for p in net.parameters()], counters


def test_a_convolutional_backward_launches_before_the_optimizer_step():
    """The lazy step launches its forward and backward as the optimizer step begins (as every lazy
    step does): the updates then follow the backward instead of running beside its host kernels.
    Both programs are cached: two executions per step, nothing compiled after the first step."""
    want_losses, want_params, _ = train_steps(conv_net, "cpu", 3)
    losses, params, counters = train_steps(conv_net, "pjrt", 3)
    torch.testing.assert_close(losses, want_losses, rtol=1e-4, atol=1e-5)
    for got, want in zip(params, want_params):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    for c in counters:
        assert step_launches(c) == (3, 1, 1, 1) and c["FallbackOps"] == 0
    assert [c["GraphsCompiled"] for c in counters[1:]] == [0, 0]


def test_a_captured_convolutional_step_is_two_programs_split_where_the_lazy_step_is():
    """Where host kernels are a large part of the backward, a device graph holds the whole step in
    two programs, split where the lazy step launches its updates: the forward and backward, then
    the optimizer's step (one program ran ResNet-18 15-30% slower). The launches at the optimizer step are dropped in
    the capture."""
    net, static_loss, replay_executions = captured_step(conv_net)
    assert replay_executions == 2
    assert_matches_three_cpu_steps(conv_net, net, static_loss, atol=1e-5)


def captured_step(make_net):
    """Captures `training`'s step (after two lazy warm-up steps) and replays it once: the net, the
    captured loss and the replay's executions."""
    net, step = training(make_net, "pjrt", capturable=True)
    for _ in range(2):  # lazy warm-up steps (optimizer state made): launched apart
        with Counters() as warm:
            step()
            torch.pjrt.synchronize()
    assert step_launches(warm) == (3, 1, 1, 1)
    graph = torch.accelerator.Graph()
    with Counters() as c, graph:
        static_loss = step()
    assert c["Sync::before_optimizer_step"] == 0 and c["Sync::optimizer_step"] == 0
    with Counters() as c:
        graph.replay()
        torch.pjrt.synchronize()
    assert c["NodesTraced"] == 0
    return net, static_loss, c["Executions"]


def assert_matches_three_cpu_steps(make_net, net, static_loss, atol):
    """Two warm-up steps and one replay (the capture runs nothing) give CPU's third loss and
    parameters."""
    want_losses, want_params, _ = train_steps(make_net, "cpu", 3)
    torch.testing.assert_close(static_loss.item(), want_losses[2], rtol=1e-4, atol=1e-5)
    for got, want in zip(net.parameters(), want_params):
        torch.testing.assert_close(got.detach().cpu(), want, rtol=1e-4, atol=atol)


def test_a_captured_mostly_dense_step_is_one_program():
    """Replays trace nothing that an early launch could overlap: a step of few host kernels stays
    one program, where XLA runs each update as soon as its gradient exists."""
    net, static_loss, replay_executions = captured_step(mostly_dense_net)
    assert replay_executions == 1
    assert_matches_three_cpu_steps(mostly_dense_net, net, static_loss, atol=1e-4)


def test_without_host_kernels_a_captured_convolutional_step_is_one_program():
    script = ("import sys; sys.path.insert(0, %r)\n" % HERE +
              "from test_host_kernels import conv_net, captured_step\n"
              "print('replay executions', captured_step(conv_net)[2])\n")
    env = dict(os.environ, TORCH_PJRT_HOST_KERNELS="0")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split()[-3:] == ["replay", "executions", "1"], proc.stdout
