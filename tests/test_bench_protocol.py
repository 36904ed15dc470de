"""The benchmarks' measuring protocol (bench/models.py, bench/run.py): every backend runs in
several fresh processes, interleaved with the other backends', and a rate is the best of them
while compile times and peak RSS stay the first process's. No model runs here: the child
processes are stood in for."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))
import models  # noqa: E402  (bench/models.py)
import run  # noqa: E402  (bench/run.py)


def fake_children(monkeypatch, rates):
    """Stands in for the child processes: each call of (backend) returns the next of `rates[backend]`
    and records (backend, cache) in the returned list of calls."""
    calls, left = [], {b: list(r) for b, r in rates.items()}

    def child(backend, name, mode, steps, cache):
        calls.append((backend, cache))
        first = not any(b == backend for b, _ in calls[:-1])
        rate = left[backend].pop(0)
        if rate is None:
            return {"error": "boom"}
        return {"steps_per_s": rate, "first_steps_s": [9.0 if first else 0.5, 0.01], "peak_rss_mb": 100 + rate}
    monkeypatch.setattr(models, "_child", child)
    return calls


def test_models_rounds_interleave_backends_and_keep_the_best_rate(monkeypatch):
    calls = fake_children(monkeypatch, {"pjrt": [10.0, 30.0, 20.0], "eager": [25.0, 15.0, 5.0]})
    results = models.run_job("gpt2", "train", ["pjrt", "eager"], steps=24, rounds=3)
    assert [b for b, _ in calls] == ["pjrt", "eager"] * 3  # round by round, not backend by backend
    pjrt, eager = results["pjrt"], results["eager"]
    assert pjrt["steps_per_s"] == 30.0 and pjrt["steps_per_s_runs"] == [10.0, 30.0, 20.0]
    assert eager["steps_per_s"] == 25.0
    # Compile times and peak RSS are the first process's (empty caches); the cached first step is
    # pjrt's second process, on the cache the first filled.
    assert pjrt["first_steps_s"] == [9.0, 0.01] and pjrt["peak_rss_mb"] == 110.0
    assert pjrt["cached_first_step_s"] == 0.5 and "cached_first_step_s" not in eager
    caches = {b: {c for cb, c in calls if cb == b} for b in ("pjrt", "eager")}
    assert len(caches["pjrt"]) == 1 and caches["pjrt"] != caches["eager"]


def test_models_a_failed_first_process_is_reported_not_retried(monkeypatch):
    calls = fake_children(monkeypatch, {"pjrt": [None], "eager": [7.0, 8.0]})
    results = models.run_job("bert", "train", ["pjrt", "eager"], steps=24, rounds=2)
    assert results["pjrt"] == {"error": "boom"}
    assert [b for b, _ in calls] == ["pjrt", "eager", "eager"]
    assert results["eager"]["steps_per_s"] == 8.0


def test_run_keeps_the_better_rate_and_time_and_the_first_compile_and_memory():
    first = {"steps_per_s": 30.0, "host_ms_per_step": 2.0, "us_per_op_trace": 2.5, "gflops": 100.0,
             "first_step_s": 0.5, "peak_rss_mb": 500.0, "executions_per_step": 2.0}
    second = {"steps_per_s": 33.0, "host_ms_per_step": 2.4, "us_per_op_trace": 2.1, "gflops": 90.0,
              "first_step_s": 0.4, "peak_rss_mb": 450.0, "executions_per_step": 3.0}
    run.keep_better_rates(first, second)
    assert first == {"steps_per_s": 33.0, "host_ms_per_step": 2.0, "us_per_op_trace": 2.1, "gflops": 100.0,
                     "first_step_s": 0.5, "peak_rss_mb": 500.0, "executions_per_step": 2.0}


@pytest.mark.parametrize("key", sorted(run.BEST_OF_TWO))
def test_run_best_of_two_covers_only_metrics_the_tables_show(key):
    assert key in {row[2] for row in run.ROWS}


def test_threads_configurations_interleave_and_keep_the_best_time(monkeypatch):
    import threads  # bench/threads.py

    calls, times = [], iter([3.0, 2.0, 2.5, 4.0, 5.0, 2.0, 3.0, 1.5, 3.5, 6.0])

    def child(name, mode, device, threads_, seconds):
        calls.append((device, threads_))
        return {"step_s": next(times)}
    monkeypatch.setattr(threads, "_child", child)
    best = threads.measure("gpt2", "train", rounds=2, seconds=1.0)
    assert calls == threads.CONFIGS * 2  # round by round: every configuration once per round
    assert best == {("pjrt", "0"): 2.0, ("pjrt", "1"): 2.0, ("pjrt", "xla1"): 1.5, ("cpu", "0"): 3.5,
                    ("cpu", "1"): 5.0}
    row = threads.row("gpt2", "train", best)
    # pjrt's default against one thread and against PJRT_NPROC=1; eager's default against pjrt's;
    # pjrt's best against eager's best.
    assert row.endswith("| 1.00 | 1.33 | 1.75 | 2.33 |"), row
