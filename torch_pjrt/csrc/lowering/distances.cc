// Pairwise distances: _cdist_forward / _cdist_backward, _pdist_forward / _pdist_backward. torch's CPU kernels
// (aten/src/ATen/native/Distance.cpp, cpu/DistanceOpsKernel.cpp) are followed formula for formula:
// the p = 2 forward switches to the matrix-product form where torch does, because that form
// rounds differently (it cancels for close points) and results must match CPU's.
#include "lowering/lowering.h"
#include "lowering/pointwise_util.h"

namespace torch_pjrt::lowering {

namespace {

using namespace pw;

// x1 [..., P, M] and x2 [..., R, M] with their batch dims broadcast to the output's.
struct PointSets {
  Val x1, x2;
  int64_t batch_rank;
};
PointSets Broadcast(LowerCtx& c, size_t i1, size_t i2, const Dims& out, ElementType t) {
  Val a = c.e.Convert(c.tensor(i1), t), b = c.e.Convert(c.tensor(i2), t);
  int64_t batch = static_cast<int64_t>(out.size()) - 2;
  auto shaped = [&](const Val& v, int64_t rows) {
    Dims d;
    for (int64_t i = 0; i < batch; ++i) d.push_back(out[i]);
    d.push_back(rows);
    d.push_back(v.dims().back());
    return c.e.BroadcastTo(v, d);
  };
  return {shaped(a, out[batch]), shaped(b, out[batch + 1]), batch};
}

// x1[..., i, :] - x2[..., j, :] as [..., P, R, M].
Val Differences(Emitter& e, const PointSets& s) {
  int64_t b = s.batch_rank;
  Dims full = s.x1.dims();
  full.insert_at(b + 1, s.x2.dims()[b]);  // [..., P, R, M]
  Dims map1, map2;
  for (int64_t i = 0; i < b; ++i) {
    map1.push_back(i);
    map2.push_back(i);
  }
  for (int64_t d : {b, b + 2}) map1.push_back(d);
  for (int64_t d : {b + 1, b + 2}) map2.push_back(d);
  return Sub(e, e.BroadcastInDim(s.x1, full, map1), e.BroadcastInDim(s.x2, full, map2));
}

// torch's _euclidean_dist: [-2 x1, |x1|^2, 1] @ [x2, 1, |x2|^2]^T, clamped at 0, square root.
Val EuclideanByProduct(Emitter& e, const PointSets& s) {
  int64_t b = s.batch_rank, m = b + 1;
  auto squared_norms = [&](const Val& x) {
    Val n = SumDims(e, Mul(e, x, x), {m}, x.dtype());
    Dims kept = x.dims();
    kept[m] = 1;
    return e.Reshape(n, kept);
  };
  Val n1 = squared_norms(s.x1), n2 = squared_norms(s.x2);
  Val a = e.Concatenate({Mul(e, s.x1, K(e, -2, s.x1)), n1, K(e, 1, n1)}, m);
  Val bb = e.Concatenate({s.x2, K(e, 1, n2), n2}, m);
  Dims batch;
  for (int64_t i = 0; i < b; ++i) batch.push_back(i);
  Val r = e.DotGeneral(a, bb, batch, batch, {m}, {m}, a.dtype());
  return Sqrt(e, Max(e, r, K(e, 0, r)));
}

// _cdist_forward(x1, x2, p, compute_mode): compute_mode None/0 uses the product form for p = 2
// when either set has more than 25 points, 1 always, 2 never.
bool UsesProduct(LowerCtx& c, double p, const PointSets& s) {
  if (p != 2) return false;
  int64_t mode = c.is_none(3) ? 0 : c.int_arg(3);
  int64_t b = s.batch_rank;
  return mode == 1 || (mode == 0 && (s.x1.dims()[b] > 25 || s.x2.dims()[b] > 25));
}

// The p-distances of [..., P, R, M] differences over M, as torch's distance kernels reduce them:
// where they differ from a vector norm, ord 0 counts min(ceil(|d|), 1), so NaN stays NaN, and
// cdist's ord inf folds std::max(agg, |d|) from 0, which skips NaN (pdist's propagates it).
Val PDistances(Emitter& e, const Val& diff, double p, bool inf_skips_nan) {
  Val a = Abs(e, diff);
  Dims features{a.rank() - 1};
  if (p == 0) return SumDims(e, Min(e, e.Unary("ceil", a), K(e, 1, a)), features, a.dtype());
  if (std::isinf(p) && inf_skips_nan) a = Sel(e, IsNan(e, a), K(e, 0, a), a);
  return PNorm(e, a, p, features);
}

std::vector<Val> LowerCdistForward(LowerCtx& c) {
  Emitter& e = c.e;
  ElementType t = Opmath(c.out().dtype);
  PointSets s = Broadcast(c, 0, 1, c.out().dims, t);
  double p = c.double_arg(2);
  if (s.x1.dims().back() == 0) return {e.Full(0, c.out())};
  if (UsesProduct(c, p, s)) return {Done(c, EuclideanByProduct(e, s))};
  return {Done(c, PDistances(e, Differences(e, s), p, /*inf_skips_nan=*/true))};
}

// The pairs i < j of n points in row-major order, condensed [n (n - 1) / 2], from a full
// [n, n] matrix: the part of row i right of the diagonal, row after row.
Val Condense(Emitter& e, const Val& full) {
  int64_t n = full.dims()[0];
  std::vector<Val> rows;
  for (int64_t i = 0; i + 1 < n; ++i) rows.push_back(e.Reshape(e.Slice(full, {i, i + 1}, {i + 1, n}, {1, 1}), {n - 1 - i}));
  if (rows.empty()) return e.Full(0, TensorType{full.dtype(), {0}});
  return rows.size() == 1 ? rows[0] : e.Concatenate(rows, 0);
}
// The inverse: a symmetric [n, n] matrix with the condensed values off the diagonal (0 on it).
Val Expand(Emitter& e, const Val& condensed, int64_t n) {
  std::vector<Val> rows;
  int64_t start = 0;
  Val zero = e.Scalar(0, condensed.dtype());
  for (int64_t i = 0; i < n; ++i) {
    Val part = e.SliceDim(condensed, 0, start, start + n - 1 - i);
    rows.push_back(e.Reshape(e.Pad(part, zero, {i + 1}, {0}, {0}), {1, n}));
    start += n - 1 - i;
  }
  Val upper = rows.size() == 1 ? rows[0] : e.Concatenate(rows, 0);
  return Add(e, upper, e.Transpose(upper, {1, 0}));
}

// _pdist_forward(self [n, m], p): distances of every pair of rows.
std::vector<Val> LowerPdistForward(LowerCtx& c) {
  Emitter& e = c.e;
  ElementType t = Opmath(c.out().dtype);
  Val x = e.Convert(c.tensor(0), t);
  if (c.out().dims[0] == 0) return {e.Full(0, c.out())};
  Val diff = Differences(e, PointSets{x, x, 0});
  return {Done(c, Condense(e, PDistances(e, diff, c.double_arg(1), /*inf_skips_nan=*/false)))};
}

// d dist / d diff for one pair, as torch's backward kernels compute it (0 where dist is 0).
Val PairGradient(Emitter& e, const Val& diff, const Val& grad, const Val& dist, double p) {
  Val zero = K(e, 0, diff);
  Val sign = e.Unary("sign", diff);
  if (p == 0) return zero;
  if (p == 1) return Mul(e, sign, grad);
  if (std::isinf(p)) return Mul(e, Mul(e, grad, sign), e.Convert(Cmp(e, "EQ", Abs(e, diff), dist), diff.dtype()));
  Val at_zero = Cmp(e, "EQ", dist, zero);
  Val g;
  if (p == 2) {
    g = Div(e, Mul(e, grad, diff), dist);
  } else if (p < 2) {
    Val num = Mul(e, Mul(e, sign, e.Binary("power", Abs(e, diff), K(e, p - 1, diff))), grad);
    g = Div(e, num, e.Binary("power", dist, K(e, p - 1, dist)));
    if (p < 1) at_zero = Or(e, at_zero, Cmp(e, "EQ", diff, zero));
  } else {
    Val num = Mul(e, Mul(e, diff, e.Binary("power", Abs(e, diff), K(e, p - 2, diff))), grad);
    g = Div(e, num, e.Binary("power", dist, K(e, p - 1, dist)));
  }
  return Sel(e, at_zero, zero, g);
}

// _cdist_backward(grad, x1, x2, p, cdist) -> grad of x1: the pair gradients summed over x2's
// points (and over batch dims x1 was broadcast along).
std::vector<Val> LowerCdistBackward(LowerCtx& c) {
  Emitter& e = c.e;
  ElementType t = Opmath(c.out().dtype);
  Val dist = e.Convert(c.tensor(4), t);
  PointSets s = Broadcast(c, 1, 2, dist.dims(), t);
  Val diff = Differences(e, s);  // [..., P, R, M]
  Dims pr = dist.dims();
  Dims lead;
  for (int64_t i = 0; i < static_cast<int64_t>(pr.size()); ++i) lead.push_back(i);
  Val g = e.BroadcastInDim(Coerce(e, c.tensor(0), pr, t), diff.dims(), lead);
  Val d = e.BroadcastInDim(dist, diff.dims(), lead);
  Val pair = PairGradient(e, diff, g, d, c.double_arg(3));
  Val per_point = SumDims(e, pair, {s.batch_rank + 1}, t);  // [..., P, M]
  return {Done(c, SumTo(e, per_point, c.out().dims, t))};
}

// _pdist_backward(grad, self, p, pdist): each pair's gradient goes to both of its rows with
// opposite signs; summing the pair gradient over all j != i of the symmetric matrices does that.
std::vector<Val> LowerPdistBackward(LowerCtx& c) {
  Emitter& e = c.e;
  ElementType t = Opmath(c.out().dtype);
  Val x = e.Convert(c.tensor(1), t);
  int64_t n = x.dims()[0];
  if (n < 2) return {e.Full(0, c.out())};
  Val diff = Differences(e, PointSets{x, x, 0});  // [n, n, m]
  Val g = e.BroadcastInDim(Expand(e, e.Convert(c.tensor(0), t), n), diff.dims(), {0, 1});
  Val d = e.BroadcastInDim(Expand(e, e.Convert(c.tensor(3), t), n), diff.dims(), {0, 1});
  return {Done(c, SumDims(e, PairGradient(e, diff, g, d, c.double_arg(2)), {1}, t))};
}

}  // namespace

void RegisterDistanceOps(Registry& r) {
  r.Add("_pdist_forward", LowerPdistForward);
  r.Add("_pdist_backward", LowerPdistBackward);
  r.Add("_cdist_forward", LowerCdistForward);
  r.Add("_cdist_backward", LowerCdistBackward);
}

}  // namespace torch_pjrt::lowering
