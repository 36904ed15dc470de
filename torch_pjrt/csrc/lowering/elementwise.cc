// Elementwise ops: arithmetic, comparisons, unary math, activations and their backward formulas.
// Each computes in torch's opmath type (float for half types) at the output's shape, then converts.
#include <cmath>

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

Val Add(Emitter& e, const Val& a, const Val& b) { return e.Binary("add", a, b); }
Val Sub(Emitter& e, const Val& a, const Val& b) { return e.Binary("subtract", a, b); }
Val Mul(Emitter& e, const Val& a, const Val& b) { return e.Binary("multiply", a, b); }
Val Div(Emitter& e, const Val& a, const Val& b) { return e.Binary("divide", a, b); }

// other * alpha, skipping the multiply for the (constant) default alpha of 1.
Val Scaled(LowerCtx& c, const Val& other, size_t alpha_index, ElementType t) {
  if (c.is_none(alpha_index)) return other;
  if (!c.is_tensor(alpha_index) && c.double_arg(alpha_index) == 1.0) return other;
  return Mul(c.e, other, In(c, alpha_index, t));
}

// ------------------------------------------------------------ arithmetic

std::vector<Val> LowerAdd(LowerCtx& c) {  // add.Tensor(self, other, *, alpha=1)
  ElementType t = Compute(c);
  return {Done(c, Add(c.e, In(c, 0, t), Scaled(c, In(c, 1, t), 2, t)))};
}

std::vector<Val> LowerSub(LowerCtx& c) {  // sub.Tensor(self, other, *, alpha=1)
  ElementType t = Compute(c);
  return {Done(c, Sub(c.e, In(c, 0, t), Scaled(c, In(c, 1, t), 2, t)))};
}

std::vector<Val> LowerRsub(LowerCtx& c) {  // rsub.Tensor(self, other, *, alpha=1): other - alpha*self
  ElementType t = Compute(c);
  return {Done(c, Sub(c.e, In(c, 1, t), Scaled(c, In(c, 0, t), 2, t)))};
}

std::vector<Val> LowerMul(LowerCtx& c) {
  ElementType t = Compute(c);
  if (t == ElementType::kBool) return {c.e.Binary("and", In(c, 0, t), In(c, 1, t))};
  return {Done(c, Mul(c.e, In(c, 0, t), In(c, 1, t)))};
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
  Val a = In(c, 0, t), b = In(c, 1, t);
  if (mode.empty()) return {Done(c, Div(c.e, a, b))};
  if (IsFloating(t)) {
    Val q = Div(c.e, a, b);
    return {Done(c, mode == "trunc" ? Trunc(c.e, q) : c.e.Unary("floor", q))};
  }
  return {Done(c, mode == "trunc" ? Div(c.e, a, b) : FloorDivInt(c.e, a, b))};
}

std::vector<Val> LowerDiv(LowerCtx& c) { return DivWithMode(c, ""); }
std::vector<Val> LowerDivMode(LowerCtx& c) {  // div.Tensor_mode(self, other, *, rounding_mode)
  return DivWithMode(c, c.is_none(2) ? "" : c.string_arg(2));
}

std::vector<Val> LowerRemainder(LowerCtx& c) {  // Python's %: the result takes the divisor's sign
  ElementType t = Compute(c);
  Val a = In(c, 0, t), b = In(c, 1, t);
  Val r = c.e.Binary("remainder", a, b);
  Val zero = K(c, 0, t);
  Val fix = c.e.Binary("and", c.e.Compare("NE", r, zero),
                       c.e.Compare("NE", c.e.Compare("LT", r, zero), c.e.Compare("LT", b, zero)));
  return {Done(c, c.e.Select(fix, Add(c.e, r, b), r))};
}

std::vector<Val> LowerFmod(LowerCtx& c) {  // C's fmod: the result takes the dividend's sign
  ElementType t = Compute(c);
  return {Done(c, c.e.Binary("remainder", In(c, 0, t), In(c, 1, t)))};
}

std::vector<Val> LowerPow(LowerCtx& c) {  // pow.Tensor_Tensor / pow.Scalar
  ElementType t = Compute(c);
  return {Done(c, c.e.Binary("power", In(c, 0, t), In(c, 1, t)))};
}

std::vector<Val> LowerPowScalar(LowerCtx& c) {  // pow.Tensor_Scalar: the exponent is structural
  ElementType t = Compute(c);
  Val x = In(c, 0, t);
  double p = c.scalar_constant(1);
  if (p == 1) return {Done(c, x)};
  if (p == 2) return {Done(c, Mul(c.e, x, x))};
  if (p == 3) return {Done(c, Mul(c.e, Mul(c.e, x, x), x))};
  if (p == 0) return {Done(c, K(c, 1, t))};
  if (p == -1) return {Done(c, Div(c.e, K(c, 1, t), x))};
  if (p == 0.5 && IsFloating(t)) return {Done(c, c.e.Unary("sqrt", x))};
  if (p == -0.5 && IsFloating(t)) return {Done(c, c.e.Unary("rsqrt", x))};
  return {Done(c, c.e.Binary("power", x, K(c, p, t)))};
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
  return {Done(c, c.e.Binary("atan2", In(c, 0, t), In(c, 1, t)))};
}

std::vector<Val> Bitwise(LowerCtx& c, const char* op) {
  ElementType t = c.out().dtype;
  return {c.e.Binary(op, In(c, 0, t), In(c, 1, t))};
}
std::vector<Val> LowerBitwiseAnd(LowerCtx& c) { return Bitwise(c, "and"); }
std::vector<Val> LowerBitwiseOr(LowerCtx& c) { return Bitwise(c, "or"); }
std::vector<Val> LowerBitwiseXor(LowerCtx& c) { return Bitwise(c, "xor"); }

std::vector<Val> Logical(LowerCtx& c, const char* op) {
  Val a = In(c, 0, ElementType::kBool), b = In(c, 1, ElementType::kBool);
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

std::vector<Val> LowerLerp(LowerCtx& c) {  // lerp.{Scalar,Tensor}(self, end, weight)
  ElementType t = Compute(c);
  Val a = In(c, 0, t), b = In(c, 1, t), w = In(c, 2, t);
  return {Done(c, Add(c.e, a, Mul(c.e, w, Sub(c.e, b, a))))};
}

std::vector<Val> LowerAddcmul(LowerCtx& c) {  // addcmul(self, tensor1, tensor2, *, value=1)
  ElementType t = Compute(c);
  Val prod = Mul(c.e, In(c, 1, t), In(c, 2, t));
  return {Done(c, Add(c.e, In(c, 0, t), Scaled(c, prod, 3, t)))};
}
std::vector<Val> LowerAddcdiv(LowerCtx& c) {  // addcdiv(self, tensor1, tensor2, *, value=1)
  ElementType t = Compute(c);
  Val q = Div(c.e, In(c, 1, t), In(c, 2, t));
  return {Done(c, Add(c.e, In(c, 0, t), Scaled(c, q, 3, t)))};
}

// ------------------------------------------------------------ unary

template <const char* kOp>
std::vector<Val> LowerUnary(LowerCtx& c) {
  ElementType t = Compute(c);
  return {Done(c, c.e.Unary(kOp, In(c, 0, t)))};
}
constexpr char kNeg[] = "negate", kExp[] = "exponential", kExpm1[] = "exponential_minus_one",
               kLog[] = "log", kLog1p[] = "log_plus_one", kSqrt[] = "sqrt", kRsqrt[] = "rsqrt",
               kSin[] = "sine", kCos[] = "cosine", kTan[] = "tan", kTanh[] = "tanh",
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
constexpr char kErf[] = "erf", kErfinv[] = "erf_inv", kAsin[] = "asin", kAcos[] = "acos",
               kAtan[] = "atan", kSinh[] = "sinh", kCosh[] = "cosh", kAsinh[] = "asinh",
               kAcosh[] = "acosh", kAtanh[] = "atanh", kLgamma[] = "lgamma", kDigamma[] = "digamma";

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
  ElementType t = c.out().dtype;
  return {c.e.Binary("maximum", In(c, 0, t), K(c, 0, t))};
}

Val GeluTanh(Emitter& e, const Val& x) {
  Val half = e.Full(0.5, x.type), one = e.Full(1, x.type);
  Val cube = Mul(e, Mul(e, x, x), x);
  Val inner = Mul(e, e.Full(kSqrt2OverPi, x.type), Add(e, x, Mul(e, e.Full(0.044715, x.type), cube)));
  return Mul(e, Mul(e, half, x), Add(e, one, e.Unary("tanh", inner)));
}
Val GeluErf(Emitter& e, const Val& x) {
  Val cdf = Mul(e, e.Full(0.5, x.type),
                Add(e, e.Full(1, x.type), Chlo(e, "erf", Div(e, x, e.Full(kSqrt2, x.type)))));
  return Mul(e, x, cdf);
}
std::vector<Val> LowerGelu(LowerCtx& c) {  // gelu(self, *, approximate='none')
  ElementType t = Compute(c);
  Val x = In(c, 0, t);
  bool tanh = !c.is_none(1) && c.string_arg(1) == "tanh";
  return {Done(c, tanh ? GeluTanh(c.e, x) : GeluErf(c.e, x))};
}
std::vector<Val> LowerSilu(LowerCtx& c) {
  ElementType t = Compute(c);
  Val x = In(c, 0, t);
  return {Done(c, Mul(c.e, x, c.e.Unary("logistic", x)))};
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
Val HardSigmoid(LowerCtx& c, const Val& x, ElementType t) {
  Val y = Add(c.e, Div(c.e, x, K(c, 6, t)), K(c, 0.5, t));
  return c.e.Binary("minimum", c.e.Binary("maximum", y, K(c, 0, t)), K(c, 1, t));
}
std::vector<Val> LowerHardsigmoid(LowerCtx& c) {
  ElementType t = Compute(c);
  return {Done(c, HardSigmoid(c, In(c, 0, t), t))};
}
std::vector<Val> LowerHardswish(LowerCtx& c) {
  ElementType t = Compute(c);
  Val x = In(c, 0, t);
  return {Done(c, Mul(c.e, x, HardSigmoid(c, x, t)))};
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
  Val cdf = Mul(e, K(c, 0.5, t), Add(e, K(c, 1, t), Chlo(e, "erf", Div(e, x, K(c, kSqrt2, t)))));
  Val pdf = Mul(e, K(c, kInvSqrt2Pi, t), e.Unary("exponential", Mul(e, K(c, -0.5, t), Mul(e, x, x))));
  return {Done(c, Mul(e, g, Add(e, cdf, Mul(e, x, pdf))))};
}
std::vector<Val> LowerSiluBackward(LowerCtx& c) {  // (grad_output, self)
  ElementType t = Compute(c);
  Val g = In(c, 0, t), x = In(c, 1, t);
  Val s = c.e.Unary("logistic", x);
  Val d = Mul(c.e, s, Add(c.e, K(c, 1, t), Mul(c.e, x, Sub(c.e, K(c, 1, t), s))));
  return {Done(c, Mul(c.e, g, d))};
}
std::vector<Val> LowerSigmoidBackward(LowerCtx& c) {  // (grad_output, output)
  ElementType t = Compute(c);
  Val g = In(c, 0, t), y = In(c, 1, t);
  return {Done(c, Mul(c.e, g, Mul(c.e, Sub(c.e, K(c, 1, t), y), y)))};
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
  Val d = Div(c.e, z, Add(c.e, z, K(c, 1, t)));
  return {Done(c, c.e.Select(c.e.Compare("GT", bx, In(c, 3, t)), g, Mul(c.e, g, d)))};
}
std::vector<Val> LowerHardsigmoidBackward(LowerCtx& c) {  // (grad, self)
  ElementType t = Compute(c);
  Val g = In(c, 0, t), x = In(c, 1, t);
  Val inside = c.e.Binary("and", c.e.Compare("GT", x, K(c, -3, t)), c.e.Compare("LT", x, K(c, 3, t)));
  return {Done(c, c.e.Select(inside, Div(c.e, g, K(c, 6, t)), K(c, 0, t)))};
}
std::vector<Val> LowerHardswishBackward(LowerCtx& c) {  // (grad, self)
  ElementType t = Compute(c);
  Val g = In(c, 0, t), x = In(c, 1, t);
  Val mid = Mul(c.e, g, Add(c.e, Div(c.e, x, K(c, 3, t)), K(c, 0.5, t)));
  Val r = c.e.Select(c.e.Compare("LE", x, K(c, 3, t)), mid, g);
  return {Done(c, c.e.Select(c.e.Compare("LT", x, K(c, -3, t)), K(c, 0, t), r))};
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
  r.Add("div.Tensor_mode", LowerDivMode);
  r.Add("remainder.Tensor", LowerRemainder);
  r.Add("fmod.Tensor", LowerFmod);
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
  r.Add("abs", LowerUnary<kAbs>);
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
  r.Add("sin", LowerUnary<kSin>);
  r.Add("cos", LowerUnary<kCos>);
  r.Add("tan", LowerUnary<kTan>);
  r.Add("tanh", LowerUnary<kTanh>);
  r.Add("sigmoid", LowerUnary<kSigmoid>);
  r.Add("erf", LowerChlo<kErf>);
  r.Add("erfinv", LowerChlo<kErfinv>);
  r.Add("asin", LowerChlo<kAsin>);
  r.Add("acos", LowerChlo<kAcos>);
  r.Add("atan", LowerChlo<kAtan>);
  r.Add("sinh", LowerChlo<kSinh>);
  r.Add("cosh", LowerChlo<kCosh>);
  r.Add("asinh", LowerChlo<kAsinh>);
  r.Add("acosh", LowerChlo<kAcosh>);
  r.Add("atanh", LowerChlo<kAtanh>);
  r.Add("lgamma", LowerChlo<kLgamma>);
  r.Add("digamma", LowerChlo<kDigamma>);
  r.Add("floor", LowerFloor);
  r.Add("ceil", LowerCeil);
  r.Add("trunc", LowerTrunc);
  r.Add("frac", LowerFrac);
  r.Add("round", LowerRoundInt);
  r.Add("reciprocal", LowerReciprocal);
  r.Add("logical_not", LowerLogicalNot);
  r.Add("bitwise_not", LowerBitwiseNot);
  r.Add("isnan", LowerIsnan);
  r.Add("nan_to_num", LowerNanToNum);

  r.Add("relu", LowerRelu);
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
