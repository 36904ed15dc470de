#include "lowering/helpers.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace torch_pjrt::lowering {

namespace {

int Rank(ElementType t) {  // position within its category, for widening
  switch (t) {
    case ElementType::kS8: case ElementType::kU8: return 1;
    case ElementType::kS16: case ElementType::kU16: return 2;
    case ElementType::kS32: case ElementType::kU32: return 3;
    case ElementType::kS64: case ElementType::kU64: return 4;
    case ElementType::kF8E5M2: case ElementType::kF8E4M3FN: return 0;
    case ElementType::kF16: case ElementType::kBF16: return 1;
    case ElementType::kF32: case ElementType::kC64: return 2;
    case ElementType::kF64: case ElementType::kC128: return 3;
    default: return 0;
  }
}

ElementType SignedOfSize(int rank) {
  switch (rank) {
    case 1: return ElementType::kS8;
    case 2: return ElementType::kS16;
    case 3: return ElementType::kS32;
    default: return ElementType::kS64;
  }
}

ElementType ToComplex(ElementType t) {
  if (IsComplex(t)) return t;
  return t == ElementType::kF64 ? ElementType::kC128 : ElementType::kC64;
}

enum class Category { kBool = 0, kIntegral = 1, kFloating = 2, kComplex = 3 };
Category CategoryOf(ElementType t) {
  if (t == ElementType::kBool) return Category::kBool;
  if (IsComplex(t)) return Category::kComplex;
  if (IsFloating(t)) return Category::kFloating;
  return Category::kIntegral;
}

ElementType PromoteSkipInvalid(ElementType a, ElementType b) {
  if (a == ElementType::kInvalid) return b;
  if (b == ElementType::kInvalid) return a;
  return PromoteTypes(a, b);
}

// torch's combine_categories(higher, lower).
ElementType CombineCategories(ElementType higher, ElementType lower) {
  if (higher == ElementType::kInvalid) return lower;
  if (lower == ElementType::kInvalid) return higher;
  if (IsComplex(higher)) return higher;
  if (IsComplex(lower)) {
    if (IsFloating(higher)) return ToComplex(higher);
    return lower;
  }
  if (IsFloating(higher)) return higher;
  if (higher == ElementType::kBool || IsFloating(lower)) return PromoteSkipInvalid(higher, lower);
  return higher;
}

}  // namespace

ElementType PromoteTypes(ElementType a, ElementType b) {
  if (a == b) return a;
  if (a == ElementType::kBool) return b;
  if (b == ElementType::kBool) return a;
  Category ca = CategoryOf(a), cb = CategoryOf(b);
  if (ca == Category::kComplex || cb == Category::kComplex) {
    int r = std::max(IsComplex(a) || IsFloating(a) ? Rank(a) : 0, IsComplex(b) || IsFloating(b) ? Rank(b) : 0);
    return r >= 3 ? ElementType::kC128 : ElementType::kC64;
  }
  if (ca == Category::kFloating && cb == Category::kFloating) {
    if (Rank(a) == Rank(b)) return ElementType::kF32;  // float16 with bfloat16, or two float8s
    return Rank(a) > Rank(b) ? a : b;
  }
  if (ca == Category::kFloating) return a;
  if (cb == Category::kFloating) return b;
  // Both integral.
  bool ua = IsUnsigned(a), ub = IsUnsigned(b);
  if (ua == ub) return Rank(a) >= Rank(b) ? a : b;
  ElementType u = ua ? a : b, s = ua ? b : a;
  if (Rank(s) > Rank(u)) return s;
  return SignedOfSize(std::min(Rank(u) + 1, 4));
}

ElementType Opmath(ElementType t) {
  if (t == ElementType::kF16 || t == ElementType::kBF16 || t == ElementType::kF8E5M2 ||
      t == ElementType::kF8E4M3FN) {
    return ElementType::kF32;
  }
  return t;
}

ElementType ResultType(const LowerCtx& c, std::initializer_list<size_t> arg_indices) {
  ElementType dim_result = ElementType::kInvalid, zero_result = ElementType::kInvalid,
              wrapped_result = ElementType::kInvalid;
  for (size_t i : arg_indices) {
    if (c.is_none(i)) continue;
    const Arg& a = c.arg(i);
    if (a.kind == ArgKind::kTensor) {
      Val v = c.tensor(i);
      ElementType t = v.dtype();
      if (c.is_wrapped_number(i)) {
        // Python numbers promote as the default type of their category.
        if (IsFloating(t)) t = ElementType::kF32;
        else if (IsComplex(t)) t = ElementType::kC64;
        wrapped_result = PromoteSkipInvalid(wrapped_result, t);
      } else if (v.rank() == 0) {
        zero_result = PromoteSkipInvalid(zero_result, t);
      } else {
        dim_result = PromoteSkipInvalid(dim_result, t);
      }
    } else if (a.kind == ArgKind::kDouble) {
      wrapped_result = PromoteSkipInvalid(wrapped_result, ElementType::kF32);
    } else if (a.kind == ArgKind::kInt) {
      wrapped_result = PromoteSkipInvalid(wrapped_result, ElementType::kS64);
    } else if (a.kind == ArgKind::kBool) {
      wrapped_result = PromoteSkipInvalid(wrapped_result, ElementType::kBool);
    }
  }
  return CombineCategories(dim_result, CombineCategories(zero_result, wrapped_result));
}

int64_t NormDim(int64_t dim, int64_t rank) {
  int64_t r = std::max<int64_t>(rank, 1);
  if (dim < -r || dim >= r) {
    throw std::invalid_argument("Dimension out of range (expected to be in range of [" +
                                std::to_string(-r) + ", " + std::to_string(r - 1) + "], but got " +
                                std::to_string(dim) + ")");
  }
  return dim < 0 ? dim + r : dim;
}

Dims NormDims(const Dims& dims, int64_t rank, bool empty_means_all) {
  Dims out;
  if (dims.empty() && empty_means_all) {
    for (int64_t i = 0; i < rank; ++i) out.push_back(i);
    return out;
  }
  for (int64_t d : dims) {
    int64_t n = NormDim(d, rank);
    if (rank == 0) continue;  // reducing a scalar over dim 0 is the identity
    if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
  }
  std::sort(out.begin(), out.end());
  return out;
}

Val Coerce(Emitter& e, const Val& v, const Dims& dims, ElementType t) {
  Val converted = e.Convert(v, t);
  if (v.dtype() == ElementType::kBool && (IsFloating(t) || IsComplex(t))) {
    // XLA rewrites convert(pred) * x into select(pred, x, 0) (and similarly for divide), which is
    // 0 where torch computes False * inf = NaN. The barrier hides the convert from that rewrite.
    converted = e.OptimizationBarrier(converted);
  }
  return e.BroadcastTo(converted, dims);
}

Val KeepDims(Emitter& e, const Val& reduced, const Dims& input_dims, const Dims& reduced_dims) {
  Dims kept = input_dims;
  for (int64_t d : reduced_dims) kept[d] = 1;
  return e.Reshape(reduced, kept);
}

double LowestValue(ElementType t) {
  switch (t) {
    case ElementType::kBool: return 0;
    case ElementType::kS8: return -128;
    case ElementType::kS16: return -32768;
    case ElementType::kS32: return -2147483648.0;
    case ElementType::kS64: return static_cast<double>(std::numeric_limits<int64_t>::min());
    default:
      if (IsUnsigned(t)) return 0;
      return -std::numeric_limits<double>::infinity();
  }
}

double HighestValue(ElementType t) {
  switch (t) {
    case ElementType::kBool: return 1;
    case ElementType::kS8: return 127;
    case ElementType::kS16: return 32767;
    case ElementType::kS32: return 2147483647.0;
    case ElementType::kS64: return 9223372036854775807.0;
    case ElementType::kU8: return 255;
    case ElementType::kU16: return 65535;
    case ElementType::kU32: return 4294967295.0;
    case ElementType::kU64: return 18446744073709551615.0;
    default: return std::numeric_limits<double>::infinity();
  }
}

Val IsFinite(Emitter& e, const Val& v) { return e.Compare("LT", e.Unary("abs", v), e.Full(INFINITY, v.type)); }

Val ScaledMean(Emitter& e, const Val& x, const Dims& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= x.dims()[d];
  Val scaled = e.Binary("multiply", x, e.Full(1.0 / static_cast<double>(std::max<int64_t>(n, 1)), x.type));
  if (n == 0) scaled = e.Binary("divide", x, e.Full(0, x.type));  // an empty mean is NaN (0/0)
  Val s = e.Reduce(scaled, e.Scalar(0, x.dtype()), dims, "add");
  return n == 0 ? e.Binary("divide", s, e.Full(0, s.type)) : s;
}

Val TakeRows(Emitter& e, const Val& table, const Val& index) {
  int64_t n = index.numel(), d = table.dims()[1];
  Emitter::GatherDims g;
  g.offset_dims = {1};
  g.collapsed_slice_dims = {0};
  g.start_index_map = {0};
  g.index_vector_dim = 1;
  g.slice_sizes = {1, d};
  return e.Gather(table, e.Reshape(index, {n, 1}), g, TensorType{table.dtype(), {n, d}});
}

Val SumDims(Emitter& e, const Val& x, const Dims& dims, ElementType acc) {
  Val xc = e.Convert(x, acc);
  return e.Reduce(xc, e.Scalar(0, acc), dims, "add");
}

Val InResultDtype(Emitter& e, const Val& x, ElementType result) { return e.Convert(x, result); }

Val PNorm(Emitter& e, const Val& a, double ord, const Dims& dims) {
  ElementType t = a.dtype();
  if (std::isinf(ord)) {
    return e.Reduce(a, e.Scalar(ord > 0 ? -INFINITY : INFINITY, t), dims, ord > 0 ? "maximum" : "minimum");
  }
  if (ord == 0) return SumDims(e, e.Convert(e.Compare("NE", a, e.Full(0, a.type)), t), dims, t);
  if (ord == 1) return SumDims(e, a, dims, t);
  if (ord == 2) return e.Unary("sqrt", SumDims(e, e.Binary("multiply", a, a), dims, t));
  Val s = SumDims(e, e.Binary("power", a, e.Full(ord, a.type)), dims, t);
  return e.Binary("power", s, e.Full(1.0 / ord, s.type));
}

Val WrapNegative(Emitter& e, const Val& index, int64_t size) {
  Val i = e.Convert(index, ElementType::kS64);
  Val negative = e.Compare("LT", i, e.Full(0, i.type));
  return e.Select(negative, e.Binary("add", i, e.Full(static_cast<double>(size), i.type)), i);
}

Val DimIndices(Emitter& e, const Val& index, int64_t dim, int64_t rank, int64_t size) {
  Dims with_vec = index.dims();
  with_vec.push_back(1);
  std::vector<Val> parts;
  for (int64_t d = 0; d < rank; ++d) {
    Val comp = d == dim ? WrapNegative(e, index, size) : e.Iota(TensorType{ElementType::kS64, index.dims()}, d);
    parts.push_back(e.Reshape(comp, with_vec));
  }
  return e.Concatenate(parts, index.rank());
}

Val GatherAlong(Emitter& e, const Val& x, const Val& index, int64_t dim) {
  if (index.numel() == 0) return e.Full(0, TensorType{x.dtype(), index.dims()});
  Emitter::GatherDims g;
  for (int64_t i = 0; i < x.rank(); ++i) {
    g.collapsed_slice_dims.push_back(i);
    g.start_index_map.push_back(i);
  }
  g.index_vector_dim = index.rank();
  g.slice_sizes = Dims(x.rank(), 1);
  Val coords = DimIndices(e, index, dim, x.rank(), x.dims()[dim]);
  return e.Gather(x, coords, g, TensorType{x.dtype(), index.dims()});
}

Val Row(Emitter& e, const Val& x, const Val& t) {
  Val zero = e.Scalar(0, ElementType::kS64);
  return e.Reshape(e.DynamicSlice(x, {t, zero, zero}, {1, x.dims()[1], x.dims()[2]}), {x.dims()[1], x.dims()[2]});
}

Val WithRow(Emitter& e, const Val& x, const Val& row, const Val& t) {
  Val zero = e.Scalar(0, ElementType::kS64);
  return e.DynamicUpdateSlice(x, e.Reshape(row, {1, x.dims()[1], x.dims()[2]}), {t, zero, zero});
}

Val ThroughCommonDtype(LowerCtx& c, size_t i, ElementType t, ScalarRead scalars,
                       std::initializer_list<size_t> operands) {
  ElementType common = ResultType(c, operands);
  if (c.is_tensor(i) && c.tensor(i).rank() > 0) {
    ElementType dtype = c.tensor(i).dtype();
    if (common != t && dtype != common && dtype != ElementType::kBool) {
      return Coerce(c.e, c.e.Convert(c.tensor(i), common), c.out().dims, t);
    }
  } else if (scalars == ScalarRead::kInCommonDtype && IsFloating(common) && Opmath(common) != common) {
    return Coerce(c.e, c.scalar(i, common), c.out().dims, t);
  }
  return Coerce(c.e, c.scalar(i, t), c.out().dims, t);
}

Val RoundedTo(Emitter& e, const Val& v, ElementType t) {
  if (!IsFloating(t) || Opmath(t) == t || v.dtype() == t) return v;
  return e.Convert(e.Convert(v, t), v.dtype());
}

// x with denormals replaced by zeros of the same sign. XLA:CPU runs with denormals-are-zero, but
// some of its expansions (pow's log, atan2) read the bits of a denormal and return values that
// match neither the denormal nor zero (atan2(1e-40, 1e-40) was NaN); this makes them see the zero
// the arithmetic sees. Done on the bits: XLA folds select(x == 0, x * 0, x) back to x.
Val FlushDenormals(Emitter& e, const Val& x) {
  bool f64 = x.dtype() == ElementType::kF64;
  if (x.dtype() != ElementType::kF32 && !f64) return x;
  TensorType bits_type{f64 ? ElementType::kU64 : ElementType::kU32, x.dims()};
  Val bits = e.BitcastConvert(x, bits_type);
  Val exponent = e.Binary("and", bits, e.Full(f64 ? 9218868437227405312.0 : 2139095040.0, bits_type));
  Val sign = e.Binary("and", bits, e.Full(f64 ? 9223372036854775808.0 : 2147483648.0, bits_type));
  Val denormal = e.Compare("EQ", exponent, e.Full(0, bits_type));
  return e.BitcastConvert(e.Select(denormal, sign, bits), x.type);
}

// Floor of the exact quotient, from fmod, rather than floor(a / b) (which rounds first: 1 // 0.001f
// is 999, not 1000), with inf // x = NaN like fmod(inf, x), and a signed zero (or a / b for b == 0)
// where the quotient is zero.
Val FloorDivFloat(Emitter& e, const Val& a, const Val& b, ElementType steps) {
  auto step = [&](const char* op, const Val& x, const Val& y) { return RoundedTo(e, e.Binary(op, x, y), steps); };
  Val zero = e.Full(0, a.type), one = e.Full(1, a.type), inf = e.Full(INFINITY, a.type);
  Val quotient = e.Binary("divide", a, b);
  Val mod = e.Binary("remainder", a, b);  // exact
  // a - mod is a multiple of b; where a / b overflows, fmod may be inexact: use a itself.
  Val overflow = e.Binary("and", e.Compare("EQ", e.Unary("abs", quotient), inf),
                          e.Compare("NE", e.Unary("abs", a), inf));
  Val div = step("divide", e.Select(overflow, a, step("subtract", a, mod)), b);
  Val fix = e.Binary("and", e.Compare("NE", mod, zero),
                     e.Binary("xor", e.Compare("LT", b, zero), e.Compare("LT", mod, zero)));
  div = e.Select(fix, step("subtract", div, one), div);
  Val floordiv = e.Unary("floor", div);
  Val round_up = e.Compare("GT", step("subtract", div, floordiv), e.Full(0.5, a.type));
  floordiv = e.Select(round_up, step("add", floordiv, one), floordiv);
  // copysign(0, a / b): 0 * quotient keeps the sign for finite quotients; an infinite quotient
  // with a zero div cannot occur (div is then inf too).
  floordiv = e.Select(e.Compare("EQ", div, zero), e.Binary("multiply", zero, quotient), floordiv);
  return e.Select(e.Compare("EQ", b, zero), quotient, floordiv);
}

ElementType DivisionSteps(const LowerCtx& c, size_t divisor) {
  bool single = !c.is_tensor(divisor) || c.tensor(divisor).numel() == 1;
  return single ? Opmath(c.out().dtype) : c.out().dtype;
}

double RoundedTo(double v, ElementType t) {
  if (t != ElementType::kF16 && t != ElementType::kBF16) return v;
  float f = static_cast<float>(v);
  if (!std::isfinite(f) || f == 0) return f;
  bool f16 = t == ElementType::kF16;
  int precision = f16 ? 11 : 8;     // significand bits
  int min_exponent = f16 ? -24 : -133;  // the smallest denormal is 2^min_exponent
  double max = f16 ? 65504.0 : 3.3895313892515355e38;
  int exponent;
  std::frexp(f, &exponent);  // f = m * 2^exponent, 0.5 <= |m| < 1
  double quantum = std::ldexp(1.0, std::max(exponent - precision, min_exponent));
  double r = std::nearbyint(f / quantum) * quantum;
  return std::abs(r) > max ? std::copysign(INFINITY, r) : r;
}

Val ReduceMax(Emitter& e, const Val& x, const Dims& dims, bool max) {
  if (x.dtype() == ElementType::kBool) {
    return e.Reduce(x, e.Scalar(max ? 0 : 1, x.dtype()), dims, max ? "or" : "and");
  }
  Val init = e.Scalar(max ? LowestValue(x.dtype()) : HighestValue(x.dtype()), x.dtype());
  return e.Reduce(x, init, dims, max ? "maximum" : "minimum");
}

// Two plain reductions, which XLA:CPU vectorizes (Emitter::Reduce): the extreme value (NaN where
// the slice has one), then the smallest index holding it or a NaN. A variadic (value, index)
// reduction ran as one scalar loop: argmax over [512, 1000] floats took 7.8-8.0 ms, 0.52 this way.
Val FirstExtremeIndex(Emitter& e, const Val& x, int64_t dim, bool max) {
  Val extreme = KeepDims(e, ReduceMax(e, x, {dim}, max), x.dims(), {dim});
  Val hit = e.Compare("EQ", x, e.BroadcastTo(extreme, x.dims()));
  if (IsFloating(x.dtype())) hit = e.Binary("or", hit, e.Compare("NE", x, x));
  int64_t n = x.dims()[dim];
  TensorType positions{n < (int64_t{1} << 31) ? ElementType::kS32 : ElementType::kS64, x.dims()};
  Val candidates = e.Select(hit, e.Iota(positions, dim), e.Full(static_cast<double>(n), positions));
  Val first = e.Reduce(candidates, e.Scalar(static_cast<double>(n), positions.dtype), {dim}, "minimum");
  return e.Convert(first, ElementType::kS64);
}

}  // namespace torch_pjrt::lowering
