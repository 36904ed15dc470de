// Complex numbers: complex(real, imag), polar, _conj_physical, angle, sgn; and complex inputs of
// lowerings written for real types elsewhere (abs, isnan, nan_to_num, var/std, vector norms,
// tanh/sigmoid backward, sinh/cosh, lerp, logaddexp, pow with a complex exponent, addmm-style complex
// alpha/beta).
//
// Those other lowerings compute in their (real) output type and would drop the imaginary part,
// or read a complex constant as its real part. Rather than editing them, this file registers last
// and re-points their table entries at a router: inputs that need complex handling take the code
// here, everything else reaches the original lowering unchanged.
#include <cmath>
#include <stdexcept>

#include "lowering/algebra.h"

namespace torch_pjrt::lowering {

namespace {

constexpr double kPi = 3.14159265358979323846;

bool AnyComplexTensor(LowerCtx& c) {
  for (size_t i = 0; i < c.num_args(); ++i) {
    if (c.is_tensor(i) && IsComplex(c.tensor(i).dtype())) return true;
  }
  return false;
}

// A structural Scalar with a non-zero imaginary part (the real part is the Arg's double, the
// imaginary part sits in the list pool).
bool IsComplexConstant(LowerCtx& c, size_t i) {
  if (c.is_none(i) || c.arg(i).kind != ArgKind::kComplex) return false;
  return c.double_list(i).at(0) != 0.0;
}
std::pair<double, double> ComplexConstant(LowerCtx& c, size_t i, double default_value) {
  if (c.is_none(i)) return {default_value, 0.0};
  const Arg& a = c.arg(i);
  if (a.kind == ArgKind::kComplex) return {a.as_double(), c.double_list(i).at(0)};
  return {a.as_double(), 0.0};
}
Val ComplexFull(Emitter& e, std::pair<double, double> v, const TensorType& t) {
  if (!IsComplex(t.dtype)) return e.Full(v.first, t);
  TensorType pt{ComplexPartType(t.dtype), t.dims};
  return MakeComplex(e, e.Full(v.first, pt), e.Full(v.second, pt));
}

// Tensor argument i converted to t and broadcast to the output's shape.
Val In(LowerCtx& c, size_t i, ElementType t) {
  return c.e.BroadcastTo(ConvertTo(c.e, c.tensor(i), t), c.out().dims);
}

Val IsNan(Emitter& e, const Val& x) {
  if (IsComplex(x.dtype())) {
    return e.Binary("or", IsNan(e, RealPart(e, x)), IsNan(e, ImagPart(e, x)));
  }
  if (!IsFloating(x.dtype())) return e.Full(0, TensorType{ElementType::kBool, x.dims()});
  return e.Compare("NE", x, x);
}

Val Abs(Emitter& e, const Val& x) {
  if (!IsComplex(x.dtype())) return e.Unary("abs", x);
  TensorType t{ComplexPartType(x.dtype()), x.dims()};
  Val a = e.Raw("\"stablehlo.abs\"(" + e.Name(x) + ")", "(" + TypeString(x) + ") -> " + TypeString(t), t);
  // XLA expands complex abs with max/min of the parts, which drop a NaN part on a compiler with
  // fast min/max (TargetOptions::nan_propagating_min_max): the NaN is selected explicitly.
  a = e.Select(IsNan(e, x), e.Full(NAN, t), a);
  // C's hypot (what CPU eager's std::abs computes): +inf when either part is infinite, even if the
  // other is NaN; XLA's complex abs gives NaN there.
  Val inf = e.Full(INFINITY, t);
  Val any_inf = e.Binary("or", e.Compare("EQ", e.Unary("abs", RealPart(e, x)), inf),
                         e.Compare("EQ", e.Unary("abs", ImagPart(e, x)), inf));
  return e.Select(any_inf, inf, a);
}

// ------------------------------------------------------------ new ops

// complex(real, imag)
std::vector<Val> LowerComplex(LowerCtx& c) {
  ElementType part = ComplexPartType(c.out().dtype);
  return {MakeComplex(c.e, In(c, 0, part), In(c, 1, part))};
}

// polar(abs, angle) = abs * (cos(angle) + i sin(angle))
std::vector<Val> LowerPolar(LowerCtx& c) {
  ElementType part = ComplexPartType(c.out().dtype);
  Val r = In(c, 0, part), th = In(c, 1, part);
  return {MakeComplex(c.e, c.e.Binary("multiply", r, c.e.Unary("cosine", th)),
                      c.e.Binary("multiply", r, c.e.Unary("sine", th)))};
}

// _conj_physical(self)
std::vector<Val> LowerConjPhysical(LowerCtx& c) { return {Conj(c.e, c.tensor(0))}; }

// angle(self): atan2(imag, real) for complex; for real numbers pi below zero, else 0 (NaN stays).
std::vector<Val> LowerAngle(LowerCtx& c) {
  Emitter& e = c.e;
  Val x = c.tensor(0);
  ElementType t = c.out().dtype;
  if (IsComplex(x.dtype())) {
    return {e.Convert(e.Binary("atan2", ImagPart(e, x), RealPart(e, x)), t)};
  }
  ElementType ct = Opmath(t);
  Val xf = e.Convert(x, ct);
  Val r = e.Select(e.Compare("LT", xf, e.Full(0, xf.type)), e.Full(kPi, xf.type), e.Full(0, xf.type));
  if (IsFloating(x.dtype())) r = e.Select(IsNan(e, xf), xf, r);
  return {e.Convert(r, t)};
}

// sgn(self) of a complex tensor: z / |z|, 0 at 0 (real inputs: sampling.cc's sgn).
std::vector<Val> ComplexSgn(LowerCtx& c) {
  Emitter& e = c.e;
  Val x = c.tensor(0);
  Val a = Abs(e, x);
  Val zero = e.Compare("EQ", a, e.Full(0, a.type));
  Val q = e.Binary("divide", x, MakeComplex(e, a, e.Full(0, a.type)));
  return {e.Select(zero, e.Full(0, x.type), q)};
}

// ------------------------------------------------------------ complex paths of other lowerings

// sinh and cosh of x + iy by parts, as std::sinh/std::cosh: sinh = sinh x cos y + i cosh x sin y,
// cosh = cosh x cos y + i sinh x sin y. A zero imaginary part stays zero (inf * sin 0 is NaN).
std::vector<Val> ComplexHyperbolic(LowerCtx& c, bool sinh) {
  Emitter& e = c.e;
  Val z = In(c, 0, c.out().dtype);
  Val x = RealPart(e, z), y = ImagPart(e, z);
  TensorType part{x.dtype(), x.dims()};
  Val half = e.Full(0.5, part), zero = e.Full(0, part);
  Val sh = e.Binary("multiply", half, e.Binary("subtract", e.Unary("exponential_minus_one", x),
                                               e.Unary("exponential_minus_one", e.Unary("negate", x))));
  Val ex = e.Unary("exponential", x);
  Val ch = e.Binary("multiply", half, e.Binary("add", ex, e.Binary("divide", e.Full(1, part), ex)));
  Val cos_y = e.Unary("cosine", y), sin_y = e.Unary("sine", y);
  Val re = e.Binary("multiply", sinh ? sh : ch, cos_y);
  Val im = e.Select(e.Compare("EQ", y, zero), y, e.Binary("multiply", sinh ? ch : sh, sin_y));
  return {MakeComplex(e, re, im)};
}
std::vector<Val> ComplexSinh(LowerCtx& c) { return ComplexHyperbolic(c, true); }
std::vector<Val> ComplexCosh(LowerCtx& c) { return ComplexHyperbolic(c, false); }

// lerp with complex values: torch's two-sided formula with |w| the complex modulus,
// |w| < 0.5 ? self + w * (end - self) : end + (w - 1) * (end - self).
std::vector<Val> ComplexLerp(LowerCtx& c) {
  Emitter& e = c.e;
  const TensorType& t = c.out();
  Val a = In(c, 0, t.dtype), b = In(c, 1, t.dtype);
  Val w = c.is_tensor(2) ? In(c, 2, t.dtype) : ComplexFull(e, ComplexConstant(c, 2, 0), t);
  Val size = Abs(e, w);
  Val small = e.Compare("LT", size, e.Full(0.5, TensorType{size.dtype(), size.dims()}));
  Val coeff = e.Select(small, w, e.Binary("subtract", w, ComplexFull(e, {1, 0}, t)));
  Val diff = e.Binary("subtract", b, a);
  return {e.Binary("add", e.Select(small, a, b), e.Binary("multiply", coeff, diff))};
}

// exp(+inf + iy) with C99's rules (what std::exp gives CPU eager): +inf for y = 0, else
// (inf cos y, inf sin y); XLA's exp gives NaN parts there.
Val ExpOfPlusInf(Emitter& e, const Val& z) {
  Val y = ImagPart(e, z);
  TensorType part{y.dtype(), y.dims()};
  Val inf = e.Full(INFINITY, part);
  Val zero_y = e.Compare("EQ", y, e.Full(0, part));
  Val re = e.Select(zero_y, inf, e.Binary("multiply", inf, e.Unary("cosine", y)));
  Val im = e.Select(zero_y, y, e.Binary("multiply", inf, e.Unary("sine", y)));
  return MakeComplex(e, re, im);
}
// log(z) with C99's rules for infinite parts: (log |z|, atan2(im, re)), |z| = +inf when a part is.
Val LogC99(Emitter& e, const Val& z) {
  return MakeComplex(e, e.Unary("log", Abs(e, z)), e.Binary("atan2", ImagPart(e, z), RealPart(e, z)));
}

// logaddexp of complex values, as CPU eager's _log_add_exp_helper: with lo/hi the operands
// ordered by real part (lo = y on ties, as CPU), log1p(exp(lo - hi)) + hi; a NaN part in lo gives
// NaN; equal infinite real parts give lo (-inf) or log(exp(lo) + exp(hi)) (+inf, C99 rules).
std::vector<Val> ComplexLogaddexp(LowerCtx& c) {
  Emitter& e = c.e;
  ElementType t = c.out().dtype;
  Val x = In(c, 0, t), y = In(c, 1, t);
  Val y_lower = e.Compare("LE", RealPart(e, y), RealPart(e, x));
  Val lo = e.Select(y_lower, y, x), hi = e.Select(y_lower, x, y);
  Val lo_re = RealPart(e, lo);
  TensorType part{lo_re.dtype(), lo_re.dims()};
  Val general = e.Binary("add", e.Unary("log_plus_one", e.Unary("exponential", e.Binary("subtract", lo, hi))), hi);
  Val both_inf = e.Binary("and", e.Compare("EQ", e.Unary("abs", lo_re), e.Full(INFINITY, part)),
                          e.Compare("EQ", lo_re, RealPart(e, hi)));
  Val plus_inf = LogC99(e, e.Binary("add", ExpOfPlusInf(e, lo), ExpOfPlusInf(e, hi)));
  Val inf_case = e.Select(e.Compare("LT", lo_re, e.Full(0, part)), lo, plus_inf);
  Val r = e.Select(both_inf, inf_case, general);
  Val nan = MakeComplex(e, e.Full(NAN, part), e.Full(NAN, part));
  return {e.Select(IsNan(e, lo), nan, r)};
}

std::vector<Val> ComplexAbs(LowerCtx& c) { return {c.e.Convert(Abs(c.e, c.tensor(0)), c.out().dtype)}; }

std::vector<Val> ComplexIsnan(LowerCtx& c) { return {IsNan(c.e, c.tensor(0))}; }

// nan_to_num(self, nan?, posinf?, neginf?): each part on its own.
std::vector<Val> ComplexNanToNum(LowerCtx& c) {
  Emitter& e = c.e;
  Val x = c.tensor(0);
  ElementType pt = ComplexPartType(x.dtype());
  double nan = c.is_none(1) ? 0.0 : c.double_arg(1);
  double pos = c.is_none(2) ? HighestFinite(pt) : c.double_arg(2);
  double neg = c.is_none(3) ? -HighestFinite(pt) : c.double_arg(3);
  auto fix = [&](const Val& v) {
    Val r = e.Select(e.Compare("NE", v, v), e.Full(nan, v.type), v);
    r = e.Select(e.Compare("EQ", v, e.Full(INFINITY, v.type)), e.Full(pos, v.type), r);
    return e.Select(e.Compare("EQ", v, e.Full(-INFINITY, v.type)), e.Full(neg, v.type), r);
  };
  return {MakeComplex(e, fix(RealPart(e, x)), fix(ImagPart(e, x)))};
}

Dims ReduceDimsArg(LowerCtx& c, size_t i, int64_t rank) {
  if (c.is_none(i)) return NormDims({}, rank);
  return NormDims(c.int_list(i), rank);
}

Dims KeptDims(int64_t rank, const Dims& reduced) {
  Dims kept;
  for (int64_t i = 0; i < rank; ++i) {
    if (std::find(reduced.begin(), reduced.end(), i) == reduced.end()) kept.push_back(i);
  }
  return kept;
}

// (variance, mean) of complex x over dims: sum |x - mean|^2 / (n - correction), a real number.
std::pair<Val, Val> ComplexVarMean(LowerCtx& c, const Val& x, const Dims& dims) {
  Emitter& e = c.e;
  double count = 1;
  for (int64_t d : dims) count *= static_cast<double>(x.dims()[d]);
  Val sum = e.Reduce(x, e.Scalar(0, x.dtype()), dims, "add");
  Val mean = e.Binary("divide", sum, e.Full(count, sum.type));
  Val centered = e.Binary("subtract", x, e.BroadcastInDim(mean, x.dims(), KeptDims(x.rank(), dims)));
  Val re = RealPart(e, centered), im = ImagPart(e, centered);
  Val sq = e.Binary("add", e.Binary("multiply", re, re), e.Binary("multiply", im, im));
  Val ss = e.Reduce(sq, e.Scalar(0, sq.dtype()), dims, "add");
  double correction = c.is_none(2) ? 1.0 : c.double_arg(2);
  double n = count - correction;
  return {e.Binary("divide", ss, e.Full(n > 0 ? n : 0.0, ss.type)), mean};
}

// var.correction / std.correction / var_mean.correction / std_mean.correction
// (self, dim=None, *, correction=None, keepdim=False)
std::vector<Val> ComplexVarStd(LowerCtx& c, bool sqrt, bool with_mean) {
  Val x = c.tensor(0);
  Dims dims = ReduceDimsArg(c, 1, x.rank());
  auto [var, mean] = ComplexVarMean(c, x, dims);
  if (sqrt) var = c.e.Unary("sqrt", var);
  std::vector<Val> out{c.e.Convert(c.e.Reshape(var, c.out(0).dims), c.out(0).dtype)};
  if (with_mean) out.push_back(ConvertTo(c.e, c.e.Reshape(mean, c.out(1).dims), c.out(1).dtype));
  return out;
}
std::vector<Val> ComplexVar(LowerCtx& c) { return ComplexVarStd(c, false, false); }
std::vector<Val> ComplexStd(LowerCtx& c) { return ComplexVarStd(c, true, false); }
std::vector<Val> ComplexVarMeanOp(LowerCtx& c) { return ComplexVarStd(c, false, true); }
std::vector<Val> ComplexStdMeanOp(LowerCtx& c) { return ComplexVarStd(c, true, true); }

// linalg_vector_norm(self, ord=2, dim=None, keepdim=False, *, dtype=None) of complex input: the
// norm of |x|.
std::vector<Val> ComplexVectorNorm(LowerCtx& c) {
  Emitter& e = c.e;
  Val x = c.tensor(0);
  Dims dims = ReduceDimsArg(c, 2, x.rank());
  ElementType acc = Opmath(c.out().dtype);
  Val a = e.Convert(Abs(e, x), acc);
  Val r = PNorm(e, a, c.is_none(1) ? 2.0 : c.scalar_constant(1), dims);
  return {e.Convert(e.Reshape(r, c.out().dims), c.out().dtype)};
}

// tanh_backward(grad, y) = grad * conj(1 - y^2); sigmoid_backward(grad, y) = grad * conj((1 - y) y)
std::vector<Val> ComplexTanhBackward(LowerCtx& c) {
  Emitter& e = c.e;
  ElementType t = c.out().dtype;
  Val g = In(c, 0, t), y = In(c, 1, t);
  Val d = e.Binary("subtract", e.Full(1, y.type), e.Binary("multiply", y, y));
  return {e.Binary("multiply", g, Conj(e, d))};
}
std::vector<Val> ComplexSigmoidBackward(LowerCtx& c) {
  Emitter& e = c.e;
  ElementType t = c.out().dtype;
  Val g = In(c, 0, t), y = In(c, 1, t);
  Val d = e.Binary("multiply", e.Binary("subtract", e.Full(1, y.type), y), y);
  return {e.Binary("multiply", g, Conj(e, d))};
}

// pow.Tensor_Scalar(self, exponent) with a complex exponent.
std::vector<Val> ComplexPowScalar(LowerCtx& c) {
  ElementType t = c.out().dtype;
  Val x = In(c, 0, t);
  return {c.e.Binary("power", x, ComplexFull(c.e, ComplexConstant(c, 1, 1.0), x.type))};
}

// addmm / addmv / baddbmm / addbmm (self, a, b, *, beta, alpha) with complex beta or alpha.
std::vector<Val> ComplexAddProduct(LowerCtx& c, const Dims& batch, const Dims& ca, const Dims& cb) {
  Emitter& e = c.e;
  ElementType t = c.out().dtype;
  Val a = ConvertTo(e, c.tensor(1), t), b = ConvertTo(e, c.tensor(2), t);
  Val r = e.DotGeneral(a, b, batch, batch, ca, cb, t);
  auto alpha = ComplexConstant(c, 4, 1.0), beta = ComplexConstant(c, 3, 1.0);
  if (alpha != std::make_pair(1.0, 0.0)) r = e.Binary("multiply", r, ComplexFull(e, alpha, r.type));
  if (beta != std::make_pair(0.0, 0.0)) {
    Val self = c.e.BroadcastTo(ConvertTo(e, c.tensor(0), t), r.dims());
    if (beta != std::make_pair(1.0, 0.0)) self = e.Binary("multiply", self, ComplexFull(e, beta, r.type));
    r = e.Binary("add", self, r);
  }
  return {r};
}
// addr(self, vec1, vec2, *, beta, alpha) of complex values: (alpha * vec1) * vec2 + beta * self.
std::vector<Val> ComplexAddr(LowerCtx& c) {
  Emitter& e = c.e;
  const TensorType& out = c.out();
  Val v1 = e.BroadcastTo(e.Reshape(ConvertTo(e, c.tensor(1), out.dtype), {out.dims[0], 1}), out.dims);
  Val v2 = e.BroadcastTo(e.Reshape(ConvertTo(e, c.tensor(2), out.dtype), {1, out.dims[1]}), out.dims);
  auto alpha = ComplexConstant(c, 4, 1.0), beta = ComplexConstant(c, 3, 1.0);
  Val r = e.Binary("multiply", e.Binary("multiply", ComplexFull(e, alpha, out), v1), v2);
  if (beta == std::make_pair(0.0, 0.0)) return {r};
  Val self = e.BroadcastTo(ConvertTo(e, c.tensor(0), out.dtype), out.dims);
  return {e.Binary("add", r, e.Binary("multiply", ComplexFull(e, beta, out), self))};
}
std::vector<Val> ComplexAddmm(LowerCtx& c) { return ComplexAddProduct(c, {}, {1}, {0}); }
std::vector<Val> ComplexAddmv(LowerCtx& c) { return ComplexAddProduct(c, {}, {1}, {0}); }
std::vector<Val> ComplexBaddbmm(LowerCtx& c) { return ComplexAddProduct(c, {0}, {2}, {1}); }
std::vector<Val> ComplexAddbmm(LowerCtx& c) { return ComplexAddProduct(c, {}, {0, 2}, {0, 1}); }

// ------------------------------------------------------------ routing

bool TakesComplexInput(LowerCtx& c) { return AnyComplexTensor(c); }
bool HasComplexExponent(LowerCtx& c) { return IsComplexConstant(c, 1); }
bool HasComplexAlphaBeta(LowerCtx& c) { return IsComplexConstant(c, 3) || IsComplexConstant(c, 4); }

constexpr int kMaxRoutes = 24;
LowerFn g_original[kMaxRoutes];

template <int K, LowerFn kComplexFn, bool (*kApplies)(LowerCtx&)>
std::vector<Val> Route(LowerCtx& c) {
  return kApplies(c) ? kComplexFn(c) : g_original[K](c);
}

void Reroute(Registry& r, const char* schema, int k, LowerFn route) {
  OpLowering* entry = r.Find(schema);
  if (entry == nullptr) throw std::logic_error(std::string("complex.cc: no lowering to route: ") + schema);
  if (k >= kMaxRoutes) throw std::logic_error("complex.cc: too many routes");
  g_original[k] = entry->fn;
  entry->fn = route;
}

}  // namespace

Val Magnitude(Emitter& e, const Val& x) { return Abs(e, x); }

void RegisterComplexOps(Registry& r) {
  r.Add("complex", LowerComplex);
  r.Add("polar", LowerPolar);
  // conj_physical_ and its out= form are not named after _conj_physical: listed explicitly
  // (without them the in-place op reached a CPU DispatchStub with no pjrt kernel).
  r.Add("_conj_physical", LowerConjPhysical).extra_variants = {"conj_physical_", "conj_physical.out"};
  r.Add("angle", LowerAngle);

  Reroute(r, "abs", 0, Route<0, ComplexAbs, TakesComplexInput>);
  Reroute(r, "isnan", 1, Route<1, ComplexIsnan, TakesComplexInput>);
  Reroute(r, "nan_to_num", 2, Route<2, ComplexNanToNum, TakesComplexInput>);
  Reroute(r, "var.correction", 3, Route<3, ComplexVar, TakesComplexInput>);
  Reroute(r, "std.correction", 4, Route<4, ComplexStd, TakesComplexInput>);
  Reroute(r, "var_mean.correction", 5, Route<5, ComplexVarMeanOp, TakesComplexInput>);
  Reroute(r, "std_mean.correction", 6, Route<6, ComplexStdMeanOp, TakesComplexInput>);
  Reroute(r, "linalg_vector_norm", 7, Route<7, ComplexVectorNorm, TakesComplexInput>);
  Reroute(r, "tanh_backward", 8, Route<8, ComplexTanhBackward, TakesComplexInput>);
  Reroute(r, "sigmoid_backward", 9, Route<9, ComplexSigmoidBackward, TakesComplexInput>);
  Reroute(r, "pow.Tensor_Scalar", 10, Route<10, ComplexPowScalar, HasComplexExponent>);
  Reroute(r, "addmm", 11, Route<11, ComplexAddmm, HasComplexAlphaBeta>);
  Reroute(r, "addmv", 12, Route<12, ComplexAddmv, HasComplexAlphaBeta>);
  Reroute(r, "baddbmm", 13, Route<13, ComplexBaddbmm, HasComplexAlphaBeta>);
  Reroute(r, "sgn", 14, Route<14, ComplexSgn, TakesComplexInput>);
  Reroute(r, "sinh", 15, Route<15, ComplexSinh, TakesComplexInput>);
  Reroute(r, "cosh", 16, Route<16, ComplexCosh, TakesComplexInput>);
  Reroute(r, "lerp.Scalar", 17, Route<17, ComplexLerp, TakesComplexInput>);
  Reroute(r, "lerp.Tensor", 18, Route<18, ComplexLerp, TakesComplexInput>);
  Reroute(r, "logaddexp", 19, Route<19, ComplexLogaddexp, TakesComplexInput>);
  Reroute(r, "addbmm", 20, Route<20, ComplexAddbmm, HasComplexAlphaBeta>);
  Reroute(r, "addr", 21, Route<21, ComplexAddr, TakesComplexInput>);
}

}  // namespace torch_pjrt::lowering
