"""The CPU plugin's second client for small programs (runtime::ClientForProgram): programs below
TORCH_PJRT_SMALL_PROGRAM_WORK run on a client whose XLA pool has one thread, larger ones on the
main client's pool, each reading the other's buffers as views of the same memory."""
import os

import pytest
import torch

from helpers import run_python
from torch_pjrt import _C

DEVICE = "pjrt"


def counters():
    return torch.pjrt.metrics.counters()


def needs_second_client():
    torch.ones(1, device=DEVICE).sum().item()  # starts the clients
    if not _C._small_program_client_started():
        pytest.skip("one CPU or PJRT_NPROC=1: there is no second client")


def test_programs_cross_between_the_clients_and_match_cpu():
    needs_second_client()
    torch.manual_seed(0)
    a_cpu = torch.randn(512, 512)
    a = a_cpu.to(DEVICE)  # uploaded on the main client
    torch.pjrt.metrics.reset()
    allocated = torch.pjrt.memory_allocated()
    b = a * 2 + 1  # small (~0.5M elements): the one-thread client, reading `a` as a view
    b_cpu = a_cpu * 2 + 1
    torch.testing.assert_close(b.cpu(), b_cpu)
    # The view of `a` is not counted: only b's new bytes are.
    assert torch.pjrt.memory_allocated() - allocated == b.nbytes
    c = b @ b  # 512^3 multiply-adds: the main client, reading b (a small program's result)
    c_cpu = b_cpu @ b_cpu
    torch.testing.assert_close(c.cpu(), c_cpu, rtol=1e-4, atol=1e-2)
    torch.pjrt.synchronize()
    before = counters()["DonatedBuffers"]
    allocated = torch.pjrt.memory_allocated()
    c.relu_()  # small and in place: c's memory, the other client's, is donated through a view
    c_cpu.relu_()
    torch.pjrt.synchronize()
    assert counters()["DonatedBuffers"] == before + 1
    assert torch.pjrt.memory_allocated() == allocated  # the new c replaced the old one
    d = c @ a
    torch.testing.assert_close(c.cpu(), c_cpu, rtol=1e-4, atol=1e-2)
    torch.testing.assert_close(d.cpu(), c_cpu @ a_cpu, rtol=1e-4, atol=1e-1)
    n = counters()
    assert 0 < n["SmallProgramExecutions"] < n["Executions"]
    assert n["FallbackOps"] == 0


def test_training_on_the_small_client_matches_cpu_and_donates_its_own_buffers():
    needs_second_client()
    torch.manual_seed(0)
    model_cpu = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
    model.load_state_dict(model_cpu.state_dict())
    model.to(DEVICE)  # the parameters start on the main client
    x_cpu, y_cpu = torch.randn(8, 16), torch.randn(8, 4)
    x, y = x_cpu.to(DEVICE), y_cpu.to(DEVICE)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (model_cpu, model)]
    torch.pjrt.metrics.reset()
    for step in range(5):
        for m, opt, xx, yy in ((model_cpu, opts[0], x_cpu, y_cpu), (model, opts[1], x, y)):
            opt.zero_grad()
            torch.nn.functional.mse_loss(m(xx), yy).backward()
            opt.step()
        if step == 1:
            torch.pjrt.metrics.reset()
    for p_cpu, p in zip(model_cpu.parameters(), model.parameters()):
        torch.testing.assert_close(p.cpu(), p_cpu, rtol=1e-5, atol=1e-6)
    n = counters()
    # From the third step on every parameter is a small program's result: updated in place.
    assert n["SmallProgramExecutions"] == n["Executions"] > 0
    assert n["DonatedBuffers"] >= 4


SMALL_AND_LARGE = """
    import ctypes, os, torch
    libc = ctypes.CDLL(None)
    libc.getenv.restype = ctypes.c_char_p
    x = torch.randn(128, 128, device="pjrt")
    (x * 2).sum().item()  # ~16k elements: small
    small = torch.pjrt.metrics.counters()["SmallProgramExecutions"]
    (x @ x).sum().item()  # 128^3 multiply-adds: large under a 1M bound
    counters = torch.pjrt.metrics.counters()
    names = [open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")]
    nproc = libc.getenv(b"PJRT_NPROC")
    print(small, counters["SmallProgramExecutions"], counters["Executions"], names.count("tf_XLAEigen"),
          nproc.decode() if nproc else "-", os.environ.get("PJRT_NPROC", "-"))
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one CPU: there is no second client")
def test_the_bound_routes_programs_and_the_second_pool_has_one_thread():
    env = {"TORCH_PJRT_SMALL_PROGRAM_WORK": "1000000", "TORCH_PJRT_CPU_DEVICE_COUNT": "1", "PJRT_NPROC": "2"}
    small, small_total, executions, eigen_threads, c_env, py_env = run_python(SMALL_AND_LARGE, env=env).stdout.split()
    assert (int(small), int(small_total)) == (1, 1) and int(executions) >= 2
    assert int(eigen_threads) == 2 + 1  # the main pool's two and the small programs' one
    # PJRT_NPROC=1 was set only while the second client started.
    assert c_env == py_env == "2"
    # 0 turns it off: one client, one pool.
    env["TORCH_PJRT_SMALL_PROGRAM_WORK"] = "0"
    small, small_total, executions, eigen_threads, c_env, _ = run_python(SMALL_AND_LARGE, env=env).stdout.split()
    assert (int(small), int(small_total), int(eigen_threads), c_env) == (0, 0, 2, "2")


TRAINING_STEP_LAUNCHES = """
    import torch
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 4)).to("pjrt")
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 64, device="pjrt"), torch.randn(32, 4, device="pjrt")
    def step():
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()
    for _ in range(3):
        step()
    torch.pjrt.synchronize()
    torch.pjrt.metrics.reset()
    step()
    torch.pjrt.synchronize()
    training = torch.pjrt.metrics.counters()
    with torch.no_grad():
        model(x).sum().item()  # the same forward, read: not a training step's launch
    inference = torch.pjrt.metrics.counters()
    print(training["SmallProgramExecutions"], training["Executions"],
          inference["SmallProgramExecutions"] - training["SmallProgramExecutions"],
          inference["Executions"] - training["Executions"])
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one CPU: there is no second client")
def test_a_training_steps_fine_grained_launches_run_on_the_small_client_whatever_their_size():
    # Every program here is above the size bound; the per-op bound alone decides.
    env = {"TORCH_PJRT_SMALL_PROGRAM_WORK": "1000", "TORCH_PJRT_SMALL_PROGRAM_WORK_PER_OP": "1000000000",
           "TORCH_PJRT_CPU_DEVICE_COUNT": "1", "PJRT_NPROC": "2"}
    small, executions, read_small, read_executions = map(int, run_python(TRAINING_STEP_LAUNCHES, env=env).stdout.split())
    assert small == executions >= 2  # the step's launches (forward and backward, updates)
    assert (read_small, read_executions) == (0, 1)  # a read waits: it keeps both threads
    env["TORCH_PJRT_SMALL_PROGRAM_WORK_PER_OP"] = "0"
    small, executions, _, _ = map(int, run_python(TRAINING_STEP_LAUNCHES, env=env).stdout.split())
    assert small == 0 and executions >= 2
