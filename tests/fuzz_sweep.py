"""Long differential fuzzing sweep: many random programs on pjrt against CPU eager.

    .venv/bin/python tests/fuzz_sweep.py --programs 10000            # writes docs/fuzz.md
    .venv/bin/python tests/fuzz_sweep.py --programs 500 --start 20000 --out /tmp/fuzz.md
    .venv/bin/python tests/fuzz_sweep.py --programs 2000 --focus out,reduce --out /tmp/fuzz.md

Program i is generated from random.Random(start + i) by tests/fuzz_programs.py, the generator
tests/test_fuzz.py runs under hypothesis, so a failure here is reproduced by its seed
(`--start SEED --programs 1`) and its source, which the report prints. The report counts the
programs that ran clean, those where CPU raised and pjrt raised the same exception type, the
known gaps the generator steered around (fuzz_programs.KNOWN_GAPS) and every failure.
"""
import argparse
import collections
import datetime
import os
import platform
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
# Every program is a new graph: thousands of them would fill the persistent compile cache.
os.environ.setdefault("TORCH_PJRT_DISK_CACHE", "0")

import torch  # noqa: E402

import fuzz_programs as FP  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--programs", type=int, default=10000)
    ap.add_argument("--start", type=int, default=0, help="first seed")
    ap.add_argument("--out", default=os.path.join(HERE, "..", "docs", "fuzz.md"))
    ap.add_argument("--focus", default="",
                    help="comma-separated op kinds (Gen.op_* in fuzz_programs.py, e.g. out,reduce) that half "
                         "of the ops are drawn from; a failure replays with the same --focus")
    ap.add_argument("--progress", type=int, default=500, help="print a line every N programs")
    ap.add_argument("--seconds", type=float, default=None,
                    help="stop after this long; the report covers the programs run (for a lent machine's time)")
    args = ap.parse_args()
    torch.pjrt.set_fallback_warnings(False)

    clean = raised = 0
    failures = []
    gaps = collections.Counter()
    cpu_errors = collections.Counter()
    lines = 0
    t0 = time.time()
    focus = [kind for kind in args.focus.split(",") if kind]
    for k in range(args.programs):
        seed = args.start + k
        try:
            program = FP.generate(FP.RandomDraw(seed), focus=focus)
            gaps.update(program.gaps)
            lines += len(program.lines)
            FP.check(program)
            if program.error is None:
                clean += 1
            else:
                raised += 1
                cpu_errors[type(program.error[1]).__name__] += 1
        except FP.Mismatch as m:
            failures.append((seed, str(m)))
        except Exception:  # noqa: BLE001 - a crash of the harness or of pjrt is a failure too
            failures.append((seed, "harness error:\n" + traceback.format_exc()))
        if args.progress and (k + 1) % args.progress == 0:
            print(f"{k + 1} programs, {clean} clean, {raised} raised alike, {len(failures)} failed, "
                  f"{time.time() - t0:.0f} s", flush=True)
        if args.seconds is not None and time.time() - t0 > args.seconds:
            args.programs = k + 1
            break
    elapsed = time.time() - t0
    write_report(args, clean, raised, failures, gaps, cpu_errors, lines, elapsed)
    print(f"done: {args.programs} programs, {clean} clean, {raised} raised alike, {len(failures)} failed; "
          f"report in {os.path.abspath(args.out)}")
    return 1 if failures else 0


def write_report(args, clean, raised, failures, gaps, cpu_errors, lines, elapsed):
    n = args.programs
    out = [
        "# Differential fuzzing: pjrt against CPU eager",
        "",
        "Written by `tests/fuzz_sweep.py`; regenerate with",
        "",
        "```bash",
        f".venv/bin/python tests/fuzz_sweep.py --programs {n}" + (f" --start {args.start}" if args.start else "")
        + (f" --focus {args.focus}" if args.focus else ""),
        "```",
        "",
        "Each program is 1-3 input tensors (NaN, infinities, signed zeros, large and extreme integer values; "
        "contiguous, transposed, strided, offset or expanded; 0-d and 0-size shapes included) and 1-6 ops "
        "(elementwise math with broadcasting and Python scalars, reductions and scans, views, in-place updates, "
        "indexed writes, out= writes, casts, indexing, matmul, less common binary and ternary ops such as "
        "hypot, nextafter, lerp and addcdiv, stable sorts, cummax, scatter_reduce, the data-dependent "
        "shapes of nonzero, masked_select and unique, torch.nn.functional ops (losses, normalizations, 1-d "
        "convolutions, pooling and interpolation), and gradients: torch.autograd.grad of one or two "
        "differentiable ops on a float leaf, with random weights), generated by `tests/fuzz_programs.py` from "
        "`random.Random(seed)` and run on CPU eager and on pjrt. Every variable is compared: dtype, shape, "
        "strides of dims with more than one element, storage offset, values (NaN in the same places, equal "
        "infinities, integers exactly, floats within a small tolerance); where CPU raised, pjrt must raise the "
        "same exception type. `tests/test_fuzz.py` runs the same generator under hypothesis in CI.",
        "",
        "## Latest run",
        "",
        f"- date: {datetime.date.today().isoformat()}, torch {torch.__version__}, "
        f"plugin {torch.pjrt.plugin()} on {platform.machine()}, {elapsed:.0f} s",
        f"- seeds {args.start} to {args.start + n - 1}: **{n} programs**, {lines} lines",
        f"- **{clean + raised} ran clean**: {clean} computed the same results, {raised} raised the same "
        f"exception type as CPU eager ({', '.join(f'{v} {k}' for k, v in cpu_errors.most_common())})",
        f"- **{len(failures)} failed**",
        "",
        "## Known gaps the generator steers around",
        "",
        "A generated line whose CPU error is one of these is dropped and another op drawn (count: lines "
        "dropped in this run). None can be fixed in a lowering; `tests/test_fuzz.py::test_known_gap_*` holds "
        "a strict-xfail example of each.",
        "",
        "| gap | lines dropped |",
        "|---|---|",
    ]
    for name in FP.KNOWN_GAPS:
        out.append(f"| {name} | {gaps.get(name, 0)} |")
    out += [
        "",
        "Also left out by construction, each with its reason in `tests/fuzz_programs.py`: integer division by "
        "zero (a data-dependent error) and int32/int64 min // -1 (SIGFPE in CPU eager), float -> int casts of "
        "NaN, infinities or out-of-range values (undefined in C++), out-of-range indices, "
        "`clone(memory_format=...)`/`.contiguous()`, out= tensors that alias an input, a one-element tensor written into itself by indexing (CPU eager raises or not by the rank of the value, which reaches the device expanded either way), mask writes of a one-element tensor of another dtype (CPU eager fills from a one-element CPU tensor as from a Python number and raises where it overflows the destination; CUDA and pjrt convert it as a tensor), in-place writes that read their own memory under another layout (`v.mul_(v.mT)`: CPU eager allows the full overlap and computes in its loop order, reading elements it already wrote), "
        "infinities and NaN in half-precision convolutions (CPU eager's spread NaN to outputs whose window "
        "holds none), gelu of infinities (CPU eager's vectorized and scalar "
        "kernels disagree), and normalizations of finite groups whose variance overflows the dtype "
        "(CPU eager's scalar loop gives NaN, its vectorized one and pjrt zeros).",
        "",
        "A value that differs is also accepted where CPU eager computes pjrt's value from the line's own "
        "inputs (`explained_by_inputs` in `tests/fuzz_programs.py`): from pjrt's inputs (a difference within "
        "tolerance that the line amplified), half types rounded once, sums within ulps of their magnitudes, "
        "and subnormal floats read and written as zero where the plugin declares `flushes_denormals` "
        "(XLA's CPU client sets FTZ/DAZ: docs/design.md, \"Subnormal floats\").",
        "",
        "## Failures",
        "",
    ]
    if not failures:
        out.append("None.")
    for seed, message in failures:
        out += [f"### seed {seed}", "", "```", message.rstrip(), "```", ""]
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write("\n".join(out).rstrip() + "\n")


if __name__ == "__main__":
    sys.exit(main())
