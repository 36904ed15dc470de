"""The OpInfo sweep: PyTorch's `op_db` on pjrt against CPU eager, every dtype, gradients, in-place
and out= variants and extremal values, written to docs/ops.md (readable) and docs/ops.json.

    nice -n 10 .venv/bin/python openreg_tests/sweep.py           # everything (docs/ops.md, docs/ops.json)
    .venv/bin/python openreg_tests/sweep.py --ops 'sort,nn.functional.*' --dtypes float32 --no-grad
    .venv/bin/python openreg_tests/sweep.py --report-only        # docs/ops.md again from docs/ops.json

Ops run in worker subprocesses (openreg_tests/opcheck.py): a crash or hang in one op is recorded as
"crashed" and the sweep goes on. A subset run (--ops/--dtypes/--kinds/--no-grad/--max-samples)
prints its results and writes files only where --md/--json name them. Every number in docs/ops.md
is computed from the results (docs/ops.json), and its header gives the command that produced it.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import fnmatch
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

import torch  # noqa: E402

import opcheck  # noqa: E402
from opcheck import KINDS, PJRT_DTYPES, EXCLUDED_DTYPES, dtype_name  # noqa: E402

SHORT = {"bool": "b8", "uint8": "u8", "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
         "uint16": "u16", "uint32": "u32", "uint64": "u64", "float16": "f16", "bfloat16": "bf16",
         "float32": "f32", "float64": "f64", "complex64": "c64", "complex128": "c128",
         "float8_e4m3fn": "f8e4m3", "float8_e5m2": "f8e5m2"}
SYMBOL = {"native": "✓", "fallback": "F", "fails": "✗", "crashed": "💥", "skipped": "–"}
MATCH = ("native", "fallback")


KIND_TITLES = {"forward": "forward", "extremal": "extremal values (NaN, ±inf)", "inplace": "in-place variants",
               "out": "out= variants", "grad": "gradients"}
# Failure classes, in report order (a failing case's class comes from its first error line).
CLASSES = ("wrong result", "CPU raises, pjrt does not", "different exception type", "pjrt raises, CPU does not",
           "wrong aliasing", "crashed", "harness error")
ALIASING = ("the in-place variant did not return its input", "out= variant did not return the given out tensors",
            "out= tensors were reallocated instead of written in place")


# ---------------------------------------------------------------------------------------------
# Results: one record per op, cases keyed by kind then dtype


def compact_case(items):
    status, fallbacks, error = opcheck.summarize(items)
    case = {"status": status}
    if fallbacks:
        case["fallbacks"] = fallbacks
    if error:
        case["error" if status in ("fails", "crashed") else "note"] = error
    if status in MATCH:
        judged = [it["note"] for it in items if it["status"] == "pass"
                  and it.get("note", "").startswith((opcheck.REFERENCE_NOTE, opcheck.TIES_NOTE))]
        if judged:
            case["judged"] = judged[0]  # accepted although CPU's own result differs (see JUDGED)
    per = [[it["status"], sorted(it.get("fallbacks", {})), it.get("error") or it.get("note")] for it in
           sorted(items, key=lambda it: it["sample"])]
    if len({json.dumps(p) for p in per}) > 1:
        case["samples"] = per  # only when the samples disagree
    return case


def op_record(op, result):
    cases = collections.defaultdict(lambda: collections.defaultdict(list))
    for it in result["items"]:
        cases[it["kind"]][it["dtype"]].append(it)
    rec = {"seconds": result["seconds"], "lowered": sorted(result["lowered"]),
           "cases": {k: {d: compact_case(v) for d, v in cases[k].items()} for k in KINDS if k in cases}}
    _, excluded = opcheck.op_dtypes(op)
    if excluded:
        rec["excluded_dtypes"] = [dtype_name(d) for d in excluded]
    if "crashed" in result:
        rec["worker_crash"] = result["crashed"].splitlines()[0][:300]
    return rec


def failure_class(case):
    if case["status"] == "crashed":
        return "crashed"
    err = case.get("error", "")
    if err.startswith("mismatch:"):
        return "wrong result"
    if err.startswith("CPU raised") and err.endswith("pjrt accepted the sample"):
        return "CPU raises, pjrt does not"
    if err.startswith("CPU raised"):
        return "different exception type"
    if err in ALIASING:
        return "wrong aliasing"
    if err.startswith(("harness: ", "sample generation: ")):
        return "harness error"
    return "pjrt raises, CPU does not"


# ---------------------------------------------------------------------------------------------
# Lowering counts


def lowering_counts():
    import torch_pjrt
    functional = sorted(torch_pjrt._C._lowered_ops())
    regs = sorted(torch._C._dispatch_get_registrations_for_dispatch_key("PrivateUse1"))
    by_file = collections.defaultdict(list)
    for r in regs:
        if not r.startswith("aten::"):
            continue  # c10d:: collectives registered by torch itself
        lines = [ln for ln in torch._C._dispatch_dump(r).splitlines() if ln.startswith("PrivateUse1")]
        where = lines[0].split("registered at")[-1].strip().split(":")[0] if lines else "?"
        by_file[os.path.basename(where)].append(r)
    aten = sorted(r for rs in by_file.values() for r in rs)
    return {"functional": functional, "registered_aten": aten,
            "registered_by_file": {k: len(v) for k, v in sorted(by_file.items())},
            "lowered_kernel_registrations": len(by_file.get("lowered_kernel.cc", []))}


# ---------------------------------------------------------------------------------------------
# Totals: every number of the report's summary, computed from the per-op records


def pct(a, b):
    return 100.0 * a / b if b else 0.0


def _counts(cases):
    cs = [c for c in cases if c["status"] != "skipped"]
    n = collections.Counter(c["status"] for c in cs)
    return {"total": len(cs), "match": n["native"] + n["fallback"], "native": n["native"],
            "fallback": n["fallback"], "fails": n["fails"], "crashed": n["crashed"],
            "skipped": len(cases) - len(cs),
            "judged_float64": sum(c.get("judged", "").startswith(opcheck.REFERENCE_NOTE) for c in cs),
            "judged_ties": sum(c.get("judged", "").startswith(opcheck.TIES_NOTE) for c in cs)}


def totals(ops, lowering):
    t = {"opinfos": len(ops)}
    t["forward_float32"] = _counts([rec["cases"]["forward"]["float32"] for rec in ops.values()
                                    if "float32" in rec["cases"].get("forward", {})])
    every = []
    for kind in KINDS:
        cs = [c for rec in ops.values() for c in rec["cases"].get(kind, {}).values()]
        every += cs
        t[kind] = _counts(cs)
        t[kind]["opinfos"] = sum(1 for rec in ops.values()
                                 if any(c["status"] != "skipped" for c in rec["cases"].get(kind, {}).values()))
    t["all_kinds"] = _counts(every)
    compared = {k: [c for cs in rec["cases"].values() for c in cs.values() if c["status"] != "skipped"]
                for k, rec in ops.items()}
    t["opinfos_compared"] = sum(1 for cs in compared.values() if cs)
    t["opinfos_all_match"] = sum(1 for cs in compared.values() if cs and all(c["status"] in MATCH for c in cs))
    t["opinfos_all_native"] = sum(1 for cs in compared.values() if cs and all(c["status"] == "native" for c in cs))
    classes = collections.Counter()
    by_design = 0
    for key, rec in ops.items():
        for cases in rec["cases"].values():
            for c in cases.values():
                if c["status"] in ("fails", "crashed"):
                    if opcheck.by_design(key, c.get("error")):
                        by_design += 1
                    else:
                        classes[failure_class(c)] += 1
    t["failing_cases_by_class"] = {k: classes[k] for k in CLASSES}
    t["failing_cases_by_design"] = by_design
    t["fallback_ops"] = len(fallback_table(ops))
    t["lowered_functional"] = len(lowering["functional"])
    t["registered_aten"] = len(lowering["registered_aten"])
    t["lowered_kernel_registrations"] = lowering["lowered_kernel_registrations"]
    exercised = set()
    for rec in ops.values():
        exercised.update(rec["lowered"])
    t["lowered_exercised"] = len(exercised & set(lowering["functional"]))
    return t


def fallback_table(ops):
    """op that fell back -> (OpInfos where it fell back in any case, OpInfos in forward float32)."""
    anywhere, f32 = collections.defaultdict(set), collections.defaultdict(set)
    for key, rec in ops.items():
        for kind, cases in rec["cases"].items():
            for d, c in cases.items():
                for f in c.get("fallbacks", {}):
                    anywhere[f].add(key)
                    if kind == "forward" and d == "float32":
                        f32[f].add(key)
    return {f: (sorted(anywhere[f]), sorted(f32[f])) for f in anywhere}


def ranked_fallbacks(ops):
    """[(op, OpInfos anywhere, OpInfos in forward float32)], most OpInfos first."""
    return sorted(((f, a, b) for f, (a, b) in fallback_table(ops).items()), key=lambda r: (-len(r[1]), r[0]))


def fallback_reason(aten_op, functional):
    from torch_pjrt import unlowered
    known = unlowered.reason(aten_op)
    if known:
        return known
    base = aten_op.split("::", 1)[-1]
    same = [s for s in functional if s.split(".")[0] == base]
    if not same:
        return "no lowering"
    return (f"lowered as {', '.join(same)}, but these calls take the CPU path (other overload, or arguments the "
            "lowering refuses)")


# ---------------------------------------------------------------------------------------------
# docs/ops.md


def cell(cases, dtypes):
    """One summary cell over several dtypes: the worst status, with the failing dtypes named."""
    cs = {d: cases[d] for d in dtypes if d in cases}
    if not cs:
        return ""
    st = [c["status"] for c in cs.values()]
    for bad in ("crashed", "fails"):
        if bad in st:
            ds = [SHORT[d] for d, c in cs.items() if c["status"] == bad]
            return SYMBOL[bad] + " " + ",".join(ds) if len(ds) < len(cs) else SYMBOL[bad]
    if "fallback" in st:
        return SYMBOL["fallback"]
    if "native" in st:
        return SYMBOL["native"]
    return SYMBOL["skipped"]


def md_escape(s):
    return s.replace("|", "\\|").replace("\n", " ").replace("<", "&lt;").replace(">", "&gt;")


def dtype_list(ds):
    return " ".join(SHORT[d] for d in sorted(ds, key=lambda d: list(SHORT).index(d)))


def summary_lines(data):
    """The headline numbers (printed by the sweep, and the report's first table's source)."""
    t = data["totals"]
    f, a, g = t["forward_float32"], t["forward"], t["grad"]
    return [f"OpInfos: {t['opinfos']} ({t['opinfos_compared']} with a compared case; "
            f"{t['opinfos_all_match']} match CPU in every case, {t['opinfos_all_native']} natively in every case)",
            f"forward float32: {pct(f['match'], f['total']):.1f}% match CPU ({f['match']}/{f['total']}), "
            f"{pct(f['native'], f['total']):.1f}% native ({f['native']}/{f['total']})",
            f"forward every dtype: {pct(a['match'], a['total']):.1f}% match ({a['match']}/{a['total']}), "
            f"{pct(a['native'], a['total']):.1f}% native",
            f"gradients: {pct(g['match'], g['total']):.1f}% match ({g['match']}/{g['total']}), "
            f"{pct(g['native'], g['total']):.1f}% native",
            "failing cases: " + ", ".join(f"{k} {v}" for k, v in t["failing_cases_by_class"].items())
            + f"; by design {t['failing_cases_by_design']}",
            f"distinct ops falling back to the CPU: {t['fallback_ops']}"]


README_BEGIN = "<!-- ops-summary: written by openreg_tests/sweep.py from docs/ops.json -->"
README_END = "<!-- /ops-summary -->"


def readme_summary(data):
    """The README's coverage table: the report's headline numbers."""
    t, meta = data["totals"], data["meta"]
    L = [README_BEGIN, "",
         f"OpInfo sweep of commit `{meta['commit']}` ({meta['date']}, torch {meta['torch']}, `{meta['plugin']}` "
         "sub-plugin): every OpInfo of PyTorch's `op_db`, every dtype it supports, compared with CPU eager. "
         "*Native* means no CPU fallback.", "",
         "| cases | compared | match CPU | native |", "|---|---|---|---|"]
    for name, key in [("forward, float32", "forward_float32"), ("forward, every dtype", "forward"),
                      ("extremal values", "extremal"), ("in-place", "inplace"), ("out=", "out"),
                      ("gradients", "grad"), ("all kinds", "all_kinds")]:
        c = t[key]
        L.append(f"| {name} | {c['total']} | {pct(c['match'], c['total']):.1f}% | {pct(c['native'], c['total']):.1f}% |")
    L += ["", f"{t['opinfos_all_native']} of {t['opinfos']} OpInfos run natively in every case; "
          f"{t['fallback_ops']} distinct ATen ops still fall back somewhere, each listed with its reason in "
          f"[docs/ops.md](docs/ops.md); {t['lowered_functional']} ATen schemas are lowered.", "", README_END]
    return "\n".join(L)


def update_readme(data, path=os.path.join(ROOT, "README.md")):
    with open(path) as f:
        text = f.read()
    begin, end = text.find(README_BEGIN), text.find(README_END)
    if begin < 0 or end < 0:
        print(f"note: {path} has no {README_BEGIN!r} block; not updated")
        return
    with open(path, "w") as f:
        f.write(text[:begin] + readme_summary(data) + text[end + len(README_END):])


def render_md(data):
    meta, t, ops, lowering = data["meta"], data["totals"], data["ops"], data["lowering"]
    L = []
    w = L.append
    w("# Operator coverage: PyTorch's OpInfo database on pjrt")
    w("")
    w("Generated by `openreg_tests/sweep.py`; regenerate from the repository root with")
    w("")
    w("```bash")
    w(meta["command"])
    w("```")
    w("")
    run = meta["run"]
    lim = meta["limits"]
    fwd = lim["forward"]
    fwd_text = (f"the first {fwd.get('float32', fwd.get('*'))} samples for float32 and {fwd.get('*')} for every "
                "other dtype" if isinstance(fwd, dict) else f"the first {fwd} samples")
    w(f"What this run was: commit `{meta['commit']}` ({meta['branch']}), {meta['date']}, torch {meta['torch']}, "
      f"the `{meta['plugin']}` sub-plugin, Python {meta['python']}. "
      + (f"OpInfos: every entry of `op_db` ({meta['op_count']}). " if not run["ops"] else
         f"OpInfos: those matching `{run['ops']}` ({meta['op_count']}). ")
      + ("dtypes: every dtype each OpInfo supports on the CPU that a pjrt tensor can hold. " if not run["dtypes"]
         else f"dtypes: {', '.join(run['dtypes'])} (where the OpInfo supports them). ")
      + f"Kinds: {', '.join(run['kinds'])}. Samples per case (`op.sample_inputs`, seed 0): forward {fwd_text}; "
      f"extremal {lim['extremal']}; in-place {lim['inplace']}; out= {lim['out']}; gradients {lim['grad']}"
      + (f" (capped by --max-samples {run['max_samples']})" if run.get("max_samples") else "") + ". "
      f"Runtime: **{meta['runtime_min']:.1f} min** with {meta['jobs']} worker process(es) on a {meta['cpus']}-core "
      f"machine at niceness {meta['niceness']} ({meta['load']}), with a cold compile cache"
      + (f"; {meta['resumed']} OpInfos came from an interrupted run's partial results and are not in that time"
         if meta.get("resumed") else "") + ". docs/ops.json has every result.")
    w("")
    w("## Summary")
    w("")
    w("Cases are (OpInfo, kind, dtype) triples; a case *matches* when every sample run agrees with CPU eager, "
      "natively (✓, no CPU fallback) or with CPU fallbacks (F); it *fails* (✗) on a mismatch or an error, and "
      "*crashed* (💥) when the worker process died or hung. Cases with nothing to compare (–) are not counted.")
    w("")
    w("| cases | compared | match CPU | native | with CPU fallbacks | fail | crashed | not compared |")
    w("|---|---|---|---|---|---|---|---|")

    def row(name, c):
        w(f"| {name} | {c['total']} | **{pct(c['match'], c['total']):.1f}%** ({c['match']}) | "
          f"**{pct(c['native'], c['total']):.1f}%** ({c['native']}) | {c['fallback']} | {c['fails']} | "
          f"{c['crashed']} | {c['skipped']} |")

    row("forward, float32 (one per OpInfo)", t["forward_float32"])
    for kind in KINDS:
        row(f"{KIND_TITLES[kind]}, every dtype", t[kind])
    row("all kinds", t["all_kinds"])
    w("")
    w(f"- OpInfos: {t['opinfos']}; {t['opinfos_compared']} had a compared case; **{t['opinfos_all_match']}** "
      f"match CPU in every case they ran, **{t['opinfos_all_native']}** natively in every case.")
    w("- Failing cases by class (by design excluded): "
      + ", ".join(f"{k}: **{v}**" for k, v in t["failing_cases_by_class"].items())
      + f"; by design (listed differences, see below): {t['failing_cases_by_design']}.")
    a = t["all_kinds"]
    w(f"- {a['judged_float64'] + a['judged_ties']} matching cases differ from CPU's own result and were accepted "
      f"(listed below): {a['judged_float64']} match the float64 computation, {a['judged_ties']} differ only in "
      "the order of tied elements (indices of sort, argsort, topk, kthvalue).")
    w(f"- **{t['fallback_ops']}** distinct ops take the CPU fallback somewhere in the sweep (ranked below).")
    w(f"- Lowerings: {t['lowered_functional']} ATen schemas lowered natively (`torch_pjrt._C._lowered_ops()`), "
      f"{t['lowered_exercised']} of them exercised natively by this run; {t['lowered_kernel_registrations']} ATen "
      f"overloads registered on PrivateUse1 through the lowered kernel (with in-place and out= variants), "
      f"{t['registered_aten']} in all (adding copies, views, allocation and data-dependent-shape kernels).")
    w("")
    w("How each case runs (openreg_tests/opcheck.py, one worker subprocess at a time, restarted after a crash):")
    w("")
    w("- **forward**: the op on each dtype the OpInfo supports on the CPU that a pjrt tensor can hold, compared "
      "through the sample's `output_process_fn_grad` (as PyTorch's test_compare_cpu: eigenvector signs are not "
      "unique). When CPU eager raises, pjrt must raise the same exception type. Random or uninitialized results "
      f"({', '.join(sorted(opcheck.NONDETERMINISTIC))}) are compared by shape and dtype only; samples with a "
      "nonzero `dropout_p` are left out.")
    w("- **extremal**: the first sample with NaN, +inf and -inf written into the first elements of every floating "
      "tensor (float16, bfloat16, float32, float64).")
    w("- **in-place** (`op.inplace_variant`, samples that do not broadcast the input) and **out=** "
      "(`op.supports_out`): must mutate / write into and return the given pjrt tensors (out= storages are not "
      "reallocated; ops writing a list return None, as on the CPU), compared with the CPU result; where CPU "
      "rejects the out= call, pjrt must raise the same exception type.")
    w("- **gradients** (`op.supports_autograd`, float32 and float64, samples with `requires_grad=True`): "
      "`torch.autograd.grad` of Σᵢ⟨wᵢ, outᵢ⟩ over the differentiable outputs, fixed random weights wᵢ (a plain "
      "sum would hide permuted gradients), with respect to every input requiring grad, compared with the CPU's.")
    w("- **fallbacks**: the ops whose `torch.pjrt.metrics.fallbacks()` counters moved during the pjrt call.")
    tol = ", ".join(f"{SHORT[dtype_name(d)]} {r:g}/{a:g}" for d, (r, a) in opcheck.FORWARD_TOL.items())
    gtol = ", ".join(f"{SHORT[dtype_name(d)]} {r:g}/{a:g}" for d, (r, a) in opcheck.GRAD_TOL.items()
                     if d in opcheck.GRAD_DTYPES)
    w(f"- tolerances (rtol/atol): {tol}; gradients {gtol}; integers and bool exact; NaNs must match. A "
      "float16/bfloat16/float32/complex64 sample of a forward, extremal, in-place or out= case on which CPU and "
      "pjrt disagree also matches when pjrt agrees with the float64 (complex128) CPU computation cast back "
      "(as test_ops.py does for float32). For sort and argsort (unless stable=True), topk and kthvalue, a "
      "result whose values equal CPU's and whose indices point at them (distinct for sort and topk) also "
      "matches: the order of tied elements is not specified.")
    excl = collections.Counter(d for rec in ops.values() for d in rec.get("excluded_dtypes", []))
    if excl:
        w("- dtypes not run because a pjrt tensor cannot hold them: "
          + "; ".join(f"{d} ({n} OpInfos: {EXCLUDED_DTYPES[opcheck.DTYPE_BY_NAME[d]]})"
                      for d, n in sorted(excl.items())) + ".")
    w("")

    # Fallbacks, ranked
    ranked = ranked_fallbacks(ops)
    w("## Ops still falling back to the CPU")
    w("")
    w(f"{len(ranked)} ops take the CPU fallback somewhere in the sweep, ranked by how many OpInfos hit them in any "
      "case (any dtype, kind); float32: OpInfos hitting them in the float32 forward case.")
    w("")
    w("| # | op | OpInfos | float32 forward | why | e.g. |")
    w("|---|---|---|---|---|---|")
    for i, (f, anyw, f32) in enumerate(ranked, 1):
        eg = ", ".join(anyw[:4]) + (", …" if len(anyw) > 4 else "")
        w(f"| {i} | `{f}` | {len(anyw)} | {len(f32)} | {fallback_reason(f, lowering['functional'])} | "
          f"{md_escape(eg)} |")
    if not ranked:
        w("| | none | | | | |")
    w("")

    # Fallbacks per OpInfo
    w("## Fallbacks by OpInfo")
    w("")
    w("Every matching case with CPU fallbacks, by OpInfo and kind; dtypes with the same fallbacks share a row.")
    w("")
    w("| OpInfo | kind | dtypes | ops that fell back |")
    w("|---|---|---|---|")
    n = 0
    for key, rec in ops.items():
        for kind in KINDS:
            groups = collections.defaultdict(list)
            for d, c in rec["cases"].get(kind, {}).items():
                if c["status"] == "fallback":
                    groups[tuple(sorted(c["fallbacks"]))].append(d)
            for fbs, ds in groups.items():
                n += 1
                w(f"| {md_escape(key)} | {kind} | {dtype_list(ds)} | {', '.join(f'`{f}`' for f in fbs)} |")
    if not n:
        w("| none | | | |")
    w("")

    # Failures, by class
    rows = collections.defaultdict(list)
    designed = []
    for key, rec in ops.items():
        for kind in KINDS:
            groups = collections.defaultdict(list)
            for d, c in rec["cases"].get(kind, {}).items():
                if c["status"] in ("fails", "crashed"):
                    groups[(c["status"], c.get("error", ""))].append(d)
            for (st, err), ds in groups.items():
                why = opcheck.by_design(key, err)
                case = {"status": st, "error": err}
                fb = sorted({f for d in ds for f in rec["cases"][kind][d].get("fallbacks", {})})
                r = (key, kind, ds, st, err, why, fb)
                (designed if why else rows[failure_class(case)]).append(r)
    w("## Failures")
    w("")
    w("Grouped by class, then by OpInfo and kind; dtypes failing with the same first error line share a row "
      "(cases: (OpInfo, kind, dtype) triples). *with fallbacks*: ops that fell back to the CPU in those cases, "
      "when any did.")
    w("")
    for cls in CLASSES:
        rs = rows.get(cls, [])
        w(f"### {cls}: {sum(len(r[2]) for r in rs)} cases")
        w("")
        if not rs:
            w("None.")
            w("")
            continue
        w("| OpInfo | kind | dtypes | first error line |")
        w("|---|---|---|---|")
        for key, kind, ds, st, err, why, fb in rs:
            extra = f" (with fallbacks: {', '.join(fb)})" if fb else ""
            w(f"| {md_escape(key)} | {kind} | {dtype_list(ds)} | "
              f"{SYMBOL[st]} {md_escape(err or '')}{md_escape(extra)} |")
        w("")
    w(f"### by design: {sum(len(r[2]) for r in designed)} cases")
    w("")
    w("Listed differences (openreg_tests/opcheck.py BY_DESIGN, test_ops.py EXPECTED_FAILURES), with their reasons.")
    w("")
    if designed:
        w("| OpInfo | kind | dtypes | reason | first error line |")
        w("|---|---|---|---|---|")
        for key, kind, ds, st, err, why, fb in designed:
            w(f"| {md_escape(key)} | {kind} | {dtype_list(ds)} | {md_escape(why)} | "
              f"{SYMBOL[st]} {md_escape(err or '')} |")
    else:
        w("None.")
    w("")

    # Matches judged otherwise than by equality with CPU's result
    w("## Matches that differ from CPU's result")
    w("")
    w("Cases accepted although pjrt's result differs from CPU eager's: *float64*: CPU's own result is out of "
      "tolerance, pjrt's agrees with the float64 (complex128) CPU computation cast back; *ties*: the values "
      "equal CPU's and the indices point at them, but tied elements come in another order (valid: not a stable "
      "sort). The CPU disagreement is shown for the first dtype.")
    w("")
    judged = collections.defaultdict(list)
    for key, rec in ops.items():
        for kind in KINDS:
            for d, c in rec["cases"].get(kind, {}).items():
                if "judged" in c:
                    how = "float64" if c["judged"].startswith(opcheck.REFERENCE_NOTE) else "ties"
                    judged[(key, kind, how)].append((d, c["judged"]))
    if judged:
        w("| OpInfo | kind | dtypes | judged by | CPU disagreement |")
        w("|---|---|---|---|---|")
        for (key, kind, how), ds in judged.items():
            note = re.split(r" does not: |; CPU comparison: ", ds[0][1], maxsplit=1)[-1]
            w(f"| {md_escape(key)} | {kind} | {dtype_list([d for d, _ in ds])} | {how} | {md_escape(note)} |")
    else:
        w("None.")
    w("")

    # Per op
    shown = [dtype_name(d) for d in PJRT_DTYPES]
    w("## Every OpInfo")
    w("")
    w("Forward per dtype, then extremal values, in-place, out= and gradients summarized over their dtypes "
      "(the dtypes that fail are named). ✓ native, F matches with CPU fallbacks, ✗ fails, 💥 crashed, "
      "– nothing to compare, blank: not run (not supported by the OpInfo on the CPU, or not applicable).")
    w("")
    w("| OpInfo | " + " | ".join(SHORT[d] for d in shown) + " | extremal | in-place | out= | grad |")
    w("|---|" + "---|" * (len(shown) + 4))
    for key, rec in ops.items():
        fwd_cases = rec["cases"].get("forward", {})
        cells = [SYMBOL[fwd_cases[d]["status"]] if d in fwd_cases else "" for d in shown]
        for kind in ("extremal", "inplace", "out", "grad"):
            cells.append(cell(rec["cases"].get(kind, {}), shown))
        w(f"| {md_escape(key)} | " + " | ".join(cells) + " |")
    w("")

    # Slowest ops and unexercised lowerings
    w("## Slowest OpInfos")
    w("")
    slow = sorted(ops.items(), key=lambda kv: -kv[1]["seconds"])[:12]
    w(", ".join(f"{k} {v['seconds']:.1f} s" for k, v in slow) + ".")
    w("")
    exercised = set()
    for rec in ops.values():
        exercised.update(rec["lowered"])
    never = [s for s in lowering["functional"] if s not in exercised]
    w("## Lowered schemas the sweep never ran natively")
    w("")
    w(f"{len(never)} of {len(lowering['functional'])} (internal ops, backward ops of untested paths, or ops the "
      "OpInfos reach only through other overloads): " + ", ".join(f"`{s}`" for s in never) + ".")
    w("")
    return "\n".join(L)


# ---------------------------------------------------------------------------------------------
# Main


def select_ops(patterns):
    ops = opcheck.all_ops()
    if not patterns:
        return list(ops)
    pats = [p.strip() for p in patterns.split(",") if p.strip()]
    return [k for k, op in ops.items() if any(fnmatch.fnmatchcase(k, p) or fnmatch.fnmatchcase(op.name, p)
                                              for p in pats)]


def capped(limits, n):
    """`limits` with every sample count at most `n`."""
    return {k: ({d: min(v, n) for d, v in lim.items()} if isinstance(lim, dict) else min(lim, n))
            for k, lim in limits.items()}


def commit_id():
    """HEAD's short hash, with "+changes" when tracked files other than the reports differ from it."""
    head = git("rev-parse", "--short", "HEAD")
    changed = [ln for ln in git("status", "--porcelain", "--untracked-files=no").splitlines()
               if not ln.endswith(("docs/ops.md", "docs/ops.json"))]
    return head + ("+changes" if changed else "")


def git(*args):
    try:
        return subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True, check=True).stdout.strip()
    except Exception:
        return "?"


def command_line(argv):
    """The command that reproduces this run from the repository root (output paths dropped when they
    are the defaults)."""
    nice = os.nice(0)
    return ((f"nice -n {nice} " if nice else "") + ".venv/bin/python openreg_tests/sweep.py"
            + ("" if not argv else " " + shlex.join(argv)))


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ops", help="comma-separated OpInfo names or keys (name.variant), globs allowed")
    p.add_argument("--dtypes", help="comma-separated dtype names (float32,int64,...)")
    p.add_argument("--kinds", help=f"comma-separated subset of {','.join(KINDS)}")
    p.add_argument("--no-grad", action="store_true", help="skip gradients")
    p.add_argument("--max-samples", type=int, help="at most this many samples per case (default: opcheck.SWEEP_LIMITS)")
    p.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    p.add_argument("--timeout", type=float, default=600, help="seconds one OpInfo may take before it counts as crashed")
    p.add_argument("--md", help="report path (default docs/ops.md for a full sweep)")
    p.add_argument("--json", help="results path (default docs/ops.json for a full sweep)")
    p.add_argument("--resume", action="store_true", help="keep the results of an interrupted run (<json>.partial)")
    p.add_argument("--report-only", action="store_true", help="rewrite the report from the JSON file, running nothing")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)

    subset = bool(args.ops or args.dtypes or args.kinds or args.no_grad or args.max_samples)
    md_path = args.md or (None if subset else os.path.join(ROOT, "docs", "ops.md"))
    json_path = args.json or (None if subset else os.path.join(ROOT, "docs", "ops.json"))

    if args.report_only:
        data = read_json(json_path or os.path.join(ROOT, "docs", "ops.json"))
        data["totals"] = totals(data["ops"], data["lowering"])  # the report's numbers come from the results
        with open(md_path or os.path.join(ROOT, "docs", "ops.md"), "w") as f:
            f.write(render_md(data))
        if not args.md:
            update_readme(data)
        print("\n".join(summary_lines(data)))
        return 0

    keys = select_ops(args.ops)
    if not keys:
        sys.exit(f"no OpInfo matches {args.ops!r}")
    dtypes = [d.strip() for d in args.dtypes.split(",")] if args.dtypes else None
    if dtypes:
        bad = [d for d in dtypes if d not in opcheck.DTYPE_BY_NAME]
        if bad:
            sys.exit(f"unknown dtypes {bad}; known: {', '.join(opcheck.DTYPE_BY_NAME)}")
    kinds = [k.strip() for k in args.kinds.split(",")] if args.kinds else list(KINDS)
    if args.no_grad:
        kinds = [k for k in kinds if k != "grad"]
    limits = capped(opcheck.SWEEP_LIMITS, args.max_samples) if args.max_samples else opcheck.SWEEP_LIMITS

    partial_path = (json_path or os.path.join(tempfile.gettempdir(), "opcheck_sweep.json")) + ".partial"
    done = {}
    if args.resume and os.path.exists(partial_path):
        with open(partial_path) as f:
            for line in f:
                r = json.loads(line)
                done[r["op"]] = r
    todo = [k for k in keys if k not in done]
    results = dict(done)
    # A private compile cache: every graph is compiled by this build, and the runtime is a cold one.
    os.environ.setdefault("TORCH_PJRT_CACHE_DIR", tempfile.mkdtemp(prefix="torch_pjrt_sweep_cache_"))
    partial = open(partial_path, "a" if args.resume else "w")
    started = time.time()
    counter = [len(done)]
    loads = []
    lock = __import__("threading").Lock()

    def on_result(res):
        with lock:
            counter[0] += 1
            loads.append(os.getloadavg()[0])
            results[res["op"]] = res
            partial.write(json.dumps(res) + "\n")
            partial.flush()
            if not args.quiet:
                st = collections.Counter(opcheck.summarize(v)[0] for v in group(res["items"]).values())
                crash = "  (worker crashed: " + res["crashed"].splitlines()[0][:120] + ")" if "crashed" in res else ""
                print(f"[{counter[0]}/{len(keys)} {time.time() - started:6.0f}s] {res['op']:40} {res['seconds']:6.1f}s "
                      + " ".join(f"{k} {v}" for k, v in sorted(st.items())) + crash, flush=True)

    checker = opcheck.Checker(limits, jobs=args.jobs, dtypes=dtypes, kinds=kinds,
                              timeout=args.timeout, on_result=on_result)
    checker.schedule(todo)
    checker.wait_all()
    checker.close()
    partial.close()
    elapsed = time.time() - started

    all_ops = opcheck.all_ops()
    ops = {k: op_record(all_ops[k], results[k]) for k in keys}  # op_db order
    lowering = lowering_counts()
    load = sum(loads) / len(loads) if loads else os.getloadavg()[0]
    data = {
        "meta": {"date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), "commit": commit_id(),
                 "branch": git("rev-parse", "--abbrev-ref", "HEAD"), "torch": torch.__version__,
                 "plugin": torch.pjrt.plugin(), "op_count": len(keys), "runtime_min": round(elapsed / 60, 2),
                 "resumed": len(done), "jobs": args.jobs, "cpus": os.cpu_count(), "niceness": os.nice(0),
                 "load": f"mean 1-minute load average {load:.1f} during the run: the cores are shared with other work",
                 "python": platform.python_version(), "limits": limits, "command": command_line(argv),
                 "run": {"ops": args.ops, "dtypes": dtypes, "kinds": kinds, "max_samples": args.max_samples}},
        "totals": None, "lowering": lowering, "ops": ops,
    }
    data["totals"] = totals(ops, lowering)
    if json_path:
        write_json(json_path, data)
    if md_path:
        with open(md_path, "w") as f:
            f.write(render_md(data))
    if not subset and not args.md:
        update_readme(data)
    if subset and not args.quiet:
        for key, rec in ops.items():
            for kind, cases in rec["cases"].items():
                for d, c in cases.items():
                    if c["status"] != "native":
                        extra = c.get("error") or c.get("note") or ", ".join(sorted(c.get("fallbacks", {})))
                        print(f"  {key} {kind} {d}: {c['status']} {extra}")
    print("\n".join(summary_lines(data)))
    print(f"{len(keys)} OpInfos in {elapsed / 60:.1f} min" + (f"; wrote {md_path}" if md_path else "")
          + (f", {json_path}" if json_path else ""))
    if not os.environ.get("OPCHECK_KEEP_PARTIAL"):
        os.unlink(partial_path)
    return 0


def write_json(path, data):
    """One line per op (and per op's time), so that a rerun's diff shows the ops that changed."""
    ops = data["ops"]
    seconds = {k: rec.pop("seconds") for k, rec in ops.items()}
    with open(path, "w") as f:
        f.write("{\n")
        for name in ("meta", "totals", "lowering"):
            f.write(f'"{name}": {json.dumps(data[name])},\n')
        f.write('"ops": {\n' + ",\n".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in ops.items()) + "\n},\n")
        f.write('"seconds": {\n' + ",\n".join(f"{json.dumps(k)}: {v}" for k, v in seconds.items()) + "\n}\n}\n")
    for k, rec in ops.items():
        rec["seconds"] = seconds[k]


def read_json(path):
    with open(path) as f:
        data = json.load(f)
    for k, rec in data["ops"].items():
        rec["seconds"] = data["seconds"].get(k, 0.0)
    return data


def group(items):
    g = collections.defaultdict(list)
    for it in items:
        g[(it["kind"], it["dtype"])].append(it)
    return g


if __name__ == "__main__":
    sys.exit(main())
