"""The OpInfo sweep's harness (opcheck.py, sweep.py): a crash or a hang in a worker is recorded as the
op's result and the next request still runs, only the crashing (kind, dtype) part is marked crashed,
mismatch messages, and the sweep command end to end with its totals computed from its results."""

import json
import os
import subprocess
import sys

import pytest

import opcheck
import sweep

HERE = os.path.dirname(os.path.abspath(__file__))
LIMITS = {"forward": {"float32": 2, "*": 1}, "extremal": 1, "inplace": 1, "out": 1, "grad": 1}


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    w = opcheck.Worker(str(tmp_path_factory.mktemp("opcheck")))
    yield w
    w.close()


def test_crash_is_recorded_and_the_worker_restarts(worker):
    req = {"op": "abs", "dtypes": ["float32"], "kinds": ["forward"], "limits": LIMITS}
    res = opcheck.run_isolated(worker, dict(req, selftest="abort"), timeout=120)
    assert [it["status"] for it in res["items"]] == ["crash"]
    assert "SIGABRT" in res["items"][0]["error"]
    res = opcheck.run_isolated(worker, req, timeout=120)  # a fresh worker answers the next request
    assert {it["status"] for it in res["items"]} == {"pass"}
    assert res["lowered"].get("abs")


class CrashingWorker:
    """Dies on every request that includes int32 (no subprocess: this tests the splitting)."""

    def __init__(self):
        self.requests = []

    def request(self, req, timeout):
        self.requests.append((req["dtypes"], req["kinds"]))
        if "int32" in req["dtypes"]:
            raise opcheck.WorkerDied("killed by SIGABRT")
        return {"op": req["op"], "lowered": {"abs": 1},
                "items": [{"kind": k, "dtype": d, "sample": 0, "status": "pass"}
                          for k, d in opcheck.plan(opcheck.all_ops()[req["op"]], req["dtypes"], req["kinds"])]}


def test_crash_in_one_part_spares_the_others():
    # The whole request crashes, so each (kind, dtype) part is rerun alone: only int32's crash.
    w = CrashingWorker()
    req = {"op": "abs", "dtypes": ["float32", "int32"], "kinds": ["forward", "out"], "limits": LIMITS}
    res = opcheck.run_isolated(w, req)
    assert len(w.requests) == 5 and res["crashed"] == "killed by SIGABRT"
    assert sorted((it["kind"], it["dtype"], it["status"]) for it in res["items"]) == [
        ("forward", "float32", "pass"), ("forward", "int32", "crash"), ("out", "float32", "pass"),
        ("out", "int32", "crash")]
    assert res["lowered"] == {"abs": 2}


def test_hang_times_out(worker):
    req = {"op": "abs", "dtypes": ["float32"], "kinds": ["forward"], "limits": LIMITS, "selftest": "hang"}
    res = opcheck.run_isolated(worker, req, timeout=1)
    assert res["items"][0]["status"] == "crash" and "timed out" in res["items"][0]["error"]


def test_mismatch_messages():
    import torch
    a, e = torch.tensor([1.0, float("nan")]), torch.tensor([1.0, 2.0])
    assert "NaN pattern" in opcheck.mismatch(a, e, opcheck.FORWARD_TOL)
    assert opcheck.mismatch(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.00001]), opcheck.FORWARD_TOL) is None
    assert "values differ" in opcheck.mismatch(torch.tensor([1, 2]), torch.tensor([1, 3]), opcheck.FORWARD_TOL)
    assert "dtype" in opcheck.mismatch(torch.tensor([1.0]), torch.tensor([1.0], dtype=torch.float64),
                                       opcheck.FORWARD_TOL)
    # float8: assert_close takes no tolerance, the element-wise comparison decides
    f8 = torch.tensor([1.0, float("nan"), -448.0]).to(torch.float8_e4m3fn)
    assert opcheck.mismatch(f8, f8.clone(), opcheck.FORWARD_TOL) is None
    assert opcheck.mismatch((torch.ones(2), 3), (torch.ones(2), 3), opcheck.FORWARD_TOL) is None


def test_failure_classes():
    c = lambda err, st="fails": {"status": st, "error": err}
    assert sweep.failure_class(c("mismatch: 1 of 4 values differ")) == "wrong result"
    assert sweep.failure_class(c("CPU raised RuntimeError: x, pjrt accepted the sample")) == "CPU raises, pjrt does not"
    assert sweep.failure_class(c("CPU raised IndexError, pjrt RuntimeError: y")) == "different exception type"
    assert sweep.failure_class(c("RuntimeError: failed to compile")) == "pjrt raises, CPU does not"
    assert sweep.failure_class(c("killed by SIGSEGV", "crashed")) == "crashed"


def test_sweep_command(tmp_path):
    md, js = tmp_path / "ops.md", tmp_path / "ops.json"
    r = subprocess.run([sys.executable, os.path.join(HERE, "sweep.py"), "--ops", "abs,argsort", "--dtypes",
                        "float32,int64", "--max-samples", "1", "--md", str(md), "--json", str(js), "--quiet"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    data = json.loads(js.read_text())
    assert list(data["ops"]) == ["abs", "argsort"]
    assert data["ops"]["abs"]["cases"]["forward"]["float32"]["status"] == "native"
    assert set(data["ops"]["abs"]["cases"]) == {"forward", "extremal", "inplace", "out", "grad"}
    assert data["meta"]["limits"]["forward"] == {"float32": 1, "*": 1}
    # The summary is computed from the per-op results, and the report shows it.
    assert data["totals"] == sweep.totals(data["ops"], data["lowering"])
    f32 = data["totals"]["forward_float32"]
    assert f32["total"] == 2 and f32["match"] == 2
    text = md.read_text()
    assert "## Summary" in text and "--max-samples 1" in text
    assert f"| forward, float32 (one per OpInfo) | 2 | **100.0%** (2) |" in text
