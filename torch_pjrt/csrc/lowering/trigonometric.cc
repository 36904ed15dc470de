// sin, cos and tan. XLA:CPU computes stablehlo.sine/cosine/tan with a call into libm per element
// (perf: 88% of a one-thread sine's time in `__sinf_fma`): 9-11 ns an element, sin over [512,
// 1000] floats 4.3-4.6 ms against CPU eager's 0.2 (SLEEF's vectorized kernels). On such a compiler
// (TargetOptions::fast_transcendentals false), for float32 (and the half types, computed in float)
// a tensor of float_math::kMinElements or more is reduced and evaluated here in plain arithmetic,
// which XLA vectorizes: in float64, k = round(x * 2/pi), r = x - k*pi/2
// with pi/2 in two parts (Cody-Waite; exact while k < 2^20), then Taylor polynomials of sin r and
// cos r on |r| <= pi/4 (truncation below 1e-12, far under a float ulp) picked and negated by
// k mod 4. The result is the float64 value rounded once to float: within 0.5 ulp of the exact
// value where CPU eager's SLEEF kernels reach 0.54 (tests/test_lowerings_trigonometric.py).
// An argument beyond kLargestReduced (where k would need more bits) sends the whole tensor to
// XLA's own ops in the other branch of a stablehlo.if; inf and NaN give NaN on the fast path.
// Float64 and complex tensors keep XLA's ops.
#include <string>
#include <vector>

#include "lowering/float_math.h"
#include "lowering/pointwise_util.h"

namespace torch_pjrt::lowering {

namespace {

using namespace pw;

// |x| beyond this goes to XLA's ops: k = round(x * 2/pi) stays under 2^20, so k * kPio2Hi (33
// significant bits) is exact in float64.
constexpr double kLargestReduced = 1.0e6;
constexpr double kTwoOverPi = 0.63661977236758134308;
constexpr double kPio2Hi = 1.57079632673412561417e+00;   // pi/2 to 33 bits (fdlibm's pio2_1)
constexpr double kPio2Lo = 6.07710050650619224932e-11;   // pi/2 - kPio2Hi (pio2_1t)

enum class Trig { kSin, kCos, kTan };

const char* XlaOp(Trig f) { return f == Trig::kSin ? "sine" : f == Trig::kCos ? "cosine" : "tan"; }

// sin r and cos r for |r| <= pi/4 (float64): Taylor series to r^13 and r^12.
std::pair<Val, Val> SinCosOfReduced(Emitter& e, const Val& r) {
  Val z = Mul(e, r, r);
  Val sin_poly = Polevl(e, z, {1.0 / 6227020800.0, -1.0 / 39916800, 1.0 / 362880, -1.0 / 5040, 1.0 / 120,
                               -1.0 / 6});
  Val sin_r = Add(e, r, Mul(e, Mul(e, r, z), sin_poly));
  Val cos_r = Polevl(e, z, {1.0 / 479001600.0, -1.0 / 3628800, 1.0 / 40320, -1.0 / 720, 1.0 / 24,
                            -1.0 / 2, 1.0});
  return {sin_r, cos_r};
}

// f(x) for a float32 x with |x| <= kLargestReduced (or inf/NaN: NaN), computed in float64.
Val ReducedTrig(Emitter& e, const Val& x, Trig f) {
  Val xd = e.Convert(x, ElementType::kF64);
  Val k = e.Unary("round_nearest_even", Mul(e, xd, K(e, kTwoOverPi, xd)));
  Val r = Sub(e, Sub(e, xd, Mul(e, k, K(e, kPio2Hi, xd))), Mul(e, k, K(e, kPio2Lo, xd)));
  auto [s, c] = SinCosOfReduced(e, r);
  Val q = e.Convert(k, ElementType::kS32);  // only its two low bits are read
  auto bit = [&](int b) { return Cmp(e, "NE", e.Binary("and", q, K(e, b, q)), K(e, 0, q)); };
  Val odd = bit(1), high = bit(2);
  Val y;
  if (f == Trig::kTan) {
    y = Sel(e, odd, Neg(e, Div(e, c, s)), Div(e, s, c));
  } else if (f == Trig::kSin) {  // k mod 4 = 0, 1, 2, 3: s, c, -s, -c
    Val base = Sel(e, odd, c, s);
    y = Sel(e, high, Neg(e, base), base);
  } else {  // c, -s, -c, s
    Val base = Sel(e, odd, s, c);
    y = Sel(e, e.Binary("xor", odd, high), Neg(e, base), base);
  }
  y = e.Convert(y, x.dtype());
  if (f == Trig::kCos) return y;
  return Sel(e, Cmp(e, "EQ", x, K(e, 0, x)), x, y);  // sin and tan keep the sign of a zero
}

std::vector<Val> LowerTrig(LowerCtx& c, Trig f) {
  ElementType t = Compute(c);
  Val x = In(c, 0, t);
  if (!float_math::Applies(c.e, x)) return {Done(c, c.e.Unary(XlaOp(f), x))};
  Emitter& e = c.e;
  Val a = Abs(e, x);
  Val large = And(e, Cmp(e, "GT", a, K(e, kLargestReduced, a)), Cmp(e, "LT", a, K(e, INFINITY, a)));
  auto by_xla = [&](Emitter& b) { return b.Unary(XlaOp(f), x); };
  Val y = float_math::ComputedUnlessAny(e, large, by_xla, [&](Emitter& b) { return ReducedTrig(b, x, f); });
  return {Done(c, y)};
}

std::vector<Val> LowerSin(LowerCtx& c) { return LowerTrig(c, Trig::kSin); }
std::vector<Val> LowerCos(LowerCtx& c) { return LowerTrig(c, Trig::kCos); }
std::vector<Val> LowerTan(LowerCtx& c) { return LowerTrig(c, Trig::kTan); }

}  // namespace

void RegisterTrigonometricOps(Registry& r) {
  r.Add("sin", LowerSin);
  r.Add("cos", LowerCos);
  r.Add("tan", LowerTan);
}

}  // namespace torch_pjrt::lowering
