// Small helpers shared by the elementwise-style lowering files (special.cc, activations.cc,
// losses.cc, distances.cc): arguments broadcast to the output, constants, arithmetic shorthands,
// float bit tricks and sum-to-shape.
#pragma once

#include <cmath>
#include <functional>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "lowering/helpers.h"

namespace torch_pjrt::lowering::pw {

inline Val Add(Emitter& e, const Val& a, const Val& b) { return e.Binary("add", a, b); }
inline Val Sub(Emitter& e, const Val& a, const Val& b) { return e.Binary("subtract", a, b); }
inline Val Mul(Emitter& e, const Val& a, const Val& b) { return e.Binary("multiply", a, b); }
inline Val Div(Emitter& e, const Val& a, const Val& b) { return e.Binary("divide", a, b); }
inline Val Max(Emitter& e, const Val& a, const Val& b) { return e.Binary("maximum", a, b); }
inline Val Min(Emitter& e, const Val& a, const Val& b) { return e.Binary("minimum", a, b); }
inline Val And(Emitter& e, const Val& a, const Val& b) { return e.Binary("and", a, b); }
inline Val Or(Emitter& e, const Val& a, const Val& b) { return e.Binary("or", a, b); }
inline Val Not(Emitter& e, const Val& a) { return e.Unary("not", a); }
inline Val Neg(Emitter& e, const Val& a) { return e.Unary("negate", a); }
inline Val Abs(Emitter& e, const Val& a) { return e.Unary("abs", a); }
inline Val Exp(Emitter& e, const Val& a) { return e.Unary("exponential", a); }
inline Val Log(Emitter& e, const Val& a) { return e.Unary("log", a); }
inline Val Log1p(Emitter& e, const Val& a) { return e.Unary("log_plus_one", a); }
inline Val Sqrt(Emitter& e, const Val& a) { return e.Unary("sqrt", a); }
inline Val Cmp(Emitter& e, const char* dir, const Val& a, const Val& b) { return e.Compare(dir, a, b); }
// A constant shaped like `like`.
inline Val K(Emitter& e, double v, const Val& like) { return e.Full(v, like.type); }
// A constant divisor shaped like `like` that XLA keeps: its simplifier rewrites x / constant as
// x * (1 / constant), an ulp off where torch divides. Behind an optimization barrier it is not a
// constant to XLA.
inline Val KDiv(Emitter& e, double v, const Val& like) {
  return e.BroadcastTo(e.OptimizationBarrier(e.Scalar(v, like.dtype())), like.dims());
}
inline Val IsNan(Emitter& e, const Val& x) { return e.Compare("NE", x, x); }
inline Val Sel(Emitter& e, const Val& p, const Val& a, const Val& b) { return e.Select(p, a, b); }

// Argument i (tensor, value Scalar or constant Scalar) in type t, broadcast to `dims`.
inline Val ArgAt(LowerCtx& c, size_t i, ElementType t, const Dims& dims) {
  return Coerce(c.e, c.scalar(i, t), dims, t);
}
// Argument i broadcast to the output's shape, in type t.
inline Val In(LowerCtx& c, size_t i, ElementType t) { return ArgAt(c, i, t, c.out().dims); }
// A constant at the output's shape.
inline Val KOut(LowerCtx& c, double v, ElementType t) { return c.e.Full(v, TensorType{t, c.out().dims}); }
inline Val Done(LowerCtx& c, const Val& v, size_t out = 0) { return c.e.Convert(v, c.out(out).dtype); }
inline ElementType Compute(LowerCtx& c, size_t out = 0) { return Opmath(c.out(out).dtype); }

// Kernels that dispatch on float and double only (no half types) on CPU: the same error.
inline void CheckFloatOrDouble(ElementType t, const char* op) {
  if (t != ElementType::kF32 && t != ElementType::kF64) {
    throw std::invalid_argument(std::string("\"") + op + "_cpu\" not implemented for this dtype (float and double only)");
  }
}

// Same-width signed integer type of a float type (for bit manipulation).
inline ElementType BitsType(ElementType t) {
  switch (ItemSize(t)) {
    case 1: return ElementType::kS8;
    case 2: return ElementType::kS16;
    case 4: return ElementType::kS32;
    default: return ElementType::kS64;
  }
}
inline Val Bits(Emitter& e, const Val& x) {
  return e.BitcastConvert(x, TensorType{BitsType(x.dtype()), x.dims()});
}
// The sign bit of x: set for -0.0 and negative NaNs of floats; x < 0 for signed integers.
inline Val SignBit(Emitter& e, const Val& x) {
  if (IsFloating(x.dtype())) {
    Val b = Bits(e, x);
    return e.Compare("LT", b, e.Full(0, b.type));
  }
  if (x.dtype() == ElementType::kBool || IsUnsigned(x.dtype())) {
    return e.Full(0, TensorType{ElementType::kBool, x.dims()});
  }
  return e.Compare("LT", x, e.Full(0, x.type));
}
// |a| with the sign bit of b (floats of the same type), bit-exact like std::copysign.
inline Val CopySign(Emitter& e, const Val& a, const Val& b) {
  Val ab = Bits(e, a), bb = Bits(e, b);
  double sign = -std::ldexp(1.0, static_cast<int>(ItemSize(a.dtype())) * 8 - 1);
  Val mask = e.Full(sign, ab.type);
  Val mag = e.Binary("and", ab, e.Unary("not", mask));
  Val r = e.Binary("or", mag, e.Binary("and", bb, mask));
  return e.BitcastConvert(r, a.type);
}

// Truncation toward zero of a float value.
inline Val Trunc(Emitter& e, const Val& x) {
  return e.Select(e.Compare("LT", x, e.Full(0, x.type)), e.Unary("ceil", x), e.Unary("floor", x));
}

// Dims of `full` that map to `small` under numpy broadcasting: sums `x` (shaped `full`) down to
// `small`'s shape, like autograd's sum_to.
inline Val SumTo(Emitter& e, const Val& x, const Dims& small, ElementType acc) {
  if (x.dims() == small) return x;
  int64_t lead = x.rank() - static_cast<int64_t>(small.size());
  Dims reduce;
  for (int64_t i = 0; i < x.rank(); ++i) {
    if (i < lead || (small[i - lead] == 1 && x.dims()[i] != 1)) reduce.push_back(i);
  }
  Val s = SumDims(e, x, reduce, acc);
  return e.Reshape(s, small);
}

// All dims of a rank-n value.
inline Dims AllDims(int64_t n) {
  Dims d;
  for (int64_t i = 0; i < n; ++i) d.push_back(i);
  return d;
}

// Raw CHLO op with one or two operands of x's type: "chlo.<op> %a[, %b] : T[, T] -> T".
inline Val Chlo(Emitter& e, const std::string& op, const Val& a) {
  std::string t = TypeString(a);
  return e.Raw("chlo." + op + " " + e.Name(a), t + " -> " + t, a.type);
}
inline Val Chlo2(Emitter& e, const std::string& op, const Val& a, const Val& b) {
  std::string t = TypeString(a);
  return e.Raw("chlo." + op + " " + e.Name(a) + ", " + e.Name(b), t + ", " + t + " -> " + t, a.type);
}

// Polynomial c[0] x^n + ... + c[n] (Cephes polevl: coefficients highest degree first).
inline Val Polevl(Emitter& e, const Val& x, const std::vector<double>& coeffs) {
  Val r;
  bool first = true;
  for (double k : coeffs) {
    if (first) {
      r = e.Full(k, x.type);
      first = false;
    } else {
      r = Add(e, Mul(e, r, x), e.Full(k, x.type));
    }
  }
  return r;
}

// One step of an elementwise iteration: the next state and, per element, whether it converged.
// `n` is the 1-based step number, broadcast to the elements' shape.
using Step = std::function<std::pair<std::vector<Val>, Val>(Emitter&, const std::vector<Val>& state, const Val& n)>;

// Runs `step` on every element that is not `done` yet, at most `max_steps` times; an element
// stops changing once it converged. Returns the final state.
inline std::vector<Val> IterateUntilDone(Emitter& e, std::vector<Val> state, const Val& done, int max_steps, Step step) {
  Dims all = AllDims(done.rank());
  size_t k = state.size();
  std::vector<Val> init = {e.Scalar(0, ElementType::kS64), done};
  init.insert(init.end(), state.begin(), state.end());
  auto cond = [all, max_steps](Emitter& b, const std::vector<Val>& w) -> std::vector<Val> {
    Val more = b.Compare("LT", w[0], b.Scalar(max_steps, ElementType::kS64));
    Val pending = b.Reduce(b.Unary("not", w[1]), b.Scalar(0, ElementType::kBool), all, "or");
    return {b.Binary("and", more, pending)};
  };
  auto body = [k, step](Emitter& b, const std::vector<Val>& w) -> std::vector<Val> {
    std::vector<Val> cur(w.begin() + 2, w.end());
    Val i = b.Binary("add", w[0], b.Scalar(1, ElementType::kS64));
    Val n = b.BroadcastInDim(b.Convert(i, cur[0].dtype()), cur[0].dims(), {});
    auto [next, converged] = step(b, cur, n);
    Val active = b.Unary("not", w[1]);
    std::vector<Val> out = {i, b.Binary("or", w[1], b.Binary("and", active, converged))};
    for (size_t j = 0; j < k; ++j) out.push_back(b.Select(active, next[j], cur[j]));
    return out;
  };
  std::vector<Val> r = e.While(init, cond, body);
  return std::vector<Val>(r.begin() + 2, r.end());
}

}  // namespace torch_pjrt::lowering::pw
