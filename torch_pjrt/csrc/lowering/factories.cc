// Factory ops that produce values without tensor inputs. zeros/ones/full arrive as empty + fill_
// (fill lives in indexing.cc); random factories in random.cc.
#include "lowering/helpers.h"

namespace torch_pjrt::lowering {

namespace {

// arange.start_out(start, end, step=1, *, out): start + i * step, computed in double (int64 for
// integer outputs) like torch's CPU kernel. The bounds are structural: they decide the length.
std::vector<Val> LowerArange(LowerCtx& c) {
  const TensorType& out = c.out();
  ElementType t = out.dtype;
  ElementType acc = IsFloating(t) ? ElementType::kF64 : ElementType::kS64;
  TensorType ta{acc, out.dims};
  Val i = c.e.Convert(c.e.Iota(TensorType{ElementType::kS64, out.dims}, 0), acc);
  Val v = c.e.Binary("add", c.e.Full(c.scalar_constant(0), ta),
                     c.e.Binary("multiply", i, c.e.Full(c.scalar_constant(2), ta)));
  return {c.e.Convert(v, t)};
}

// The element indices 0..n-1 of a 1-d output, as `t`.
Val Indices(LowerCtx& c, ElementType t) {
  return c.e.Convert(c.e.Iota(TensorType{ElementType::kS64, c.out().dims}, 0), t);
}

// torch's CPU formula for evenly spaced points, symmetric so that both ends are exact:
// first + step * i for the first half, last - step * (n - 1 - i) for the rest.
Val EvenlySpaced(LowerCtx& c, const Val& first, const Val& last, const Val& step, ElementType t) {
  Emitter& e = c.e;
  int64_t n = c.out().dims[0];
  Dims dims = c.out().dims;
  Val i = Indices(c, t);
  Val from_first = e.Binary("add", e.BroadcastTo(first, dims), e.Binary("multiply", e.BroadcastTo(step, dims), i));
  Val back = e.Binary("subtract", e.Full(static_cast<double>(n - 1), TensorType{t, dims}), i);
  Val from_last = e.Binary("subtract", e.BroadcastTo(last, dims), e.Binary("multiply", e.BroadcastTo(step, dims), back));
  Val first_half = e.Compare("LT", e.Iota(TensorType{ElementType::kS64, dims}, 0),
                             e.Full(static_cast<double>(n / 2), TensorType{ElementType::kS64, dims}));
  return e.Select(first_half, from_first, from_last);
}

// The start and end Scalars as torch's kernel holds them: converted to the output's type, then
// (integer outputs) widened to double, the type the steps are computed in.
std::pair<Val, Val> Bounds(LowerCtx& c, ElementType compute) {
  ElementType t = c.out().dtype;
  return {c.e.Convert(c.scalar(0, t), compute), c.e.Convert(c.scalar(1, t), compute)};
}
Val Step(LowerCtx& c, const Val& first, const Val& last, ElementType compute) {
  double intervals = static_cast<double>(c.out().dims[0] - 1);
  return c.e.Binary("divide", c.e.Binary("subtract", last, first), c.e.Scalar(intervals, compute));
}

// linspace.out(start, end, steps, *, out): in the output's type (double for integer outputs,
// truncated at the end), like RangeFactoriesKernel.cpp; one step is the start.
std::vector<Val> LowerLinspace(LowerCtx& c) {
  ElementType t = c.out().dtype;
  ElementType compute = IsFloating(t) || IsComplex(t) ? t : ElementType::kF64;
  auto [first, last] = Bounds(c, compute);
  if (c.out().dims[0] == 1) return {c.e.Convert(c.e.Reshape(first, {1}), t)};
  return {c.e.Convert(EvenlySpaced(c, first, last, Step(c, first, last, compute), compute), t)};
}

// logspace.out(start, end, steps, base=10, *, out): base ** (evenly spaced exponents), exponents
// and power in double like torch's CPU kernel (which rounds an integer output's base to float).
std::vector<Val> LowerLogspace(LowerCtx& c) {
  ElementType t = c.out().dtype;
  constexpr ElementType kF64 = ElementType::kF64;
  double base = c.double_arg(3);
  Val exponents;
  if (c.out().dims[0] == 1) {  // torch's special case: the start as given, not in the output's type
    exponents = c.e.Reshape(c.scalar(0, kF64), {1});
  } else {
    if (!IsFloating(t)) base = static_cast<float>(base);
    auto [first, last] = Bounds(c, kF64);
    exponents = EvenlySpaced(c, first, last, Step(c, first, last, kF64), kF64);
  }
  Val power = c.e.Binary("power", c.e.Full(base, exponents.type), exponents);
  return {c.e.Convert(power, t)};
}

// eye.m_out(n, m, *, out) / eye.out(n, *, out): ones on the diagonal.
std::vector<Val> LowerEye(LowerCtx& c) {
  const TensorType& out = c.out();
  TensorType rows{ElementType::kS64, out.dims};
  Val diagonal = c.e.Compare("EQ", c.e.Iota(rows, 0), c.e.Iota(rows, 1));
  return {c.e.Convert(diagonal, out.dtype)};
}

// _efficientzerotensor(size, *, dtype, ...): autograd's stand-in for a gradient known to be zero
// (sgn's at 0). A device without the ZeroTensor key materializes zeros, as torch's fallback does.
std::vector<Val> LowerZeroTensor(LowerCtx& c) { return {c.e.Full(0, c.out())}; }

}  // namespace

void RegisterFactoryOps(Registry& r) {
  r.Add("arange.start_out", LowerArange).structural_scalars = {0, 1, 2};
  r.Add("linspace.out", LowerLinspace);
  r.Add("logspace.out", LowerLogspace);
  r.Add("eye.out", LowerEye);
  r.Add("eye.m_out", LowerEye);
  r.Add("_efficientzerotensor", LowerZeroTensor);
}

}  // namespace torch_pjrt::lowering
