"""Why an ATen op still runs on the CPU on pjrt: one entry per op the OpInfo sweep sees fall back.

The one list of known fallbacks and their reasons. ``torch.pjrt.metrics.report()`` prints the
reason next to a fallback's count, and docs/ops.md (``openreg_tests/sweep.py``) shows it in its
ranking of fallbacks; tests/test_fallback.py checks that every op named here really has no native
kernel (so the list cannot go stale as lowerings land). An op missing from this list that falls
back is a gap, not a decision.
"""

from __future__ import annotations

from typing import Dict, Optional

_NO_XLA_DECOMPOSITION = ("StableHLO has no such op and the XLA:CPU plugin expands no custom call for it (it ships "
                         "no LAPACK)")
_JACOBI = "; an implementation of our own (Jacobi iterations as a stablehlo.while) is future work"

REASONS: Dict[str, str] = {
    # Linear algebra XLA cannot compute on this plugin.
    "aten::_linalg_svd": "SVD: " + _NO_XLA_DECOMPOSITION + _JACOBI + ". svd, svdvals, pinv, matrix_rank, cond, the "
                         "nuclear and 2-norms and lstsq's gelsd driver reach it",
    "aten::linalg_eig": "general (non-Hermitian) eigendecomposition: " + _NO_XLA_DECOMPOSITION + _JACOBI,
    "aten::linalg_eigvals": "general eigenvalues: " + _NO_XLA_DECOMPOSITION + _JACOBI,
    "aten::_linalg_eigvals": "general eigenvalues: " + _NO_XLA_DECOMPOSITION + _JACOBI,
    "aten::linalg_ldl_factor_ex": "LDL with LAPACK sytrf's Bunch-Kaufman pivoting, whose pivots are part of the "
                                  "result: " + _NO_XLA_DECOMPOSITION,
    "aten::linalg_ldl_solve": "solves with sytrf's factors and pivots (see linalg_ldl_factor_ex)",
    "aten::linalg_lstsq": "CPU's default driver (gelsy) is a QR with column pivoting (rank-revealing); XLA's QR "
                          "does not pivot, so rank-deficient problems would differ",
    # Ops not lowered yet.
    # Lowered, but some arguments take the CPU path.
    "aten::upsample_bilinear2d": "uint8 inputs only: CPU's int16 fixed-point kernel, which the float lowering does "
                                 "not reproduce bit for bit",
    "aten::upsample_bicubic2d": "uint8 inputs only (see upsample_bilinear2d)",
    "aten::_upsample_bilinear2d_aa": "uint8 inputs only (see upsample_bilinear2d)",
    "aten::_upsample_bicubic2d_aa": "uint8 inputs only (see upsample_bilinear2d)",
}

# Ops above that are lowered for most arguments (the rest have no pjrt kernel at all).
PARTLY_LOWERED = ("aten::upsample_bilinear2d", "aten::upsample_bicubic2d", "aten::_upsample_bilinear2d_aa",
                  "aten::_upsample_bicubic2d_aa")


def reason(op: str) -> Optional[str]:
    """Why `op` ("aten::<name>") runs on the CPU, if it is a known fallback."""
    return REASONS.get(op)
