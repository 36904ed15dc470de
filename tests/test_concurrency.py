"""Many Python threads using the device at once: no hang, no crash, correct values.

The locking order these tests hold the code to is written down in docs/design.md ("Concurrency"):
Python is never called with a runtime or graph lock held, and no lock holder waits for the GIL.
Each run is a fresh process, so first-use races (plugin start, kernel caches) are exercised too.
"""
from helpers import run_python

STRESS = """
import os, random, sys, threading, time
import torch

THREADS, ITERATIONS = 8, int(sys.argv[1]) if len(sys.argv) > 1 else 60
errors = []
start = threading.Barrier(THREADS)

def check(cond, what):
    if not cond:
        raise AssertionError(what)

def worker(k):
    rng = random.Random(k)
    try:
        start.wait()
        x = torch.full((4,), float(k), device="pjrt")  # first tensors are created concurrently
        for it in range(ITERATIONS):
            choice = rng.randrange(8)
            if choice == 0:
                y = x + it
                check(y.cpu().tolist() == [float(k + it)] * 4, f"thread {k}: x + {it}")
            elif choice == 1:
                torch.pjrt.is_initialized(); torch.pjrt.device_count(); torch.pjrt.plugin()
            elif choice == 2:
                torch.pjrt.metrics.counters(); torch.pjrt.metrics.report()
            elif choice == 3:
                torch.pjrt.set_log_compiles(False); torch.pjrt.set_cache_dir(torch.pjrt.cache_dir())
                torch.pjrt.set_max_pending_nodes(torch.pjrt.max_pending_nodes())
            elif choice == 4:
                m = torch.arange(12.0, device="pjrt").reshape(3, 4) * k
                want = torch.arange(12.0).reshape(3, 4) * k
                check(torch.equal((m @ m.t()).cpu(), want @ want.t()), f"thread {k}: matmul")
            elif choice == 5:
                torch.pjrt.synchronize()
            elif choice == 6:
                z = torch.randn(64, 64, device="pjrt")
                del z  # storages freed on any thread
            else:
                dtype = torch.float64 if rng.random() < 0.5 else torch.float32
                v = torch.ones(3, device="pjrt", dtype=dtype).mul_(k).add_(it)
                check(v.cpu().tolist() == [float(k + it)] * 3, f"thread {k}: in place {dtype}")
    except Exception as e:
        errors.append(f"thread {k}: {type(e).__name__}: {e}")

threads = [threading.Thread(target=worker, args=(k,)) for k in range(THREADS)]
for t in threads:
    t.start()
deadline = time.time() + 150
for t in threads:
    t.join(max(0.0, deadline - time.time()))
hung = [t for t in threads if t.is_alive()]
print("HUNG" if hung else "DONE", len(errors))
for e in errors:
    print(e)
sys.stdout.flush()
os._exit(0)
"""


def test_eight_threads_create_trace_sync_and_query_at_once():
    for run in range(3):
        out = run_python(STRESS, timeout=240).stdout
        assert out.startswith("DONE 0"), out


def test_threads_share_one_trace_without_mixing_values():
    out = run_python("""
        import threading, torch
        results = {}
        base = torch.arange(1000.0, device="pjrt")
        def worker(k):
            acc = base.clone()
            for i in range(50):
                acc = acc * 1.0 + k  # traced ops interleave with other threads' syncs
            results[k] = acc.sum().item()
        threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
        [t.start() for t in threads]
        [t.join(120) for t in threads]
        expected = {k: float(sum(range(1000)) + 1000 * 50 * k) for k in range(8)}
        print(results == expected)
    """, timeout=240).stdout
    assert out.strip() == "True"
