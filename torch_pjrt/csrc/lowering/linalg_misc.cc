// Other linear algebra: linalg_matrix_exp (scaling and squaring with a Pade approximant),
// linalg_cross, vdot, trace.
#include <cmath>

#include "lowering/algebra.h"

namespace torch_pjrt::lowering {

namespace {

Val Scale(Emitter& e, const Val& x, double k) { return e.Binary("multiply", x, e.Full(k, x.type)); }
Val Add(Emitter& e, const Val& a, const Val& b) { return e.Binary("add", a, b); }

// linalg_matrix_exp(self): Higham's scaling and squaring (2005). A is scaled by 2^-s so that its
// 1-norm is at most theta, exp(A / 2^s) is the [q/q] Pade approximant (q = 13 for double
// precision, 7 for single, like JAX's expm), and the result is squared s times; s is chosen per
// matrix and the squarings of a batch run in one loop, each matrix stopping at its own s.
std::vector<Val> LowerMatrixExp(LowerCtx& c) {
  Emitter& e = c.e;
  ElementType t = Opmath(c.out().dtype);
  Val x = ConvertTo(e, c.tensor(0), t);
  if (x.numel() == 0) return {e.Convert(x, c.out().dtype)};
  int64_t n = x.dims().back();
  Val a = FlattenBatch(e, x);
  int64_t batch = a.dims()[0];
  ElementType rt = ComplexPartType(t);
  bool wide = rt == ElementType::kF64;
  if (n == 1) return {e.Convert(e.Reshape(e.Unary("exponential", a), c.out().dims), c.out().dtype)};
  // 1-norm: the largest column sum of |a|.
  Val mag = IsComplex(t) ? e.Raw("\"stablehlo.abs\"(" + e.Name(a) + ")",
                                 "(" + TypeString(a) + ") -> " + TypeString(TensorType{rt, a.dims()}),
                                 TensorType{rt, a.dims()})
                         : e.Unary("abs", a);
  Val colsum = e.Reduce(mag, e.Scalar(0, rt), {1}, "add");
  Val norm = e.Reduce(colsum, e.Scalar(0, rt), {1}, "maximum");  // [B]; NaN-propagating maximum
  double theta = wide ? 5.371920351148152 : 3.925724783138660;
  TensorType bt{rt, {batch}};
  Val s = e.Unary("ceil", e.Binary("divide", e.Unary("log", e.Binary("divide", norm, e.Full(theta, bt))),
                                   e.Full(std::log(2.0), bt)));
  s = e.Clamp(e.Scalar(0, rt), s, e.Scalar(128, rt));
  s = e.Select(e.Compare("NE", s, s), e.Full(0, bt), s);  // NaN norm: no scaling (result is NaN)
  Val factor = e.Binary("power", e.Full(2, bt), e.Unary("negate", s));
  Val scaled = e.Binary("multiply", a, e.BroadcastInDim(ConvertTo(e, factor, t), a.dims(), {0}));

  Val eye = Identity(e, a.type);
  Val a2 = BatchMatmul(e, scaled, scaled);
  Val a4 = BatchMatmul(e, a2, a2);
  Val a6 = BatchMatmul(e, a4, a2);
  Val u, v;
  if (wide) {
    const double b[] = {64764752532480000.0, 32382376266240000.0, 7771770303897600.0, 1187353796428800.0,
                        129060195264000.0,   10559470521600.0,    670442572800.0,     33522128640.0,
                        1323241920.0,        40840800.0,          960960.0,           16380.0,
                        182.0,               1.0};
    Val inner_u = Add(e, Add(e, Scale(e, a6, b[13]), Scale(e, a4, b[11])), Scale(e, a2, b[9]));
    Val uu = Add(e, BatchMatmul(e, a6, inner_u),
                 Add(e, Add(e, Scale(e, a6, b[7]), Scale(e, a4, b[5])), Add(e, Scale(e, a2, b[3]), Scale(e, eye, b[1]))));
    u = BatchMatmul(e, scaled, uu);
    Val inner_v = Add(e, Add(e, Scale(e, a6, b[12]), Scale(e, a4, b[10])), Scale(e, a2, b[8]));
    v = Add(e, BatchMatmul(e, a6, inner_v),
            Add(e, Add(e, Scale(e, a6, b[6]), Scale(e, a4, b[4])), Add(e, Scale(e, a2, b[2]), Scale(e, eye, b[0]))));
  } else {
    const double b[] = {17297280.0, 8648640.0, 1995840.0, 277200.0, 25200.0, 1512.0, 56.0, 1.0};
    Val uu = Add(e, Add(e, Scale(e, a6, b[7]), Scale(e, a4, b[5])), Add(e, Scale(e, a2, b[3]), Scale(e, eye, b[1])));
    u = BatchMatmul(e, scaled, uu);
    v = Add(e, Add(e, Scale(e, a6, b[6]), Scale(e, a4, b[4])), Add(e, Scale(e, a2, b[2]), Scale(e, eye, b[0])));
  }
  // (V - U) R = (V + U)
  LuResult lu = LuFactor(e, e.Binary("subtract", v, u));
  Val r = LuSolve(e, lu.lu, lu.perm, Add(e, v, u), false);
  // Square each matrix s times.
  Val steps = e.Convert(s, ElementType::kS64);
  Val max_steps = e.Reduce(steps, e.Scalar(0, ElementType::kS64), {0}, "maximum");
  auto cond = [](Emitter& b, const std::vector<Val>& w) -> std::vector<Val> {
    return {b.Compare("LT", w[0], w[3])};
  };
  auto body = [](Emitter& b, const std::vector<Val>& w) -> std::vector<Val> {
    const Val &i = w[0], &m = w[1], &st = w[2], &mx = w[3];
    Val sq = BatchMatmul(b, m, m);
    Val more = b.Compare("LT", b.BroadcastInDim(i, st.dims(), {}), st);
    Val next = b.Select(b.BroadcastInDim(more, m.dims(), {0}), sq, m);
    return {b.Binary("add", i, b.Scalar(1, ElementType::kS64)), next, st, mx};
  };
  r = e.While({e.Scalar(0, ElementType::kS64), r, steps, max_steps}, cond, body)[1];
  return {e.Convert(e.Reshape(r, c.out().dims), c.out().dtype)};
}

// linalg_cross(self, other, *, dim=-1)
std::vector<Val> LowerCross(LowerCtx& c) {
  Emitter& e = c.e;
  ElementType t = c.out().dtype;
  const Dims& dims = c.out().dims;
  Val a = e.BroadcastTo(ConvertTo(e, c.tensor(0), t), dims), b = e.BroadcastTo(ConvertTo(e, c.tensor(1), t), dims);
  int64_t d = NormDim(c.int_arg(2, -1), static_cast<int64_t>(dims.size()));
  auto part = [&](const Val& v, int64_t i) { return e.SliceDim(v, d, i, i + 1); };
  auto term = [&](int64_t i, int64_t j) {
    return e.Binary("subtract", e.Binary("multiply", part(a, i), part(b, j)), e.Binary("multiply", part(a, j), part(b, i)));
  };
  return {e.Concatenate({term(1, 2), term(2, 0), term(0, 1)}, d)};
}

// vdot(self, other) = sum(conj(self) * other) over 1-d inputs.
std::vector<Val> LowerVdot(LowerCtx& c) {
  Emitter& e = c.e;
  ElementType t = c.out().dtype;
  Val a = Conj(e, ConvertTo(e, c.tensor(0), t)), b = ConvertTo(e, c.tensor(1), t);
  return {e.Convert(e.DotGeneral(a, b, {}, {}, {0}, {0}, Opmath(t)), t)};
}

// trace(self): the sum of the main diagonal of a matrix, accumulated like sum (integers in
// int64). Off-diagonal NaNs must not leak in, so the diagonal is selected, not masked by a product.
std::vector<Val> LowerTrace(LowerCtx& c) {
  Emitter& e = c.e;
  ElementType t = c.out().dtype;
  ElementType acc = IsFloating(t) || IsComplex(t) ? Opmath(t) : t;
  Val x = ConvertTo(e, c.tensor(0), acc);
  TensorType positions{ElementType::kS64, x.dims()};
  Val on_diagonal = e.Compare("EQ", e.Iota(positions, 0), e.Iota(positions, 1));
  Val diagonal = e.Select(on_diagonal, x, e.Full(0, x.type));
  return {e.Convert(SumDims(e, diagonal, {0, 1}, acc), t)};
}

}  // namespace

void RegisterLinalgMiscOps(Registry& r) {
  r.Add("linalg_matrix_exp", LowerMatrixExp);
  r.Add("linalg_cross", LowerCross);
  r.Add("vdot", LowerVdot);
  r.Add("trace", LowerTrace);
}

}  // namespace torch_pjrt::lowering
