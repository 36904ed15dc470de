// The orthogonal polynomials of torch.special (Chebyshev T/U/V/W and their shifted forms,
// Hermite H/He, Laguerre L, Legendre P) of x and a degree tensor n, as torch's CPU kernels
// compute them (aten/src/ATen/native/Math.h): the same special cases, closed forms and three-term
// recurrences in the same order and type, the recurrence as one stablehlo.while that runs as many
// steps as the largest degree needs (each element stops at its own, or at NaN, like the CPU loop).
#include "lowering/lowering.h"
#include "lowering/pointwise_util.h"

namespace torch_pjrt::lowering {

namespace {

using namespace pw;

// One recurrence step: the next value from the step's k (in x's type), x, and the last two.
using StepFn = Val (*)(Emitter& e, const Val& k, const Val& x, const Val& p, const Val& q);

// Runs `step` count[i] times from (p, q), k = k_first + k_stride * i; returns the last value.
Val Recurrence(Emitter& e, const Val& x, const Val& p0, const Val& q0, const Val& count, double k_first,
               double k_stride, StepFn step) {
  Dims all = AllDims(x.rank());
  auto active = [](Emitter& b, const Val& i, const Val& q, const Val& n) {
    Val more = b.Compare("LT", b.BroadcastInDim(i, n.dims(), {}), n);
    return b.Binary("and", more, b.Unary("not", b.Compare("NE", q, q)));
  };
  auto cond = [all, active](Emitter& b, const std::vector<Val>& w) -> std::vector<Val> {
    Val any = b.Reduce(active(b, w[0], w[2], w[4]), b.Scalar(0, ElementType::kBool), all, "or");
    return {any};
  };
  auto body = [active, k_first, k_stride, step](Emitter& b, const std::vector<Val>& w) -> std::vector<Val> {
    const Val &i = w[0], &p = w[1], &q = w[2], &xv = w[3], &n = w[4];
    Val ki = b.Binary("add", b.Scalar(k_first, xv.dtype()),
                      b.Binary("multiply", b.Scalar(k_stride, xv.dtype()), b.Convert(i, xv.dtype())));
    Val k = b.BroadcastInDim(ki, xv.dims(), {});
    Val on = active(b, i, q, n);
    Val r = step(b, k, xv, p, q);
    return {b.Binary("add", i, b.Scalar(1, ElementType::kS64)), b.Select(on, q, p), b.Select(on, r, q), xv, n};
  };
  return e.While({e.Scalar(0, ElementType::kS64), p0, q0, x, count}, cond, body)[2];
}

// x, the degree as torch casts it (static_cast<int64_t> of a non-finite or huge n is INT64_MIN
// on x86: negative, so the result is 0), and helpers of it.
struct Args {
  Val x, n;      // n: s64
  Val n_float;   // n in x's type
  Val even;      // n % 2 == 0
};
Args Prepare(LowerCtx& c, const char* op) {
  ElementType t = c.out().dtype;
  CheckFloatOrDouble(t, op);
  Emitter& e = c.e;
  Val x = In(c, 0, t), nf = In(c, 1, t);
  Val representable = Cmp(e, "LT", Abs(e, nf), K(e, 9.2e18, nf));  // also false for NaN
  Val n = e.Convert(Sel(e, representable, nf, K(e, -1, nf)), ElementType::kS64);
  Val even = Cmp(e, "EQ", e.Binary("remainder", n, e.Full(2, n.type)), e.Full(0, n.type));
  return {x, n, e.Convert(n, t), even};
}
Val NEq(Emitter& e, const Args& a, double v) { return Cmp(e, "EQ", a.n, e.Full(v, a.n.type)); }
Val NGt(Emitter& e, const Args& a, double v) { return Cmp(e, "GT", a.n, e.Full(v, a.n.type)); }
Val NLt(Emitter& e, const Args& a, double v) { return Cmp(e, "LT", a.n, e.Full(v, a.n.type)); }
// Steps a loop over k = k0 .. n (or k < n) runs: max(n - 1, 0) where the loop is reached.
Val LoopCount(Emitter& e, const Args& a, const Val& reached) {
  Val c = e.Binary("maximum", e.Binary("subtract", a.n, e.Full(1, a.n.type)), e.Full(0, a.n.type));
  return e.Select(reached, c, e.Full(0, c.type));
}
// +v where n is even, else -v.
Val SignedByParity(Emitter& e, const Args& a, const Val& v) { return Sel(e, a.even, v, Neg(e, v)); }

// ---------------------------------------------------------------- Chebyshev

enum class Kind { kT, kU, kV, kW };
struct Chebyshev {
  Kind kind;
  bool shifted;
  int64_t closed_form_above;  // the degree above which |y| < 1 uses the trigonometric form
};

Val ChebyshevStep(Emitter& e, const Val& k, const Val& y, const Val& p, const Val& q) {
  return Sub(e, Mul(e, Add(e, y, y), q), p);
}

// The values at y = 1 and y = -1 (x = 1 and x = 0 for the shifted forms).
Val EndValue(Emitter& e, const Chebyshev& f, const Args& a, bool positive) {
  Val one = K(e, 1, a.x), n1 = Add(e, a.n_float, one), n21 = Add(e, Add(e, a.n_float, a.n_float), one);
  switch (f.kind) {
    case Kind::kT: return positive ? one : SignedByParity(e, a, one);
    case Kind::kU: return positive ? n1 : SignedByParity(e, a, n1);
    case Kind::kV: return positive ? one : SignedByParity(e, a, n21);
    default: return positive ? n21 : SignedByParity(e, a, one);
  }
}

// The trigonometric form for |y| < 1, with torch's guards where a denominator vanishes.
Val ClosedForm(Emitter& e, const Chebyshev& f, const Args& a, const Val& y) {
  Val acos = Chlo(e, "acos", y), one = K(e, 1, y), half = K(e, 0.5, y);
  Val n = a.n_float, n1 = Add(e, n, one), nh = Add(e, n, half);
  auto sin = [&](const Val& v) { return e.Unary("sine", v); };
  auto cos = [&](const Val& v) { return e.Unary("cosine", v); };
  switch (f.kind) {
    case Kind::kT: return cos(Mul(e, n, acos));
    case Kind::kU: {
      Val s = sin(acos);
      Val regular = Div(e, sin(Mul(e, n1, acos)), s);
      Val degenerate = Div(e, Mul(e, n1, cos(Mul(e, n1, acos))), y);
      return Sel(e, Cmp(e, "NE", s, K(e, 0, s)), regular, degenerate);
    }
    case Kind::kV: {
      Val h = Div(e, acos, K(e, 2, y));
      Val regular = Div(e, cos(Mul(e, nh, acos)), cos(h));
      return Sel(e, Cmp(e, "NE", sin(h), one), regular, EndValue(e, f, a, false));
    }
    default: {
      Val h = Div(e, acos, K(e, 2, y));
      Val regular = Div(e, sin(Mul(e, nh, acos)), sin(h));
      Val end = EndValue(e, f, a, false);
      if (!f.shifted) end = Sel(e, Cmp(e, "GT", a.x, K(e, 0, a.x)), EndValue(e, f, a, true), end);
      return Sel(e, Cmp(e, "NE", cos(h), one), regular, end);
    }
  }
}

// The first two values: degree 0 is 1, degree 1 is y, 2y, 2y - 1 or 2y + 1.
Val DegreeOne(Emitter& e, const Chebyshev& f, const Val& y) {
  Val two_y = Add(e, y, y);
  switch (f.kind) {
    case Kind::kT: return y;
    case Kind::kU: return two_y;
    case Kind::kV: return Sub(e, two_y, K(e, 1, y));
    default: return Add(e, two_y, K(e, 1, y));
  }
}

Val LowerChebyshevAs(LowerCtx& c, const Chebyshev& f, const char* op) {
  Emitter& e = c.e;
  Args a = Prepare(c, op);
  Val one = K(e, 1, a.x);
  Val y = f.shifted ? Sub(e, Add(e, a.x, a.x), one) : a.x;
  Val at_pos = f.shifted ? Cmp(e, "EQ", a.x, one) : And(e, Cmp(e, "EQ", Abs(e, a.x), one), Cmp(e, "GT", a.x, K(e, 0, a.x)));
  Val at_neg = f.shifted ? Cmp(e, "EQ", a.x, K(e, 0, a.x)) : And(e, Cmp(e, "EQ", Abs(e, a.x), one), Not(e, Cmp(e, "GT", a.x, K(e, 0, a.x))));
  Val closed = And(e, NGt(e, a, static_cast<double>(f.closed_form_above)), Cmp(e, "LT", Abs(e, y), one));
  Val first = DegreeOne(e, f, y);
  Val special = Or(e, Or(e, NLt(e, a, 0), Or(e, at_pos, at_neg)), Or(e, closed, NLt(e, a, 2)));
  Val looped = Recurrence(e, y, one, first, LoopCount(e, a, Not(e, special)), 2, 1, ChebyshevStep);
  Val r = Sel(e, NEq(e, a, 1), first, looped);
  r = Sel(e, NEq(e, a, 0), one, r);
  r = Sel(e, closed, ClosedForm(e, f, a, y), r);
  r = Sel(e, at_neg, EndValue(e, f, a, false), r);
  r = Sel(e, at_pos, EndValue(e, f, a, true), r);
  return Done(c, Sel(e, NLt(e, a, 0), K(e, 0, r), r));
}

#define CHEBYSHEV(name, kind, shifted, above, op)                              \
  std::vector<Val> name(LowerCtx& c) {                                          \
    return {LowerChebyshevAs(c, Chebyshev{kind, shifted, above}, op)};          \
  }
CHEBYSHEV(LowerChebyshevT, Kind::kT, false, 6, "chebyshev_polynomial_t")
CHEBYSHEV(LowerChebyshevU, Kind::kU, false, 8, "chebyshev_polynomial_u")
CHEBYSHEV(LowerChebyshevV, Kind::kV, false, 8, "chebyshev_polynomial_v")
CHEBYSHEV(LowerChebyshevW, Kind::kW, false, 8, "chebyshev_polynomial_w")
CHEBYSHEV(LowerShiftedChebyshevT, Kind::kT, true, 6, "shifted_chebyshev_polynomial_t")
CHEBYSHEV(LowerShiftedChebyshevU, Kind::kU, true, 6, "shifted_chebyshev_polynomial_u")
CHEBYSHEV(LowerShiftedChebyshevV, Kind::kV, true, 6, "shifted_chebyshev_polynomial_v")
CHEBYSHEV(LowerShiftedChebyshevW, Kind::kW, true, 4, "shifted_chebyshev_polynomial_w")
#undef CHEBYSHEV

// ---------------------------------------------------------------- Hermite, Laguerre, Legendre

Val HermiteHStep(Emitter& e, const Val& k, const Val& x, const Val& p, const Val& q) {
  return Sub(e, Mul(e, Add(e, x, x), q), Mul(e, k, p));
}
Val HermiteHeStep(Emitter& e, const Val& k, const Val& x, const Val& p, const Val& q) {
  return Sub(e, Mul(e, x, q), Mul(e, k, p));
}
Val LaguerreStep(Emitter& e, const Val& k, const Val& x, const Val& p, const Val& q) {
  Val one = K(e, 1, x);
  return Div(e, Sub(e, Mul(e, Add(e, Add(e, k, k), Sub(e, one, x)), q), Mul(e, k, p)), Add(e, k, one));
}
Val LegendreStep(Emitter& e, const Val& k, const Val& x, const Val& p, const Val& q) {
  Val one = K(e, 1, x);
  return Div(e, Sub(e, Mul(e, Mul(e, Add(e, Add(e, k, k), one), x), q), Mul(e, k, p)), Add(e, k, one));
}

// Hermite H (physicists') and He (probabilists'): NaN above a degree limit (128 for float, 512
// for double), as torch.
std::vector<Val> LowerHermite(LowerCtx& c, bool physicists, const char* op) {
  Emitter& e = c.e;
  Args a = Prepare(c, op);
  Val one = K(e, 1, a.x);
  Val first = physicists ? Add(e, a.x, a.x) : a.x;
  double limit = c.out().dtype == ElementType::kF32 ? 128 : 512;
  Val too_high = NGt(e, a, limit);
  Val looped = Recurrence(e, a.x, one, first, LoopCount(e, a, Not(e, Or(e, too_high, NLt(e, a, 2)))),
                          physicists ? 2 : 1, physicists ? 2 : 1, physicists ? HermiteHStep : HermiteHeStep);
  Val r = Sel(e, too_high, K(e, NAN, one), looped);
  r = Sel(e, NEq(e, a, 1), first, r);
  r = Sel(e, NEq(e, a, 0), one, r);
  return {Done(c, Sel(e, NLt(e, a, 0), K(e, 0, r), r))};
}
std::vector<Val> LowerHermiteH(LowerCtx& c) { return LowerHermite(c, true, "hermite_polynomial_h"); }
std::vector<Val> LowerHermiteHe(LowerCtx& c) { return LowerHermite(c, false, "hermite_polynomial_he"); }

// Laguerre L: 1 at x = 0.
std::vector<Val> LowerLaguerre(LowerCtx& c) {
  Emitter& e = c.e;
  Args a = Prepare(c, "laguerre_polynomial_l");
  Val one = K(e, 1, a.x), zero_x = Cmp(e, "EQ", Abs(e, a.x), K(e, 0, a.x));
  Val first = Sub(e, one, a.x);
  Val looped = Recurrence(e, a.x, one, first, LoopCount(e, a, Not(e, Or(e, zero_x, NLt(e, a, 2)))), 1, 1, LaguerreStep);
  Val r = Sel(e, NEq(e, a, 1), first, looped);
  r = Sel(e, Or(e, zero_x, NEq(e, a, 0)), one, r);
  return {Done(c, Sel(e, NLt(e, a, 0), K(e, 0, r), r))};
}

// Legendre P: +-1 at x = +-1.
std::vector<Val> LowerLegendre(LowerCtx& c) {
  Emitter& e = c.e;
  Args a = Prepare(c, "legendre_polynomial_p");
  Val one = K(e, 1, a.x);
  Val at_end = Cmp(e, "EQ", Abs(e, a.x), one);
  Val end = Sel(e, Or(e, Cmp(e, "GT", a.x, K(e, 0, a.x)), a.even), one, K(e, -1, one));
  Val looped = Recurrence(e, a.x, one, a.x, LoopCount(e, a, Not(e, Or(e, at_end, NLt(e, a, 2)))), 1, 1, LegendreStep);
  Val r = Sel(e, NEq(e, a, 1), a.x, looped);
  r = Sel(e, NEq(e, a, 0), one, r);
  r = Sel(e, at_end, end, r);
  return {Done(c, Sel(e, NLt(e, a, 0), K(e, 0, r), r))};
}

}  // namespace

void RegisterPolynomialOps(Registry& r) {
  r.Add("special_chebyshev_polynomial_t", LowerChebyshevT);
  r.Add("special_chebyshev_polynomial_u", LowerChebyshevU);
  r.Add("special_chebyshev_polynomial_v", LowerChebyshevV);
  r.Add("special_chebyshev_polynomial_w", LowerChebyshevW);
  r.Add("special_shifted_chebyshev_polynomial_t", LowerShiftedChebyshevT);
  r.Add("special_shifted_chebyshev_polynomial_u", LowerShiftedChebyshevU);
  r.Add("special_shifted_chebyshev_polynomial_v", LowerShiftedChebyshevV);
  r.Add("special_shifted_chebyshev_polynomial_w", LowerShiftedChebyshevW);
  r.Add("special_hermite_polynomial_h", LowerHermiteH);
  r.Add("special_hermite_polynomial_he", LowerHermiteHe);
  r.Add("special_laguerre_polynomial_l", LowerLaguerre);
  r.Add("special_legendre_polynomial_p", LowerLegendre);
}

}  // namespace torch_pjrt::lowering
