"""The benchmarks' measuring protocol (bench/models.py, bench/run.py, bench/lockstep.py): both
time compiles and peak RSS in a cold-cache process per backend and the steady state in lock-step
rounds, the backends' processes taking turns. No model runs here: the child processes are stood
in for."""
import io
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))
import lockstep  # noqa: E402  (bench/lockstep.py)
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


class StandInChild:
    """A serving child whose steps take 0.1 s (pjrt) or 0.2 s (others); logs what it is asked."""

    def __init__(self, name, log):
        self.name, self.log = name, log
        self.step = 0.1 if name == "pjrt" else 0.2
        log.append(("start", name))

    def reply(self):
        return {"ready": True, "first_steps_s": [0.3, 0.01], "step_s": self.step}

    def ask(self, command):
        self.log.append((command, self.name))
        if command == "done":
            return {"peak_rss_mb": 1.0}
        return {"times": [self.step] * int(command.split()[1])}

    def close(self):
        self.log.append(("close", self.name))


def test_lockstep_children_take_turns():
    """run_round: warm-up one after another, then blocks in turn with the order reversed every
    other block, and a median step per child."""
    log = []
    out = lockstep.run_round(lambda name: StandInChild(name, log), ["pjrt", "eager"], blocks=3)
    per_block = {b: round(lockstep.BLOCK_SECONDS / s) for b, s in (("pjrt", 0.1), ("eager", 0.2))}
    runs = [f"run {per_block['pjrt']}", f"run {per_block['eager']}"]
    assert log[:2] == [("start", "pjrt"), ("start", "eager")]
    assert log[2:8] == [(runs[0], "pjrt"), (runs[1], "eager"), (runs[1], "eager"), (runs[0], "pjrt"),
                        (runs[0], "pjrt"), (runs[1], "eager")]
    assert out["pjrt"]["step_s"] == 0.1 and out["eager"]["step_s"] == 0.2
    assert out["pjrt"]["first_steps_s"] == [0.3, 0.01] and out["eager"]["peak_rss_mb"] == 1.0


def test_lockstep_a_child_that_fails_to_start_is_reported_and_the_others_run():
    class Broken(StandInChild):
        def reply(self):
            return {"error": "ImportError: boom"}
    log = []
    out = lockstep.run_round(lambda name: (Broken if name == "pjrt" else StandInChild)(name, log),
                             ["pjrt", "eager"], blocks=2)
    assert out["pjrt"] == {"error": "ImportError: boom"}
    assert out["eager"]["step_s"] == 0.2 and ("close", "pjrt") in log


def test_lockstep_serve_answers_blocks_then_reports_the_median(monkeypatch, capsys):
    """The child's side: ready after the warm-up, one line of times per block, then the report of
    the median step over all blocks."""
    calls = []
    monkeypatch.setattr(sys, "stdin", io.StringIO("run 3\nrun 2\ndone\n"))
    lockstep.serve(lambda: calls.append(1), 2, lambda median: {"median_is_number": median >= 0})
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines[0]["ready"] and len(lines[0]["first_steps_s"]) == 2
    assert [len(line["times"]) for line in lines[1:3]] == [3, 2]
    assert lines[3] == {"median_is_number": True} and len(calls) == 2 + 3 + 2


def test_models_lockstep_gives_steps_per_second(monkeypatch):
    log = []
    monkeypatch.setattr(lockstep, "ServingChild", lambda cmd, env: StandInChild(cmd[3], log))
    out = models._lockstep(["pjrt", "eager"], "gpt2", "train", {"pjrt": "a", "eager": "b"}, blocks=3)
    assert out["pjrt"]["steps_per_s"] == 10.0 and out["eager"]["steps_per_s"] == 5.0
    assert "step_s" not in out["pjrt"]


def test_run_rates_come_from_the_lockstep_round_and_the_rest_from_the_cold_process(monkeypatch, tmp_path):
    cold = {"pjrt": {"steps_per_s": 30.0, "host_ms_per_step": 2.0, "first_step_s": 0.5, "peak_rss_mb": 500.0},
            "eager": {"steps_per_s": 20.0, "host_ms_per_step": 9.0, "first_step_s": 0.1, "peak_rss_mb": 400.0},
            "inductor": {"error": "boom"}}
    calls = []

    def workload(name, backend, cache):
        calls.append(("cold", backend, cache))
        return dict(cold[backend])

    def round_(name, backends, caches):
        calls.append(("lockstep", list(backends), dict(caches)))
        return {"pjrt": {"steps_per_s": 25.0, "peak_rss_mb": 1.0, "first_steps_s": [0.1, 0.01]},
                "eager": {"error": "killed"}}
    monkeypatch.setattr(run, "run_workload", workload)
    monkeypatch.setattr(run, "lockstep_rates", round_)
    results = run.run_all("mlp", ["pjrt", "eager", "inductor"], str(tmp_path))
    # The round runs the backends whose cold process succeeded, on the caches those filled.
    assert calls[3][:2] == ("lockstep", ["pjrt", "eager"])
    assert {b: calls[3][2][b] for b in calls[3][1]} == {b: c for _, b, c in calls[:2]} and calls[0][2] != calls[1][2]
    assert results["pjrt"] == {"steps_per_s": 25.0, "host_ms_per_step": 2.0, "first_step_s": 0.5,
                               "peak_rss_mb": 500.0, "cold": {"steps_per_s": 30.0}}
    assert results["eager"]["steps_per_s"] == 20.0 and results["eager"]["lockstep_error"] == "killed"
    assert results["inductor"] == {"error": "boom"}


def test_run_lockstep_rates_are_metrics_the_tables_show():
    shown = {row[2] for row in run.ROWS}
    assert set(run.LOCKSTEP_RATES) <= shown


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
