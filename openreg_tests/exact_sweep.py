"""Bit-for-bit comparison with CPU eager in one dtype: which OpInfos differ, and by how many ulps.

    .venv/bin/python openreg_tests/exact_sweep.py --dtype bfloat16           # ops off by > 2.5 ulps
    .venv/bin/python openreg_tests/exact_sweep.py --dtype float32 --ulps 64 --ops remainder,lerp

The OpInfo sweep (sweep.py) compares within torch's tolerances, which for float16 and bfloat16
hide systematic differences of a few ulps and more: a Python number read in float where CPU's
kernel reads it in the half type, a step rounded on one side only, another order of operations.
This sweep runs the first samples of every OpInfo (or of --ops) on both devices and reports, per
op, the largest difference in ulps of the dtype, relative to max(|CPU's value|, 1e-2), so values
near zero do not dominate. Random ops, whose draws differ by design, are left out. A difference is
a lead, not a verdict: CPU eager is sometimes the less precise side (its bfloat16 grid_sampler
computes coordinates in bfloat16) and transcendental functions differ by an ulp or two; see
docs/design.md ("Python numbers beside half types") for what has been matched and what not.
About 3 minutes per dtype on two cores.
"""
import argparse
import warnings

import torch
import torch.utils._pytree as pytree
from torch.testing._internal.common_methods_invocations import op_db

ULP = {torch.bfloat16: 2.0 ** -7, torch.float16: 2.0 ** -10, torch.float32: 2.0 ** -23, torch.float64: 2.0 ** -52}
RANDOM = ("rand", "normal", "dropout", "bernoulli", "cauchy", "exponential", "geometric", "uniform", "multinomial",
          "rrelu", "fractional", "empty", "multi_head_attention", "scaled_dot_product_attention")


def on_pjrt(tree):
    return pytree.tree_map(lambda t: t.to("pjrt") if isinstance(t, torch.Tensor) else t, tree)


def worst_ulps(want, got, dtype):
    """The largest difference between two results of `dtype`, in ulps (0: bit for bit)."""
    worst = 0.0
    for w, g in zip(pytree.tree_leaves(want), pytree.tree_leaves(got)):
        if not (isinstance(w, torch.Tensor) and isinstance(g, torch.Tensor)) or w.dtype != dtype or g.shape != w.shape:
            continue
        w, g = w.double(), g.cpu().double()
        differ = ~((w == g) | (w.isnan() & g.isnan()))
        if differ.any():
            err = ((w - g).abs() / w.abs().clamp_min(1e-2))[differ].nan_to_num(1e30).max().item()
            worst = max(worst, err / ULP.get(dtype, 1.0))
    return worst


def sweep_op(op, dtype, samples):
    """(worst ulps, sample kwargs there) over the op's first samples that run on both devices."""
    worst, where = 0.0, None
    for s in list(op.sample_inputs("cpu", dtype, requires_grad=False))[:samples]:
        try:
            want = op(s.input, *s.args, **s.kwargs)
            got = op(on_pjrt(s.input), *on_pjrt(s.args), **on_pjrt(s.kwargs))
            err = worst_ulps(want, got, dtype)
        except Exception:  # noqa: BLE001 - errors are sweep.py's business
            continue
        if err > worst:
            worst, where = err, s.kwargs
    return worst, where


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--ulps", type=float, default=2.5, help="report ops off by more than this")
    ap.add_argument("--ops", default=None, help="comma-separated OpInfo names (default: all)")
    ap.add_argument("--samples", type=int, default=12, help="samples per OpInfo")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    torch.pjrt.set_fallback_warnings(False)
    dtype = getattr(torch, args.dtype)
    names = set(args.ops.split(",")) if args.ops else None
    rows = []
    for op in op_db:
        if names is not None and op.name not in names:
            continue
        if dtype not in op.supported_dtypes("cpu") or any(r in op.name for r in RANDOM):
            continue
        worst, where = sweep_op(op, dtype, args.samples)
        if worst > args.ulps:
            rows.append((worst, f"{op.name} {op.variant_test_name}".strip(), where))
    for worst, name, where in sorted(rows, key=lambda r: -r[0]):
        print(f"{worst:12.1f}  {name}  {str(where)[:100] if where else ''}")
    print(f"{len(rows)} OpInfos off by more than {args.ulps} ulps in {args.dtype}")


if __name__ == "__main__":
    main()
