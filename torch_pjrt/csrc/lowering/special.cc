// More elementwise ops: float predicates and bit-level ops (signbit, copysign, frexp,
// nextafter), NaN-aware and Python-style arithmetic (fmax, floor_divide, logaddexp, xlogy, hypot),
// integer ops (gcd, lcm, shifts) and special functions (erfc, erfcx, log_ndtr, ndtri, polygamma,
// zeta, entr, logit; the Bessel functions are in bessel.cc). Each follows torch's CPU kernel formula, including its
// NaN/inf/-0.0 conventions, and computes in torch's opmath type (float for half types).
#include <cmath>
#include <stdexcept>
#include <string>

#include "lowering/pointwise_util.h"

namespace torch_pjrt::lowering {

namespace {

using namespace pw;

constexpr double kPi = 3.14159265358979323846;
constexpr double kInvSqrtPi = 0.56418958354775628694807945156;  // 1 / sqrt(pi)
constexpr double kLn2 = 0.69314718055994530942;

// Torch's CPU kernels of some ops dispatch on floating types only (NotImplementedError for the
// others); XLA would fail to compile them, or compute a value. The lowering refuses instead.
void CheckFloating(ElementType t, const char* op) {
  if (!IsFloating(t)) {
    throw std::invalid_argument(std::string("\"") + op + "_cpu\" not implemented for this dtype (floating types only)");
  }
}

// v rounded to the output's dtype where that is a half type (see RoundedTo).
Val RoundedToOut(LowerCtx& c, const Val& v) { return RoundedTo(c.e, v, c.out().dtype); }

// ------------------------------------------------------------ predicates and bits

std::vector<Val> LowerSignbit(LowerCtx& c) { return {SignBit(c.e, c.tensor(0))}; }

// copysign.Tensor(self, other), the half types in float32 (exact both ways): XLA:CPU lost the sign
// of a bfloat16 converted from an integer where the bit operations were fused with what followed
// (copysign(bf16, int16).clamp(max=0) gave 0 for -100; fuzz seed 1109337).
std::vector<Val> LowerCopysign(LowerCtx& c) {
  ElementType t = Compute(c);
  return {Done(c, CopySign(c.e, In(c, 0, t), In(c, 1, t)))};
}

std::vector<Val> LowerHeaviside(LowerCtx& c) {  // heaviside(self, values)
  ElementType t = c.out().dtype;
  Val x = In(c, 0, t), v = In(c, 1, t);
  Val zero = K(c.e, 0, x);
  return {Sel(c.e, Cmp(c.e, "EQ", x, zero), v, c.e.Convert(Cmp(c.e, "GT", x, zero), t))};
}

std::vector<Val> LowerNextafter(LowerCtx& c) {  // nextafter(self, other): steps in the own type
  ElementType t = c.out().dtype;
  CheckFloating(t, "nextafter");
  return {Chlo2(c.e, "next_after", In(c, 0, t), In(c, 1, t))};
}

// frexp.Tensor(self) -> (mantissa, exponent int32): x = m * 2^e with 0.5 <= |m| < 1; zeros, infs
// and NaNs give (x, 0) like glibc. Done on the bits, so denormals (which XLA:CPU's arithmetic
// reads as zeros) come out exact. Half types go through float, where their values are normal.
std::vector<Val> LowerFrexp(LowerCtx& c) {
  Emitter& e = c.e;
  Val x0 = c.tensor(0);
  ElementType t = Opmath(x0.dtype());
  bool f64 = t == ElementType::kF64;
  int64_t width = f64 ? 64 : 32, mant = f64 ? 52 : 23, exp_mask = f64 ? 0x7FF : 0xFF;
  int64_t bias = f64 ? 1022 : 126;  // biased exponent of 0.5
  Val x = e.Convert(x0, t);
  Val bits = Bits(e, x);
  auto k = [&](double v) { return K(e, v, bits); };
  Val sign = e.Binary("and", bits, k(-std::ldexp(1.0, static_cast<int>(width) - 1)));
  Val frac_mask = Sub(e, e.Binary("shift_left", k(1), k(static_cast<double>(mant))), k(1));
  Val frac = e.Binary("and", bits, frac_mask);
  Val biased = e.Binary("and", e.Binary("shift_right_logical", bits, k(static_cast<double>(mant))),
                        k(static_cast<double>(exp_mask)));
  Val half_exp = e.Binary("shift_left", k(static_cast<double>(bias)), k(static_cast<double>(mant)));
  // Normal numbers: replace the exponent field by that of 0.5.
  Val e_norm = Sub(e, biased, k(static_cast<double>(bias)));
  Val m_norm = Or(e, Or(e, sign, half_exp), frac);
  // Denormals: normalize the fraction by its leading one at bit p.
  Val p = Sub(e, k(static_cast<double>(width - 1)), e.Unary("count_leading_zeros", frac));
  Val shifted = e.Binary("and", e.Binary("shift_left", frac, Sub(e, k(static_cast<double>(mant)), p)), frac_mask);
  Val e_den = Add(e, p, k(static_cast<double>(1 - bias - mant)));
  Val m_den = Or(e, Or(e, sign, half_exp), shifted);
  Val denormal = Cmp(e, "EQ", biased, k(0));
  Val special = Or(e, And(e, denormal, Cmp(e, "EQ", frac, k(0))), Cmp(e, "EQ", biased, k(static_cast<double>(exp_mask))));
  Val m = e.BitcastConvert(Sel(e, denormal, m_den, m_norm), x.type);
  Val ex = Sel(e, denormal, e_den, e_norm);
  return {Done(c, Sel(e, special, x, m), 0), e.Convert(Sel(e, special, k(0), ex), c.out(1).dtype)};
}

// ------------------------------------------------------------ arithmetic

// fmax/fmin: NaN loses to a number; ties keep the first argument (as std::fmax does on CPU).
std::vector<Val> LowerFMaxMin(LowerCtx& c, bool max) {
  ElementType t = c.out().dtype;
  Val a = In(c, 0, t), b = In(c, 1, t);
  Val take_a = Cmp(c.e, max ? "GE" : "LE", a, b);
  if (IsFloating(t)) take_a = Or(c.e, take_a, IsNan(c.e, b));
  return {Sel(c.e, take_a, a, b)};
}
std::vector<Val> LowerFmax(LowerCtx& c) { return LowerFMaxMin(c, true); }
std::vector<Val> LowerFmin(LowerCtx& c) { return LowerFMaxMin(c, false); }

// c10::div_floor_integer.
Val FloorDivInt(Emitter& e, const Val& a, const Val& b) {
  Val q = Div(e, a, b);
  Val zero = K(e, 0, a);
  Val inexact = Cmp(e, "NE", e.Binary("remainder", a, b), zero);
  Val differ = Cmp(e, "NE", Cmp(e, "LT", a, zero), Cmp(e, "LT", b, zero));
  return Sel(e, And(e, inexact, differ), Sub(e, q, K(e, 1, a)), q);
}
std::vector<Val> LowerFloorDivide(LowerCtx& c) {  // floor_divide(self, other)
  ElementType t = Compute(c);
  Val a = Operand(c, 0, t), b = ThroughCommonDtype(c, 1, t);
  return {Done(c, IsFloating(t) ? FloorDivFloat(c.e, a, b, DivisionSteps(c, 1)) : FloorDivInt(c.e, a, b))};
}

// remainder.Scalar_Tensor(Scalar self, Tensor other): the result takes the divisor's sign.
std::vector<Val> LowerRemainderScalarTensor(LowerCtx& c) {
  ElementType t = Compute(c);
  Emitter& e = c.e;
  Val a = Operand(c, 0, t), b = Operand(c, 1, t);
  Val r = e.Binary("remainder", a, b);
  Val zero = K(e, 0, r);
  Val fix = And(e, Cmp(e, "NE", r, zero), Cmp(e, "NE", Cmp(e, "LT", r, zero), Cmp(e, "LT", b, zero)));
  return {Done(c, Sel(e, fix, Add(e, r, b), r))};
}

Val Exp2(Emitter& e, const Val& x) { return e.Binary("power", K(e, 2, x), x); }

// logaddexp / logaddexp2: max + log1p(exp(-|a - b|)), and a itself for equal infinities.
std::vector<Val> LowerLogAddExp(LowerCtx& c, bool base2) {
  CheckFloating(c.out().dtype, base2 ? "logaddexp2" : "logaddexp");
  ElementType t = Compute(c);
  Emitter& e = c.e;
  Val a = Operand(c, 0, t), b = Operand(c, 1, t);
  Val m = Max(e, a, b);
  Val d = Neg(e, Abs(e, Sub(e, a, b)));
  Val r = base2 ? Add(e, m, Mul(e, Log1p(e, Exp2(e, d)), K(e, 1.0 / kLn2, a))) : Add(e, m, Log1p(e, Exp(e, d)));
  Val same_inf = And(e, Cmp(e, "EQ", a, b), Cmp(e, "EQ", Abs(e, a), K(e, INFINITY, a)));
  return {Done(c, Sel(e, same_inf, a, r))};
}
std::vector<Val> LowerLogaddexp(LowerCtx& c) { return LowerLogAddExp(c, false); }
std::vector<Val> LowerLogaddexp2(LowerCtx& c) { return LowerLogAddExp(c, true); }

// xlogy / special_xlog1py: NaN if y is NaN, 0 if x == 0, else x * log(y) (log1p(y)). For the
// half types the logarithm is rounded to the type before the product, as c10's std::log overload
// for them returns the type.
std::vector<Val> LowerXLog(LowerCtx& c, bool log1p) {
  ElementType t = Compute(c);
  Emitter& e = c.e;
  Val x = Operand(c, 0, t), y = Operand(c, 1, t);
  Val r = Mul(e, x, RoundedToOut(c, log1p ? Log1p(e, y) : Log(e, y)));
  r = Sel(e, Cmp(e, "EQ", x, K(e, 0, x)), K(e, 0, x), r);
  return {Done(c, Sel(e, IsNan(e, y), K(e, NAN, y), r))};
}
std::vector<Val> LowerXlogy(LowerCtx& c) { return LowerXLog(c, false); }
std::vector<Val> LowerXlog1py(LowerCtx& c) { return LowerXLog(c, true); }

std::vector<Val> LowerSinc(LowerCtx& c) {  // 1 at 0, else sin(pi x) / (pi x)
  ElementType t = Compute(c);
  Emitter& e = c.e;
  Val x = In(c, 0, t);
  Val p = Mul(e, x, K(e, kPi, x));
  Val r = Div(e, e.Unary("sine", p), p);
  return {Done(c, Sel(e, Cmp(e, "EQ", x, K(e, 0, x)), K(e, 1, x), r))};
}

// round.decimals(self, *, decimals): nearbyint(x * 10^d) / 10^d (x / 10^-d ... for d < 0).
std::vector<Val> LowerRoundDecimals(LowerCtx& c) {
  ElementType t = Compute(c);
  Emitter& e = c.e;
  Val x = In(c, 0, t);
  int64_t d = c.int_arg(1);
  CheckFloating(x.dtype(), "round");
  Val p = KDiv(e, std::pow(10.0, static_cast<double>(d < 0 ? -d : d)), x);
  Val r = d < 0 ? Mul(e, e.Unary("round_nearest_even", Div(e, x, p)), p)
                : Div(e, e.Unary("round_nearest_even", Mul(e, x, p)), p);
  return {Done(c, r)};
}

// hypot without overflow: double precision for narrower types, m * sqrt(1 + (n/m)^2) for doubles.
std::vector<Val> LowerHypot(LowerCtx& c) {
  Emitter& e = c.e;
  ElementType out = c.out().dtype;
  CheckFloating(out, "hypot");
  Val r;
  Val a, b;
  if (out != ElementType::kF64) {
    a = Abs(e, Operand(c, 0, ElementType::kF64));
    b = Abs(e, Operand(c, 1, ElementType::kF64));
    r = Sqrt(e, Add(e, Mul(e, a, a), Mul(e, b, b)));
  } else {
    a = Abs(e, In(c, 0, out));
    b = Abs(e, In(c, 1, out));
    Val m = Max(e, a, b), n = Min(e, a, b);
    Val q = Div(e, n, m);
    r = Mul(e, m, Sqrt(e, Add(e, K(e, 1, q), Mul(e, q, q))));
    r = Sel(e, Cmp(e, "EQ", m, K(e, 0, m)), K(e, 0, m), r);
  }
  // An infinite side wins over NaN, as in std::hypot.
  Val inf = K(e, INFINITY, a);
  Val any_inf = Or(e, Cmp(e, "EQ", a, inf), Cmp(e, "EQ", b, inf));
  return {Done(c, Sel(e, any_inf, inf, r))};
}

// logit(self, eps=None): log(x / (1 - x)) of x clamped to [eps, 1 - eps] when eps >= 0. The half
// types round after each operation, as their CPU kernel's Vectorized<scalar_t> math does.
std::vector<Val> LowerLogit(LowerCtx& c) {
  ElementType t = Compute(c);
  Emitter& e = c.e;
  Val x = In(c, 0, t);
  if (!c.is_none(1) && c.double_arg(1) >= 0) {
    // The bounds are rounded to the tensor's type first, as the CPU kernel's scalar_t math does.
    ElementType st = c.out().dtype;
    Val lo = e.Convert(e.Full(c.double_arg(1), TensorType{st, x.dims()}), t);
    Val hi = e.Convert(e.Convert(Sub(e, K(e, 1, x), lo), st), t);
    x = Sel(e, Cmp(e, "LT", x, lo), lo, Sel(e, Cmp(e, "GT", x, hi), hi, x));
  }
  Val one = K(e, 1, x);
  Val r = Log(e, RoundedToOut(c, Div(e, x, RoundedToOut(c, Sub(e, one, x)))));
  return {Done(c, Sel(e, Cmp(e, "EQ", x, one), K(e, INFINITY, x), r))};
}

// logit_backward(grad_output, self, eps=None)
std::vector<Val> LowerLogitBackward(LowerCtx& c) {
  CheckFloating(c.out().dtype, "logit_backward");
  ElementType t = Compute(c);
  Emitter& e = c.e;
  Val g = In(c, 0, t), x = In(c, 1, t);
  Val zero = K(e, 0, x), one = K(e, 1, x);
  Val at_edge = Or(e, Cmp(e, "EQ", x, zero), Cmp(e, "EQ", x, one));
  Val r = Sel(e, at_edge, Mul(e, g, K(e, INFINITY, x)), Div(e, g, Mul(e, x, Sub(e, one, x))));
  if (!c.is_none(2) && c.double_arg(2) >= 0) {
    ElementType st = c.out().dtype;
    Val lo = e.Convert(e.Full(c.double_arg(2), TensorType{st, x.dims()}), t);
    Val hi = e.Convert(e.Convert(Sub(e, one, lo), st), t);
    Val outside = Or(e, Cmp(e, "LT", x, lo), Cmp(e, "GT", x, hi));
    return {Done(c, Sel(e, outside, zero, r))};
  }
  Val outside = Or(e, Cmp(e, "LT", x, zero), Cmp(e, "GT", x, one));
  return {Done(c, Sel(e, outside, K(e, NAN, x), r))};
}

// ------------------------------------------------------------ integers

// Euclid's algorithm on |a|, |b| as a loop that runs until every element has finished.
Val Gcd(Emitter& e, Val a, Val b) {
  if (!IsUnsigned(a.dtype())) {
    a = Abs(e, a);
    b = Abs(e, b);
  }
  int64_t rank = a.rank();
  auto cond = [rank](Emitter& w, const std::vector<Val>& v) -> std::vector<Val> {
    Val nz = w.Compare("NE", v[0], w.Full(0, v[0].type));
    return {w.Reduce(nz, w.Scalar(0, ElementType::kBool), AllDims(rank), "or")};
  };
  auto body = [](Emitter& w, const std::vector<Val>& v) -> std::vector<Val> {
    const Val &x = v[0], &y = v[1];
    Val nz = w.Compare("NE", x, w.Full(0, x.type));
    Val safe = w.Select(nz, x, w.Full(1, x.type));
    Val r = w.Binary("remainder", y, safe);
    return {w.Select(nz, r, x), w.Select(nz, x, y)};
  };
  return e.While({a, b}, cond, body)[1];
}
// Integer types only, like torch's CPU kernel (a float NaN would never leave Euclid's loop).
void CheckIntegral(ElementType t, const char* op) {
  if (IsFloating(t) || IsComplex(t) || t == ElementType::kBool) {
    throw std::invalid_argument(std::string("\"") + op + "_cpu\" not implemented for this dtype (integers only)");
  }
}
std::vector<Val> LowerGcd(LowerCtx& c) {
  ElementType t = c.out().dtype;
  CheckIntegral(t, "gcd");
  return {Gcd(c.e, In(c, 0, t), In(c, 1, t))};
}
// lcm: g == 0 ? 0 : |a / g * b|, with C++'s promotion of narrow types to int for the product.
std::vector<Val> LowerLcm(LowerCtx& c) {
  ElementType t = c.out().dtype;
  CheckIntegral(t, "lcm");
  Emitter& e = c.e;
  Val a = In(c, 0, t), b = In(c, 1, t);
  Val g = Gcd(e, a, b);
  Val zero = K(e, 0, g);
  Val is_zero = Cmp(e, "EQ", g, zero);
  ElementType wide = ItemSize(t) < 4 ? ElementType::kS32 : t;
  Val q = e.Convert(Div(e, a, Sel(e, is_zero, K(e, 1, g), g)), wide);
  Val r = Mul(e, q, e.Convert(b, wide));
  if (!IsUnsigned(wide)) r = Abs(e, r);
  return {Sel(e, is_zero, zero, e.Convert(r, t))};
}

// Shifts with torch's out-of-range rules: a << b is 0 for b < 0 or b >= bits; a >> b fills
// with the sign (0 for unsigned types) for b < 0 or b >= bits - is_signed.
std::vector<Val> LowerShift(LowerCtx& c, bool left) {
  ElementType t = c.out().dtype;
  Emitter& e = c.e;
  Val a = In(c, 0, t), b = In(c, 1, t);
  int64_t bits = static_cast<int64_t>(ItemSize(t)) * 8;
  bool is_signed = !IsUnsigned(t) && t != ElementType::kBool;
  Val zero = K(e, 0, b);
  Val out_of_range = Cmp(e, "GE", b, K(e, static_cast<double>(left || !is_signed ? bits : bits - 1), b));
  if (is_signed) out_of_range = Or(e, out_of_range, Cmp(e, "LT", b, zero));
  if (left) return {Sel(e, out_of_range, K(e, 0, a), e.Binary("shift_left", a, b))};
  if (!is_signed) return {Sel(e, out_of_range, K(e, 0, a), e.Binary("shift_right_logical", a, b))};
  Val amount = Sel(e, out_of_range, K(e, static_cast<double>(bits - 1), b), b);
  return {e.Binary("shift_right_arithmetic", a, amount)};
}
std::vector<Val> LowerLshift(LowerCtx& c) { return LowerShift(c, true); }
std::vector<Val> LowerRshift(LowerCtx& c) { return LowerShift(c, false); }

// ------------------------------------------------------------ special functions

// exp(x^2) erfc(x) for x >= 0 in double: the product directly (XLA's erfc is exp(-x^2) times a
// rational function, so the exponentials cancel exactly), a continued fraction from 26 on.
Val ErfcxNonNegF64(Emitter& e, const Val& x) {
  Val x2 = Mul(e, x, x);
  Val direct = Mul(e, Exp(e, x2), Chlo(e, "erfc", x));
  Val num = Add(e, Mul(e, x2, Add(e, x2, K(e, 4.5, x))), K(e, 2, x));
  Val den = Mul(e, x, Add(e, Mul(e, x2, Add(e, x2, K(e, 5, x))), K(e, 3.75, x)));
  Val cf = Mul(e, K(e, kInvSqrtPi, x), Div(e, num, den));
  Val huge = Div(e, K(e, kInvSqrtPi, x), x);
  Val far = Sel(e, Cmp(e, "GT", x, K(e, 5e7, x)), huge, cf);
  return Sel(e, Cmp(e, "LT", x, K(e, 26, x)), direct, far);
}
// erfcx(x) = exp(x^2) erfc(x), computed in double; negative x use 2 exp(x^2) - erfcx(-x).
Val ErfcxF64(Emitter& e, const Val& x0) {
  Val x = e.Convert(x0, ElementType::kF64);
  Val pos = ErfcxNonNegF64(e, Abs(e, x));
  Val neg = Sub(e, Mul(e, K(e, 2, x), Exp(e, Mul(e, x, x))), pos);
  neg = Sel(e, Cmp(e, "LT", x, K(e, -26.7, x)), K(e, INFINITY, x), neg);
  return Sel(e, Cmp(e, "GE", x, K(e, 0, x)), pos, neg);
}
std::vector<Val> LowerErfcx(LowerCtx& c) {
  CheckFloatOrDouble(c.out().dtype, "special_erfcx");
  return {Done(c, ErfcxF64(c.e, c.tensor(0)))};
}
// log_ndtr(x) = log(normal CDF), as torch: log(erfcx(-t) / 2) - t^2 below -1 (t = x / sqrt 2),
// where the CDF underflows, else log1p(-erfc(t) / 2). In double.
std::vector<Val> LowerLogNdtr(LowerCtx& c) {
  Emitter& e = c.e;
  Val x = In(c, 0, ElementType::kF64);
  Val t = Mul(e, x, K(e, 0.70710678118654752440, x));
  Val tail = Sub(e, Log(e, Div(e, ErfcxF64(e, Neg(e, t)), K(e, 2, t))), Mul(e, t, t));
  Val body = Log1p(e, Neg(e, Div(e, Chlo(e, "erfc", t), K(e, 2, t))));
  return {Done(c, Sel(e, Cmp(e, "LT", x, K(e, -1, x)), tail, body))};
}
std::vector<Val> LowerErfc(LowerCtx& c) { return {Done(c, Chlo(c.e, "erfc", In(c, 0, Compute(c))))}; }

// ndtri (Cephes): the inverse of the standard normal CDF.
std::vector<Val> LowerNdtri(LowerCtx& c) {
  CheckFloatOrDouble(c.out().dtype, "special_ndtri");
  ElementType t = Compute(c);
  Emitter& e = c.e;
  Val y0 = In(c, 0, t);
  constexpr double kExpM2 = 0.13533528323661269189;  // exp(-2)
  constexpr double kS2Pi = 2.50662827463100050242;   // sqrt(2 pi)
  Val one = K(e, 1, y0);
  Val upper = Cmp(e, "GT", y0, K(e, 1 - kExpM2, y0));
  Val y = Sel(e, upper, Sub(e, one, y0), y0);
  // Central range.
  Val yc = Sub(e, y, K(e, 0.5, y));
  Val y2 = Mul(e, yc, yc);
  Val p0 = Polevl(e, y2, {-5.99633501014107895267E1, 9.80010754185999661536E1, -5.66762857469070293439E1,
                          1.39312609387279679503E1, -1.23916583867381258016E0});
  Val q0 = Polevl(e, y2, {1.00000000000000000000E0, 1.95448858338141759834E0, 4.67627912898881538453E0,
                          8.63602421390890590575E1, -2.25462687854119370527E2, 2.00260212380060660359E2,
                          -8.20372256168333339912E1, 1.59056225126211695515E1, -1.18331621121330003142E0});
  Val central = Mul(e, Add(e, yc, Mul(e, yc, Div(e, Mul(e, y2, p0), q0))), K(e, kS2Pi, y));
  // Tails.
  Val x = Sqrt(e, Mul(e, K(e, -2, y), Log(e, y)));
  Val x0 = Sub(e, x, Div(e, Log(e, x), x));
  Val z = Div(e, one, x);
  Val p1 = Polevl(e, z, {4.05544892305962419923E0, 3.15251094599893866154E1, 5.71628192246421288162E1,
                         4.40805073893200834700E1, 1.46849561928858024014E1, 2.18663306850790267539E0,
                         -1.40256079171354495875E-1, -3.50424626827848203418E-2, -8.57456785154685413611E-4});
  Val q1 = Polevl(e, z, {1.00000000000000000000E0, 1.57799883256466749731E1, 4.53907635128879210584E1,
                         4.13172038254672030440E1, 1.50425385692907503408E1, 2.50464946208309415979E0,
                         -1.42182922854787788574E-1, -3.80806407691578277194E-2, -9.33259480895457427372E-4});
  Val p2 = Polevl(e, z, {3.23774891776946035970E0, 6.91522889068984211695E0, 3.93881025292474443415E0,
                         1.33303460815807542389E0, 2.01485389549179081538E-1, 1.23716634817820021358E-2,
                         3.01581553508235416007E-4, 2.65806974686737550832E-6, 6.23974539184983293730E-9});
  Val q2 = Polevl(e, z, {1.00000000000000000000E0, 6.02427039364742014255E0, 3.67983563856160859403E0,
                         1.37702099489081330271E0, 2.16236993594496635890E-1, 1.34204006088543189037E-2,
                         3.28014464682127739104E-4, 2.89247864745380683936E-6, 6.79019408009981274425E-9});
  Val x1 = Sel(e, Cmp(e, "LT", x, K(e, 8, x)), Div(e, Mul(e, z, p1), q1), Div(e, Mul(e, z, p2), q2));
  Val tail = Sub(e, x0, x1);
  tail = Sel(e, upper, tail, Neg(e, tail));
  Val r = Sel(e, Cmp(e, "GT", y, K(e, kExpM2, y)), central, tail);
  Val zero = K(e, 0, y0);
  r = Sel(e, Or(e, Cmp(e, "LT", y0, zero), Cmp(e, "GT", y0, one)), K(e, NAN, y0), r);
  r = Sel(e, Cmp(e, "EQ", y0, zero), K(e, -INFINITY, y0), r);
  r = Sel(e, Cmp(e, "EQ", y0, one), K(e, INFINITY, y0), r);
  return {Done(c, r)};
}

// entr(x): -x log x for x > 0, 0 at 0, -inf below, NaN for NaN.
std::vector<Val> LowerEntr(LowerCtx& c) {
  ElementType t = Compute(c);
  Emitter& e = c.e;
  Val x = In(c, 0, t);
  Val zero = K(e, 0, x);
  Val r = Neg(e, Mul(e, x, RoundedToOut(c, Log(e, x))));  // a half type's log is rounded (see RoundedToOut)
  r = Sel(e, Cmp(e, "EQ", x, zero), zero, r);
  r = Sel(e, Cmp(e, "LT", x, zero), K(e, -INFINITY, x), r);
  return {Done(c, r)};
}

// Hurwitz zeta(x, q) as torch computes it (Cephes, in double): special values first, then the
// direct sum of (q + k)^-x for at least 9 terms and until q + k > 9 (a loop, per element, that
// stops early once a term is below machine precision), then 12 Euler-Maclaurin terms.
Val ZetaF64(Emitter& e, const Val& x0, const Val& q0) {
  Val x = e.Convert(x0, ElementType::kF64), q = e.Convert(q0, ElementType::kF64);
  constexpr double kMachEp = 1.11022302462515654042E-16;
  auto k = [&](double v) { return K(e, v, x); };
  // Special values, in the order torch checks them (before its loop: they must not enter it,
  // q = -inf would never leave it).
  Val q_nonpos = Cmp(e, "LE", q, k(0));
  Val q_int = And(e, q_nonpos, Cmp(e, "EQ", q, e.Unary("floor", q)));
  Val x_frac = And(e, q_nonpos, Cmp(e, "NE", x, e.Unary("floor", x)));
  Val x_le1 = Cmp(e, "LE", x, k(1));
  Val special = Or(e, Or(e, x_le1, q_int), x_frac);
  Val s = e.Binary("power", q, Neg(e, x));
  Val i = K(e, 0, x);
  Val done = special;
  int64_t rank = x.rank();
  auto active = [](Emitter& w, const Val& i_, const Val& a_, const Val& done_) {
    Val more = w.Binary("or", w.Compare("LT", i_, w.Full(9, i_.type)), w.Compare("LE", a_, w.Full(9, a_.type)));
    return w.Binary("and", more, w.Unary("not", done_));
  };
  auto cond = [&](Emitter& w, const std::vector<Val>& v) -> std::vector<Val> {
    Val act = active(w, v[0], v[1], v[4]);
    return {w.Reduce(act, w.Scalar(0, ElementType::kBool), AllDims(rank), "or")};
  };
  auto body = [&](Emitter& w, const std::vector<Val>& v) -> std::vector<Val> {
    const Val &i_ = v[0], &a_ = v[1], &b_ = v[2], &s_ = v[3], &done_ = v[4], &x_ = v[5];
    Val act = active(w, i_, a_, done_);
    Val a1 = w.Binary("add", a_, w.Full(1, a_.type));
    Val b1 = w.Binary("power", a1, w.Unary("negate", x_));
    Val s1 = w.Binary("add", s_, b1);
    Val eps_s = w.Binary("multiply", w.Full(kMachEp, s1.type), s1);
    Val conv = w.Binary("and", w.Compare("LT", w.Unary("negate", eps_s), b1), w.Compare("LT", b1, eps_s));
    return {w.Select(act, w.Binary("add", i_, w.Full(1, i_.type)), i_), w.Select(act, a1, a_),
            w.Select(act, b1, b_), w.Select(act, s1, s_), w.Binary("or", done_, w.Binary("and", act, conv)), x_};
  };
  std::vector<Val> r = e.While({i, q, K(e, 0, x), s, done, x}, cond, body);
  Val a = r[1], b = r[2];
  s = r[3];
  done = r[4];
  static const double kA[] = {12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9,
                              7.47242496e10, -2.950130727918164224e12, 1.1646782814350067249e14,
                              -4.5979787224074726105e15, 1.8152105401943546773e17,
                              -7.1661652561756670113e18};
  Val w = a;
  Val s2 = Add(e, s, Div(e, Mul(e, b, w), Sub(e, x, k(1))));
  s2 = Sub(e, s2, Mul(e, k(0.5), b));
  Val aa = k(1), kk = k(0);
  for (double coeff : kA) {
    aa = Mul(e, aa, Add(e, x, kk));
    b = Div(e, b, w);
    Val term = Div(e, Mul(e, aa, b), KDiv(e, coeff, x));
    Val next = Add(e, s2, term);
    Val small = Cmp(e, "LT", Abs(e, Div(e, term, next)), k(kMachEp));
    s2 = Sel(e, done, s2, next);
    done = Or(e, done, small);
    kk = Add(e, kk, k(1));
    aa = Mul(e, aa, Add(e, x, kk));
    b = Div(e, b, w);
    kk = Add(e, kk, k(1));
  }
  Val result = Sel(e, r[4], s, s2);
  result = Sel(e, x_frac, k(NAN), result);
  result = Sel(e, q_int, k(INFINITY), result);
  result = Sel(e, Cmp(e, "LT", x, k(1)), k(NAN), result);
  return Sel(e, Cmp(e, "EQ", x, k(1)), k(INFINITY), result);
}
std::vector<Val> LowerZeta(LowerCtx& c) {  // special_zeta(self, other): Hurwitz zeta(x, q)
  ElementType t = c.out().dtype;
  CheckFloatOrDouble(t, "zeta");
  return {Done(c, ZetaF64(c.e, In(c, 0, t), In(c, 1, t)))};
}

// torch's trigamma: reflection below 0.5, six recurrence steps, then the asymptotic series.
Val Trigamma(Emitter& e, const Val& x0) {
  auto k = [&](double v) { return K(e, v, x0); };
  Val reflect = Cmp(e, "LT", x0, k(0.5));
  Val sin_pi_x = e.Unary("sine", Mul(e, k(kPi), x0));
  Val result = Sel(e, reflect, Neg(e, Div(e, Mul(e, k(kPi), k(kPi)), Mul(e, sin_pi_x, sin_pi_x))), k(0));
  Val x = Sel(e, reflect, Sub(e, k(1), x0), x0);
  for (int i = 0; i < 6; ++i) {
    result = Add(e, result, Div(e, k(1), Mul(e, x, x)));
    x = Add(e, x, k(1));
  }
  Val ixx = Div(e, k(1), Mul(e, x, x));
  Val series = Sub(e, k(1.0 / 30), Mul(e, ixx, k(1.0 / 42)));
  series = Sub(e, k(1.0 / 6), Mul(e, ixx, series));
  series = Add(e, Add(e, k(1), Div(e, k(1), Mul(e, k(2), x))), Mul(e, ixx, series));
  result = Add(e, result, Div(e, series, x));
  return Sel(e, reflect, Neg(e, result), result);
}

// polygamma(int n, Tensor self): digamma (with torch's -+inf at +-0), trigamma, and for n >= 2
// (-1)^(n+1) n! zeta(n + 1, x).
std::vector<Val> LowerPolygamma(LowerCtx& c) {
  ElementType t = Compute(c);
  Emitter& e = c.e;
  Val x = In(c, 1, t);
  int64_t n = c.int_arg(0);
  if (n == 0) {
    Val at_zero = Div(e, K(e, -1, x), x);
    return {Done(c, Sel(e, Cmp(e, "EQ", x, K(e, 0, x)), at_zero, Chlo(e, "digamma", x)))};
  }
  if (n == 1) return {Done(c, Trigamma(e, x))};
  double factorial = std::exp(std::lgamma(static_cast<double>(n) + 1));
  Val z = ZetaF64(e, K(e, static_cast<double>(n + 1), x), x);
  return {Done(c, Mul(e, K(e, (n % 2 ? 1.0 : -1.0) * factorial, z), z))};
}


}  // namespace

void RegisterSpecialOps(Registry& r) {
  r.Add("signbit", LowerSignbit);
  r.Add("copysign.Tensor", LowerCopysign);
  r.Add("heaviside", LowerHeaviside);
  r.Add("nextafter", LowerNextafter);
  r.Add("frexp.Tensor", LowerFrexp);
  r.Add("fmax", LowerFmax);
  r.Add("fmin", LowerFmin);
  // In-place variants named apart from their functional op (floor_divide_.Tensor, __ilshift__); floor_divide.Scalar is
  // CompositeExplicitAutograd (floor_divide with a wrapped number).
  OpLowering& floor_divide = r.Add("floor_divide", LowerFloorDivide);
  floor_divide.extra_variants = {"floor_divide_.Tensor"};
  floor_divide.zero_divisor_check.enabled = true;
  r.Add("remainder.Scalar_Tensor", LowerRemainderScalarTensor).zero_divisor_check.enabled = true;
  r.Add("logaddexp", LowerLogaddexp);
  r.Add("logaddexp2", LowerLogaddexp2);
  r.Add("xlogy.Tensor", LowerXlogy);
  r.Add("special_xlog1py", LowerXlog1py);
  r.Add("sinc", LowerSinc);
  r.Add("round.decimals", LowerRoundDecimals);
  r.Add("hypot", LowerHypot);
  r.Add("logit", LowerLogit);
  r.Add("logit_backward", LowerLogitBackward);
  r.Add("gcd", LowerGcd);
  r.Add("lcm", LowerLcm);
  r.Add("__lshift__.Tensor", LowerLshift).extra_variants = {"__ilshift__.Tensor"};
  r.Add("__lshift__.Scalar", LowerLshift).extra_variants = {"__ilshift__.Scalar"};
  r.Add("__rshift__.Tensor", LowerRshift).extra_variants = {"__irshift__.Tensor"};
  r.Add("__rshift__.Scalar", LowerRshift).extra_variants = {"__irshift__.Scalar"};
  r.Add("bitwise_left_shift.Tensor", LowerLshift);
  r.Add("bitwise_right_shift.Tensor", LowerRshift);
  r.Add("erfc", LowerErfc);
  r.Add("special_erfcx", LowerErfcx);
  r.Add("special_log_ndtr", LowerLogNdtr);
  r.Add("special_ndtri", LowerNdtri);
  r.Add("special_entr", LowerEntr);
  r.Add("special_zeta", LowerZeta);
  r.Add("polygamma", LowerPolygamma);
}

}  // namespace torch_pjrt::lowering
