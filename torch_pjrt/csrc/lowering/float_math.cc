// See float_math.h. Measured on XLA:CPU (one-thread client, 1M floats, ms): atan 20.1, asin
// 19.8, atan2 33.4, x ** 2.5 14.0 and fmod 23 through libm, against CPU eager's 0.35, 0.80, 1.66,
// 2.5 and 2.0 (docs/design.md, "XLA CPU performance notes").
#include "lowering/float_math.h"

#include <cmath>
#include <limits>
#include <vector>

#include "lowering/pointwise_util.h"

namespace torch_pjrt::lowering::float_math {

namespace {

using namespace pw;

constexpr double kPi = 3.14159265358979323846;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kLn2 = 0.69314718055994530942;
constexpr double kSqrt2 = 1.41421356237309504880;

// x in float64, subnormals read as zeros of their sign (what the CPU plugin's arithmetic reads
// them as), on the bits, so that the result does not depend on whether the convert runs with the
// DAZ flag set.
Val Widened(Emitter& e, const Val& x) { return e.Convert(FlushDenormals(e, x), ElementType::kF64); }

// atan t for 0 <= t <= 1 (or NaN), float64: Cephes' atan, whose rational function holds to 1e-16
// on |u| <= 0.66 (checked against numpy over [0, 1]); t above 0.66 is reduced by
// atan t = pi/4 + atan((t - 1) / (t + 1)).
Val AtanOfUnit(Emitter& e, const Val& t) {
  static const std::vector<double> p = {-8.750608600031904122785e-1, -1.615753718733365076637e1,
                                        -7.500855792314704667340e1, -1.228866684490136173410e2,
                                        -6.485021904942025371773e1};
  static const std::vector<double> q = {1.0, 2.485846490142306297962e1, 1.650270098316988542046e2,
                                        4.328810604912902668951e2, 4.853903996359136964868e2,
                                        1.945506571482613964425e2};
  Val one = K(e, 1, t);
  Val reduced = Cmp(e, "GT", t, K(e, 0.66, t));
  Val u = Sel(e, reduced, Div(e, Sub(e, t, one), Add(e, t, one)), t);
  Val z = Mul(e, u, u);
  Val r = Add(e, u, Mul(e, u, Div(e, Mul(e, z, Polevl(e, z, p)), Polevl(e, z, q))));
  return Sel(e, reduced, Add(e, r, K(e, kPi / 4, r)), r);
}

// atan2(y, x) of float64 values: the angle of the smaller magnitude over the larger, then moved
// to its octant. 0/0 (both zeros) reads as 0 and inf/inf (both infinite) as 1, which gives C's
// signed zeros, +-pi, +-pi/4 and +-3pi/4 there; NaN stays NaN.
Val Atan2OfDoubles(Emitter& e, const Val& y, const Val& x) {
  Val ay = Abs(e, y), ax = Abs(e, x);
  Val steep = Cmp(e, "GT", ay, ax);
  Val num = Sel(e, steep, ax, ay), den = Sel(e, steep, ay, ax);
  auto both = [&](double v) { return And(e, Cmp(e, "EQ", ay, K(e, v, ay)), Cmp(e, "EQ", ax, K(e, v, ax))); };
  Val ratio = Div(e, num, den);
  ratio = Sel(e, both(0), K(e, 0, ratio), ratio);
  ratio = Sel(e, both(kInf), K(e, 1, ratio), ratio);
  Val r = AtanOfUnit(e, ratio);
  r = Sel(e, steep, Sub(e, K(e, kPi / 2, r), r), r);
  r = Sel(e, SignBit(e, x), Sub(e, K(e, kPi, r), r), r);
  return Sel(e, SignBit(e, y), Neg(e, r), r);
}

Val Narrowed(Emitter& e, const Val& x) { return e.Convert(x, ElementType::kF32); }

// sqrt(1 - x^2) of float64 x as sqrt((1 - x)(1 + x)), exact but for the product's and the root's
// roundings; NaN for |x| > 1.
Val Cathetus(Emitter& e, const Val& x) {
  Val one = K(e, 1, x);
  return Sqrt(e, Mul(e, Sub(e, one, x), Add(e, one, x)));
}

// log |x| of float32 x, float64: |x| = m 2^k from the bits, m in [sqrt(2)/2, sqrt(2)), and
// log m = 2 atanh(s) with s = (m - 1) / (m + 1), |s| < 0.172, by its series to s^19 (truncation
// under 1e-16; XLA:CPU computes float64 log with a libm call too). Zero gives -inf, inf inf, NaN
// NaN; subnormals are zeros.
Val LogOfMagnitude(Emitter& e, const Val& x) {
  Val bits = Bits(e, Abs(e, x));
  Val biased = e.Binary("shift_right_logical", bits, K(e, 23, bits));
  Val mantissa = e.Binary("or", e.Binary("and", bits, K(e, 0x7fffff, bits)), K(e, 0x3f800000, bits));
  Val m = e.Convert(e.BitcastConvert(mantissa, TensorType{ElementType::kF32, x.dims()}), ElementType::kF64);
  Val k = e.Convert(Sub(e, biased, K(e, 127, biased)), ElementType::kF64);
  Val high = Cmp(e, "GT", m, K(e, kSqrt2, m));
  m = Sel(e, high, Mul(e, m, K(e, 0.5, m)), m);
  k = Sel(e, high, Add(e, k, K(e, 1, k)), k);
  Val one = K(e, 1, m);
  Val s = Div(e, Sub(e, m, one), Add(e, m, one));
  std::vector<double> series;
  for (int n = 9; n >= 0; --n) series.push_back(1.0 / (2 * n + 1));
  Val log_m = Mul(e, Mul(e, K(e, 2, s), s), Polevl(e, Mul(e, s, s), series));
  Val finite = Add(e, Mul(e, k, K(e, kLn2, k)), log_m);
  Val a = Widened(e, Abs(e, x));
  Val special = Sel(e, Cmp(e, "EQ", a, K(e, 0, a)), K(e, -kInf, a), a);  // 0: -inf; inf, NaN: themselves
  Val regular = And(e, Cmp(e, "GT", a, K(e, 0, a)), Cmp(e, "LT", a, K(e, kInf, a)));
  return Sel(e, regular, finite, special);
}

// Whether float64 y is an integer, and an odd one (infinities are even integers here, as in C's
// special cases).
std::pair<Val, Val> IntegerAndOdd(Emitter& e, const Val& y) {
  Val integer = Cmp(e, "EQ", e.Unary("round_nearest_even", y), y);
  Val half = Mul(e, y, K(e, 0.5, y));
  Val odd = And(e, integer, Cmp(e, "NE", e.Unary("round_nearest_even", half), half));
  return {integer, odd};
}

}  // namespace

Val ComputedUnlessAny(Emitter& e, const Val& beyond, const std::function<Val(Emitter&)>& by_compiler,
                      const std::function<Val(Emitter&)>& computed) {
  Val any = e.Reduce(beyond, e.Scalar(0, ElementType::kBool), AllDims(beyond.rank()), "or");
  auto compiler_branch = [&](Emitter& b, const std::vector<Val>&) {
    return std::vector<Val>{b.OptimizationBarrier(by_compiler(b))};
  };
  auto computed_branch = [&](Emitter& b, const std::vector<Val>&) { return std::vector<Val>{computed(b)}; };
  return e.If(any, compiler_branch, computed_branch)[0];
}

bool Applies(const Emitter& e, const Val& x) {
  return !e.target().fast_transcendentals && x.dtype() == ElementType::kF32 && x.numel() >= kMinElements;
}

Val Atan2(Emitter& e, const Val& y, const Val& x) { return Narrowed(e, Atan2OfDoubles(e, Widened(e, y), Widened(e, x))); }

// atan x = atan2(x, 1), folded: |x| > 1 is 1/|x| reduced to the unit interval.
Val Atan(Emitter& e, const Val& x) {
  Val xd = Widened(e, x);
  Val a = Abs(e, xd);
  Val inverted = Cmp(e, "GT", a, K(e, 1, a));
  Val r = AtanOfUnit(e, Sel(e, inverted, Div(e, K(e, 1, a), a), a));
  r = Sel(e, inverted, Sub(e, K(e, kPi / 2, r), r), r);
  return Narrowed(e, Sel(e, SignBit(e, xd), Neg(e, r), r));
}

Val Asin(Emitter& e, const Val& x) {
  Val xd = Widened(e, x);
  return Narrowed(e, Atan2OfDoubles(e, xd, Cathetus(e, xd)));
}

Val Acos(Emitter& e, const Val& x) {
  Val xd = Widened(e, x);
  return Narrowed(e, Atan2OfDoubles(e, Cathetus(e, xd), xd));
}

// pow(x, y) = +-exp(y log|x|) in float64 (XLA:CPU's float64 exp is vectorized), then C's special
// cases: a negative base gives a negative result for odd integer exponents (-0 and -inf included)
// and NaN for finite non-integer ones; pow(x, 0), pow(1, y) and pow(-1, +-inf) are 1, even with
// NaN. The rest (zeros, infinities, NaN) comes out of log and exp's own infinities.
Val Pow(Emitter& e, const Val& x, const Val& y) {
  Val xd = Widened(e, x), yd = Widened(e, y);
  Val magnitude = Exp(e, Mul(e, yd, LogOfMagnitude(e, x)));
  auto [integer, odd] = IntegerAndOdd(e, yd);
  Val negative = SignBit(e, xd);
  Val r = Sel(e, And(e, negative, odd), Neg(e, magnitude), magnitude);
  Val finite_negative = And(e, Cmp(e, "LT", xd, K(e, 0, xd)), Cmp(e, "GT", xd, K(e, -kInf, xd)));
  r = Sel(e, And(e, finite_negative, Not(e, integer)), K(e, std::numeric_limits<double>::quiet_NaN(), r), r);
  Val ax = Abs(e, xd);
  Val one = Or(e, Or(e, Cmp(e, "EQ", yd, K(e, 0, yd)), Cmp(e, "EQ", xd, K(e, 1, xd))),
               And(e, Cmp(e, "EQ", ax, K(e, 1, ax)), Cmp(e, "EQ", Abs(e, yd), K(e, kInf, yd))));
  return Narrowed(e, Sel(e, one, K(e, 1, r), r));
}

// While |a / b| < 2^26 the float64 quotient truncates to the exact quotient's integer part (a
// float32 ratio's fraction is at least 2^-24 from the next integer, far more than the division's
// rounding), q b is exact (26 + 24 bits) and so is a - q b, which lies on b's or a's grid below
// |b|: the result is exact, as fmod's is. Its sign is a's (a - q b gives +0 for a negative a).
Val Fmod(Emitter& e, const Val& a, const Val& b) {
  Val ad = Widened(e, a), bd = Widened(e, b);
  Val q = Trunc(e, Div(e, ad, bd));
  Val r = Sub(e, ad, Mul(e, q, bd));
  Val by_infinite = And(e, Cmp(e, "EQ", Abs(e, bd), K(e, kInf, bd)), Cmp(e, "LT", Abs(e, ad), K(e, kInf, ad)));
  Val exact = Narrowed(e, CopySign(e, Sel(e, by_infinite, ad, r), ad));
  Val aq = Abs(e, q);
  Val large = And(e, Cmp(e, "GE", aq, K(e, 67108864.0, aq)), Cmp(e, "LT", aq, K(e, kInf, aq)));
  auto by_compiler = [&](Emitter& inner) {
    // Raw: Emitter::Binary("remainder") would come back here.
    return inner.Raw("stablehlo.remainder " + inner.Name(a) + ", " + inner.Name(b), TypeString(a), a.type);
  };
  return ComputedUnlessAny(e, large, by_compiler, [&](Emitter&) { return exact; });
}

}  // namespace torch_pjrt::lowering::float_math
