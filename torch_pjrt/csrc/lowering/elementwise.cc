// Elementwise ops: arithmetic, comparisons, unary math, activations and their backward formulas.
// Each computes in torch's opmath type (float for half types) at the output's shape, then converts.
#include <cmath>
#include <cstdint>
#include <stdexcept>

#include "lowering/float_math.h"
#include "lowering/helpers.h"

namespace torch_pjrt::lowering {

namespace {

constexpr double kSqrt2 = 1.41421356237309504880;
constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2 / pi)
constexpr double kInvSqrt2Pi = 0.39894228040143267794;   // 1 / sqrt(2 pi)

// Argument i (tensor or Scalar) broadcast to the output shape in type t.
Val In(LowerCtx& c, size_t i, ElementType t) {
  if (c.is_tensor(i)) return Coerce(c.e, c.tensor(i), c.out().dims, t);
  return c.e.Full(c.double_arg(i), TensorType{t, c.out().dims});
}
ElementType Compute(LowerCtx& c) { return Opmath(c.out().dtype); }
Val K(LowerCtx& c, double v, ElementType t) { return c.e.Full(v, TensorType{t, c.out().dims}); }
Val Done(LowerCtx& c, const Val& v) { return c.e.Convert(v, c.out().dtype); }
// A constant divisor XLA keeps: its simplifier turns x / constant into x * (1 / constant), which
// is off by an ulp where torch divides (hardswish_backward's x / 3 at x = -2.5). Behind an
// optimization barrier the divisor is no longer a constant to XLA.
Val Divisor(LowerCtx& c, double v, ElementType t) {
  return c.e.BroadcastTo(c.e.OptimizationBarrier(c.e.Scalar(v, t)), c.out().dims);
}

Val Add(Emitter& e, const Val& a, const Val& b) { return e.Binary("add", a, b); }
Val Sub(Emitter& e, const Val& a, const Val& b) { return e.Binary("subtract", a, b); }
Val Mul(Emitter& e, const Val& a, const Val& b) { return e.Binary("multiply", a, b); }
Val Div(Emitter& e, const Val& a, const Val& b) { return e.Binary("divide", a, b); }

// other * alpha, skipping the multiply for the (constant) default alpha of 1; alpha read as
// `read` says (add/sub's is an operand, rounded to a half type; addcmul's value is read as given).
Val Scaled(LowerCtx& c, const Val& other, size_t alpha_index, ElementType t, ScalarRead read = ScalarRead::kAsGiven) {
  if (c.is_none(alpha_index)) return other;
  if (!c.is_tensor(alpha_index) && c.double_arg(alpha_index) == 1.0) return other;
  return Mul(c.e, other, ThroughCommonDtype(c, alpha_index, t, read));
}

// add/sub/rsub: a + alpha * b, where CPU's kernel for float16 and bfloat16 reads a CPU scalar and
// alpha rounded to the result's dtype (ScalarRead) and computes in float.
std::vector<Val> LowerAddLike(LowerCtx& c, size_t a, size_t b, bool subtract) {
  ElementType t = Compute(c);
  Val scaled = Scaled(c, Operand(c, b, t), 2, t, ScalarRead::kInCommonDtype);
  Val base = Operand(c, a, t);
  return {Done(c, subtract ? Sub(c.e, base, scaled) : Add(c.e, base, scaled))};
}

// ------------------------------------------------------------ arithmetic

// add.Tensor(self, other, *, alpha=1)
std::vector<Val> LowerAdd(LowerCtx& c) { return LowerAddLike(c, 0, 1, false); }

// torch's sub_check, which the Meta kernels skip for a bool Python number (True - x, x - True):
// raised when the graph runs.
void CheckNoBoolSubtraction(LowerCtx& c) {
  if (c.tensor(0).dtype() == ElementType::kBool || c.tensor(1).dtype() == ElementType::kBool) {
    throw std::invalid_argument(
        "Subtraction, the `-` operator, with a bool tensor is not supported. If you are trying to invert a mask, "
        "use the `~` or `logical_not()` operator instead.");
  }
}

std::vector<Val> LowerSub(LowerCtx& c) {  // sub.Tensor(self, other, *, alpha=1)
  CheckNoBoolSubtraction(c);
  return LowerAddLike(c, 0, 1, true);
}

std::vector<Val> LowerRsub(LowerCtx& c) {  // rsub.Tensor(self, other, *, alpha=1): other - alpha*self
  CheckNoBoolSubtraction(c);
  return LowerAddLike(c, 1, 0, true);
}

std::vector<Val> LowerMul(LowerCtx& c) {
  ElementType t = Compute(c);  // bool: the emitter's multiply of i1 values is a logical and
  return {Done(c, Mul(c.e, Operand(c, 0, t), ThroughCommonDtype(c, 1, t)))};
}

// Integer division rounded toward negative infinity.
Val FloorDivInt(Emitter& e, const Val& a, const Val& b) {
  Val q = Div(e, a, b);
  Val zero = e.Full(0, a.type);
  Val inexact = e.Compare("NE", Sub(e, a, Mul(e, q, b)), zero);
  Val signs_differ = e.Compare("NE", e.Compare("LT", a, zero), e.Compare("LT", b, zero));
  Val adjust = e.Binary("and", inexact, signs_differ);
  return e.Select(adjust, Sub(e, q, e.Full(1, a.type)), q);
}

Val Trunc(Emitter& e, const Val& x) {
  if (!IsFloating(x.dtype())) return x;
  return e.Select(e.Compare("LT", x, e.Full(0, x.type)), e.Unary("ceil", x), e.Unary("floor", x));
}

std::vector<Val> DivWithMode(LowerCtx& c, const std::string& mode) {
  ElementType t = Compute(c);
  Val a = Operand(c, 0, t), b = ThroughCommonDtype(c, 1, t);
  if (mode.empty()) return {Done(c, Div(c.e, a, b))};
  if (IsFloating(t)) {
    ElementType steps = DivisionSteps(c, 1);  // a half type's quotient is rounded before trunc
    if (mode == "trunc") return {Done(c, Trunc(c.e, RoundedTo(c.e, Div(c.e, a, b), steps)))};
    return {Done(c, FloorDivFloat(c.e, a, b, steps))};
  }
  return {Done(c, mode == "trunc" ? Div(c.e, a, b) : FloorDivInt(c.e, a, b))};
}

std::vector<Val> LowerDiv(LowerCtx& c) { return DivWithMode(c, ""); }
std::vector<Val> LowerDivMode(LowerCtx& c) {  // div.Tensor_mode(self, other, *, rounding_mode)
  return DivWithMode(c, c.is_none(2) ? "" : c.string_arg(2));
}

std::vector<Val> LowerRemainder(LowerCtx& c) {  // Python's %: the result takes the divisor's sign
  ElementType t = Compute(c);
  Val a = Operand(c, 0, t), b = Operand(c, 1, t);
  Val r = c.e.Binary("remainder", a, b);
  Val zero = K(c, 0, t);
  Val fix = c.e.Binary("and", c.e.Compare("NE", r, zero),
                       c.e.Compare("NE", c.e.Compare("LT", r, zero), c.e.Compare("LT", b, zero)));
  return {Done(c, c.e.Select(fix, Add(c.e, r, b), r))};
}

std::vector<Val> LowerFmod(LowerCtx& c) {  // C's fmod: the result takes the dividend's sign
  ElementType t = Compute(c);
  return {Done(c, c.e.Binary("remainder", Operand(c, 0, t), Operand(c, 1, t)))};
}

// torch's integer pow (exponentiation by squaring over every bit of the exponent, wrapping on
// overflow; XLA's integer power looks at 6 bits only, so 3 ** 64 came out 1). Negative exponents
// give 1 for a base of 1, +-1 for -1, and 0 otherwise.
Val IntPow(Emitter& e, const Val& a, const Val& b) {
  ElementType t = a.dtype();
  Val one = e.Full(1, a.type), zero = e.Full(0, a.type);
  Val result = one, base = a, exp = b;
  int bits = static_cast<int>(ItemSize(t) * 8) - (IsUnsigned(t) ? 0 : 1);
  for (int i = 0; i < bits; ++i) {
    Val odd = e.Compare("NE", e.Binary("and", exp, one), zero);
    result = e.Select(odd, Mul(e, result, base), result);
    if (i + 1 < bits) {
      base = Mul(e, base, base);
      exp = e.Binary("shift_right_logical", exp, one);
    }
  }
  if (IsUnsigned(t)) return result;
  Val minus_one = e.Full(-1, a.type);
  Val odd_exp = e.Compare("NE", e.Binary("and", b, one), zero);
  Val negative = e.Select(e.Compare("EQ", a, one), one,
                          e.Select(e.Compare("EQ", a, minus_one), e.Select(odd_exp, minus_one, one), zero));
  return e.Select(e.Compare("LT", b, zero), negative, result);
}

// a ** p for a constant p >= 0: the product of the squarings selected by p's bits.
Val IntPowConst(Emitter& e, const Val& a, uint64_t p) {
  Val result = e.Full(1, a.type), base = a;
  bool first = true;
  while (p != 0) {
    if (p & 1) {
      result = first ? base : Mul(e, result, base);
      first = false;
    }
    p >>= 1;
    if (p != 0) base = Mul(e, base, base);
  }
  return result;
}

std::vector<Val> LowerPow(LowerCtx& c) {  // pow.Tensor_Tensor / pow.Scalar
  ElementType t = Compute(c);
  if (t == ElementType::kBool) {
    throw std::invalid_argument("\"pow\" not implemented for 'Bool'");
  }
  if (IsIntegral(t)) return {Done(c, IntPow(c.e, In(c, 0, t), In(c, 1, t)))};
  return {Done(c, c.e.Binary("power", FlushDenormals(c.e, Operand(c, 0, t)), FlushDenormals(c.e, Operand(c, 1, t))))};
}

// pow.Tensor_Scalar: the exponent is structural. Special cases as torch's CPU kernel takes them:
// 0 -> 1, 1 -> x; for float32/float64/bfloat16 also 0.5 -> sqrt, -0.5 -> rsqrt, -1 -> 1/x; then the
// exponent is read in a half type's own precision (bfloat16 x ** 2.003 is x * x), and 2 -> x*x,
// 3 -> x*x*x, -2 -> 1/(x*x) except for float16, which uses pow for the rest (pow(-0, 0.5) is +0,
// sqrt(-0) -0).
std::vector<Val> LowerPowScalar(LowerCtx& c) {
  ElementType t = Compute(c);
  ElementType out = c.out().dtype;
  Val x = In(c, 0, t);
  double p = c.scalar_constant(1);
  if (p == 0) return {Done(c, K(c, 1, t))};
  if (p == 1) return {Done(c, x)};
  if (IsIntegral(t) || t == ElementType::kBool) {
    if (t == ElementType::kBool) throw std::invalid_argument("\"pow\" not implemented for 'Bool'");
    if (p < 0) throw std::invalid_argument("Integers to negative integer powers are not allowed.");
    return {Done(c, IntPowConst(c.e, x, static_cast<uint64_t>(p)))};
  }
  bool half = out == ElementType::kF16;
  if (p == -1 && !half) return {Done(c, Div(c.e, K(c, 1, t), x))};
  if (p == 0.5 && !half && IsFloating(t)) return {Done(c, c.e.Unary("sqrt", x))};
  if (p == -0.5 && !half && IsFloating(t)) return {Done(c, c.e.Unary("rsqrt", x))};
  p = RoundedTo(p, out);
  if (p == 2 && !half) return {Done(c, Mul(c.e, x, x))};
  if (p == 3 && !half) return {Done(c, Mul(c.e, Mul(c.e, x, x), x))};
  if (p == -2 && !half && IsFloating(t)) return {Done(c, Div(c.e, K(c, 1, t), Mul(c.e, x, x)))};
  return {Done(c, c.e.Binary("power", FlushDenormals(c.e, x), K(c, p, t)))};
}

std::vector<Val> LowerMaximum(LowerCtx& c) {
  ElementType t = Compute(c);
  return {Done(c, c.e.Binary("maximum", In(c, 0, t), In(c, 1, t)))};
}
std::vector<Val> LowerMinimum(LowerCtx& c) {
  ElementType t = Compute(c);
  return {Done(c, c.e.Binary("minimum", In(c, 0, t), In(c, 1, t)))};
}
std::vector<Val> LowerAtan2(LowerCtx& c) {
  ElementType t = Compute(c);
  return {Done(c, c.e.Binary("atan2", FlushDenormals(c.e, Operand(c, 0, t)), FlushDenormals(c.e, Operand(c, 1, t))))};
}

std::vector<Val> Bitwise(LowerCtx& c, const char* op) {
  ElementType t = c.out().dtype;
  return {c.e.Binary(op, In(c, 0, t), In(c, 1, t))};
}
std::vector<Val> LowerBitwiseAnd(LowerCtx& c) { return Bitwise(c, "and"); }
std::vector<Val> LowerBitwiseOr(LowerCtx& c) { return Bitwise(c, "or"); }
std::vector<Val> LowerBitwiseXor(LowerCtx& c) { return Bitwise(c, "xor"); }

// Like comparisons, logical ops test their operands in the promoted type: a 0-d int32 -2^31 beside
// an int16 tensor is cast to int16 first (0, so false).
std::vector<Val> Logical(LowerCtx& c, const char* op) {
  ElementType t = ResultType(c, {0, 1});
  Val a = c.e.Convert(In(c, 0, t), ElementType::kBool), b = c.e.Convert(In(c, 1, t), ElementType::kBool);
  return {Done(c, c.e.Binary(op, a, b))};
}
std::vector<Val> LowerLogicalAnd(LowerCtx& c) { return Logical(c, "and"); }
std::vector<Val> LowerLogicalOr(LowerCtx& c) { return Logical(c, "or"); }
std::vector<Val> LowerLogicalXor(LowerCtx& c) { return Logical(c, "xor"); }

// Comparisons compute in the promoted type of their operands, not their (bool) output type.
template <const char* kDir>
std::vector<Val> LowerCompare(LowerCtx& c) {
  ElementType t = ResultType(c, {0, 1});
  return {Done(c, c.e.Compare(kDir, In(c, 0, t), In(c, 1, t)))};
}
constexpr char kEq[] = "EQ", kNe[] = "NE", kLt[] = "LT", kLe[] = "LE", kGt[] = "GT", kGe[] = "GE";

std::vector<Val> LowerWhere(LowerCtx& c) {  // where.self(condition, self, other)
  ElementType t = c.out().dtype;
  Val cond = In(c, 0, ElementType::kBool);
  return {c.e.Select(cond, In(c, 1, t), In(c, 2, t))};
}

std::vector<Val> LowerMaskedFill(LowerCtx& c) {  // masked_fill.{Scalar,Tensor}(self, mask, value)
  ElementType t = c.out().dtype;
  return {c.e.Select(In(c, 1, ElementType::kBool), In(c, 2, t), In(c, 0, t))};
}

Val ClampBounds(LowerCtx& c, Val x, size_t lo, size_t hi, ElementType t) {
  if (!c.is_none(lo)) x = c.e.Binary("maximum", x, In(c, lo, t));
  if (!c.is_none(hi)) x = c.e.Binary("minimum", x, In(c, hi, t));
  return x;
}
std::vector<Val> LowerClamp(LowerCtx& c) {  // clamp / clamp.Tensor(self, min?, max?)
  ElementType t = Compute(c);
  return {Done(c, ClampBounds(c, In(c, 0, t), 1, 2, t))};
}
std::vector<Val> LowerClampMin(LowerCtx& c) {
  ElementType t = Compute(c);
  return {Done(c, c.e.Binary("maximum", In(c, 0, t), In(c, 1, t)))};
}
std::vector<Val> LowerClampMax(LowerCtx& c) {
  ElementType t = Compute(c);
  return {Done(c, c.e.Binary("minimum", In(c, 0, t), In(c, 1, t)))};
}

// lerp.{Scalar,Tensor}(self, end, weight): torch's two-sided formula, exact at both ends:
// |w| < 0.5 ? self + w * (end - self) : end + (w - 1) * (end - self).
std::vector<Val> LowerLerp(LowerCtx& c) {
  ElementType t = Compute(c);
  // lerp.Tensor's weight is an operand like the others; lerp.Scalar's is read as given.
  Val a = Operand(c, 0, t, {0, 1, 2}), b = Operand(c, 1, t, {0, 1, 2});
  Val w = c.is_wrapped_number(2) ? In(c, 2, t) : Operand(c, 2, t, {0, 1, 2});
  Val small = c.e.Compare("LT", c.e.Unary("abs", w), K(c, 0.5, t));
  Val coeff = c.e.Select(small, w, Sub(c.e, w, K(c, 1, t)));
  Val base = c.e.Select(small, a, b);
  return {Done(c, Add(c.e, base, Mul(c.e, coeff, Sub(c.e, b, a))))};
}

// addcmul / addcdiv(self, tensor1, tensor2, *, value=1) in CPU's order, self + value * t1 op t2:
// (value * t1) * t2 + self, which XLA contracts to one fused multiply-add as CPU's kernel does,
// and self + (value * t1) / t2. The order t1 op t2 first was off by an ulp in 10-30% of the
// elements, Adam's updates among them.
// The tensors are read through the common dtype (an int64 9e18 beside float16 is inf there).
std::vector<Val> LowerAddcmul(LowerCtx& c) {
  ElementType t = Compute(c);
  auto in = [&](size_t i) { return Operand(c, i, t, {0, 1, 2}); };
  Val prod = Mul(c.e, Scaled(c, in(1), 3, t), in(2));
  return {Done(c, Add(c.e, prod, in(0)))};
}
std::vector<Val> LowerAddcdiv(LowerCtx& c) {
  ElementType t = Compute(c);
  auto in = [&](size_t i) { return Operand(c, i, t, {0, 1, 2}); };
  Val q = Div(c.e, Scaled(c, in(1), 3, t), in(2));
  return {Done(c, Add(c.e, in(0), q))};
}

// ------------------------------------------------------------ unary

template <const char* kOp>
std::vector<Val> LowerUnary(LowerCtx& c) {
  ElementType t = Compute(c);
  return {Done(c, c.e.Unary(kOp, In(c, 0, t)))};
}
constexpr char kNeg[] = "negate", kExp[] = "exponential", kExpm1[] = "exponential_minus_one",
               kLog[] = "log", kLog1p[] = "log_plus_one", kSqrt[] = "sqrt", kRsqrt[] = "rsqrt",
               kTanh[] = "tanh",
               kSigmoid[] = "logistic", kAbs[] = "abs", kNot[] = "not",
               kRound[] = "round_nearest_even", kCbrt[] = "cbrt";

// CHLO ops (lowered to StableHLO by the plugin): "%r = chlo.erf %x : tensor<..> -> tensor<..>".
Val Chlo(Emitter& e, const char* op, const Val& x) {
  std::string type = TypeString(x);
  return e.Raw(std::string("chlo.") + op + " " + e.Name(x), type + " -> " + type, x.type);
}
template <const char* kOp>
std::vector<Val> LowerChlo(LowerCtx& c) {
  ElementType t = Compute(c);
  return {Done(c, Chlo(c.e, kOp, In(c, 0, t)))};
}
constexpr char kErfinv[] = "erf_inv", kAsin[] = "asin", kAcos[] = "acos",
               kAtan[] = "atan", kAsinh[] = "asinh", kAcosh[] = "acosh", kAtanh[] = "atanh";
// atan, asin and acos: XLA expands CHLO's into atan2, a libm call per element on XLA:CPU;
// float_math computes large float32 ones in vectorized arithmetic instead.
template <const char* kOp, Val (*kArithmetic)(Emitter&, const Val&)>
std::vector<Val> LowerInverseTrig(LowerCtx& c) {
  Val x = In(c, 0, Compute(c));
  return {Done(c, float_math::Applies(c.e, x) ? kArithmetic(c.e, x) : Chlo(c.e, kOp, x))};
}

// XLA's float32 erf clamps its argument at 3.8325069 and returns 1 - 3 ulps there, so erf(36)
// cast to an integer was 0. torch's float32 erf is exactly +-1 from that same |x| on; float64's
// reaches 1 by itself (from 5.92).
constexpr double kFloat32ErfIsOne = 3.8325067758560185;
Val Erf(Emitter& e, const Val& x) {
  Val erf = Chlo(e, "erf", x);
  if (x.dtype() == ElementType::kF64) return erf;
  Val saturated = e.Compare("GE", e.Unary("abs", x), e.Full(kFloat32ErfIsOne, x.type));
  return e.Select(saturated, e.Unary("sign", x), erf);
}
std::vector<Val> LowerErf(LowerCtx& c) { return {Done(c, Erf(c.e, In(c, 0, Compute(c))))}; }

// sinh and cosh from exp/expm1: XLA's own lose ~|x| ulps (exp(x + log 0.5) rounds x + log 0.5),
// 14 ulps at x = 64 in float32. Near overflow, exp(|x| / 2) squared keeps finite results finite
// (cosh(89.0f) is 2.24e38), as glibc does and CPU eager's scalar path.
Val ExpOverflowsNear(LowerCtx& c, ElementType t) { return K(c, t == ElementType::kF64 ? 700 : 80, t); }
Val HalfExpSquared(LowerCtx& c, const Val& a, ElementType t) {  // 0.5 * exp(a), for large a
  Val h = c.e.Unary("exponential", Mul(c.e, a, K(c, 0.5, t)));
  return Mul(c.e, Mul(c.e, K(c, 0.5, t), h), h);
}
std::vector<Val> LowerSinh(LowerCtx& c) {
  ElementType t = Compute(c);
  Val x = In(c, 0, t), a = c.e.Unary("abs", x);
  Val d = Sub(c.e, c.e.Unary("exponential_minus_one", x), c.e.Unary("exponential_minus_one", c.e.Unary("negate", x)));
  Val small = Mul(c.e, K(c, 0.5, t), d);
  Val big = HalfExpSquared(c, a, t);
  big = c.e.Select(c.e.Compare("LT", x, K(c, 0, t)), c.e.Unary("negate", big), big);
  return {Done(c, c.e.Select(c.e.Compare("GT", a, ExpOverflowsNear(c, t)), big, small))};
}
std::vector<Val> LowerCosh(LowerCtx& c) {
  ElementType t = Compute(c);
  Val a = c.e.Unary("abs", In(c, 0, t));
  Val ex = c.e.Unary("exponential", a);
  Val half = K(c, 0.5, t);
  Val small = Add(c.e, Mul(c.e, half, ex), Div(c.e, half, ex));
  return {Done(c, c.e.Select(c.e.Compare("GT", a, ExpOverflowsNear(c, t)), HalfExpSquared(c, a, t), small))};
}
// digamma(+-0) is -+inf in torch (XLA's gives NaN): -1 / x.
std::vector<Val> LowerDigamma(LowerCtx& c) {
  ElementType t = Compute(c);
  Val x = In(c, 0, t);
  Val at_zero = Div(c.e, K(c, -1, t), x);
  return {Done(c, c.e.Select(c.e.Compare("EQ", x, K(c, 0, t)), at_zero, Chlo(c.e, "digamma", x)))};
}
// lgamma(1) and lgamma(2) are exactly 0 in torch; XLA's approximation leaves a few ulps there.
std::vector<Val> LowerLgamma(LowerCtx& c) {
  ElementType t = Compute(c);
  Val x = In(c, 0, t);
  Val one_or_two = c.e.Binary("or", c.e.Compare("EQ", x, K(c, 1, t)), c.e.Compare("EQ", x, K(c, 2, t)));
  return {Done(c, c.e.Select(one_or_two, K(c, 0, t), Chlo(c.e, "lgamma", x)))};
}

std::vector<Val> LowerAbs(LowerCtx& c) {  // unsigned integers are their own absolute value
  if (IsUnsigned(c.out().dtype)) return {In(c, 0, c.out().dtype)};
  return LowerUnary<kAbs>(c);
}

std::vector<Val> LowerFloorCeil(LowerCtx& c, const char* op) {
  Val x = c.tensor(0);
  if (!IsFloating(x.dtype())) return {Done(c, x)};  // integers are already whole
  ElementType t = Compute(c);
  return {Done(c, c.e.Unary(op, In(c, 0, t)))};
}
std::vector<Val> LowerFloor(LowerCtx& c) { return LowerFloorCeil(c, "floor"); }
std::vector<Val> LowerCeil(LowerCtx& c) { return LowerFloorCeil(c, "ceil"); }
std::vector<Val> LowerTrunc(LowerCtx& c) { return {Done(c, Trunc(c.e, In(c, 0, Compute(c))))}; }
std::vector<Val> LowerFrac(LowerCtx& c) {
  ElementType t = Compute(c);
  Val x = In(c, 0, t);
  return {Done(c, Sub(c.e, x, Trunc(c.e, x)))};
}
std::vector<Val> LowerRoundInt(LowerCtx& c) {  // round: integers unchanged
  if (!IsFloating(c.tensor(0).dtype())) return {Done(c, c.tensor(0))};
  return LowerUnary<kRound>(c);
}
std::vector<Val> LowerExp2(LowerCtx& c) {
  ElementType t = Compute(c);
  return {Done(c, c.e.Binary("power", K(c, 2, t), In(c, 0, t)))};
}
std::vector<Val> LowerLogBase(LowerCtx& c, double base) {
  ElementType t = Compute(c);
  return {Done(c, Div(c.e, c.e.Unary("log", In(c, 0, t)), K(c, std::log(base), t)))};
}
std::vector<Val> LowerLog2(LowerCtx& c) { return LowerLogBase(c, 2); }
std::vector<Val> LowerLog10(LowerCtx& c) { return LowerLogBase(c, 10); }
std::vector<Val> LowerReciprocal(LowerCtx& c) {
  ElementType t = Compute(c);
  return {Done(c, Div(c.e, K(c, 1, t), In(c, 0, t)))};
}
std::vector<Val> LowerLogicalNot(LowerCtx& c) {
  return {Done(c, c.e.Unary("not", In(c, 0, ElementType::kBool)))};
}
std::vector<Val> LowerBitwiseNot(LowerCtx& c) { return {c.e.Unary("not", In(c, 0, c.out().dtype))}; }
// torch.sign is (0 < x) - (x < 0): 0 for NaN and for -0.0, where stablehlo.sign returns NaN
// and -0.0.
std::vector<Val> LowerSign(LowerCtx& c) {
  ElementType t = Compute(c);
  Val x = In(c, 0, t);
  if (t == ElementType::kBool) return {Done(c, x)};
  Val zero = K(c, 0, t);
  Val pos = c.e.Convert(c.e.Compare("GT", x, zero), t);
  Val neg = c.e.Convert(c.e.Compare("LT", x, zero), t);
  return {Done(c, Sub(c.e, pos, neg))};
}
std::vector<Val> LowerIsnan(LowerCtx& c) {
  Val x = c.tensor(0);
  if (!IsFloating(x.dtype())) return {c.e.Full(0, c.out())};
  return {c.e.Compare("NE", x, x)};
}
// isposinf / isneginf: `x == ±inf`; integers are never infinite. SDPA's _safe_softmax needs
// isneginf, so every attention call reaches this.
std::vector<Val> LowerIsInfSigned(LowerCtx& c, double inf) {
  Val x = c.tensor(0);
  if (!IsFloating(x.dtype())) return {c.e.Full(0, c.out())};
  return {c.e.Compare("EQ", x, K(c, inf, x.dtype()))};
}
std::vector<Val> LowerIsPosInf(LowerCtx& c) { return LowerIsInfSigned(c, INFINITY); }
std::vector<Val> LowerIsNegInf(LowerCtx& c) { return LowerIsInfSigned(c, -INFINITY); }
std::vector<Val> LowerNanToNum(LowerCtx& c) {  // nan_to_num(self, nan?, posinf?, neginf?)
  Val x = c.tensor(0);
  if (!IsFloating(x.dtype())) return {x};
  ElementType t = x.dtype();
  double nan = c.is_none(1) ? 0.0 : c.double_arg(1);
  double pos = c.is_none(2) ? HighestFinite(t) : c.double_arg(2);
  double neg = c.is_none(3) ? -HighestFinite(t) : c.double_arg(3);
  Val inf = K(c, INFINITY, t);
  Val r = c.e.Select(c.e.Compare("NE", x, x), K(c, nan, t), x);
  r = c.e.Select(c.e.Compare("EQ", x, inf), K(c, pos, t), r);
  return {c.e.Select(c.e.Compare("EQ", x, K(c, -INFINITY, t)), K(c, neg, t), r)};
}

// ------------------------------------------------------------ activations

std::vector<Val> LowerRelu(LowerCtx& c) {
  if (c.tensor(0).dtype() == ElementType::kBool) {
    throw std::invalid_argument("Boolean inputs not supported for relu");  // torch's check
  }
  ElementType t = c.out().dtype;
  return {c.e.Binary("maximum", In(c, 0, t), K(c, 0, t))};
}

Val GeluTanh(Emitter& e, const Val& x) {
  Val half = e.Full(0.5, x.type), one = e.Full(1, x.type);
  Val cube = Mul(e, Mul(e, x, x), x);
  Val inner = Mul(e, e.Full(kSqrt2OverPi, x.type), Add(e, x, Mul(e, e.Full(0.044715, x.type), cube)));
  return Mul(e, Mul(e, half, x), Add(e, one, e.Unary("tanh", inner)));
}
// The normal CDF as torch computes it, 0.5 * (1 + erf(x / sqrt 2)). XLA's float32 erf stops 3
// ulps short of +-1, which would leave gelu(-1e38) at -3e30 instead of -0 and gelu(100.) at
// 99.99998 (cast to 99) instead of 100: beyond |x| = 5.7 the CDF is within half an ulp of 0 or 1
// (the erf inside CPU eager's gelu rounds to +-1 there; it does not saturate from 3.8325 on as
// torch.erf does, so LowerErf's rule is not used here). erfc(-x / sqrt 2) would avoid the
// selects but costs 3x erf in XLA:CPU (gelu was 0.63 ms against 0.20 for 512k floats), and
// torch's own 1 + erf cancels the same way.
Val NormalCdf(Emitter& e, const Val& x) {
  Val cdf = Mul(e, e.Full(0.5, x.type),
                Add(e, e.Full(1, x.type), Chlo(e, "erf", Mul(e, x, e.Full(1 / kSqrt2, x.type)))));
  if (x.dtype() == ElementType::kF64) return cdf;  // float64 erf reaches +-1
  cdf = e.Select(e.Compare("LT", x, e.Full(-5.7, x.type)), e.Full(0, x.type), cdf);
  return e.Select(e.Compare("GT", x, e.Full(5.7, x.type)), e.Full(1, x.type), cdf);
}
Val GeluErf(Emitter& e, const Val& x) { return Mul(e, x, NormalCdf(e, x)); }
std::vector<Val> LowerGelu(LowerCtx& c) {  // gelu(self, *, approximate='none')
  ElementType t = Compute(c);
  Val x = In(c, 0, t);
  bool tanh = !c.is_none(1) && c.string_arg(1) == "tanh";
  return {Done(c, tanh ? GeluTanh(c.e, x) : GeluErf(c.e, x))};
}
std::vector<Val> LowerSilu(LowerCtx& c) {  // torch: x / (1 + exp(-x))
  ElementType t = Compute(c);
  Val x = In(c, 0, t);
  return {Done(c, Div(c.e, x, Add(c.e, K(c, 1, t), c.e.Unary("exponential", c.e.Unary("negate", x)))))};
}
std::vector<Val> LowerLeakyRelu(LowerCtx& c) {  // leaky_relu(self, negative_slope=0.01)
  ElementType t = Compute(c);
  Val x = In(c, 0, t);
  Val slope = c.is_none(1) ? K(c, 0.01, t) : In(c, 1, t);
  return {Done(c, c.e.Select(c.e.Compare("GT", x, K(c, 0, t)), x, Mul(c.e, x, slope)))};
}
std::vector<Val> LowerElu(LowerCtx& c) {  // elu(self, alpha=1, scale=1, input_scale=1)
  ElementType t = Compute(c);
  Val x = In(c, 0, t);
  Val alpha = In(c, 1, t), scale = In(c, 2, t), input_scale = In(c, 3, t);
  Val neg = Mul(c.e, Mul(c.e, scale, alpha),
                c.e.Unary("exponential_minus_one", Mul(c.e, x, input_scale)));
  return {Done(c, c.e.Select(c.e.Compare("GT", x, K(c, 0, t)), Mul(c.e, scale, x), neg))};
}
std::vector<Val> LowerSoftplus(LowerCtx& c) {  // softplus(self, beta=1, threshold=20)
  ElementType t = Compute(c);
  Val x = In(c, 0, t), beta = In(c, 1, t), threshold = In(c, 2, t);
  Val bx = Mul(c.e, x, beta);
  Val soft = Div(c.e, c.e.Unary("log_plus_one", c.e.Unary("exponential", bx)), beta);
  return {Done(c, c.e.Select(c.e.Compare("GT", bx, threshold), x, soft))};
}
std::vector<Val> LowerHardtanh(LowerCtx& c) {  // hardtanh(self, min_val=-1, max_val=1)
  ElementType t = Compute(c);
  return {Done(c, ClampBounds(c, In(c, 0, t), 1, 2, t))};
}
// torch's formulas and order: min(max(x + 3, 0), 6) / 6 and x * min(max(x + 3, 0), 6) / 6 (x / 6 + 0.5
// cancels near -3, and x * (... / 6) does not overflow where torch's x * (...) does).
Val Relu6(LowerCtx& c, const Val& x, ElementType t) {
  return c.e.Binary("minimum", c.e.Binary("maximum", Add(c.e, x, K(c, 3, t)), K(c, 0, t)), K(c, 6, t));
}
std::vector<Val> LowerHardsigmoid(LowerCtx& c) {
  ElementType t = Compute(c);
  return {Done(c, Div(c.e, Relu6(c, In(c, 0, t), t), Divisor(c, 6, t)))};
}
std::vector<Val> LowerHardswish(LowerCtx& c) {
  ElementType t = Compute(c);
  Val x = In(c, 0, t);
  return {Done(c, Div(c.e, Mul(c.e, x, Relu6(c, x, t)), Divisor(c, 6, t)))};
}
std::vector<Val> LowerMish(LowerCtx& c) {
  ElementType t = Compute(c);
  Val x = In(c, 0, t);
  Val sp = c.e.Unary("log_plus_one", c.e.Unary("exponential", x));
  return {Done(c, Mul(c.e, x, c.e.Unary("tanh", sp)))};
}

// ------------------------------------------------------------ activation backward

std::vector<Val> LowerThresholdBackward(LowerCtx& c) {  // (grad_output, self, threshold)
  ElementType t = Compute(c);
  Val g = In(c, 0, t), x = In(c, 1, t);
  return {Done(c, c.e.Select(c.e.Compare("LE", x, In(c, 2, t)), K(c, 0, t), g))};
}
std::vector<Val> LowerGeluBackward(LowerCtx& c) {  // (grad_output, self, *, approximate)
  ElementType t = Compute(c);
  Val g = In(c, 0, t), x = In(c, 1, t);
  Emitter& e = c.e;
  bool tanh = !c.is_none(2) && c.string_arg(2) == "tanh";
  if (tanh) {
    constexpr double kKappa = 0.044715;
    Val x2 = Mul(e, x, x);
    Val inner = Mul(e, K(c, kSqrt2OverPi, t), Add(e, x, Mul(e, K(c, kKappa, t), Mul(e, x2, x))));
    Val th = e.Unary("tanh", inner);
    Val left = Mul(e, K(c, 0.5, t), x);
    Val left_d = Mul(e, K(c, 0.5, t), Add(e, K(c, 1, t), th));
    Val dinner = Mul(e, K(c, kSqrt2OverPi, t), Add(e, K(c, 1, t), Mul(e, K(c, 3 * kKappa, t), x2)));
    Val right_d = Mul(e, Mul(e, left, Sub(e, K(c, 1, t), Mul(e, th, th))), dinner);
    return {Done(c, Mul(e, g, Add(e, left_d, right_d)))};
  }
  Val cdf = NormalCdf(e, x);
  Val pdf = Mul(e, K(c, kInvSqrt2Pi, t), e.Unary("exponential", Mul(e, K(c, -0.5, t), Mul(e, x, x))));
  return {Done(c, Mul(e, g, Add(e, cdf, Mul(e, x, pdf))))};
}
std::vector<Val> LowerSiluBackward(LowerCtx& c) {  // (grad_output, self)
  ElementType t = Compute(c);
  Val g = In(c, 0, t), x = In(c, 1, t);
  Val s = Div(c.e, K(c, 1, t), Add(c.e, K(c, 1, t), c.e.Unary("exponential", c.e.Unary("negate", x))));
  // torch's order: dy * s * (1 + x * (1 - s)).
  return {Done(c, Mul(c.e, Mul(c.e, g, s), Add(c.e, K(c, 1, t), Mul(c.e, x, Sub(c.e, K(c, 1, t), s)))))};
}
// mish_backward(grad_output, self), as CPU's fused kernel in the op-math type (the composite
// decomposition it replaced rounded every step of a half type): dy * (t + x * sigmoid(x) *
// (1 - t^2)), t = tanh(softplus(x)). With u = e^x, n = u (u + 2) and d = n + 2, t = n / d and
// 1 - t^2 = 4 (n + 1) / d^2: XLA's tanh, an ulp or two off near 1, made 1 - t^2 up to 7 float32
// ulps off at x = 3. Where t rounds to 1 (n overflows, or x is large), 1 - t^2 is 0 as CPU's is.
std::vector<Val> LowerMishBackward(LowerCtx& c) {
  ElementType t = Compute(c);
  Emitter& e = c.e;
  Val g = In(c, 0, t), x = In(c, 1, t), one = K(c, 1, t);
  Val u = e.Unary("exponential", x);
  Val n = Mul(e, u, Add(e, u, K(c, 2, t))), d = Add(e, n, K(c, 2, t));
  Val overflow = e.Compare("EQ", n, K(c, INFINITY, t));
  Val tanh_sp = e.Select(overflow, one, Div(e, n, d));
  Val sech2 = e.Select(e.Compare("EQ", tanh_sp, one), K(c, 0, t),
                       Div(e, Mul(e, K(c, 4, t), Add(e, n, one)), Mul(e, d, d)));
  Val sigmoid = Div(e, one, Add(e, one, e.Unary("exponential", e.Unary("negate", x))));
  return {Done(c, Mul(e, g, Add(e, tanh_sp, Mul(e, Mul(e, x, sigmoid), sech2))))};
}
std::vector<Val> LowerSigmoidBackward(LowerCtx& c) {  // (grad_output, output)
  ElementType t = Compute(c);
  Val g = In(c, 0, t), y = In(c, 1, t);
  return {Done(c, Mul(c.e, Mul(c.e, g, Sub(c.e, K(c, 1, t), y)), y))};  // torch's order: g * (1 - y) * y
}
std::vector<Val> LowerTanhBackward(LowerCtx& c) {  // (grad_output, output)
  ElementType t = Compute(c);
  Val g = In(c, 0, t), y = In(c, 1, t);
  return {Done(c, Mul(c.e, g, Sub(c.e, K(c, 1, t), Mul(c.e, y, y))))};
}
std::vector<Val> LowerLeakyReluBackward(LowerCtx& c) {  // (grad, self, negative_slope, self_is_result)
  ElementType t = Compute(c);
  Val g = In(c, 0, t), x = In(c, 1, t);
  return {Done(c, c.e.Select(c.e.Compare("GT", x, K(c, 0, t)), g, Mul(c.e, g, In(c, 2, t))))};
}
// elu_backward(grad, alpha, scale, input_scale, is_result, self_or_result)
std::vector<Val> LowerEluBackward(LowerCtx& c) {
  ElementType t = Compute(c);
  Emitter& e = c.e;
  Val g = In(c, 0, t), alpha = In(c, 1, t), scale = In(c, 2, t), input_scale = In(c, 3, t);
  Val v = In(c, 5, t);
  Val pos = Mul(e, g, scale);
  Val neg;
  if (c.bool_arg(4)) {
    neg = Mul(e, Mul(e, g, input_scale), Add(e, v, Mul(e, alpha, scale)));
  } else {
    neg = Mul(e, Mul(e, Mul(e, g, input_scale), Mul(e, alpha, scale)),
              e.Unary("exponential", Mul(e, v, input_scale)));
  }
  return {Done(c, e.Select(e.Compare("LE", v, K(c, 0, t)), neg, pos))};
}
std::vector<Val> LowerHardtanhBackward(LowerCtx& c) {  // (grad, self, min_val, max_val)
  ElementType t = Compute(c);
  Val g = In(c, 0, t), x = In(c, 1, t);
  Val outside = c.e.Binary("or", c.e.Compare("LE", x, In(c, 2, t)), c.e.Compare("GE", x, In(c, 3, t)));
  return {Done(c, c.e.Select(outside, K(c, 0, t), g))};
}
std::vector<Val> LowerSoftplusBackward(LowerCtx& c) {  // (grad, self, beta, threshold)
  ElementType t = Compute(c);
  Val g = In(c, 0, t), x = In(c, 1, t);
  Val bx = Mul(c.e, x, In(c, 2, t));
  Val z = c.e.Unary("exponential", bx);
  Val d = Div(c.e, Mul(c.e, g, z), Add(c.e, z, K(c, 1, t)));  // torch's order: g * z / (z + 1)
  return {Done(c, c.e.Select(c.e.Compare("GT", bx, In(c, 3, t)), g, d))};
}
std::vector<Val> LowerHardsigmoidBackward(LowerCtx& c) {  // (grad, self)
  ElementType t = Compute(c);
  Val g = In(c, 0, t), x = In(c, 1, t);
  Val inside = c.e.Binary("and", c.e.Compare("GT", x, K(c, -3, t)), c.e.Compare("LT", x, K(c, 3, t)));
  // torch multiplies by float(1/6) whatever the type (0.1666666716337204 for float64 too).
  return {Done(c, c.e.Select(inside, Mul(c.e, g, K(c, static_cast<double>(1.0f / 6.0f), t)), K(c, 0, t)))};
}
std::vector<Val> LowerHardswishBackward(LowerCtx& c) {  // (grad, self)
  ElementType t = Compute(c);
  Val g = In(c, 0, t), x = In(c, 1, t);
  // torch: 0 for x <= -3, g * (x / 3 + 0.5) for -3 < x < 3, g otherwise (x >= 3 and NaN, in
  // both its scalar and vectorized kernels).
  Val mid = Mul(c.e, g, Add(c.e, Div(c.e, x, Divisor(c, 3, t)), K(c, 0.5, t)));
  Val r = c.e.Select(c.e.Compare("LT", x, K(c, 3, t)), mid, g);
  return {Done(c, c.e.Select(c.e.Compare("LE", x, K(c, -3, t)), K(c, 0, t), r))};
}

}  // namespace

double HighestFinite(ElementType t) {
  switch (t) {
    case ElementType::kF16: return 65504.0;
    case ElementType::kBF16: return 3.3895313892515355e38;
    case ElementType::kF32: return 3.4028234663852886e38;
    default: return 1.7976931348623157e308;
  }
}

void RegisterElementwiseOps(Registry& r) {
  r.Add("add.Tensor", LowerAdd);
  r.Add("sub.Tensor", LowerSub);
  r.Add("rsub.Tensor", LowerRsub);
  r.Add("mul.Tensor", LowerMul);
  r.Add("div.Tensor", LowerDiv);
  r.Add("div.Tensor_mode", LowerDivMode).zero_divisor_check = {true, 2};
  r.Add("remainder.Tensor", LowerRemainder).zero_divisor_check.enabled = true;
  r.Add("fmod.Tensor", LowerFmod).zero_divisor_check.enabled = true;
  r.Add("pow.Tensor_Tensor", LowerPow);
  r.Add("pow.Scalar", LowerPow);
  r.Add("pow.Tensor_Scalar", LowerPowScalar).structural_scalars = {1};
  r.Add("maximum", LowerMaximum);
  r.Add("minimum", LowerMinimum);
  r.Add("atan2", LowerAtan2);
  r.Add("bitwise_and.Tensor", LowerBitwiseAnd);
  r.Add("bitwise_or.Tensor", LowerBitwiseOr);
  r.Add("bitwise_xor.Tensor", LowerBitwiseXor);
  r.Add("logical_and", LowerLogicalAnd);
  r.Add("logical_or", LowerLogicalOr);
  r.Add("logical_xor", LowerLogicalXor);
  r.Add("eq.Tensor", LowerCompare<kEq>);
  r.Add("ne.Tensor", LowerCompare<kNe>);
  r.Add("lt.Tensor", LowerCompare<kLt>);
  r.Add("le.Tensor", LowerCompare<kLe>);
  r.Add("gt.Tensor", LowerCompare<kGt>);
  r.Add("ge.Tensor", LowerCompare<kGe>);
  r.Add("eq.Scalar", LowerCompare<kEq>);
  r.Add("ne.Scalar", LowerCompare<kNe>);
  r.Add("lt.Scalar", LowerCompare<kLt>);
  r.Add("le.Scalar", LowerCompare<kLe>);
  r.Add("gt.Scalar", LowerCompare<kGt>);
  r.Add("ge.Scalar", LowerCompare<kGe>);
  r.Add("where.self", LowerWhere);
  r.Add("masked_fill.Scalar", LowerMaskedFill);
  r.Add("masked_fill.Tensor", LowerMaskedFill);
  r.Add("clamp", LowerClamp);
  r.Add("clamp.Tensor", LowerClamp);
  r.Add("clamp_min", LowerClampMin);
  r.Add("clamp_min.Tensor", LowerClampMin);
  r.Add("clamp_max", LowerClampMax);
  r.Add("clamp_max.Tensor", LowerClampMax);
  r.Add("lerp.Scalar", LowerLerp);
  r.Add("lerp.Tensor", LowerLerp);
  r.Add("addcmul", LowerAddcmul);
  r.Add("addcdiv", LowerAddcdiv);

  r.Add("neg", LowerUnary<kNeg>);
  r.Add("abs", LowerAbs);
  r.Add("sign", LowerSign);
  r.Add("exp", LowerUnary<kExp>);
  r.Add("exp2", LowerExp2);
  r.Add("expm1", LowerUnary<kExpm1>);
  r.Add("log", LowerUnary<kLog>);
  r.Add("log2", LowerLog2);
  r.Add("log10", LowerLog10);
  r.Add("log1p", LowerUnary<kLog1p>);
  r.Add("sqrt", LowerUnary<kSqrt>);
  r.Add("rsqrt", LowerUnary<kRsqrt>);
  r.Add("tanh", LowerUnary<kTanh>);
  r.Add("sigmoid", LowerUnary<kSigmoid>);
  r.Add("erf", LowerErf);
  r.Add("erfinv", LowerChlo<kErfinv>);
  r.Add("asin", LowerInverseTrig<kAsin, float_math::Asin>);
  r.Add("acos", LowerInverseTrig<kAcos, float_math::Acos>);
  r.Add("atan", LowerInverseTrig<kAtan, float_math::Atan>);
  r.Add("sinh", LowerSinh);
  r.Add("cosh", LowerCosh);
  r.Add("asinh", LowerChlo<kAsinh>);
  r.Add("acosh", LowerChlo<kAcosh>);
  r.Add("atanh", LowerChlo<kAtanh>);
  r.Add("lgamma", LowerLgamma);
  r.Add("digamma", LowerDigamma);
  r.Add("floor", LowerFloor);
  r.Add("ceil", LowerCeil);
  r.Add("trunc", LowerTrunc);
  r.Add("frac", LowerFrac);
  r.Add("round", LowerRoundInt);
  r.Add("reciprocal", LowerReciprocal);
  r.Add("logical_not", LowerLogicalNot);
  r.Add("bitwise_not", LowerBitwiseNot);
  r.Add("isnan", LowerIsnan);
  r.Add("isposinf", LowerIsPosInf);
  r.Add("isneginf", LowerIsNegInf);
  r.Add("nan_to_num", LowerNanToNum);

  // relu is increasing (OpLowering::increasing): max pooling after it runs first.
  r.Add("relu", LowerRelu).increasing = [](LowerCtx&) { return Increasing{true, Val()}; };
  r.Add("gelu", LowerGelu);
  r.Add("silu", LowerSilu);
  r.Add("leaky_relu", LowerLeakyRelu);
  r.Add("elu", LowerElu);
  r.Add("softplus", LowerSoftplus);
  r.Add("hardtanh", LowerHardtanh);
  r.Add("hardsigmoid", LowerHardsigmoid);
  r.Add("hardswish", LowerHardswish);
  r.Add("mish", LowerMish);

  r.Add("threshold_backward", LowerThresholdBackward);
  r.Add("gelu_backward", LowerGeluBackward);
  r.Add("silu_backward", LowerSiluBackward);
  r.Add("mish_backward", LowerMishBackward);
  r.Add("sigmoid_backward", LowerSigmoidBackward);
  r.Add("tanh_backward", LowerTanhBackward);
  r.Add("leaky_relu_backward", LowerLeakyReluBackward);
  r.Add("elu_backward", LowerEluBackward);
  r.Add("hardtanh_backward", LowerHardtanhBackward);
  r.Add("softplus_backward", LowerSoftplusBackward);
  r.Add("hardsigmoid_backward", LowerHardsigmoidBackward);
  r.Add("hardswish_backward", LowerHardswishBackward);
}

}  // namespace torch_pjrt::lowering
