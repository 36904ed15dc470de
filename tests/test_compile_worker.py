"""The compile worker (capability `compile_worker`, csrc/runtime/compile_worker.h): the CPU plugin
compiles portable programs in a second process and loads the serialized executables here, so
that the compiler's allocations never fragment this process's heap. Results must equal eager's,
compiler errors must read as when compiling here, and a lost worker must never lose a graph."""
import os
import subprocess
import sys
import textwrap
import time

import pytest
import torch
import torch.nn.functional as F

from torch_pjrt import _C


def started_worker_pid():
    torch.ones(1, device="pjrt").cpu()  # the client (and with it the worker) is started
    deadline = time.monotonic() + 60
    while True:
        status = _C._compile_worker_status()
        assert status["pid"] > 0, "the CPU plugin compiles in a worker"
        if status["started"]:
            return status["pid"]
        assert time.monotonic() < deadline, "the compile worker did not start in 60 s"
        time.sleep(0.02)


def fresh_size():
    """A dimension no earlier run compiled for, so the graph misses the persistent cache too."""
    return 1000 + (os.getpid() * 7919 + time.monotonic_ns()) % 9000


def counter(name):
    return torch.pjrt.metrics.counter(name)


def test_cpu_plugin_declares_compile_worker():
    assert torch.pjrt.capabilities()["compile_worker"] is True


def test_graphs_compile_in_the_worker_and_equal_eager():
    started_worker_pid()
    x = torch.randn(fresh_size(), 3)
    compiled, in_worker = counter("GraphsCompiled"), counter("CompilesInWorker")
    got = (torch.sin(x.to("pjrt")) * 2 + x.to("pjrt").exp()).sum(0).cpu()
    assert counter("GraphsCompiled") == compiled + 1
    assert counter("CompilesInWorker") == in_worker + 1
    torch.testing.assert_close(got, (torch.sin(x) * 2 + x.exp()).sum(0))


def test_host_kernel_programs_compile_in_the_worker():
    # The worker registers stand-ins for the host kernels' custom-call targets; this process's
    # own handlers run them.
    started_worker_pid()
    x, w = torch.randn(2, 3, 9, fresh_size() % 50 + 9), torch.randn(4, 3, 3, 3)
    in_worker = counter("CompilesInWorker")
    got = F.conv2d(x.to("pjrt"), w.to("pjrt"), padding=1).relu().cpu()
    assert counter("CompilesInWorker") == in_worker + 1
    torch.testing.assert_close(got, F.conv2d(x, w, padding=1).relu())


def test_compiler_errors_from_the_worker_read_as_here():
    started_worker_pid()
    in_worker = counter("CompilesInWorker")
    with pytest.raises(RuntimeError, match=r"failed to compile a graph: -:1:\d+: error: .*frobnicate"):
        _C._compile_stablehlo(
            "module { func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> { "
            "%0 = stablehlo.frobnicate %a : tensor<2xf32>\n return %0 : tensor<2xf32> } }")
    assert _C._compile_worker_status()["started"], "a bad program does not end the worker"
    assert counter("CompilesInWorker") == in_worker


def run_script(body, **env):
    code = textwrap.dedent("""
        import os, signal, time, warnings
        import torch
        from torch_pjrt import _C
        import sys; sys.path.insert(0, {test_dir!r})
        from test_compile_worker import started_worker_pid, fresh_size, counter
        """).format(test_dir=os.path.dirname(__file__)) + textwrap.dedent(body)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_the_first_programs_wait_for_the_starting_worker():
    """A process's first programs are small and come while the worker is still starting; they wait
    for it (~20 ms) instead of compiling here, which would page ~30 MB of the plugin's compiler
    code into this process for good (docs/design.md, "Compiling in a worker process")."""
    out = run_script("""
        got = (torch.ones(2, device="pjrt") + 1).cpu()
        assert got.tolist() == [2.0, 2.0]
        print("compiles", counter("GraphsCompiled"), counter("CompilesInWorker"))
        """)
    compiled, in_worker = (int(v) for v in out.split("compiles")[1].split())
    assert compiled >= 1 and in_worker == compiled, out


def test_a_lost_worker_is_replaced_by_compiling_here():
    out = run_script("""
        os.kill(started_worker_pid(), signal.SIGKILL)
        x = torch.randn(fresh_size(), 2)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = (x.to("pjrt").cos() + 1).cpu()
        torch.testing.assert_close(got, x.cos() + 1)
        print("warned", any("compile worker died" in str(w.message) for w in caught))
        print("status", _C._compile_worker_status()["pid"], counter("CompilesInWorker"))
        """)
    assert "warned True" in out
    assert "status -1 0" in out


def test_a_worker_that_never_starts_is_replaced_by_compiling_here():
    out = run_script("""
        from torch_pjrt.backends import registry
        registry._WORKER_CODE = "import os; os._exit(3)"  # exits before its start reply
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            x = torch.ones(1, device="pjrt")  # starts the client and the worker
            pid, deadline = _C._compile_worker_status()["pid"], time.monotonic() + 60
            while open(f"/proc/{pid}/stat").read().split(")")[1].split()[0] != "Z":  # exited, unreaped
                assert time.monotonic() < deadline
                time.sleep(0.01)
            y = torch.randn(fresh_size(), 2)
            got = (y.to("pjrt") * 2 + x).cpu()
        torch.testing.assert_close(got, y * 2 + 1)
        print("warned", any("exited before it started" in str(w.message) for w in caught))
        print("status", _C._compile_worker_status()["pid"], counter("CompilesInWorker"))
        """)
    assert "warned True" in out
    assert "status -1 0" in out


def test_a_worker_whose_start_hangs_is_given_up_and_ended():
    """A worker that neither reports its start nor exits (a plugin whose client start blocks) is
    given up after TORCH_PJRT_COMPILE_WORKER_START_TIMEOUT: the waiting compile runs here, with a
    warning, and the worker process is ended. Without the timeout the first op hangs."""
    out = run_script("""
        from torch_pjrt.backends import registry
        registry._WORKER_CODE = "import time; time.sleep(600)"  # never replies, never exits
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            x = torch.ones(1, device="pjrt")  # starts the client and the worker
            pid = _C._compile_worker_status()["pid"]
            t0 = time.monotonic()
            got = (x * 2).cpu()
            waited = time.monotonic() - t0
        assert got.tolist() == [2.0]
        print("warned", any("did not start within 1.5 s" in str(w.message) for w in caught))
        print("waited", 1.0 < waited < 60)
        print("worker gone", not os.path.exists(f"/proc/{pid}"))
        print("status", _C._compile_worker_status()["pid"], counter("CompilesInWorker"))
        """, TORCH_PJRT_COMPILE_WORKER_START_TIMEOUT="1.5")
    assert "warned True" in out
    assert "waited True" in out
    assert "worker gone True" in out
    assert "status -1 0" in out


def test_worker_can_be_turned_off():
    out = run_script("""
        x = torch.randn(fresh_size(), 2)
        torch.testing.assert_close((x.to("pjrt") * 3).cpu(), x * 3)
        print("status", _C._compile_worker_status()["pid"], counter("CompilesInWorker"), counter("GraphsCompiled"))
        """, TORCH_PJRT_COMPILE_WORKER="0")
    assert "status -1 0 1" in out


def test_worker_ends_with_its_process():
    out = run_script("print('pid', started_worker_pid())")
    pid = int(out.split("pid")[1].split()[0])
    deadline = time.monotonic() + 30
    while os.path.exists(f"/proc/{pid}"):
        with open(f"/proc/{pid}/stat") as f:
            if f.read().split(")")[1].split()[0] == "Z":
                break  # ended; whoever adopted it has yet to reap it
        assert time.monotonic() < deadline, "the compile worker outlived its process"
        time.sleep(0.05)


def test_worker_compiled_programs_load_from_the_disk_cache(tmp_path):
    # The disk cache stores the worker's own bytes: the CPU plugin re-serializes a loaded
    # executable without its code, which failed at the next process's first run.
    script = """
        started_worker_pid()
        x = torch.arange(4096.0).reshape(64, 64) / 4096
        torch.testing.assert_close((x.to("pjrt").tanh() @ x.to("pjrt")).cpu(), x.tanh() @ x)
        print("counts", counter("CompilesInWorker"), counter("GraphsCompiled"))
        """
    cache = str(tmp_path / "cache")
    # started_worker_pid's `ones` and the product, both in the worker.
    assert "counts 2 2" in run_script(script, TORCH_PJRT_CACHE_DIR=cache)
    assert "counts 0 0" in run_script(script, TORCH_PJRT_CACHE_DIR=cache)  # all from the disk


def test_programs_are_compiled_for_the_pool_that_runs_them(tmp_path):
    # XLA:CPU splits a program's loops for the pool of the client that compiles it
    # (outer_dimension_partitions); a program split for the main pool ran 3-5x slower on the
    # small programs' one-thread client. The worker compiles each program on a client like the
    # one that runs it (docs/design.md, "Compiling for the client that runs the program").
    dump = tmp_path / "dump"
    script = """
        started_worker_pid()
        small, large = torch.randn(512, 1000), torch.randn(2048, 2048)
        torch.testing.assert_close((small.to("pjrt").exp() * 2).cpu(), small.exp() * 2)
        torch.testing.assert_close((large.to("pjrt").exp() * 2).cpu(), large.exp() * 2)
        print("counts", counter("CompilesInWorker"), counter("SmallProgramExecutions"))
        """
    # One device: with several (the suite's four) XLA splits the one-thread client's loops too.
    out = run_script(script, XLA_FLAGS=f"--xla_dump_to={dump}", PJRT_NPROC="2", TORCH_PJRT_CPU_DEVICE_COUNT="1",
                     TORCH_PJRT_SMALL_PROGRAM_WORK="10000000", TORCH_PJRT_CACHE_DIR=str(tmp_path / "cache"))
    # `ones`, the small and the large program compiled in the worker; `ones` and the small one ran
    # on one thread.
    assert "counts 3 2" in out
    optimized = {}
    for path in dump.glob("*cpu_after_optimizations.txt"):
        text = path.read_text()
        for shape in ("f32[512,1000]", "f32[2048,2048]"):
            if shape in text:
                optimized[shape] = text
    assert set(optimized) == {"f32[512,1000]", "f32[2048,2048]"}, sorted(p.name for p in dump.iterdir())
    assert "outer_dimension_partitions" in optimized["f32[2048,2048]"], "the main pool's program is split"
    assert "outer_dimension_partitions" not in optimized["f32[512,1000]"], "the one-thread client's is not"
