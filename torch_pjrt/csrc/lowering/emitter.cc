#include "lowering/emitter.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>

#include "lowering/float_math.h"

namespace torch_pjrt::lowering {

namespace {

void AppendInt(std::string& s, int64_t v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  s.append(buf, r.ptr);
}

bool IsNarrowFloat(ElementType t) {
  return t == ElementType::kF16 || t == ElementType::kBF16 || t == ElementType::kF8E5M2 ||
         t == ElementType::kF8E4M3FN;
}

const char* CompareType(ElementType t) {
  if (IsFloating(t)) return "FLOAT";
  if (IsComplex(t)) return "FLOAT";
  if (t == ElementType::kBool || IsUnsigned(t)) return "UNSIGNED";
  return "SIGNED";
}

// A reduction's operand shape with each run of adjacent reduced dimensions merged into one (a
// reshape of contiguous dimensions, no copy).
struct GroupedReduction {
  Dims shape;    // the merged operand shape
  Dims reduced;  // the merged reduced dimensions, positions in `shape`
  Dims kept;     // the dimensions kept: the result's shape
  bool keeps_minor_dim = false;
};

GroupedReduction GroupReducedDims(const Dims& x_dims, const Dims& dims) {
  std::vector<bool> is_reduced(x_dims.size(), false);
  for (int64_t d : dims) is_reduced[d] = true;
  GroupedReduction g;
  for (size_t i = 0; i < x_dims.size(); ++i) {
    if (!is_reduced[i]) {
      g.kept.push_back(x_dims[i]);
      g.shape.push_back(x_dims[i]);
    } else if (i > 0 && is_reduced[i - 1]) {
      g.shape.back() *= x_dims[i];
    } else {
      g.reduced.push_back(static_cast<int64_t>(g.shape.size()));
      g.shape.push_back(x_dims[i]);
    }
  }
  g.keeps_minor_dim = !is_reduced.empty() && !is_reduced.back();
  return g;
}

}  // namespace

std::string DimsString(const Dims& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) {
    if (i) s += ", ";
    AppendInt(s, d[i]);
  }
  return s + "]";
}

std::string ArrayAttr(const Dims& d) {
  std::string s = "array<i64";
  for (size_t i = 0; i < d.size(); ++i) {
    s += i ? ", " : ": ";
    AppendInt(s, d[i]);
  }
  return s + ">";
}

std::string TypeString(const TensorType& t) {
  std::string s = "tensor<";
  for (int64_t d : t.dims) {
    AppendInt(s, d);
    s += 'x';
  }
  s += MlirTypeName(t.dtype);
  s += '>';
  return s;
}

std::string ConstantLiteral(double value, ElementType t) {
  char buf[64];
  if (t == ElementType::kBool) return value != 0 ? "true" : "false";
  if (IsIntegral(t)) {
    // Clamped to the 64-bit range first: 2^63 as a double does not convert to int64.
    if (IsUnsigned(t)) {
      unsigned long long u = value <= 0 ? 0
                             : value >= 18446744073709551615.0 ? 18446744073709551615ull
                                                                : static_cast<unsigned long long>(value);
      std::snprintf(buf, sizeof(buf), "%llu", u);
    } else {
      long long v = value >= 9223372036854775807.0    ? 9223372036854775807ll
                    : value <= -9223372036854775808.0 ? (-9223372036854775807ll - 1)
                                                      : static_cast<long long>(value);
      std::snprintf(buf, sizeof(buf), "%lld", v);
    }
    return buf;
  }
  if (IsComplex(t)) return "(" + ConstantLiteral(value, t == ElementType::kC64 ? ElementType::kF32 : ElementType::kF64) + ", 0.0)";
  if (!std::isfinite(value)) {
    // Non-finite floats are written as their bit patterns.
    bool f64 = t == ElementType::kF64;
    unsigned long long bits;
    if (std::isnan(value)) {
      bits = f64 ? 0x7FF8000000000000ull : 0x7FC00000ull;
    } else if (value > 0) {
      bits = f64 ? 0x7FF0000000000000ull : 0x7F800000ull;
    } else {
      bits = f64 ? 0xFFF0000000000000ull : 0xFF800000ull;
    }
    std::snprintf(buf, sizeof(buf), f64 ? "0x%016llX" : "0x%08llX", bits);
    return buf;
  }
  if (t == ElementType::kF64) {
    std::snprintf(buf, sizeof(buf), "%.17e", value);
  } else {
    std::snprintf(buf, sizeof(buf), "%.9e", static_cast<double>(static_cast<float>(value)));
  }
  return buf;
}

Emitter::Emitter(TargetOptions target) : target_(std::move(target)) { body_.reserve(4096); }

std::string_view Emitter::PrecisionFor(ElementType operand_type,
                                       std::string_view override_precision) const {
  if (!IsFloating(operand_type) && !IsComplex(operand_type)) return {};  // integer dots are exact whatever the setting
  return override_precision.empty() ? std::string_view(target_.matmul_precision) : override_precision;
}

std::string Emitter::Name(const Val& v) const {
  std::string s = v.is_param ? "%arg" : "%v";
  AppendInt(s, v.id);
  if (v.sub >= 0) {
    s += '#';
    AppendInt(s, v.sub);
  }
  return s;
}

Val Emitter::NewValue(const TensorType& t) {
  Val v;
  v.id = next_id_++;
  v.type = t;
  ++num_ops_;
  work_ += NumElements(t.dims);
  return v;
}

std::vector<Val> Emitter::NewResults(const std::vector<TensorType>& types, std::string* lhs) {
  int32_t id = next_id_++;
  ++num_ops_;
  std::vector<Val> out;
  for (size_t i = 0; i < types.size(); ++i) {
    Val v;
    v.id = id;
    v.sub = types.size() == 1 ? -1 : static_cast<int32_t>(i);
    v.type = types[i];
    work_ += NumElements(types[i].dims);
    out.push_back(v);
  }
  *lhs = "%v" + std::to_string(id);
  if (types.size() != 1) *lhs += ":" + std::to_string(types.size());
  return out;
}

void Emitter::Line(const std::string& s) {
  body_ += "    ";
  body_ += s;
  body_ += '\n';
}

Val Emitter::Parameter(const TensorType& t) {
  Val v;
  v.id = static_cast<int32_t>(params_.size());
  v.is_param = true;
  v.type = t;
  params_.push_back(t);
  param_attrs_.emplace_back();
  return v;
}

void Emitter::SetParameterAttr(int index, std::string attr) { param_attrs_[index] = std::move(attr); }

std::string Emitter::Finish(const std::vector<Val>& results) {
  std::string s;
  s.reserve(body_.size() + 512);
  const size_t replicas = std::max<size_t>(replica_devices_.size(), 1);
  s += "module @torch_pjrt attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = " +
       std::to_string(replicas) + " : i32} {\n";
  s += "  func.func public @main(";
  for (size_t i = 0; i < params_.size(); ++i) {
    if (i) s += ", ";
    s += "%arg" + std::to_string(i) + ": " + TypeString(params_[i]);
    if (!param_attrs_[i].empty()) s += " {" + param_attrs_[i] + "}";
  }
  s += ") -> (";
  for (size_t i = 0; i < results.size(); ++i) s += (i ? ", " : "") + TypeString(results[i].type);
  s += ") {\n";
  s += body_;
  s += "    return ";
  for (size_t i = 0; i < results.size(); ++i) s += (i ? ", " : "") + Name(results[i]);
  if (!results.empty()) s += " : ";
  for (size_t i = 0; i < results.size(); ++i) s += (i ? ", " : "") + TypeString(results[i].type);
  s += "\n  }\n}\n";
  return s;
}

Val Emitter::Raw(const std::string& text, const std::string& signature, const TensorType& result) {
  Val v = NewValue(result);
  Line(Name(v) + " = " + text + " : " + signature);
  return v;
}

// ---------------------------------------------------------------- constants

Val Emitter::Scalar(double value, ElementType t) { return Full(value, TensorType{t, {}}); }

Val Emitter::Full(double value, const TensorType& t) {
  Val v;
  if (IsNarrowFloat(t.dtype)) {
    // Written as f32 and converted, so that values not exactly representable still parse.
    v = Convert(Full(value, TensorType{ElementType::kF32, t.dims}), t.dtype);
  } else {
    v = NewValue(t);
    Line(Name(v) + " = stablehlo.constant dense<" + ConstantLiteral(value, t.dtype) + "> : " +
         TypeString(t));
  }
  if (!std::isnan(value)) non_nan_constants_.insert(v.id);
  if (t.dims.size() > 1) flat_splats_[FlatKey(v)] = value;
  return v;
}

Val Emitter::Iota(const TensorType& t, int64_t dim) {
  Val v = NewValue(t);
  Line(Name(v) + " = stablehlo.iota dim = " + std::to_string(dim) + " : " + TypeString(t));
  return v;
}

// ---------------------------------------------------------------- elementwise

int64_t Emitter::FlatKey(const Val& v) {
  if (v.sub >= 0) return -1;  // a result of a multi-result op: never a flat form's holder
  return (static_cast<int64_t>(v.id) << 1) | (v.is_param ? 1 : 0);
}

bool Emitter::FlatForm(const Val& v, Val* flat) {
  if (v.rank() <= 1) return false;
  int64_t key = FlatKey(v);
  if (key < 0) return false;
  if (auto it = flat_forms_.find(key); it != flat_forms_.end()) {
    *flat = it->second;
    return true;
  }
  Dims n{v.numel()};
  if (auto it = flat_splats_.find(key); it != flat_splats_.end()) {
    *flat = Full(it->second, TensorType{v.dtype(), n});
    return true;
  }
  if (auto it = flat_broadcasts_.find(key); it != flat_broadcasts_.end()) {
    *flat = BroadcastInDim(Reshape(it->second, {}), n, {});
    return true;
  }
  return false;
}

std::vector<Val> Emitter::FlatOperands(std::initializer_list<Val> operands) {
  bool any_reshape = false;
  for (const Val& v : operands) {
    if (v.rank() <= 1) return {};
    any_reshape |= flat_forms_.count(FlatKey(v)) > 0;
  }
  if (!any_reshape) return {};
  std::vector<Val> flat;
  for (const Val& v : operands) {
    Val f;
    flat.push_back(FlatForm(v, &f) ? f : Reshape(v, {v.numel()}));
  }
  return flat;
}

void Emitter::MarkFlatSource(const Val& param) {
  if (param.rank() == 1) flat_values_.insert(FlatKey(param));
}

Val Emitter::Unflatten(const Val& flat, const Dims& dims) {
  flat_values_.insert(FlatKey(flat));
  Val v = Reshape(flat, dims);
  if (log_foldable_.count(flat.id) > 0 && !flat.is_param && flat.sub < 0) log_foldable_.insert(v.id);
  return v;
}

Val Emitter::Unary(std::string_view op, const Val& x) {
  if (op == "log" && !x.is_param && x.sub < 0 && log_foldable_.count(x.id) > 0) return LogOfFoldable(x);
  if (op == "log_plus_one" && x.dtype() == ElementType::kF32 && !target_.fast_transcendentals) return Log1pFromLog(x);
  bool exp_like = (op == "exponential" || op == "exponential_minus_one") && IsFloating(x.dtype());
  Val v = exp_like ? ExpPassingNaN(op, x) : RawUnary(op, x);
  if (op == "exponential" && IsFloating(x.dtype())) log_foldable_.insert(v.id);
  return v;
}

// Where XLA's simplifier folds x to a NaN constant times an input (`(0 * s) / 0` becomes
// `s * nan`), XLA:CPU compiled exp(x) to a kernel with no store (LLVM's optimization left `ret`
// alone) and the output was uninitialized memory (fuzz seed 1904083). Selecting x where it is NaN
// keeps the NaN a value LLVM cannot see through; a runtime NaN was always fine. The select cost
// softmax nothing measurable (bench: within +-5% at 64x1024 to 1024x4096).
Val Emitter::ExpPassingNaN(std::string_view op, const Val& x) {
  return Select(Compare("NE", x, x), x, RawUnary(op, x));
}

Val Emitter::RawUnary(std::string_view op, const Val& x) {
  if (auto f = FlatOperands({x}); !f.empty()) return Unflatten(RawUnary(op, f[0]), x.dims());
  Val v = NewValue(x.type);
  Line(Name(v) + " = stablehlo." + std::string(op) + " " + Name(x) + " : " + TypeString(x.type));
  return v;
}

// XLA:CPU computes log_plus_one with a call into libm's log1pf per element: softplus, log-sigmoid
// and BCE with logits over [512, 1000] floats took 5-7x CPU eager's time, log1p 1.9 ms against
// 0.34. float32's is computed from XLA's log, which is vectorized, by Kahan's formula: with
// u = 1 + x, log1p(x) = log(u) * (x / (u - 1)), the rounding of 1 + x cancelling in the ratio, and
// x * 1 where u rounds to 1 (keeping -0.0, and subnormals as the device's arithmetic treats them:
// the CPU plugin returns log1p(1e-45) as 1e-45, the float64 value, where CPU eager gives 0); inf
// is inf (the ratio would be NaN); -1 gives -inf and x < -1 NaN through log. The one is opaque to XLA (behind an optimization barrier): its simplifier folded
// (x + 1) - 1 to x, and the result was log(1 + x) with 1 + x's rounding, 10^7 ulps off near 0.
Val Emitter::Log1pFromLog(const Val& x) {
  Val one = BroadcastTo(OptimizationBarrier(Scalar(1, x.dtype())), x.dims());
  Val inf = Full(std::numeric_limits<double>::infinity(), x.type);
  Val u = Binary("add", x, one);
  Val ratio = Binary("divide", x, Binary("subtract", u, one));
  Val general = Binary("multiply", RawUnary("log", u), ratio);
  Val near_zero = Binary("multiply", x, one);
  return Select(Compare("EQ", u, one), near_zero, Select(Compare("EQ", x, inf), inf, general));
}

// XLA's simplifier rewrites log(pow(a, b)) as b * log(|a|) and log(exp(a)) as a, which holds only
// where 0 < x < inf and x != 1: log(pow(-1., -1.)) gave -0.0 for NaN, log(exp(100.)) 100 for inf,
// and log(pow(1., -inf)) NaN (-inf * 0) for 0. The log of x's other values is selected explicitly:
// 0 at one (also pow(NaN, 0)), -inf at zero, inf at inf, NaN below zero and at NaN.
Val Emitter::LogOfFoldable(const Val& x) {
  Val zero = Full(0, x.type), one = Full(1, x.type), inf = Full(std::numeric_limits<double>::infinity(), x.type);
  Val regular = RawBinary("and", RawBinary("and", Compare("GT", x, zero), Compare("LT", x, inf)),
                          Compare("NE", x, one));
  Val special = Select(Compare("EQ", x, inf), inf, Full(std::numeric_limits<double>::quiet_NaN(), x.type));
  special = Select(Compare("EQ", x, zero), Full(-std::numeric_limits<double>::infinity(), x.type), special);
  special = Select(Compare("EQ", x, one), zero, special);
  return Select(regular, RawUnary("log", x), special);
}

Val Emitter::Binary(std::string_view op, const Val& a, const Val& b) {
  if (!(a.type == b.type)) {
    throw std::logic_error("stablehlo." + std::string(op) + " operands differ: " + TypeString(a) +
                           " vs " + TypeString(b));
  }
  if (NeedsExplicitNan(op, a.dtype())) return NanPropagating(RawBinary(op, a, b), a, b);
  if (op == "atan2" && float_math::Applies(*this, a)) return float_math::Atan2(*this, a, b);
  if (op == "power" && float_math::Applies(*this, a)) return float_math::Pow(*this, a, b);
  if (op == "remainder" && float_math::Applies(*this, a)) return float_math::Fmod(*this, a, b);
  return RawBinary(op, a, b);
}

bool Emitter::NeedsExplicitNan(std::string_view op, ElementType t) const {
  return !target_.nan_propagating_min_max && (op == "maximum" || op == "minimum") && IsFloating(t);
}

// A constant operand (relu's 0, clamp's bounds) cannot be NaN and needs no select.
bool Emitter::IsNonNanConstant(const Val& v) const {
  return !v.is_param && v.sub < 0 && non_nan_constants_.count(v.id) > 0;
}

// StableHLO's maximum/minimum return NaN when either operand is NaN; a compiler whose min/max
// may drop NaNs (TargetOptions::nan_propagating_min_max false) gets the NaN chosen explicitly.
Val Emitter::NanPropagating(const Val& m, const Val& a, const Val& b) {
  Val r = IsNonNanConstant(b) ? m : Select(Compare("NE", b, b), b, m);
  return IsNonNanConstant(a) ? r : Select(Compare("NE", a, a), a, r);
}

namespace {

// XLA computes add and multiply of i1 values as one-bit integer arithmetic (true + true is false
// where the add is fused); torch's bool add is a logical or, its multiply a logical and.
std::string_view BoolOp(std::string_view op, ElementType t) {
  if (t != ElementType::kBool) return op;
  if (op == "add") return "or";
  if (op == "multiply") return "and";
  return op;
}

}  // namespace

Val Emitter::RawBinary(std::string_view op_name, const Val& a, const Val& b) {
  if (auto f = FlatOperands({a, b}); !f.empty()) return Unflatten(RawBinary(op_name, f[0], f[1]), a.dims());
  std::string_view op = BoolOp(op_name, a.dtype());
  Val v = NewValue(a.type);
  Line(Name(v) + " = stablehlo." + std::string(op) + " " + Name(a) + ", " + Name(b) + " : " +
       TypeString(a.type));
  if (op == "power" && IsFloating(a.dtype())) log_foldable_.insert(v.id);
  return v;
}

Val Emitter::Compare(std::string_view direction, const Val& a, const Val& b) {
  if (auto f = FlatOperands({a, b}); !f.empty()) return Unflatten(Compare(direction, f[0], f[1]), a.dims());
  Val v = NewValue(TensorType{ElementType::kBool, a.dims()});
  Line(Name(v) + " = stablehlo.compare " + std::string(direction) + ", " + Name(a) + ", " +
       Name(b) + ", " + CompareType(a.dtype()) + " : (" + TypeString(a) + ", " + TypeString(b) +
       ") -> " + TypeString(v));
  return v;
}

Val Emitter::Select(const Val& pred, const Val& on_true, const Val& on_false) {
  if (auto f = FlatOperands({pred, on_true, on_false}); !f.empty()) {
    return Unflatten(Select(f[0], f[1], f[2]), on_true.dims());
  }
  Val v = NewValue(on_true.type);
  Line(Name(v) + " = stablehlo.select " + Name(pred) + ", " + Name(on_true) + ", " +
       Name(on_false) + " : " + TypeString(pred) + ", " + TypeString(on_true));
  return v;
}

Val Emitter::Clamp(const Val& lo, const Val& x, const Val& hi) {
  if (lo.dims() == x.dims() && hi.dims() == x.dims()) {
    if (auto f = FlatOperands({lo, x, hi}); !f.empty()) return Unflatten(Clamp(f[0], f[1], f[2]), x.dims());
  }
  Val v = NewValue(x.type);
  Line(Name(v) + " = stablehlo.clamp " + Name(lo) + ", " + Name(x) + ", " + Name(hi) + " : (" +
       TypeString(lo) + ", " + TypeString(x) + ", " + TypeString(hi) + ") -> " + TypeString(x));
  return v;
}

Val Emitter::Convert(const Val& x, ElementType t) {
  if (x.dtype() == t) return x;
  if (t == ElementType::kBool && x.dtype() != ElementType::kBool) {
    // convert-to-pred truncates on some backends; torch means "!= 0".
    return Compare("NE", x, Full(0, x.type));
  }
  if (x.dtype() == ElementType::kBool && !IsIntegral(t)) {
    // XLA's simplifier rewrites multiply(convert(pred), y) as select(pred, y, 0), which drops
    // the NaN that 0 * inf and 0 * NaN give in torch (`mask.float() * x`); a conversion from
    // uint8 is not matched by that rule.
    return Convert(Convert(x, ElementType::kU8), t);
  }
  bool signed_word = t == ElementType::kS32 || t == ElementType::kS64;
  if (IsFloating(x.dtype()) && IsIntegral(t) && ItemSize(t) < 8 && !signed_word) {
    // torch's casts go through a wider signed integer (int32 for 8- and 16-bit types, int64 for
    // uint32) and truncate, so out-of-range values wrap (-8.5 -> 248 as uint8) where XLA's
    // direct conversion would saturate.
    return Convert(Convert(x, ItemSize(t) < 4 ? ElementType::kS32 : ElementType::kS64), t);
  }
  if (IsFloating(x.dtype()) && signed_word) {
    // The CPU's conversion (x86 cvtt*) gives the "integer indefinite" value, the type's minimum,
    // for NaN and out-of-range values (+-inf included), where XLA's saturates or gives 0.
    // The test is made in the source type (for float16 the limit rounds to inf, which still
    // excludes only the infinities): a conversion of a bfloat16 result to float first would let
    // XLA drop that result's rounding (its excess-precision simplification).
    double limit = t == ElementType::kS32 ? 2147483648.0 : 9223372036854775808.0;
    Val wide = ItemSize(x.dtype()) >= 2 ? x : Convert(x, ElementType::kF32);  // float8: widened
    Val inside = Compare("LT", Unary("abs", wide), Full(limit, wide.type));  // false for NaN
    Val v = NewValue(TensorType{t, x.dims()});
    Line(Name(v) + " = stablehlo.convert " + Name(wide) + " : (" + TypeString(wide) + ") -> " + TypeString(v));
    double indefinite = t == ElementType::kS32 ? -2147483648.0 : -9223372036854775808.0;
    return Select(inside, v, Full(indefinite, v.type));
  }
  if (t == ElementType::kF8E4M3FN && x.dtype() != ElementType::kF8E5M2) {
    // float8_e4m3fn has no infinity: torch saturates values beyond its largest (448, infinities
    // included) to +-448 where a plain conversion gives NaN. NaN stays NaN (comparisons fail).
    Val wide = Convert(x, IsFloating(x.dtype()) && ItemSize(x.dtype()) >= 4 ? x.dtype() : ElementType::kF32);
    Val beyond = Compare("GT", Unary("abs", wide), Full(448, wide.type));
    Val saturated = Select(Compare("LT", wide, Full(0, wide.type)), Full(-448, wide.type), Full(448, wide.type));
    wide = Select(beyond, saturated, wide);
    Val v = NewValue(TensorType{t, x.dims()});
    Line(Name(v) + " = stablehlo.convert " + Name(wide) + " : (" + TypeString(wide) + ") -> " + TypeString(v));
    return v;
  }
  if (auto f = FlatOperands({x}); !f.empty()) return Unflatten(Convert(f[0], t), x.dims());
  Val v = NewValue(TensorType{t, x.dims()});
  Line(Name(v) + " = stablehlo.convert " + Name(x) + " : (" + TypeString(x) + ") -> " +
       TypeString(v));
  return v;
}

Val Emitter::BitcastConvert(const Val& x, const TensorType& t) {
  Val v = NewValue(t);
  Line(Name(v) + " = stablehlo.bitcast_convert " + Name(x) + " : (" + TypeString(x) + ") -> " +
       TypeString(t));
  return v;
}

// ---------------------------------------------------------------- shape and layout

Val Emitter::Reshape(const Val& x, const Dims& dims) {
  if (x.dims() == dims) return x;
  if (auto it = flat_forms_.find(FlatKey(x)); it != flat_forms_.end()) return Reshape(it->second, dims);
  Val v = NewValue(TensorType{x.dtype(), dims});
  Line(Name(v) + " = stablehlo.reshape " + Name(x) + " : (" + TypeString(x) + ") -> " +
       TypeString(v));
  if (dims.size() > 1 && x.rank() == 1 && flat_values_.count(FlatKey(x)) > 0) flat_forms_[FlatKey(v)] = x;
  return v;
}

Val Emitter::BroadcastInDim(const Val& x, const Dims& out_dims, const Dims& mapping) {
  if (x.dims() == out_dims) {
    bool identity = true;
    for (size_t i = 0; i < mapping.size(); ++i) identity &= mapping[i] == static_cast<int64_t>(i);
    if (identity) return x;
  }
  Val v = NewValue(TensorType{x.dtype(), out_dims});
  Line(Name(v) + " = stablehlo.broadcast_in_dim " + Name(x) + ", dims = " + DimsString(mapping) +
       " : (" + TypeString(x) + ") -> " + TypeString(v));
  if (out_dims.size() > 1 && x.numel() == 1) flat_broadcasts_[FlatKey(v)] = x;
  return v;
}

Val Emitter::BroadcastTo(const Val& x, const Dims& out_dims) {
  if (x.dims() == out_dims) return x;
  int64_t offset = static_cast<int64_t>(out_dims.size()) - x.rank();
  if (offset < 0) throw std::logic_error("BroadcastTo: target rank is smaller than the operand's");
  // broadcast_in_dim allows each operand dim to be 1 or equal to its output dim: numpy's rule.
  Dims mapping;
  for (int64_t i = 0; i < x.rank(); ++i) mapping.push_back(i + offset);
  return BroadcastInDim(x, out_dims, mapping);
}

Val Emitter::Transpose(const Val& x, const Dims& perm) {
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i) identity &= perm[i] == static_cast<int64_t>(i);
  if (identity) return x;
  Dims out;
  for (int64_t p : perm) out.push_back(x.dims()[p]);
  Val v = NewValue(TensorType{x.dtype(), out});
  Line(Name(v) + " = stablehlo.transpose " + Name(x) + ", dims = " + DimsString(perm) + " : (" +
       TypeString(x) + ") -> " + TypeString(v));
  if (x.rank() == 2) transposed_2d_[v.id] = x;
  return v;
}

Val Emitter::TransposeSource(const Val& v) const {
  if (v.is_param || v.sub >= 0) return Val();
  auto it = transposed_2d_.find(v.id);
  return it == transposed_2d_.end() ? Val() : it->second;
}

Val Emitter::OptimizationBarrier(const Val& x) {
  Val v = NewValue(x.type);
  Line(Name(v) + " = stablehlo.optimization_barrier " + Name(x) + " : " + TypeString(x));
  return v;
}

Val Emitter::Slice(const Val& x, const Dims& start, const Dims& limit, const Dims& strides) {
  bool identity = true;
  Dims out;
  for (size_t i = 0; i < start.size(); ++i) {
    int64_t n = limit[i] > start[i] ? (limit[i] - start[i] + strides[i] - 1) / strides[i] : 0;
    out.push_back(n);
    identity &= start[i] == 0 && limit[i] == x.dims()[i] && strides[i] == 1;
  }
  if (identity) return x;
  Val v = NewValue(TensorType{x.dtype(), out});
  Line(Name(v) + " = stablehlo.slice " + Name(x) + " " + [&] {
    std::string s = "[";
    for (size_t i = 0; i < start.size(); ++i) {
      if (i) s += ", ";
      s += std::to_string(start[i]) + ":" + std::to_string(limit[i]);
      if (strides[i] != 1) s += ":" + std::to_string(strides[i]);
    }
    return s + "]";
  }() + " : (" + TypeString(x) + ") -> " + TypeString(v));
  return v;
}

Val Emitter::SliceDim(const Val& x, int64_t dim, int64_t start, int64_t limit, int64_t stride) {
  Dims s(x.rank(), 0), l = x.dims(), st(x.rank(), 1);
  s[dim] = start;
  l[dim] = limit;
  st[dim] = stride;
  return Slice(x, s, l, st);
}

Val Emitter::Concatenate(const std::vector<Val>& xs, int64_t dim) {
  if (xs.size() == 1) return xs[0];
  TensorType t = xs[0].type;
  t.dims[dim] = 0;
  std::string names, types;
  for (size_t i = 0; i < xs.size(); ++i) {
    t.dims[dim] += xs[i].dims()[dim];
    names += (i ? ", " : "") + Name(xs[i]);
    types += (i ? ", " : "") + TypeString(xs[i]);
  }
  Val v = NewValue(t);
  Line(Name(v) + " = stablehlo.concatenate " + names + ", dim = " + std::to_string(dim) + " : (" +
       types + ") -> " + TypeString(v));
  return v;
}

Val Emitter::Pad(const Val& x, const Val& value, const Dims& lo, const Dims& hi,
                 const Dims& interior) {
  TensorType t = x.type;
  bool identity = true;
  for (int64_t i = 0; i < x.rank(); ++i) {
    int64_t d = x.dims()[i];
    t.dims[i] = lo[i] + hi[i] + d + (d > 0 ? (d - 1) * interior[i] : 0);
    identity &= lo[i] == 0 && hi[i] == 0 && interior[i] == 0;
  }
  if (identity) return x;
  Val v = NewValue(t);
  Line(Name(v) + " = stablehlo.pad " + Name(x) + ", " + Name(value) + ", low = " + DimsString(lo) +
       ", high = " + DimsString(hi) + ", interior = " + DimsString(interior) + " : (" +
       TypeString(x) + ", " + TypeString(value) + ") -> " + TypeString(v));
  return v;
}

Val Emitter::Reverse(const Val& x, const Dims& dims) {
  if (dims.empty()) return x;
  Val v = NewValue(x.type);
  Line(Name(v) + " = stablehlo.reverse " + Name(x) + ", dims = " + DimsString(dims) + " : " +
       TypeString(x));
  return v;
}

Val Emitter::DynamicSlice(const Val& x, const std::vector<Val>& starts, const Dims& sizes) {
  Val v = NewValue(TensorType{x.dtype(), sizes});
  std::string s = Name(v) + " = stablehlo.dynamic_slice " + Name(x);
  for (const Val& st : starts) s += ", " + Name(st);
  s += ", sizes = " + DimsString(sizes) + " : (" + TypeString(x);
  for (const Val& st : starts) s += ", " + TypeString(st);
  s += ") -> " + TypeString(v);
  Line(s);
  return v;
}

Val Emitter::DynamicUpdateSlice(const Val& x, const Val& update, const std::vector<Val>& starts) {
  Val v = NewValue(x.type);
  std::string s = Name(v) + " = stablehlo.dynamic_update_slice " + Name(x) + ", " + Name(update);
  for (const Val& st : starts) s += ", " + Name(st);
  s += " : (" + TypeString(x) + ", " + TypeString(update);
  for (const Val& st : starts) s += ", " + TypeString(st);
  s += ") -> " + TypeString(v);
  Line(s);
  return v;
}

// ---------------------------------------------------------------- compute

Val Emitter::DotGeneral(const Val& a, const Val& b, const Dims& batch_a, const Dims& batch_b,
                        const Dims& contract_a, const Dims& contract_b, ElementType out,
                        std::string_view precision) {
  if (!target_.fast_transposed_matmul && batch_a.empty() && a.rank() == 2 && b.rank() == 2 &&
      contract_a.size() == 1 && contract_a[0] == 1 && contract_b.size() == 1) {
    // Where b is itself a transpose (w.t() read as a view), look at w's layout: the compiler
    // folds the transpose into the dot anyway.
    Val rhs = b;
    int64_t rhs_contract = contract_b[0];
    if (Val source = TransposeSource(b); source.valid()) {
      rhs = source;
      rhs_contract = 1 - rhs_contract;
    }
    if (rhs_contract == 1 && rhs.dims()[0] > a.dims()[0]) {
      // a @ rhs.t() == (rhs @ a.t()).t(); the barrier stops the transpose being folded back.
      Val t = EmitDotGeneral(rhs, a, {}, {}, {1}, {1}, out, precision);
      return Transpose(OptimizationBarrier(t), {1, 0});
    }
  }
  return EmitDotGeneral(a, b, batch_a, batch_b, contract_a, contract_b, out, precision);
}

Val Emitter::EmitDotGeneral(const Val& a, const Val& b, const Dims& batch_a, const Dims& batch_b,
                            const Dims& contract_a, const Dims& contract_b, ElementType out,
                            std::string_view precision) {
  TensorType t{out, {}};
  for (int64_t d : batch_a) t.dims.push_back(a.dims()[d]);
  for (int64_t i = 0; i < a.rank(); ++i) {
    bool skip = false;
    for (int64_t d : batch_a) skip |= d == i;
    for (int64_t d : contract_a) skip |= d == i;
    if (!skip) t.dims.push_back(a.dims()[i]);
  }
  for (int64_t i = 0; i < b.rank(); ++i) {
    bool skip = false;
    for (int64_t d : batch_b) skip |= d == i;
    for (int64_t d : contract_b) skip |= d == i;
    if (!skip) t.dims.push_back(b.dims()[i]);
  }
  Val v = NewValue(t);
  int64_t contracted = 1;
  for (int64_t d : contract_a) contracted *= a.dims()[d];
  work_ += NumElements(t.dims) * std::max<int64_t>(contracted - 1, 0);
  std::string s = Name(v) + " = stablehlo.dot_general " + Name(a) + ", " + Name(b) + ", ";
  if (!batch_a.empty()) s += "batching_dims = " + DimsString(batch_a) + " x " + DimsString(batch_b) + ", ";
  s += "contracting_dims = " + DimsString(contract_a) + " x " + DimsString(contract_b);
  std::string_view p = PrecisionFor(a.dtype(), precision);
  if (!p.empty()) s += ", precision = [" + std::string(p) + ", " + std::string(p) + "]";
  s += " : (" + TypeString(a) + ", " + TypeString(b) + ") -> " + TypeString(t);
  Line(s);
  return v;
}

Val Emitter::Reduce(const Val& x, const Val& init, const Dims& dims, std::string_view op) {
  if (dims.empty()) return x;
  if (NeedsExplicitNan(op, x.dtype())) {
    // The fast min/max reduction, then NaN wherever a reduced element was NaN. Selecting the NaN
    // inside the reduction body instead kept XLA:CPU from vectorizing it: a row max over
    // [512, 1000] floats took 0.51 ms, 0.35 this way (docs/design.md, "Row reductions").
    Val m = ReduceRows(x, init, dims, op);
    Val any_nan = ReduceRows(Compare("NE", x, x), Scalar(0, ElementType::kBool), dims, "or");
    return Select(any_nan, Full(std::numeric_limits<double>::quiet_NaN(), m.type), m);
  }
  if (op == "add" && !target_.fast_reductions) {
    if (Val v = RowSumAsDot(x, init, dims); v.valid()) return v;
  }
  Val r = ReduceRows(x, init, dims, op);
  if (op == "add" && IsFloating(x.dtype())) {
    // A float sum that comes to zero is +0 on the CPU, whose accumulators start at +0 (+0 + -0 is
    // +0); XLA:CPU starts from the first element, so a sum of negative zeros was -0.
    r = Select(Compare("EQ", r, Full(0, r.type)), Full(0, r.type), r);
  }
  return r;
}

// A float32/64 sum over x's trailing dimensions (at least kMinRow elements per row) as
// [rows, row] x ones[row] (TargetOptions::fast_reductions false): XLA:CPU ran a row sum over
// [512, 1000] floats in 0.19 ms as a reduction and 0.05 ms as a matrix-vector product, whose
// Eigen kernel is vectorized (log_softmax over vocabulary-sized rows 0.83-0.99 -> 0.58-0.70 ms).
// The reduction's producer is then materialized instead of fused: on rows of 64-128 (attention,
// layer norm at width 128) the GPT example did not gain, so shorter rows stay reductions.
// A single row (a full sum) is split instead (SumOfOneRow). Invalid Val: not such a sum.
Val Emitter::RowSumAsDot(const Val& x, const Val& init, const Dims& dims) {
  constexpr int64_t kMinRow = 256;
  if (x.dtype() != ElementType::kF32 && x.dtype() != ElementType::kF64) return Val();
  GroupedReduction g = GroupReducedDims(x.dims(), dims);
  bool trailing_only = g.reduced.size() == 1 && !g.keeps_minor_dim;
  if (!trailing_only) return Val();
  int64_t row = g.shape.back();
  if (NumElements(g.kept) == 1) return SumOfOneRow(Reshape(x, {row}), init, g.kept);
  if (row < kMinRow) return Val();
  Val matrix = Reshape(x, {NumElements(g.kept), row});
  Val ones = Full(1, TensorType{x.dtype(), {row}});
  Val sums = EmitDotGeneral(matrix, ones, {}, {}, {1}, {0}, x.dtype(), "HIGHEST");
  Val s = Reshape(sums, g.kept);
  return Binary("add", s, BroadcastInDim(init, g.kept, {}));
}

// The sum of the n elements of vector `row`, shaped as `kept` (all ones), as [n / k, k] x ones[k]
// and a sum of the n / k partial sums, k the first divisor of n from 4096 on: a full sum of 2M
// floats took 2.6 ms as one [1, 2M] product (XLA materializes the 8 MB ones vector) and 1.0 ms as
// a reduction, 0.2 ms this way (eager 0.06). With a shorter ones vector XLA:CPU fused the product
// into a scalar loop: that [64, 32, 32, 32] tensor as [2048, 1024] x ones[1024] took 1.0 ms.
// Invalid Val: no such divisor.
Val Emitter::SumOfOneRow(const Val& row, const Val& init, const Dims& kept) {
  constexpr int64_t kMinDotRow = 4096, kMaxDotRow = 65536;
  int64_t n = row.dims()[0], k = kMinDotRow;
  while (k <= kMaxDotRow && n % k != 0) ++k;
  if (k > kMaxDotRow || n / k < 2) return Val();
  Val partials = EmitDotGeneral(Reshape(row, {n / k, k}), Full(1, TensorType{row.dtype(), {k}}), {}, {}, {1}, {0},
                                row.dtype(), "HIGHEST");
  return Reshape(Reduce(partials, init, {0}, "add"), kept);
}

// A reduction over x's trailing dimensions, where the plugin's reductions are slow
// (fast_reductions false), as a reduction over the middle dimension of [rows, row / 8, 8] and
// then one over the 8 partials. XLA:CPU emits a reduction over the minor dimension as a scalar
// loop per row (a chain of dependent compare-selects or adds) but vectorizes the middle one across
// the 8 kept lanes: a row max over [512, 1000] floats 0.63 -> 0.26 ms, log_softmax forward and
// backward 0.70-0.90x, layer norm's 0.83-0.97x, in-process alternation (docs/design.md, "Row
// reductions"). The first stage starts from the op's identity, so `init` enters once; min and max
// are idempotent. Rows that are not a multiple of 8, other ops and small inputs stay whole.
Val Emitter::ReduceRows(const Val& x, const Val& init, const Dims& dims, std::string_view op) {
  // Below this many elements a reduction takes a few microseconds whole, about what the second
  // kernel costs (cross entropy's per-label sums over 512 elements made its step 5% slower).
  constexpr int64_t kLanes = 8, kMinElements = 16384;
  GroupedReduction g = GroupReducedDims(x.dims(), dims);
  bool min_max = op == "maximum" || op == "minimum";
  bool has_identity = op == "add" || op == "or" || op == "and";
  bool rows_only = g.reduced.size() == 1 && !g.keeps_minor_dim;
  int64_t row = g.shape.empty() ? 0 : g.shape.back();
  if (target_.fast_reductions || !(min_max || has_identity) || !rows_only || row % kLanes != 0 ||
      row < 2 * kLanes || x.numel() < kMinElements) {
    return RawReduce(x, init, dims, op);
  }
  Val first_init = min_max ? init : Scalar(op == "and" ? 1 : 0, x.dtype());
  Val lanes = EmitReduce(Reshape(x, {NumElements(g.kept), row / kLanes, kLanes}), first_init, {1}, op);
  // XLA's simplifier merges a reduction of a reduction back into one over both dimensions.
  return Reshape(EmitReduce(OptimizationBarrier(lanes), init, {1}, op), g.kept);
}

// Adjacent reduced dimensions are merged into one (GroupReducedDims). Where reductions are slow
// (fast_reductions false), a reduction over leading dimensions then reads its operand through an
// optimization barrier: XLA:CPU otherwise folds the reshapes back, and its tree-reduction rewrite
// windows each reduced dimension separately. A linear layer's bias gradient, [16, 64, 512] summed
// over (0, 1), took 0.71 ms that way and 0.13-0.17 ms as [1024, 512] summed over 0
// (docs/design.md, "Column reductions"). The barrier costs the fusion of the operand's producer
// into the reduction; rows (the minor dimension) are left alone.
Val Emitter::RawReduce(const Val& x, const Val& init, const Dims& dims, std::string_view op) {
  // XLA:CPU windows (rewrites) only a reduced dimension of more than this many elements.
  constexpr int64_t kTreeReductionWindow = 32;
  GroupedReduction g = GroupReducedDims(x.dims(), dims);
  Val operand = Reshape(x, g.shape);
  if (!target_.fast_reductions && g.keeps_minor_dim &&
      NumElements(g.shape) > kTreeReductionWindow * NumElements(g.kept)) {
    operand = OptimizationBarrier(operand);
  }
  return EmitReduce(operand, init, g.reduced, op);
}

// stablehlo.reduce of `operand` over `reduced` with the binary `op`.
Val Emitter::EmitReduce(const Val& operand, const Val& init, const Dims& reduced, std::string_view op) {
  Val v = NewValue(TensorType{operand.dtype(), GroupReducedDims(operand.dims(), reduced).kept});
  Line(Name(v) + " = stablehlo.reduce(" + Name(operand) + " init: " + Name(init) +
       ") applies stablehlo." + std::string(BoolOp(op, operand.dtype())) + " across dimensions = " +
       DimsString(reduced) + " : (" + TypeString(operand) + ", " + TypeString(init) + ") -> " + TypeString(v));
  return v;
}

std::string Emitter::Block(const std::vector<TensorType>& arg_types, const RegionBody& body) {
  std::vector<Val> args;
  std::string header = "^bb0(";
  for (size_t i = 0; i < arg_types.size(); ++i) {
    Val a;
    a.id = next_id_++;
    a.type = arg_types[i];
    args.push_back(a);
    header += (i ? ", " : "") + Name(a) + ": " + TypeString(a);
  }
  header += "):\n";
  std::string saved;
  saved.swap(body_);
  std::vector<Val> results = body(*this, args);
  std::string inner;
  inner.swap(body_);
  body_.swap(saved);
  std::string ret = "      stablehlo.return ";
  for (size_t i = 0; i < results.size(); ++i) ret += (i ? ", " : "") + Name(results[i]);
  ret += " : ";
  for (size_t i = 0; i < results.size(); ++i) ret += (i ? ", " : "") + TypeString(results[i]);
  return "  " + header + inner + ret + "\n";
}

// ---------------------------------------------------------------- collectives

void Emitter::SetReplicaDevices(const Dims& devices) {
  if (devices.empty()) throw std::invalid_argument("pjrt: a collective needs at least one replica");
  if (!replica_devices_.empty() && replica_devices_ != devices) {
    throw std::logic_error("pjrt: one graph holds collectives of two process groups (devices " +
                           DimsString(replica_devices_) + " and " + DimsString(devices) + ")");
  }
  replica_devices_ = devices;
}

std::string Emitter::ReplicaGroupsAttr() const {
  const int64_t n = static_cast<int64_t>(replica_devices_.size());
  std::string ids;
  for (int64_t r = 0; r < n; ++r) ids += (r ? ", " : "") + std::to_string(r);
  return "replica_groups = dense<[[" + ids + "]]> : tensor<1x" + std::to_string(n) + "xi64>";
}

std::string Emitter::CombinerBlock(ElementType t, std::string_view op) {
  TensorType scalar{t, {}};
  // The bare op: compilers recognize only a single add/multiply/minimum/maximum as a collective's
  // combiner (XLA:CPU rejects the NaN-selecting form of maximum).
  return Block({scalar, scalar}, [op](Emitter& e, const std::vector<Val>& a) {
    return std::vector<Val>{e.RawBinary(op, a[0], a[1])};
  });
}

Val Emitter::AllReduce(const Val& x, std::string_view op) {
  std::string block = CombinerBlock(x.dtype(), op);
  Val v = NewValue(x.type);
  Line(Name(v) + " = \"stablehlo.all_reduce\"(" + Name(x) + ") ({\n" + block + "    }) {" +
       ReplicaGroupsAttr() + "} : (" + TypeString(x) + ") -> " + TypeString(x));
  return v;
}

Val Emitter::AllGather(const Val& x, int64_t dim) {
  TensorType out = x.type;
  out.dims[dim] *= static_cast<int64_t>(replica_devices_.size());
  Val v = NewValue(out);
  Line(Name(v) + " = \"stablehlo.all_gather\"(" + Name(x) + ") {all_gather_dim = " + std::to_string(dim) +
       " : i64, " + ReplicaGroupsAttr() + "} : (" + TypeString(x) + ") -> " + TypeString(out));
  return v;
}

Val Emitter::ReduceScatter(const Val& x, int64_t dim, std::string_view op) {
  const int64_t n = static_cast<int64_t>(replica_devices_.size());
  if (x.dims()[dim] % n != 0) {
    throw std::invalid_argument("pjrt: reduce_scatter input size " + std::to_string(x.dims()[dim]) +
                                " is not a multiple of the group size " + std::to_string(n));
  }
  TensorType out = x.type;
  out.dims[dim] /= n;
  std::string block = CombinerBlock(x.dtype(), op);
  Val v = NewValue(out);
  Line(Name(v) + " = \"stablehlo.reduce_scatter\"(" + Name(x) + ") ({\n" + block + "    }) {" +
       ReplicaGroupsAttr() + ", scatter_dimension = " + std::to_string(dim) + " : i64} : (" + TypeString(x) +
       ") -> " + TypeString(out));
  return v;
}

std::vector<Val> Emitter::ReduceVariadic(const std::vector<Val>& xs, const std::vector<Val>& inits,
                                         const Dims& dims, const RegionBody& body) {
  std::vector<TensorType> out_types, block_types;
  Dims sorted = dims;
  std::sort(sorted.begin(), sorted.end());
  for (const Val& x : xs) {
    out_types.push_back(TensorType{x.dtype(), GroupReducedDims(x.dims(), dims).kept});
  }
  for (int pass = 0; pass < 2; ++pass)
    for (const Val& x : xs) block_types.push_back(TensorType{x.dtype(), {}});
  std::string block = Block(block_types, body);
  std::string lhs;
  std::vector<Val> results = NewResults(out_types, &lhs);
  std::string s = lhs + " = \"stablehlo.reduce\"(";
  std::string in_types;
  bool first = true;
  for (const auto* list : {&xs, &inits}) {
    for (const Val& v : *list) {
      s += (first ? "" : ", ") + Name(v);
      in_types += (first ? "" : ", ") + TypeString(v);
      first = false;
    }
  }
  s += ") ({\n" + block + "    }) {dimensions = " + ArrayAttr(sorted) + "} : (" + in_types + ") -> (";
  for (size_t i = 0; i < out_types.size(); ++i) s += (i ? ", " : "") + TypeString(out_types[i]);
  s += ")";
  Line(s);
  return results;
}

std::vector<Val> Emitter::ReduceWindow(const std::vector<Val>& xs, const std::vector<Val>& inits,
                                       const Dims& window, const Dims& strides,
                                       const Dims& base_dilation, const Dims& window_dilation,
                                       const std::vector<std::pair<int64_t, int64_t>>& padding,
                                       const RegionBody& body) {
  std::vector<TensorType> out_types, block_types;
  for (const Val& x : xs) {
    TensorType t{x.dtype(), {}};
    for (int64_t i = 0; i < x.rank(); ++i) {
      int64_t in = (x.dims()[i] - 1) * base_dilation[i] + 1 + padding[i].first + padding[i].second;
      int64_t w = (window[i] - 1) * window_dilation[i] + 1;
      t.dims.push_back(in < w ? 0 : (in - w) / strides[i] + 1);
    }
    out_types.push_back(t);
  }
  for (int pass = 0; pass < 2; ++pass)
    for (const Val& x : xs) block_types.push_back(TensorType{x.dtype(), {}});
  std::string block = Block(block_types, body);
  std::string lhs;
  std::vector<Val> results = NewResults(out_types, &lhs);
  std::string s = lhs + " = \"stablehlo.reduce_window\"(";
  std::string in_types;
  bool first = true;
  for (const auto* list : {&xs, &inits}) {
    for (const Val& v : *list) {
      s += (first ? "" : ", ") + Name(v);
      in_types += (first ? "" : ", ") + TypeString(v);
      first = false;
    }
  }
  std::string pad = "dense<[";
  for (size_t i = 0; i < padding.size(); ++i) {
    pad += (i ? ", [" : "[") + std::to_string(padding[i].first) + ", " +
           std::to_string(padding[i].second) + "]";
  }
  pad += "]> : tensor<" + std::to_string(padding.size()) + "x2xi64>";
  s += ") ({\n" + block + "    }) {window_dimensions = " + ArrayAttr(window) +
       ", window_strides = " + ArrayAttr(strides) + ", base_dilations = " + ArrayAttr(base_dilation) +
       ", window_dilations = " + ArrayAttr(window_dilation) + ", padding = " + pad + "} : (" +
       in_types + ") -> (";
  for (size_t i = 0; i < out_types.size(); ++i) s += (i ? ", " : "") + TypeString(out_types[i]);
  s += ")";
  Line(s);
  return results;
}

namespace {
std::string PrecisionConfig(std::string_view p) {
  if (p.empty()) return "";
  std::string one = "#stablehlo<precision " + std::string(p) + ">";
  return ", precision_config = [" + one + ", " + one + "]";
}
// The multiply-adds per output element of a convolution: the kernel's elements over its output
// features (the "o" of the kernel's part of `layout`, "[b, f, 0, 1]x[o, i, 0, 1]->...").
int64_t ConvolutionTaps(const Val& rhs, const std::string& layout) {
  size_t start = layout.find("x[");
  int64_t o_dim = 0;
  for (size_t i = start + 2, dim = 0; start != std::string::npos && i < layout.size() && layout[i] != ']'; ++i) {
    if (layout[i] == ',') ++dim;
    if (layout[i] == 'o') o_dim = static_cast<int64_t>(dim);
  }
  int64_t features = o_dim < rhs.rank() ? std::max<int64_t>(rhs.dims()[o_dim], 1) : 1;
  return std::max<int64_t>(NumElements(rhs.dims()) / features, 1);
}
}  // namespace

Val Emitter::Convolution(const Val& lhs, const Val& rhs, const ConvDims& d, const TensorType& out) {
  Val v = NewValue(out);
  work_ += NumElements(out.dims) * (ConvolutionTaps(rhs, d.layout) - 1);
  std::string pad = "[";
  for (size_t i = 0; i < d.padding.size(); ++i) {
    pad += (i ? ", [" : "[") + std::to_string(d.padding[i].first) + ", " +
           std::to_string(d.padding[i].second) + "]";
  }
  pad += "]";
  Line(Name(v) + " = stablehlo.convolution(" + Name(lhs) + ", " + Name(rhs) + ") dim_numbers = " +
       d.layout + ", window = {stride = " + DimsString(d.stride) + ", pad = " + pad +
       ", lhs_dilate = " + DimsString(d.lhs_dilation) + ", rhs_dilate = " +
       DimsString(d.rhs_dilation) + "} {batch_group_count = " + std::to_string(d.batch_group_count) +
       " : i64, feature_group_count = " + std::to_string(d.feature_group_count) + " : i64" +
       PrecisionConfig(PrecisionFor(lhs.dtype(), {})) + "} : (" + TypeString(lhs) + ", " +
       TypeString(rhs) + ") -> " + TypeString(out));
  return v;
}

Val Emitter::Gather(const Val& operand, const Val& indices, const GatherDims& d,
                    const TensorType& out) {
  Val v = NewValue(out);
  std::string dn = "#stablehlo.gather<offset_dims = " + DimsString(d.offset_dims) +
                   ", collapsed_slice_dims = " + DimsString(d.collapsed_slice_dims);
  if (!d.operand_batching_dims.empty()) {
    dn += ", operand_batching_dims = " + DimsString(d.operand_batching_dims) +
          ", start_indices_batching_dims = " + DimsString(d.start_indices_batching_dims);
  }
  dn += ", start_index_map = " + DimsString(d.start_index_map) +
        ", index_vector_dim = " + std::to_string(d.index_vector_dim) + ">";
  Line(Name(v) + " = \"stablehlo.gather\"(" + Name(operand) + ", " + Name(indices) +
       ") {dimension_numbers = " + dn + ", indices_are_sorted = false, slice_sizes = " +
       ArrayAttr(d.slice_sizes) + "} : (" + TypeString(operand) + ", " + TypeString(indices) +
       ") -> " + TypeString(out));
  return v;
}

Val Emitter::Scatter(const Val& operand, const Val& indices, const Val& updates,
                     const ScatterDims& d, std::string_view combine) {
  std::string combine_op(combine);
  std::string block = Block({TensorType{operand.dtype(), {}}, TensorType{operand.dtype(), {}}},
                            [&](Emitter& e, const std::vector<Val>& a) -> std::vector<Val> {
                              if (combine_op.empty()) return {a[1]};
                              return {e.Binary(combine_op, a[0], a[1])};
                            });
  Val v = NewValue(operand.type);
  std::string dn = "#stablehlo.scatter<update_window_dims = " + DimsString(d.update_window_dims) +
                   ", inserted_window_dims = " + DimsString(d.inserted_window_dims);
  if (!d.input_batching_dims.empty()) {
    dn += ", input_batching_dims = " + DimsString(d.input_batching_dims) +
          ", scatter_indices_batching_dims = " + DimsString(d.scatter_indices_batching_dims);
  }
  dn += ", scatter_dims_to_operand_dims = " + DimsString(d.scatter_dims_to_operand_dims) +
        ", index_vector_dim = " + std::to_string(d.index_vector_dim) + ">";
  Line(Name(v) + " = \"stablehlo.scatter\"(" + Name(operand) + ", " + Name(indices) + ", " +
       Name(updates) + ") ({\n" + block + "    }) {indices_are_sorted = false, scatter_dimension_numbers = " +
       dn + ", unique_indices = false} : (" + TypeString(operand) + ", " + TypeString(indices) +
       ", " + TypeString(updates) + ") -> " + TypeString(operand));
  return v;
}

std::vector<Val> Emitter::Sort(const std::vector<Val>& xs, int64_t dim, bool stable,
                               const RegionBody& body) {
  std::vector<TensorType> block_types, out_types;
  for (const Val& x : xs) {
    block_types.push_back(TensorType{x.dtype(), {}});
    block_types.push_back(TensorType{x.dtype(), {}});
    out_types.push_back(x.type);
  }
  std::string block = Block(block_types, body);
  std::string lhs;
  std::vector<Val> results = NewResults(out_types, &lhs);
  std::string s = lhs + " = \"stablehlo.sort\"(";
  std::string types;
  for (size_t i = 0; i < xs.size(); ++i) {
    s += (i ? ", " : "") + Name(xs[i]);
    types += (i ? ", " : "") + TypeString(xs[i]);
  }
  s += ") ({\n" + block + "    }) {dimension = " + std::to_string(dim) +
       " : i64, is_stable = " + (stable ? "true" : "false") + "} : (" + types + ") -> (" + types + ")";
  Line(s);
  return results;
}

std::vector<Val> Emitter::While(const std::vector<Val>& init, const RegionBody& cond,
                                const RegionBody& body) {
  std::vector<TensorType> types;
  for (const Val& v : init) types.push_back(v.type);
  std::string cond_block = Block(types, cond);
  std::string body_block = Block(types, body);
  std::string lhs;
  std::vector<Val> results = NewResults(types, &lhs);
  std::string names, type_list;
  for (size_t i = 0; i < init.size(); ++i) {
    names += (i ? ", " : "") + Name(init[i]);
    type_list += (i ? ", " : "") + TypeString(init[i]);
  }
  Line(lhs + " = \"stablehlo.while\"(" + names + ") ({\n" + cond_block + "    }, {\n" + body_block +
       "    }) : (" + type_list + ") -> (" + type_list + ")");
  return results;
}

std::vector<Val> Emitter::If(const Val& pred, const RegionBody& on_true, const RegionBody& on_false) {
  std::vector<TensorType> types;
  std::string true_block = Block({}, [&](Emitter& e, const std::vector<Val>&) {
    std::vector<Val> results = on_true(e, {});
    for (const Val& v : results) types.push_back(v.type);
    return results;
  });
  std::string false_block = Block({}, on_false);
  std::string lhs;
  std::vector<Val> results = NewResults(types, &lhs);
  std::string type_list;
  for (size_t i = 0; i < types.size(); ++i) type_list += (i ? ", " : "") + TypeString(results[i]);
  Line(lhs + " = \"stablehlo.if\"(" + Name(pred) + ") ({\n" + true_block + "    }, {\n" + false_block +
       "    }) : (" + TypeString(pred) + ") -> (" + type_list + ")");
  return results;
}

std::vector<Val> Emitter::EmitCustomCall(const std::string& target, const std::vector<Val>& operands,
                                         const std::vector<TensorType>& results, const std::string& attributes) {
  std::string lhs;
  std::vector<Val> out = NewResults(results, &lhs);
  std::string s = lhs + " = stablehlo.custom_call @" + target + "(";
  for (size_t i = 0; i < operands.size(); ++i) s += (i ? ", " : "") + Name(operands[i]);
  s += ") {" + attributes + "} : (";
  for (size_t i = 0; i < operands.size(); ++i) s += (i ? ", " : "") + TypeString(operands[i]);
  s += ") -> ";
  if (results.size() != 1) s += "(";
  for (size_t i = 0; i < results.size(); ++i) s += (i ? ", " : "") + TypeString(results[i]);
  if (results.size() != 1) s += ")";
  Line(s);
  return out;
}

std::vector<Val> Emitter::CustomCall(const std::string& target, const std::vector<Val>& operands,
                                     const std::vector<TensorType>& results,
                                     const std::string& backend_config) {
  return EmitCustomCall(target, operands, results, "backend_config = \"" + backend_config + "\"");
}

std::vector<Val> Emitter::FfiCall(const std::string& target, const std::vector<Val>& operands,
                                  const std::vector<TensorType>& results, const std::string& attrs) {
  return EmitCustomCall(target, operands, results, "api_version = 4 : i32, backend_config = {" + attrs + "}");
}

namespace {
// `[dense<[1, 3, 2, 0]> : tensor<4xindex>, ...]`: a custom call's layouts attribute.
std::string LayoutsAttr(const std::vector<Dims>& layouts) {
  std::string s = "[";
  for (size_t i = 0; i < layouts.size(); ++i) {
    std::string dims;
    for (size_t k = 0; k < layouts[i].size(); ++k) dims += (k ? ", " : "") + std::to_string(layouts[i][k]);
    s += (i ? ", " : "") + std::string("dense<[") + dims + "]> : tensor<" + std::to_string(layouts[i].size()) + "xindex>";
  }
  return s + "]";
}
}  // namespace

std::vector<Val> Emitter::FfiCall(const std::string& target, const std::vector<Val>& operands,
                                  const std::vector<TensorType>& results, const std::string& attrs,
                                  const std::vector<Dims>& operand_layouts, const std::vector<Dims>& result_layouts) {
  return EmitCustomCall(target, operands, results,
                        "api_version = 4 : i32, backend_config = {" + attrs + "}, operand_layouts = " +
                            LayoutsAttr(operand_layouts) + ", result_layouts = " + LayoutsAttr(result_layouts));
}

std::pair<Val, Val> Emitter::RngBitGenerator(const Val& state, const TensorType& type) {
  std::string lhs;
  std::vector<Val> r = NewResults({state.type, type}, &lhs);
  Line(lhs + " = stablehlo.rng_bit_generator " + Name(state) + ", algorithm = THREE_FRY : (" +
       TypeString(state) + ") -> (" + TypeString(state) + ", " + TypeString(type) + ")");
  return {r[0], r[1]};
}

}  // namespace torch_pjrt::lowering
