// Random ops (design decision 8). Each op's draw comes from StableHLO's THREE_FRY
// rng_bit_generator keyed by the pjrt Generator's (seed, offset), which the ATen layer passes as
// value scalars (LowerCtx::rng_state) and advances at trace time: the graph never depends on
// their values, so reseeding or a new step never recompiles, and the same seed gives the same
// numbers. Distributions are built from uniform bits like torch's CPU kernels do (the same
// distributions, not the same bits).
#include <cmath>

#include "lowering/helpers.h"

namespace torch_pjrt::lowering {

namespace {

constexpr double kPi = 3.14159265358979323846;

bool WideBits(ElementType t) { return ItemSize(t) == 8; }

// Uniform random bits (u32, or u64 when `wide`) of `dims` for this op's draw.
Val RandomBits(LowerCtx& c, const Dims& dims, bool wide) {
  Emitter& e = c.e;
  auto [seed, offset] = c.rng_state();
  Val state = e.Concatenate({e.Reshape(e.Convert(seed, ElementType::kU64), {1}),
                             e.Reshape(e.Convert(offset, ElementType::kU64), {1})}, 0);
  return e.RngBitGenerator(state, TensorType{wide ? ElementType::kU64 : ElementType::kU32, dims}).second;
}

// Significant bits of a float type's values in [0, 1) that are exactly representable.
int UnitBits(ElementType t) {
  switch (t) {
    case ElementType::kF64: return 53;
    case ElementType::kF16: return 11;
    case ElementType::kBF16: return 8;
    default: return 24;
  }
}

// Uniform values in [0, 1) on the grid of `t` (so that converting to `t` never rounds up to 1),
// computed in `t`'s opmath type.
Val UniformUnit(LowerCtx& c, const Dims& dims, ElementType t) {
  Emitter& e = c.e;
  bool wide = t == ElementType::kF64;
  Val bits = RandomBits(c, dims, wide);
  int keep = UnitBits(t), total = wide ? 64 : 32;
  Val top = e.Binary("shift_right_logical", bits, e.Full(total - keep, bits.type));
  ElementType compute = wide ? ElementType::kF64 : ElementType::kF32;
  return e.Binary("multiply", e.Convert(top, compute), e.Full(std::ldexp(1.0, -keep), TensorType{compute, dims}));
}

// Standard normal values (Box-Muller over two uniform draws), in `t`'s opmath type.
Val StandardNormal(LowerCtx& c, const Dims& dims, ElementType t) {
  Emitter& e = c.e;
  Dims two = dims;
  two.insert_at(0, 2);
  Val u = UniformUnit(c, two, t);
  Val u1 = e.Reshape(e.SliceDim(u, 0, 0, 1), dims), u2 = e.Reshape(e.SliceDim(u, 0, 1, 2), dims);
  Val one = e.Full(1, u1.type);
  Val radius = e.Unary("sqrt", e.Binary("multiply", e.Full(-2, u1.type), e.Unary("log", e.Binary("subtract", one, u1))));
  return e.Binary("multiply", radius, e.Unary("cosine", e.Binary("multiply", e.Full(2 * kPi, u2.type), u2)));
}

Val Affine(Emitter& e, const Val& x, double scale, double shift) {
  return e.Binary("add", e.Binary("multiply", x, e.Full(scale, x.type)), e.Full(shift, x.type));
}

// uniform(self, from=0, to=1, *, generator)
std::vector<Val> LowerUniform(LowerCtx& c) {
  const TensorType& out = c.out();
  double from = c.double_arg(1), to = c.double_arg(2);
  Val u = UniformUnit(c, out.dims, out.dtype);
  return {c.e.Convert(Affine(c.e, u, to - from, from), out.dtype)};
}

// normal_functional(self, mean=0, std=1, *, generator)
std::vector<Val> LowerNormal(LowerCtx& c) {
  const TensorType& out = c.out();
  Val z = StandardNormal(c, out.dims, out.dtype);
  return {c.e.Convert(Affine(c.e, z, c.double_arg(2), c.double_arg(1)), out.dtype)};
}

// normal.Tensor_float / float_Tensor / Tensor_Tensor (mean, std, *, generator): arguments 0 and
// 1 are tensors or floats, broadcast to the output.
std::vector<Val> LowerNormalTensors(LowerCtx& c) {
  const TensorType& out = c.out();
  Val z = StandardNormal(c, out.dims, out.dtype);
  auto operand = [&](size_t i) {
    if (c.is_tensor(i)) return Coerce(c.e, c.tensor(i), out.dims, z.dtype());
    return c.e.Full(c.double_arg(i), z.type);
  };
  Val r = c.e.Binary("add", operand(0), c.e.Binary("multiply", operand(1), z));
  return {c.e.Convert(r, out.dtype)};
}

// log_normal(self, mean=1, std=2, *, generator): exp of a normal.
std::vector<Val> LowerLogNormal(LowerCtx& c) {
  const TensorType& out = c.out();
  Val z = StandardNormal(c, out.dims, out.dtype);
  return {c.e.Convert(c.e.Unary("exponential", Affine(c.e, z, c.double_arg(2), c.double_arg(1))), out.dtype)};
}

// exponential(self, lambd=1, *, generator): -log(1 - u) / lambd.
std::vector<Val> LowerExponential(LowerCtx& c) {
  const TensorType& out = c.out();
  Val u = UniformUnit(c, out.dims, out.dtype);
  Val r = c.e.Binary("divide", c.e.Unary("negate", c.e.Unary("log_plus_one", c.e.Unary("negate", u))),
                     c.e.Full(c.double_arg(1), u.type));
  return {c.e.Convert(r, out.dtype)};
}

// geometric(self, p, *, generator): the number of trials to the first success,
// ceil(log(1 - u) / log(1 - p)), at least 1.
std::vector<Val> LowerGeometric(LowerCtx& c) {
  const TensorType& out = c.out();
  Val u = UniformUnit(c, out.dims, out.dtype);
  Val k = c.e.Unary("ceil", c.e.Binary("divide", c.e.Unary("log_plus_one", c.e.Unary("negate", u)),
                                       c.e.Full(std::log1p(-c.double_arg(1)), u.type)));
  return {c.e.Convert(c.e.Binary("maximum", k, c.e.Full(1, k.type)), out.dtype)};
}

// cauchy(self, median=0, sigma=1, *, generator): median + sigma * tan(pi * (u - 1/2)).
std::vector<Val> LowerCauchy(LowerCtx& c) {
  const TensorType& out = c.out();
  Val u = UniformUnit(c, out.dims, out.dtype);
  Val t = c.e.Unary("tan", c.e.Binary("multiply", c.e.Binary("subtract", u, c.e.Full(0.5, u.type)), c.e.Full(kPi, u.type)));
  return {c.e.Convert(Affine(c.e, t, c.double_arg(2), c.double_arg(1)), out.dtype)};
}

// bernoulli.p(self, p, *, generator) / bernoulli.Tensor(self, p, *, generator) /
// bernoulli(self, *, generator) (self holds the probabilities): 1 where u < p.
std::vector<Val> LowerBernoulli(LowerCtx& c) {
  const TensorType& out = c.out();
  ElementType prob_type = IsFloating(out.dtype) ? out.dtype : ElementType::kF32;
  Val u = UniformUnit(c, out.dims, prob_type);
  Val p;
  if (c.num_args() > 2 && c.is_tensor(1)) {
    p = Coerce(c.e, c.tensor(1), out.dims, u.dtype());
  } else if (c.num_args() > 2 && !c.is_none(1)) {
    p = c.e.Full(c.double_arg(1), u.type);
  } else {
    p = Coerce(c.e, c.tensor(0), out.dims, u.dtype());
  }
  return {c.e.Convert(c.e.Compare("LT", u, p), out.dtype)};
}

// Integers uniform in [lo, lo + range) as `t` (range > 0, up to 2^64).
Val UniformIntegers(LowerCtx& c, const Dims& dims, ElementType t, int64_t lo, unsigned long long range) {
  Emitter& e = c.e;
  Val bits = RandomBits(c, dims, /*wide=*/true);
  Val r = range == 0 ? bits : e.Binary("remainder", bits, e.Full(static_cast<double>(range), bits.type));
  // lo + r in two's complement: add in u64, reinterpret as s64.
  Val shifted = e.Binary("add", r, e.Full(static_cast<double>(static_cast<unsigned long long>(lo)), bits.type));
  Val s = e.BitcastConvert(shifted, TensorType{ElementType::kS64, dims});
  return e.Convert(s, t);
}

// The largest value random_() draws for `t` (torch: 2^mantissa digits for floats, max for ints).
unsigned long long RandomRange(ElementType t) {
  switch (t) {
    case ElementType::kBool: return 2;
    case ElementType::kF64: return (1ull << 53) + 1;
    case ElementType::kF32: return (1ull << 24) + 1;
    case ElementType::kF16: return (1ull << 11) + 1;
    case ElementType::kBF16: return (1ull << 8) + 1;
    default: {
      double hi = HighestValue(t);
      return hi >= 9.2e18 ? (1ull << 63) : static_cast<unsigned long long>(hi) + 1;
    }
  }
}

// random(self, *, generator): [0, 2^digits] for floats, [0, max] for integers.
std::vector<Val> LowerRandom(LowerCtx& c) {
  return {UniformIntegers(c, c.out().dims, c.out().dtype, 0, RandomRange(c.out().dtype))};
}

// random.from(self, from, to?, *, generator): [from, to), or [from, max] without `to`.
std::vector<Val> LowerRandomFrom(LowerCtx& c) {
  int64_t from = c.int_arg(1);
  unsigned long long range = c.is_none(2)
                                 ? RandomRange(c.out().dtype) - static_cast<unsigned long long>(std::max<int64_t>(from, 0))
                                 : static_cast<unsigned long long>(c.int_arg(2) - from);
  return {UniformIntegers(c, c.out().dims, c.out().dtype, from, range)};
}

// random.to(self, to, *, generator): [0, to).
std::vector<Val> LowerRandomTo(LowerCtx& c) {
  return {UniformIntegers(c, c.out().dims, c.out().dtype, 0, static_cast<unsigned long long>(c.int_arg(1)))};
}

// Inclusive prefix sum along the last dim.
Val PrefixSumLastDim(Emitter& e, const Val& x) {
  int64_t last = x.rank() - 1, n = x.dims()[last];
  Dims window(x.rank(), 1), ones(x.rank(), 1);
  window[last] = n;
  std::vector<std::pair<int64_t, int64_t>> pad(x.rank(), {0, 0});
  pad[last] = {n - 1, 0};
  auto add = [](Emitter& b, const std::vector<Val>& a) -> std::vector<Val> { return {b.Binary("add", a[0], a[1])}; };
  return e.ReduceWindow({x}, {e.Scalar(0, x.dtype())}, window, ones, ones, ones, pad, add)[0];
}

// Positions 0..n-1 of the last dim ordered by descending `keys` (ties by position).
Val ArgsortDescending(Emitter& e, const Val& keys) {
  int64_t last = keys.rank() - 1;
  Val positions = e.Iota(TensorType{ElementType::kS64, keys.dims()}, last);
  auto by_key = [](Emitter& b, const std::vector<Val>& a) -> std::vector<Val> { return {b.Compare("GT", a[0], a[1])}; };
  return e.Sort({keys, positions}, last, /*stable=*/true, by_key)[1];
}

// randperm.generator_out(n, *, generator, out): positions sorted by random keys.
std::vector<Val> LowerRandperm(LowerCtx& c) {
  int64_t n = c.out().dims[0];
  Val keys = RandomBits(c, {n}, /*wide=*/true);
  return {c.e.Convert(ArgsortDescending(c.e, keys), c.out().dtype)};
}

// multinomial(self, num_samples, replacement, *, generator) -> s64 [..., num_samples].
// With replacement: inverse CDF of each row. Without: the categories with the largest
// p / Exp(1) keys (the exponential trick torch's CPU kernel uses), a sample without replacement
// proportional to p.
std::vector<Val> LowerMultinomial(LowerCtx& c) {
  Emitter& e = c.e;
  Val probs = c.tensor(0);
  ElementType t = IsFloating(probs.dtype()) && probs.dtype() == ElementType::kF64 ? ElementType::kF64 : ElementType::kF32;
  Val p = e.Convert(probs, t);
  bool batched = p.rank() == 2;
  if (!batched) p = e.Reshape(p, {1, p.dims()[0]});
  int64_t rows = p.dims()[0], cats = p.dims()[1], samples = c.out().dims.back();
  Val result;
  if (c.bool_arg(2)) {
    Val total = e.Reduce(p, e.Scalar(0, t), {1}, "add");
    Val cdf = e.Binary("divide", PrefixSumLastDim(e, p), e.BroadcastInDim(total, p.dims(), {0}));
    Val u = UniformUnit(c, {rows, samples}, t);
    // The sample is the number of CDF entries <= u (categories with zero mass are never chosen).
    Val cmp = e.Compare("LE", e.BroadcastInDim(cdf, {rows, samples, cats}, {0, 2}),
                        e.BroadcastInDim(u, {rows, samples, cats}, {0, 1}));
    Val counts = e.Reduce(e.Convert(cmp, ElementType::kS64), e.Scalar(0, ElementType::kS64), {2}, "add");
    result = e.Binary("minimum", counts, e.Full(static_cast<double>(cats - 1), counts.type));
  } else {
    Val u = UniformUnit(c, {rows, cats}, t);
    Val exp1 = e.Unary("negate", e.Unary("log_plus_one", e.Unary("negate", u)));
    Val keys = e.Binary("divide", p, exp1);
    // Zero-probability categories come last.
    keys = e.Select(e.Compare("GT", p, e.Full(0, p.type)), keys, e.Full(-1, keys.type));
    result = e.SliceDim(ArgsortDescending(e, keys), 1, 0, samples);
  }
  return {e.Reshape(result, c.out().dims)};
}

// native_dropout(input, p, train?) -> (output, mask): each element kept with probability 1 - p
// and scaled by 1 / (1 - p).
std::vector<Val> LowerNativeDropout(LowerCtx& c) {
  Emitter& e = c.e;
  Val x = c.tensor(0);
  double p = c.double_arg(1);
  bool train = c.is_none(2) || c.bool_arg(2);
  if (!train) return {x, e.Full(1, c.out(1))};
  ElementType t = Opmath(x.dtype());
  Val u = UniformUnit(c, x.dims(), IsFloating(x.dtype()) ? x.dtype() : ElementType::kF32);
  Val keep = e.Compare("LT", u, e.Full(1 - p, u.type));
  double scale = p >= 1 ? 0.0 : 1.0 / (1.0 - p);
  Val out = e.Select(keep, e.Binary("multiply", e.Convert(x, t), e.Full(scale, TensorType{t, x.dims()})),
                     e.Full(0, TensorType{t, x.dims()}));
  return {e.Convert(out, c.out(0).dtype), e.Convert(keep, c.out(1).dtype)};
}

// native_dropout_backward(grad_output, mask, scale) (not random).
std::vector<Val> LowerNativeDropoutBackward(LowerCtx& c) {
  Emitter& e = c.e;
  ElementType t = Opmath(c.out().dtype);
  Val g = e.Convert(c.tensor(0), t);
  Val mask = Coerce(e, c.tensor(1), g.dims(), t);
  return {e.Convert(e.Binary("multiply", e.Binary("multiply", g, mask), e.Full(c.double_arg(2), g.type)), c.out().dtype)};
}

}  // namespace

void RegisterRandomOps(Registry& r) {
  auto random = [&](const char* schema, LowerFn fn, std::vector<std::string> extra_variants = {}) -> OpLowering& {
    OpLowering& op = r.Add(schema, fn);
    op.random = true;
    op.extra_variants = std::move(extra_variants);
    return op;
  };
  // The value checks CPU's kernels make by reading the probabilities and deviations (a p of 1.5
  // drew ones, a negative std flipped the noise, multinomial sampled from negative or all-zero
  // rows): CPU's messages, raised at the next sync point.
  const ValueArgSpec std_checked{1, CheckRule::kNonNegative, "normal expects all elements of std >= 0.0"};
  const std::string p_message =
      "Expected p_in >= 0 && p_in <= 1 to be true, but got false.  (Could this error message be improved?  If so, "
      "please report an enhancement request to PyTorch.)";
  random("uniform", LowerUniform);
  random("normal_functional", LowerNormal, {"normal_"});
  random("normal.Tensor_float", LowerNormalTensors);
  random("normal.float_Tensor", LowerNormalTensors).value_checks = {std_checked};
  random("normal.Tensor_Tensor", LowerNormalTensors).value_checks = {std_checked};
  random("log_normal", LowerLogNormal);
  random("exponential", LowerExponential);
  random("geometric", LowerGeometric);
  random("cauchy", LowerCauchy);
  random("bernoulli", LowerBernoulli).value_checks = {{0, CheckRule::kUnitInterval, p_message}};  // self is p
  random("bernoulli.p", LowerBernoulli, {"bernoulli_.float"});
  random("bernoulli.Tensor", LowerBernoulli).value_checks = {{1, CheckRule::kUnitInterval, p_message}};
  random("random", LowerRandom);
  random("random.from", LowerRandomFrom);
  random("random.to", LowerRandomTo);
  random("randperm.generator_out", LowerRandperm);
  random("multinomial", LowerMultinomial).value_checks = {
      {0, CheckRule::kFiniteNonNegative, "probability tensor contains either `inf`, `nan` or element < 0"},
      {0, CheckRule::kPositiveRowSums, "invalid multinomial distribution (sum of probabilities <= 0)"}};
  random("native_dropout", LowerNativeDropout);
  r.Add("native_dropout_backward", LowerNativeDropoutBackward);
}

}  // namespace torch_pjrt::lowering
