"""The benchmarks' measuring protocol (bench/models.py, bench/run.py): bench/run.py runs every
backend in several fresh processes, interleaved with the other backends', and keeps the best
rate; bench/models.py times compiles and peak RSS in a cold-cache process per backend and the
steady state in lock-step rounds, the backends' processes taking turns. No model runs here: the
child processes are stood in for."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))
import models  # noqa: E402  (bench/models.py)
import run  # noqa: E402  (bench/run.py)


def fake_children(monkeypatch, cold, lockstep):
    """Stands in for the child processes: a cold-cache child of (backend) returns the next of
    `cold[backend]` (None: it failed), a lock-step round the next of `lockstep[backend]` for each
    backend it is given; records ("cold", backend, cache) and ("lockstep", backends) in the list
    returned."""
    calls, cold_left, round_left = [], {b: list(r) for b, r in cold.items()}, {b: list(r) for b, r in lockstep.items()}

    def child(backend, name, mode, steps, cache):
        calls.append(("cold", backend, cache))
        rate = cold_left[backend].pop(0)
        if rate is None:
            return {"error": "boom"}
        return {"steps_per_s": rate, "first_steps_s": [9.0, 0.01], "peak_rss_mb": 100 + rate}

    def round_(backends, name, mode, caches, blocks):
        calls.append(("lockstep", list(backends), dict(caches)))
        return {b: {"steps_per_s": round_left[b].pop(0), "first_steps_s": [0.5, 0.01], "peak_rss_mb": 1.0}
                for b in backends}
    monkeypatch.setattr(models, "_child", child)
    monkeypatch.setattr(models, "_lockstep", round_)
    return calls


def test_models_cold_processes_then_lockstep_rounds_keep_the_best_rate(monkeypatch):
    calls = fake_children(monkeypatch, {"pjrt": [10.0], "eager": [25.0]},
                          {"pjrt": [30.0, 20.0], "eager": [15.0, 5.0]})
    results = models.run_job("gpt2", "train", ["pjrt", "eager"], steps=24, rounds=3)
    assert [c[:2] for c in calls] == [("cold", "pjrt"), ("cold", "eager"), ("lockstep", ["pjrt", "eager"]),
                                      ("lockstep", ["pjrt", "eager"])]
    pjrt, eager = results["pjrt"], results["eager"]
    # Rates come from the lock-step rounds, where the backends ran side by side; the cold
    # processes' own rates are kept apart.
    assert pjrt["steps_per_s"] == 30.0 and pjrt["steps_per_s_runs"] == [30.0, 20.0]
    assert eager["steps_per_s"] == 15.0 and eager["cold_steps_per_s"] == 25.0
    # Compile times and peak RSS are the cold process's (empty caches); the cached first step is
    # pjrt's first lock-step process, on the cache the cold one filled.
    assert pjrt["first_steps_s"] == [9.0, 0.01] and pjrt["peak_rss_mb"] == 110.0
    assert pjrt["cached_first_step_s"] == 0.5 and "cached_first_step_s" not in eager
    cold_caches = {b: c for kind, b, c in calls[:2]}
    assert cold_caches["pjrt"] != cold_caches["eager"] and calls[2][2] == cold_caches


def test_models_a_failed_cold_process_is_reported_and_left_out_of_the_rounds(monkeypatch):
    calls = fake_children(monkeypatch, {"pjrt": [None], "eager": [7.0]}, {"eager": [8.0]})
    results = models.run_job("bert", "train", ["pjrt", "eager"], steps=24, rounds=2)
    assert results["pjrt"] == {"error": "boom"}
    assert calls[-1][:2] == ("lockstep", ["eager"])
    assert results["eager"]["steps_per_s"] == 8.0


def test_models_lockstep_children_take_turns(monkeypatch, tmp_path):
    """_lockstep against stand-in serving children: warm-up one after another, then blocks in
    turn with the order reversed every other block, and a median step per backend."""
    log = []

    class Child:
        def __init__(self, backend, name, mode, cache):
            self.backend = backend
            log.append(("start", backend))

        def reply(self):
            return {"ready": True, "first_steps_s": [0.3, 0.01], "step_s": 0.1 if self.backend == "pjrt" else 0.2}

        def ask(self, command):
            log.append((command, self.backend))
            if command == "done":
                return {"peak_rss_mb": 1.0}
            step = 0.1 if self.backend == "pjrt" else 0.2
            return {"times": [step] * int(command.split()[1])}

        def close(self):
            log.append(("close", self.backend))
    monkeypatch.setattr(models, "_ServingChild", Child)
    out = models._lockstep(["pjrt", "eager"], "gpt2", "train", {"pjrt": "a", "eager": "b"}, blocks=3)
    per_block = {b: round(models.BLOCK_SECONDS / s) for b, s in (("pjrt", 0.1), ("eager", 0.2))}
    runs = [f"run {per_block['pjrt']}", f"run {per_block['eager']}"]
    assert log[:2] == [("start", "pjrt"), ("start", "eager")]
    assert log[2:8] == [(runs[0], "pjrt"), (runs[1], "eager"), (runs[1], "eager"), (runs[0], "pjrt"),
                        (runs[0], "pjrt"), (runs[1], "eager")]
    assert out["pjrt"]["steps_per_s"] == 10.0 and out["eager"]["steps_per_s"] == 5.0
    assert out["pjrt"]["first_steps_s"] == [0.3, 0.01] and out["eager"]["peak_rss_mb"] == 1.0


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
