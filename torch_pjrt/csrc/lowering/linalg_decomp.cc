// Matrix factorizations and what is built on them:
//   cholesky (stablehlo.cholesky): linalg_cholesky_ex, cholesky_inverse, _cholesky_solve_helper;
//   triangular solves (stablehlo.triangular_solve): linalg_solve_triangular, triangular_solve;
//   LU with partial pivoting (a stablehlo.while loop, LAPACK getrf's pivot choice; StableHLO has no
//   LU op): linalg_lu_factor_ex, linalg_lu, lu_unpack, linalg_lu_solve, _linalg_solve_ex,
//   linalg_inv_ex (and, in aten/linalg_kernels.cc, _linalg_det and _linalg_slogdet on top of them);
//   QR (XLA's "Qr" and "ProductOfElementaryHouseholderReflectors" custom calls, expanded by the
//   compiler into blocked Householder code with LAPACK's sign conventions): linalg_qr,
//   linalg_householder_product, geqrf (Qr's own packed result), ormqr;
//   symmetric eigendecomposition (XLA's "Eigh" custom call: Jacobi sweeps): _linalg_eigh.
// Batches are flattened to one leading dim where the algorithm needs explicit batch indices.
// `check_errors=True` is not honored inside the graph: the info outputs are computed, and the
// public functions (torch.linalg.cholesky, inv, solve, ...) check them with their own ops.
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <tuple>

#include "lowering/algebra.h"

namespace torch_pjrt::lowering {

// ---------------------------------------------------------------- shared helpers

Val FlattenBatch(Emitter& e, const Val& x) {
  int64_t r = x.rank();
  int64_t b = 1;
  for (int64_t i = 0; i + 2 < r; ++i) b *= x.dims()[i];
  return e.Reshape(x, {b, x.dims()[r - 2], x.dims()[r - 1]});
}

Val TriangularSolve(Emitter& e, const Val& a, const Val& b, bool left, bool lower, bool unit_diagonal,
                    const char* transpose) {
  if (b.numel() == 0 || a.numel() == 0) return e.Full(0, b.type);
  std::string text = "\"stablehlo.triangular_solve\"(" + e.Name(a) + ", " + e.Name(b) +
                     ") {left_side = " + (left ? "true" : "false") + ", lower = " +
                     (lower ? "true" : "false") + ", transpose_a = #stablehlo<transpose " + transpose +
                     ">, unit_diagonal = " + (unit_diagonal ? "true" : "false") + "}";
  return e.Raw(text, "(" + TypeString(a) + ", " + TypeString(b) + ") -> " + TypeString(b), b.type);
}

Val GatherRows(Emitter& e, const Val& x, const Val& idx) {
  int64_t batch = x.dims()[0], r = x.dims()[2], k = idx.dims()[1];
  TensorType it{ElementType::kS64, {batch, k, 1}};
  Val bi = e.Iota(it, 0);
  Val ri = e.Reshape(e.Convert(idx, ElementType::kS64), {batch, k, 1});
  Val indices = e.Concatenate({bi, ri}, 2);
  Emitter::GatherDims g;
  g.offset_dims = {2};
  g.collapsed_slice_dims = {0, 1};
  g.start_index_map = {0, 1};
  g.index_vector_dim = 2;
  g.slice_sizes = {1, 1, r};
  return e.Gather(x, indices, g, TensorType{x.dtype(), {batch, k, r}});
}

Val InversePermutation(Emitter& e, const Val& perm) {
  Val iota = e.Iota(perm.type, 1);
  auto less = [](Emitter& b, const std::vector<Val>& a) -> std::vector<Val> {
    return {b.Compare("LT", a[0], a[1])};
  };
  return e.Sort({perm, iota}, 1, false, less)[1];
}

namespace {

// Broadcasts a [B] value over [B, ...] dims.
Val PerBatch(Emitter& e, const Val& v, const Dims& dims) { return e.BroadcastInDim(v, dims, {0}); }

// |re| + |im| (LAPACK's pivot magnitude for complex numbers), |x| for real ones.
Val PivotMagnitude(Emitter& e, const Val& x) {
  if (!IsComplex(x.dtype())) return e.Unary("abs", x);
  return e.Binary("add", e.Unary("abs", RealPart(e, x)), e.Unary("abs", ImagPart(e, x)));
}

// Index of the largest value along dim 1 of [B, m] (ties go to the first; NaN never wins), or
// `fallback` when no value beats -1 (every candidate NaN).
Val ArgMaxRows(Emitter& e, const Val& values, const Val& fallback) {
  Val idx = e.Iota(TensorType{ElementType::kS64, values.dims()}, 1);
  auto body = [](Emitter& b, const std::vector<Val>& a) -> std::vector<Val> {
    const Val &av = a[0], &ai = a[1], &xv = a[2], &xi = a[3];
    Val x_ok = b.Compare("EQ", xv, xv);
    Val a_nan = b.Compare("NE", av, av);
    Val wins = b.Binary("or", b.Compare("GT", xv, av),
                        b.Binary("and", b.Compare("EQ", xv, av), b.Compare("LT", xi, ai)));
    Val take = b.Binary("and", x_ok, b.Binary("or", a_nan, wins));
    return {b.Select(take, xv, av), b.Select(take, xi, ai)};
  };
  return e.ReduceVariadic({values, idx}, {e.Scalar(-1, values.dtype()), fallback}, {1}, body)[1];
}

}  // namespace

LuResult LuFactor(Emitter& e, const Val& a, bool pivot) {
  int64_t batch = a.dims()[0], m = a.dims()[1], n = a.dims()[2];
  int64_t kmax = std::min(m, n);
  TensorType rows_t{ElementType::kS64, {batch, m}};
  LuResult r;
  Val perm0 = e.Iota(rows_t, 1);
  Val piv0 = e.Full(0, TensorType{ElementType::kS32, {batch, kmax}});
  Val info0 = e.Full(0, TensorType{ElementType::kS32, {batch}});
  if (kmax == 0 || batch == 0) {
    return {a, piv0, perm0, info0};
  }
  auto cond = [kmax](Emitter& b, const std::vector<Val>& v) -> std::vector<Val> {
    return {b.Compare("LT", v[0], b.Scalar(static_cast<double>(kmax), ElementType::kS64))};
  };
  auto body = [=](Emitter& b, const std::vector<Val>& v) -> std::vector<Val> {
    const Val &k = v[0], &A = v[1], &piv = v[2], &perm = v[3], &info = v[4];
    Val zero = b.Scalar(0, ElementType::kS64);
    Dims full{batch, m, n};
    TensorType full_i{ElementType::kS64, full};
    Val rows = b.Iota(rows_t, 1);
    Val k_rows = b.BroadcastInDim(k, rows_t.dims, {});
    Val col = b.Reshape(b.DynamicSlice(A, {zero, zero, k}, {batch, m, 1}), {batch, m});
    Val p;
    if (pivot) {
      Val mag = PivotMagnitude(b, col);
      Val candidates = b.Select(b.Compare("GE", rows, k_rows), mag, b.Full(NAN, mag.type));
      p = ArgMaxRows(b, candidates, k);
    } else {
      p = b.BroadcastInDim(k, {batch}, {});
    }
    // Swap rows k and p.
    Val row_k = b.Reshape(b.DynamicSlice(A, {zero, k, zero}, {batch, 1, n}), {batch, n});
    Val row_p = b.Reshape(GatherRows(b, A, b.Reshape(p, {batch, 1})), {batch, n});
    Val ri = b.Iota(full_i, 1), ci = b.Iota(full_i, 2);
    Val k_full = b.BroadcastInDim(k, full, {});
    Val p_full = PerBatch(b, p, full);
    Val is_k = b.Compare("EQ", ri, k_full), is_p = b.Compare("EQ", ri, p_full);
    Val A1 = b.Select(is_k, b.BroadcastInDim(row_p, full, {0, 2}),
                      b.Select(is_p, b.BroadcastInDim(row_k, full, {0, 2}), A));
    Val perm_k = b.BroadcastInDim(b.Reshape(b.DynamicSlice(perm, {zero, k}, {batch, 1}), {batch}), rows_t.dims, {0});
    Val perm_p = b.BroadcastInDim(
        b.Reshape(GatherRows(b, b.Reshape(perm, {batch, m, 1}), b.Reshape(p, {batch, 1})), {batch}),
        rows_t.dims, {0});
    Val p_rows = PerBatch(b, p, rows_t.dims);
    Val perm1 = b.Select(b.Compare("EQ", rows, k_rows), perm_p,
                         b.Select(b.Compare("EQ", rows, p_rows), perm_k, perm));
    Val p1 = b.Convert(b.Binary("add", p, b.Full(1, p.type)), ElementType::kS32);
    Val piv1 = b.DynamicUpdateSlice(piv, b.Reshape(p1, {batch, 1}), {zero, k});
    // Eliminate below the pivot (skipped for a zero pivot, like LAPACK).
    Val d = b.Reshape(b.DynamicSlice(row_p, {zero, k}, {batch, 1}), {batch});
    Val nonzero = b.Compare("NE", d, b.Full(0, d.type));
    Val col1 = b.Reshape(b.DynamicSlice(A1, {zero, zero, k}, {batch, m, 1}), {batch, m});
    Val below = b.Binary("and", b.Compare("GT", rows, k_rows), PerBatch(b, nonzero, rows_t.dims));
    Val l = b.Select(below, b.Binary("divide", col1, PerBatch(b, d, rows_t.dims)), b.Full(0, col1.type));
    TensorType cols_t{ElementType::kS64, {batch, n}};
    Val cols = b.Iota(cols_t, 1);
    Val u = b.Select(b.Compare("GT", cols, b.BroadcastInDim(k, cols_t.dims, {})), row_p, b.Full(0, row_p.type));
    Val outer = b.Binary("multiply", b.BroadcastInDim(l, full, {0, 1}), b.BroadcastInDim(u, full, {0, 2}));
    Val below_full = b.BroadcastInDim(below, full, {0, 1});
    Val right = b.Compare("GT", ci, k_full);
    Val A2 = b.Select(b.Binary("and", below_full, right), b.Binary("subtract", A1, outer), A1);
    Val on_col = b.Binary("and", below_full, b.Compare("EQ", ci, k_full));
    A2 = b.Select(on_col, b.BroadcastInDim(l, full, {0, 1}), A2);
    Val k1 = b.Convert(b.Binary("add", k, b.Scalar(1, ElementType::kS64)), ElementType::kS32);
    Val first_zero = b.Binary("and", b.Compare("EQ", info, b.Full(0, info.type)), b.Unary("not", nonzero));
    Val info1 = b.Select(first_zero, b.BroadcastInDim(k1, {batch}, {}), info);
    return {b.Binary("add", k, b.Scalar(1, ElementType::kS64)), A2, piv1, perm1, info1};
  };
  std::vector<Val> out = e.While({e.Scalar(0, ElementType::kS64), a, piv0, perm0, info0}, cond, body);
  r.lu = out[1];
  r.pivots = out[2];
  r.perm = out[3];
  r.info = out[4];
  return r;
}

Val LuSolve(Emitter& e, const Val& lu, const Val& perm, const Val& b, bool adjoint) {
  if (b.numel() == 0 || lu.numel() == 0) return e.Full(0, b.type);  // 0x0 systems: no rows to gather
  if (!adjoint) {
    Val y = GatherRows(e, b, perm);
    y = TriangularSolve(e, lu, y, true, true, true, "NO_TRANSPOSE");
    return TriangularSolve(e, lu, y, true, false, false, "NO_TRANSPOSE");
  }
  const char* op = IsComplex(lu.dtype()) ? "ADJOINT" : "TRANSPOSE";
  Val y = TriangularSolve(e, lu, b, true, false, false, op);
  y = TriangularSolve(e, lu, y, true, true, true, op);
  return GatherRows(e, y, InversePermutation(e, perm));
}

namespace {

// Batch dims of `x` broadcast to `batch`, then flattened: [B, m, n].
Val BroadcastBatch(Emitter& e, const Val& x, const Dims& batch) {
  Dims full = batch;
  full.push_back(x.dims()[x.rank() - 2]);
  full.push_back(x.dims()[x.rank() - 1]);
  return FlattenBatch(e, e.BroadcastTo(x, full));
}

Dims WithMatrix(const Dims& batch, int64_t m, int64_t n) {
  Dims d = batch;
  d.push_back(m);
  d.push_back(n);
  return d;
}

Dims BatchOf(const Dims& d, int64_t matrix_dims) { return Dims(d.begin(), d.end() - matrix_dims); }

// ---------------------------------------------------------------- cholesky

// The Hermitian matrix that the `lower` (or upper) triangle of a describes; the diagonal's
// imaginary part is ignored, like LAPACK.
Val HermitianFromTriangle(Emitter& e, const Val& a, bool lower) {
  Val t = Triangle(e, a, lower, lower ? -1 : 1);
  Val h = e.Binary("add", t, Adjoint(e, t));
  Val d = Diagonal(e, a);
  if (IsComplex(a.dtype())) d = ConvertTo(e, RealPart(e, d), a.dtype());
  TensorType it{ElementType::kS64, a.dims()};
  Dims mapping;
  for (int64_t i = 0; i + 1 < a.rank(); ++i) mapping.push_back(i);
  Val dd = e.BroadcastInDim(d, a.dims(), mapping);
  return e.Select(e.Compare("EQ", e.Iota(it, a.rank() - 2), e.Iota(it, a.rank() - 1)), dd, h);
}

Val Cholesky(Emitter& e, const Val& a, bool lower) {
  if (a.numel() == 0) return a;
  Val l = e.Raw("\"stablehlo.cholesky\"(" + e.Name(a) + ") {lower = " + (lower ? "true" : "false") + "}",
                "(" + TypeString(a) + ") -> " + TypeString(a), a.type);
  // The other triangle is unspecified in XLA's result.
  return Triangle(e, l, lower);
}

// linalg_cholesky_ex(self, *, upper=False, check_errors=False) -> (L, info)
std::vector<Val> LowerCholeskyEx(LowerCtx& c) {
  Emitter& e = c.e;
  Val a = ConvertTo(e, c.tensor(0), c.out(0).dtype);
  bool upper = c.bool_arg(1, false);
  Val l = Cholesky(e, a, !upper);
  if (a.numel() == 0) return {l, e.Full(0, c.out(1))};
  // info (LAPACK potrf's): 1 + the index of the first leading minor that is not positive definite.
  // XLA's cholesky fills its whole result with NaN when the matrix is not positive definite, so the
  // index comes from an unpivoted LU of the Hermitian matrix that the read triangle describes: its
  // k-th pivot is L[k, k]^2 while the leading minors are positive definite, and potrf stops at the
  // first pivot that is not positive (or is NaN).
  Val h = FlattenBatch(e, HermitianFromTriangle(e, a, !upper));
  Val diag = RealPart(e, Diagonal(e, LuFactor(e, h, /*pivot=*/false).lu));  // [B, n]
  int64_t n = diag.dims().back();
  TensorType it{ElementType::kS32, diag.dims()};
  Val bad = e.Unary("not", e.Compare("GT", diag, e.Full(0, diag.type)));
  Val pos = e.Binary("add", e.Iota(it, 1), e.Full(1, it));
  Val cand = e.Select(bad, pos, e.Full(static_cast<double>(n + 1), it));
  Val first = e.Reduce(cand, e.Scalar(static_cast<double>(n + 1), ElementType::kS32), {1}, "minimum");
  Val none = e.Compare("EQ", first, e.Full(static_cast<double>(n + 1), first.type));
  Val info = e.Select(none, e.Full(0, first.type), first);
  return {l, e.Reshape(info, c.out(1).dims)};
}

// cholesky_inverse(self, upper=False): (L L^H)^-1 = L^-H L^-1, or (U^H U)^-1 = U^-1 U^-H.
std::vector<Val> LowerCholeskyInverse(LowerCtx& c) {
  Emitter& e = c.e;
  Val f = ConvertTo(e, c.tensor(0), c.out().dtype);
  bool upper = c.bool_arg(1, false);
  Val x = TriangularSolve(e, f, Identity(e, f.type), true, !upper, false, "NO_TRANSPOSE");  // f^-1
  Val r = upper ? BatchMatmul(e, x, Adjoint(e, x)) : BatchMatmul(e, Adjoint(e, x), x);
  return {e.Reshape(r, c.out().dims)};
}

// _cholesky_solve_helper(self=B, A=factor, upper): solves (L L^H) X = B or (U^H U) X = B; the
// arguments arrive with equal batch dims.
std::vector<Val> LowerCholeskySolveHelper(LowerCtx& c) {
  Emitter& e = c.e;
  ElementType t = c.out().dtype;
  Val b = ConvertTo(e, c.tensor(0), t), f = ConvertTo(e, c.tensor(1), t);
  bool upper = c.bool_arg(2);
  const char* adj = IsComplex(t) ? "ADJOINT" : "TRANSPOSE";
  Val y, x;
  if (upper) {
    y = TriangularSolve(e, f, b, true, false, false, adj);
    x = TriangularSolve(e, f, y, true, false, false, "NO_TRANSPOSE");
  } else {
    y = TriangularSolve(e, f, b, true, true, false, "NO_TRANSPOSE");
    x = TriangularSolve(e, f, y, true, true, false, adj);
  }
  return {e.Reshape(x, c.out().dims)};
}

// ---------------------------------------------------------------- triangular solves

// linalg_solve_triangular(self=A, B, *, upper, left=True, unitriangular=False)
std::vector<Val> LowerSolveTriangular(LowerCtx& c) {
  Emitter& e = c.e;
  ElementType t = c.out().dtype;
  Val a = ConvertTo(e, c.tensor(0), t), b = ConvertTo(e, c.tensor(1), t);
  bool upper = c.bool_arg(2), left = c.bool_arg(3, true), unit = c.bool_arg(4, false);
  Dims batch = BatchOf(c.out().dims, 2);
  Dims a_dims = WithMatrix(batch, a.dims()[a.rank() - 2], a.dims()[a.rank() - 1]);
  Val x = TriangularSolve(e, e.BroadcastTo(a, a_dims), e.BroadcastTo(b, c.out().dims), left, !upper, unit,
                          "NO_TRANSPOSE");
  return {x};
}

// triangular_solve(self=B, A, upper=True, transpose=False, unitriangular=False)
//   -> (solution, cloned_coefficient)
std::vector<Val> LowerTriangularSolve(LowerCtx& c) {
  Emitter& e = c.e;
  ElementType t = c.out(0).dtype;
  Val b = ConvertTo(e, c.tensor(0), t), a = ConvertTo(e, c.tensor(1), t);
  bool upper = c.bool_arg(2, true), transpose = c.bool_arg(3, false), unit = c.bool_arg(4, false);
  Val ab = e.BroadcastTo(a, c.out(1).dims);
  Val x = TriangularSolve(e, ab, e.BroadcastTo(b, c.out(0).dims), true, !upper, unit,
                          transpose ? "TRANSPOSE" : "NO_TRANSPOSE");
  return {x, ab};
}

// ---------------------------------------------------------------- LU family

// The factorization of `a` broadcast to the batch of output `lu_out`, unflattened.
struct BatchedLu {
  LuResult r;
  Dims batch;
  int64_t m = 0, n = 0;
};
BatchedLu FactorFor(Emitter& e, const Val& a, const Dims& batch, bool pivot = true) {
  BatchedLu b;
  b.batch = batch;
  b.m = a.dims()[a.rank() - 2];
  b.n = a.dims()[a.rank() - 1];
  b.r = LuFactor(e, BroadcastBatch(e, a, batch), pivot);
  return b;
}
Val Unflatten(Emitter& e, const Val& v, const Dims& batch, const Dims& tail) {
  Dims d = batch;
  for (int64_t x : tail) d.push_back(x);
  return e.Reshape(v, d);
}

// linalg_lu_factor_ex(A, *, pivot=True, check_errors=False) -> (LU, pivots, info)
std::vector<Val> LowerLuFactorEx(LowerCtx& c) {
  Emitter& e = c.e;
  Val a = ConvertTo(e, c.tensor(0), c.out(0).dtype);
  BatchedLu f = FactorFor(e, a, BatchOf(a.dims(), 2), c.bool_arg(1, true));
  return {e.Reshape(f.r.lu, c.out(0).dims), e.Reshape(f.r.pivots, c.out(1).dims),
          e.Reshape(f.r.info, c.out(2).dims)};
}

// P (m x m) with A = P L U, from the row permutation: P[perm[i], i] = 1.
Val PermutationMatrix(Emitter& e, const Val& perm, ElementType t) {
  int64_t batch = perm.dims()[0], m = perm.dims()[1];
  Dims full{batch, m, m};
  Val rows = e.Iota(TensorType{ElementType::kS64, full}, 1);
  Val p = e.BroadcastInDim(perm, full, {0, 2});
  return e.Select(e.Compare("EQ", rows, p), e.Full(1, TensorType{t, full}), e.Full(0, TensorType{t, full}));
}

// L (unit lower, m x k) and U (upper, k x n) from a packed [B, m, n] LU.
std::pair<Val, Val> UnpackLu(Emitter& e, const Val& lu) {
  int64_t batch = lu.dims()[0], m = lu.dims()[1], n = lu.dims()[2], k = std::min(m, n);
  Val l = e.Slice(lu, {0, 0, 0}, {batch, m, k}, {1, 1, 1});
  l = Triangle(e, l, true, -1);
  TensorType it{ElementType::kS64, l.dims()};
  l = e.Select(e.Compare("EQ", e.Iota(it, 1), e.Iota(it, 2)), e.Full(1, l.type), l);
  Val u = Triangle(e, e.Slice(lu, {0, 0, 0}, {batch, k, n}, {1, 1, 1}), false);
  return {l, u};
}

// linalg_lu(A, *, pivot=True) -> (P, L, U)
std::vector<Val> LowerLinalgLu(LowerCtx& c) {
  Emitter& e = c.e;
  ElementType t = c.out(1).dtype;
  Val a = ConvertTo(e, c.tensor(0), t);
  bool pivot = c.bool_arg(1, true);
  BatchedLu f = FactorFor(e, a, BatchOf(a.dims(), 2), pivot);
  auto [l, u] = UnpackLu(e, f.r.lu);
  Val p = pivot ? e.Reshape(PermutationMatrix(e, f.r.perm, t), c.out(0).dims) : e.Full(0, c.out(0));
  return {p, e.Reshape(l, c.out(1).dims), e.Reshape(u, c.out(2).dims)};
}

// The row permutation [B, m] that LAPACK-style pivots [B, k] (1-based swaps) describe.
Val PermFromPivots(Emitter& e, const Val& pivots, int64_t m) {
  int64_t batch = pivots.dims()[0], k = pivots.dims()[1];
  TensorType rows_t{ElementType::kS64, {batch, m}};
  Val perm0 = e.Iota(rows_t, 1);
  if (k == 0 || batch == 0 || m == 0) return perm0;
  Val piv = e.Convert(pivots, ElementType::kS64);
  auto cond = [k](Emitter& b, const std::vector<Val>& v) -> std::vector<Val> {
    return {b.Compare("LT", v[0], b.Scalar(static_cast<double>(k), ElementType::kS64))};
  };
  auto body = [=](Emitter& b, const std::vector<Val>& v) -> std::vector<Val> {
    const Val &i = v[0], &perm = v[1], &pv = v[2];
    Val zero = b.Scalar(0, ElementType::kS64);
    Val p = b.Binary("subtract", b.Reshape(b.DynamicSlice(pv, {zero, i}, {batch, 1}), {batch}),
                     b.Full(1, TensorType{ElementType::kS64, {batch}}));
    // Out-of-range pivots are clamped (torch checks them on the CPU; the graph cannot raise).
    p = b.Clamp(b.Scalar(0, ElementType::kS64), p, b.Scalar(static_cast<double>(m - 1), ElementType::kS64));
    Val rows = b.Iota(rows_t, 1);
    Val i_rows = b.BroadcastInDim(i, rows_t.dims, {});
    Val p_rows = b.BroadcastInDim(p, rows_t.dims, {0});
    Val at_i = b.BroadcastInDim(b.Reshape(b.DynamicSlice(perm, {zero, i}, {batch, 1}), {batch}), rows_t.dims, {0});
    Val at_p = b.BroadcastInDim(
        b.Reshape(GatherRows(b, b.Reshape(perm, {batch, m, 1}), b.Reshape(p, {batch, 1})), {batch}), rows_t.dims,
        {0});
    Val next = b.Select(b.Compare("EQ", rows, i_rows), at_p, b.Select(b.Compare("EQ", rows, p_rows), at_i, perm));
    return {b.Binary("add", i, b.Scalar(1, ElementType::kS64)), next, pv};
  };
  return e.While({e.Scalar(0, ElementType::kS64), perm0, piv}, cond, body)[1];
}

// lu_unpack(LU_data, LU_pivots, unpack_data=True, unpack_pivots=True) -> (P, L, U)
std::vector<Val> LowerLuUnpack(LowerCtx& c) {
  Emitter& e = c.e;
  ElementType t = c.out(1).dtype;
  Val lu = ConvertTo(e, c.tensor(0), t);
  bool unpack_data = c.bool_arg(2, true), unpack_pivots = c.bool_arg(3, true);
  int64_t m = lu.dims()[lu.rank() - 2];
  Dims batch = BatchOf(lu.dims(), 2);
  std::vector<Val> out;
  if (unpack_pivots && NumElements(c.out(0).dims) > 0) {
    Val piv = c.tensor(1);
    Val flat = e.Reshape(piv, {NumElements(batch), piv.dims().back()});
    out.push_back(e.Reshape(PermutationMatrix(e, PermFromPivots(e, flat, m), t), c.out(0).dims));
  } else {
    out.push_back(e.Full(0, c.out(0)));
  }
  if (unpack_data && NumElements(c.out(1).dims) + NumElements(c.out(2).dims) > 0) {
    auto [l, u] = UnpackLu(e, FlattenBatch(e, lu));
    out.push_back(e.Reshape(l, c.out(1).dims));
    out.push_back(e.Reshape(u, c.out(2).dims));
  } else {
    out.push_back(e.Full(0, c.out(1)));
    out.push_back(e.Full(0, c.out(2)));
  }
  return out;
}

// Solves with A's LU ([B, n, n], perm [B, n]) for B [B, n, r] or, with left=False, X A = B
// ([B, r, n]); adjoint solves with A^H.
Val SolveWith(Emitter& e, const Val& lu, const Val& perm, const Val& b, bool left, bool adjoint) {
  if (left) return LuSolve(e, lu, perm, b, adjoint);
  // X A = B  <=>  A^H X^H = B^H;   X A^H = B  <=>  A X^H = B^H.
  return Adjoint(e, LuSolve(e, lu, perm, Adjoint(e, b), !adjoint));
}

// linalg_lu_solve(LU, pivots, B, *, left=True, adjoint=False)
std::vector<Val> LowerLuSolve(LowerCtx& c) {
  Emitter& e = c.e;
  ElementType t = c.out().dtype;
  Val lu = ConvertTo(e, c.tensor(0), t), b = ConvertTo(e, c.tensor(2), t);
  Val piv = c.tensor(1);
  bool left = c.bool_arg(3, true), adjoint = c.bool_arg(4, false);
  Dims batch = BatchOf(c.out().dims, 2);
  int64_t n = lu.dims()[lu.rank() - 1];
  Val luf = BroadcastBatch(e, lu, batch);
  Dims piv_full = batch;
  piv_full.push_back(piv.dims().back());
  Val pivf = e.Reshape(e.BroadcastTo(piv, piv_full), {NumElements(batch), piv.dims().back()});
  Val perm = PermFromPivots(e, pivf, n);
  Val bf = FlattenBatch(e, e.BroadcastTo(b, c.out().dims));
  return {e.Reshape(SolveWith(e, luf, perm, bf, left, adjoint), c.out().dims)};
}

// _linalg_solve_ex(A, B, *, left=True, check_errors=False) -> (result, LU, pivots, info).
// B is a batch of vectors when the result has one dim less than A (torch's rule).
std::vector<Val> LowerSolveEx(LowerCtx& c) {
  Emitter& e = c.e;
  ElementType t = c.out(0).dtype;
  Val a = ConvertTo(e, c.tensor(0), t), b = ConvertTo(e, c.tensor(1), t);
  bool left = c.bool_arg(2, true);
  Dims lu_dims = c.out(1).dims;
  Dims batch = BatchOf(lu_dims, 2);
  BatchedLu f = FactorFor(e, a, batch);
  const Dims& x_dims = c.out(0).dims;
  bool vector = static_cast<int64_t>(x_dims.size()) == static_cast<int64_t>(lu_dims.size()) - 1;
  Val bm;
  Dims x_matrix = x_dims;
  if (vector) {
    x_matrix.push_back(1);
    bm = e.Reshape(e.BroadcastTo(b, x_dims), x_matrix);
  } else {
    bm = e.BroadcastTo(b, x_dims);
  }
  Dims xb = BatchOf(x_matrix, 2);
  // The result's batch may be larger than A's (B broadcasts A): factor A's batch, then broadcast.
  Val lu = f.r.lu, perm = f.r.perm;
  if (!(xb == batch)) {
    Val luu = Unflatten(e, lu, batch, {f.m, f.n});
    lu = FlattenBatch(e, e.BroadcastTo(luu, WithMatrix(xb, f.m, f.n)));
    Val pu = Unflatten(e, perm, batch, {f.m});
    Dims pd = xb;
    pd.push_back(f.m);
    perm = e.Reshape(e.BroadcastTo(pu, pd), {NumElements(xb), f.m});
  }
  Val x = SolveWith(e, lu, perm, FlattenBatch(e, bm), left, false);
  return {e.Reshape(x, x_dims), e.Reshape(f.r.lu, lu_dims), e.Reshape(f.r.pivots, c.out(2).dims),
          e.Reshape(f.r.info, c.out(3).dims)};
}

// linalg_inv_ex(A, *, check_errors=False) -> (inverse, info)
std::vector<Val> LowerInvEx(LowerCtx& c) {
  Emitter& e = c.e;
  ElementType t = c.out(0).dtype;
  Val a = ConvertTo(e, c.tensor(0), t);
  Dims batch = BatchOf(a.dims(), 2);
  BatchedLu f = FactorFor(e, a, batch);
  Val x = LuSolve(e, f.r.lu, f.r.perm, Identity(e, f.r.lu.type), false);
  return {e.Reshape(x, c.out(0).dims), e.Reshape(f.r.info, c.out(1).dims)};
}

// ---------------------------------------------------------------- QR and eigh

// linalg_householder_product(input [.., m, n], tau [.., k]) -> Q [.., m, n]
Val HouseholderProduct(Emitter& e, const Val& a, const Val& tau) {
  if (a.numel() == 0) return e.Full(0, a.type);
  return e.CustomCall("ProductOfElementaryHouseholderReflectors", {a, tau}, {a.type})[0];
}

std::vector<Val> LowerHouseholderProduct(LowerCtx& c) {
  ElementType t = c.out().dtype;
  Val a = ConvertTo(c.e, c.tensor(0), t), tau = ConvertTo(c.e, c.tensor(1), t);
  return {HouseholderProduct(c.e, a, tau)};
}

// linalg_qr(A, mode="reduced") -> (Q, R); modes "reduced", "complete", "r" (Q empty).
std::vector<Val> LowerQr(LowerCtx& c) {
  Emitter& e = c.e;
  ElementType t = c.out(1).dtype;
  Val a = ConvertTo(e, c.tensor(0), t);
  std::string mode = c.is_none(1) ? "reduced" : c.string_arg(1);
  int64_t r = a.rank(), m = a.dims()[r - 2], n = a.dims()[r - 1], k = std::min(m, n);
  Dims batch = BatchOf(a.dims(), 2);
  if (a.numel() == 0) {
    // Q of an empty-column matrix is still an identity block (complete mode).
    Val q = NumElements(c.out(0).dims) == 0 ? e.Full(0, c.out(0)) : Identity(e, c.out(0));
    return {q, e.Full(0, c.out(1))};
  }
  Dims tau_dims = batch;
  tau_dims.push_back(k);
  std::vector<Val> qr = e.CustomCall("Qr", {a}, {a.type, TensorType{t, tau_dims}});
  Val packed = qr[0], taus = qr[1];
  Val rr = Triangle(e, packed, false);
  const Dims& r_dims = c.out(1).dims;
  if (r_dims[r - 2] != m) rr = e.SliceDim(rr, r - 2, 0, r_dims[r - 2]);
  if (mode == "r") return {e.Full(0, c.out(0)), rr};
  const Dims& q_dims = c.out(0).dims;
  int64_t qcols = q_dims[r - 1];
  Val vs = packed;
  if (n > qcols) {
    vs = e.SliceDim(vs, r - 1, 0, qcols);
  } else if (n < qcols) {
    Dims lo(r, 0), hi(r, 0), in(r, 0);
    hi[r - 1] = qcols - n;
    vs = e.Pad(vs, e.Scalar(0, t), lo, hi, in);
  }
  return {HouseholderProduct(e, vs, taus), rr};
}

// geqrf(A) -> (a, tau): LAPACK's packed QR (R on and above the diagonal, the Householder vectors
// below it), which is what XLA's Qr custom call computes.
std::vector<Val> LowerGeqrf(LowerCtx& c) {
  Val a = ConvertTo(c.e, c.tensor(0), c.out(0).dtype);
  if (a.numel() == 0 || c.out(1).dims.back() == 0) return {a, c.e.Full(0, c.out(1))};
  std::vector<Val> qr = c.e.CustomCall("Qr", {a}, {a.type, c.out(1)});
  return {qr[0], qr[1]};
}

// ormqr(A, tau, C, left=True, transpose=False) -> Q C, Q^H C, C Q or C Q^H, with Q = H_1 ... H_k
// the full square product of A's Householder reflectors (A's columns padded with zeros to Q's
// size: the missing reflectors are the identity).
std::vector<Val> LowerOrmqr(LowerCtx& c) {
  Emitter& e = c.e;
  ElementType t = c.out().dtype;
  Val a = ConvertTo(e, c.tensor(0), t), tau = ConvertTo(e, c.tensor(1), t), other = ConvertTo(e, c.tensor(2), t);
  bool left = c.bool_arg(3, true), transpose = c.bool_arg(4, false);
  int64_t r = a.rank(), size = a.dims()[r - 2], k = a.dims()[r - 1];
  if (other.numel() == 0) return {e.Full(0, c.out())};
  Dims qdims = a.dims();
  qdims[r - 1] = size;
  Val q = Identity(e, TensorType{t, qdims});
  if (k > 0 && tau.dims().back() > 0) {
    Dims lo(r, 0), hi(r, 0), in(r, 0);
    hi[r - 1] = size - k;
    Val square = k == size ? a : e.Pad(a, e.Scalar(0, t), lo, hi, in);
    q = HouseholderProduct(e, square, tau);
  }
  if (transpose) q = Adjoint(e, q);
  return {left ? BatchMatmul(e, q, other) : BatchMatmul(e, other, q)};
}

// _linalg_eigh(A, UPLO="L", compute_v=True) -> (eigenvalues, eigenvectors), eigenvalues ascending.
// Frobenius norm over the two innermost dims: [...].
Val FrobeniusNorm(Emitter& e, const Val& x) {
  Val re = RealPart(e, x), im = ImagPart(e, x);
  Val sq = e.Binary("add", e.Binary("multiply", re, re), e.Binary("multiply", im, im));
  return e.Unary("sqrt", e.Reduce(sq, e.Scalar(0, sq.dtype()), {x.rank() - 2, x.rank() - 1}, "add"));
}

// One step of Ogita and Aishima's refinement of an approximate eigendecomposition (X, lambda) of
// the Hermitian matrix a ("Iterative refinement for symmetric eigenvalue decomposition", 2018):
// quadratic convergence, clusters of eigenvalues kept apart by delta. Returns the refined X and
// the eigenvalues its Rayleigh quotients give.
std::pair<Val, Val> RefineEigh(Emitter& e, const Val& a, const Val& x) {
  int64_t r = a.rank();
  Val eye = Identity(e, a.type);
  Val xh = Adjoint(e, x);
  Val rr = e.Binary("subtract", eye, BatchMatmul(e, xh, x));
  Val ss = BatchMatmul(e, xh, BatchMatmul(e, a, x));
  Val r_diag = RealPart(e, Diagonal(e, rr)), s_diag = RealPart(e, Diagonal(e, ss));
  Val lam = e.Binary("divide", s_diag, e.Binary("subtract", e.Full(1, r_diag.type), r_diag));  // [.., n]
  Dims lead;
  for (int64_t i = 0; i + 2 < r; ++i) lead.push_back(i);
  Dims row_map = lead, col_map = lead;
  row_map.push_back(r - 2);
  col_map.push_back(r - 1);
  Val lam_c = ConvertTo(e, lam, a.dtype());
  Val lam_j = e.BroadcastInDim(lam_c, a.dims(), col_map), lam_i = e.BroadcastInDim(lam_c, a.dims(), row_map);
  TensorType it{ElementType::kS64, a.dims()};
  Val on_diag = e.Compare("EQ", e.Iota(it, r - 2), e.Iota(it, r - 1));
  Val off = e.Select(on_diag, e.Full(0, ss.type), ss);
  Val delta = e.Binary("add", e.Binary("multiply", e.Full(2, FrobeniusNorm(e, off).type), FrobeniusNorm(e, off)),
                       e.Binary("multiply", FrobeniusNorm(e, a), FrobeniusNorm(e, rr)));  // [..]
  Val gap = e.Binary("subtract", lam_j, lam_i);
  Val gap_mag = e.Unary("abs", RealPart(e, gap));
  Val separated = e.Compare("GT", gap_mag, e.BroadcastInDim(delta, gap_mag.dims(), lead));
  Val apart = e.Binary("divide", e.Binary("add", ss, e.Binary("multiply", lam_j, rr)), gap);
  Val half_r = e.Binary("multiply", rr, e.Full(0.5, rr.type));
  Val ee = e.Select(separated, apart, half_r);
  return {e.Binary("add", x, BatchMatmul(e, x, ee)), lam};
}

// _linalg_eigh(A, UPLO="L", compute_v=True) -> (eigenvalues, eigenvectors), eigenvalues ascending.
// XLA's Jacobi expansion skips rotations below float32's epsilon, which leaves double-precision
// eigenvectors accurate to ~1e-8 only; two refinement steps bring them to double precision.
std::vector<Val> LowerEigh(LowerCtx& c) {
  Emitter& e = c.e;
  Val a = c.tensor(0);
  bool compute_v = c.bool_arg(2, true);
  if (a.numel() == 0) return {e.Full(0, c.out(0)), e.Full(0, c.out(1))};
  // XLA's Eigh expansion is cached per operand shape only (OpExpanderPass's computation cache
  // ignores the backend config), so two calls on one shape in one module must share a config:
  // the upper triangle of A is read as the lower triangle of A^H, which describes the same matrix.
  if (!(c.is_none(1) || c.string_arg(1) == "L")) a = Adjoint(e, a);
  const bool lower = true;
  Dims w_dims(a.dims().begin(), a.dims().end() - 1);
  TensorType wt{ComplexPartType(a.dtype()), w_dims};
  bool wide = ComplexPartType(a.dtype()) == ElementType::kF64;
  // Config: lower, sort_eigenvalues, max sweeps, tolerance (of the off-diagonal norm relative to
  // the Frobenius norm).
  char cfg[96];
  std::snprintf(cfg, sizeof(cfg), "%d,1,100,%g", lower ? 1 : 0, wide ? 1e-15 : 1e-7);
  std::vector<Val> vw = e.CustomCall("Eigh", {a}, {a.type, wt}, cfg);
  Val v = vw[0], w = vw[1];
  if (wide && a.dims().back() > 1) {
    Val h = HermitianFromTriangle(e, a, lower);
    for (int step = 0; step < 2; ++step) std::tie(v, w) = RefineEigh(e, h, v);
  }
  w = e.Convert(w, c.out(0).dtype);
  v = compute_v ? e.Reshape(v, c.out(1).dims) : e.Full(0, c.out(1));
  return {w, v};
}

}  // namespace

void RegisterLinalgDecompositionOps(Registry& r) {
  r.Add("linalg_cholesky_ex", LowerCholeskyEx);
  r.Add("cholesky_inverse", LowerCholeskyInverse);
  r.Add("_cholesky_solve_helper", LowerCholeskySolveHelper);
  r.Add("linalg_solve_triangular", LowerSolveTriangular);
  r.Add("triangular_solve", LowerTriangularSolve);
  r.Add("linalg_lu_factor_ex", LowerLuFactorEx);
  r.Add("linalg_lu", LowerLinalgLu);
  r.Add("lu_unpack", LowerLuUnpack);
  r.Add("linalg_lu_solve", LowerLuSolve);
  r.Add("_linalg_solve_ex", LowerSolveEx);
  r.Add("linalg_inv_ex", LowerInvEx);
  r.Add("linalg_householder_product", LowerHouseholderProduct);
  r.Add("linalg_qr", LowerQr);
  r.Add("geqrf", LowerGeqrf);
  r.Add("ormqr", LowerOrmqr);
  r.Add("_linalg_eigh", LowerEigh);
}

}  // namespace torch_pjrt::lowering
