// Reductions (sum, mean, max/min, arg max/min, var/std, norms, any/all), softmax and their
// backward. Half types accumulate in float like torch's CPU kernels.
#include <cmath>
#include <stdexcept>

#include "lowering/algebra.h"
#include "lowering/helpers.h"

namespace torch_pjrt::lowering {

namespace {

// Dims argument i (int[1]? or int), normalized against the input rank; None/[] means all.
Dims ReduceDims(LowerCtx& c, size_t i, int64_t rank) {
  if (c.is_none(i)) return NormDims({}, rank);
  return NormDims(c.int_list(i), rank);
}

Val Finish(LowerCtx& c, const Val& reduced, const Val& input, const Dims& dims, bool keepdim,
           size_t out = 0) {
  Val r = keepdim ? KeepDims(c.e, reduced, input.dims(), dims) : reduced;
  return c.e.Convert(c.e.Reshape(r, c.out(out).dims), c.out(out).dtype);
}

int64_t Count(const Val& x, const Dims& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= x.dims()[d];
  return n;
}

// sum.dim_IntList(self, dim?, keepdim=False, *, dtype=None) and sum(self, *, dtype=None).
std::vector<Val> LowerSumDim(LowerCtx& c) {
  Val x = InResultDtype(c.e, c.tensor(0), c.out().dtype);
  Dims dims = ReduceDims(c, 1, x.rank());
  ElementType acc = Opmath(c.out().dtype);
  return {Finish(c, SumDims(c.e, x, dims, acc), x, dims, c.bool_arg(2, false))};
}
std::vector<Val> LowerSum(LowerCtx& c) {
  Val x = InResultDtype(c.e, c.tensor(0), c.out().dtype);
  Dims dims = NormDims({}, x.rank());
  return {Finish(c, SumDims(c.e, x, dims, Opmath(c.out().dtype)), x, dims, false)};
}

// nansum(self, dim=None, keepdim=False, *, dtype=None): NaN counts as zero.
std::vector<Val> LowerNansum(LowerCtx& c) {
  Val x = c.tensor(0);
  Dims dims = ReduceDims(c, 1, x.rank());
  ElementType acc = Opmath(c.out().dtype);
  Val xc = c.e.Convert(InResultDtype(c.e, x, c.out().dtype), acc);
  if (IsFloating(x.dtype())) xc = c.e.Select(c.e.Compare("NE", x, x), c.e.Full(0, xc.type), xc);
  return {Finish(c, SumDims(c.e, xc, dims, acc), x, dims, c.bool_arg(2, false))};
}

Val Mean(LowerCtx& c, const Val& x, const Dims& dims, ElementType acc) {
  Val s = SumDims(c.e, x, dims, acc);
  return c.e.Binary("divide", s, c.e.Full(static_cast<double>(Count(x, dims)), s.type));
}
std::vector<Val> LowerMeanDim(LowerCtx& c) {  // mean.dim(self, dim?, keepdim=False, *, dtype=None)
  Val x = c.tensor(0);
  Dims dims = ReduceDims(c, 1, x.rank());
  return {Finish(c, Mean(c, x, dims, Opmath(c.out().dtype)), x, dims, c.bool_arg(2, false))};
}
std::vector<Val> LowerMean(LowerCtx& c) {
  Val x = c.tensor(0);
  Dims dims = NormDims({}, x.rank());
  return {Finish(c, Mean(c, x, dims, Opmath(c.out().dtype)), x, dims, false)};
}

std::vector<Val> LowerAmaxAmin(LowerCtx& c, bool max) {  // amax(self, dim=[], keepdim=False)
  Val x = c.tensor(0);
  Dims dims = ReduceDims(c, 1, x.rank());
  return {Finish(c, ReduceMax(c.e, x, dims, max), x, dims, c.bool_arg(2, false))};
}
std::vector<Val> LowerAmax(LowerCtx& c) { return LowerAmaxAmin(c, true); }

// hash_tensor(self, dim=[], keepdim=False, mode=0): the xor of the elements' 64-bit patterns, each
// element widened first (floats to double, integers and bool to int64), like the CPU kernel.
std::vector<Val> LowerHashTensor(LowerCtx& c) {
  Emitter& e = c.e;
  int64_t mode = c.int_arg(3, 0);
  if (mode != 0) throw std::runtime_error("Unknown hash_tensor mode: " + std::to_string(mode));
  Val x = c.tensor(0);
  ElementType wide = IsFloating(x.dtype()) ? ElementType::kF64
                     : x.dtype() == ElementType::kU64 ? ElementType::kU64 : ElementType::kS64;
  Val bits = e.BitcastConvert(e.Convert(x, wide), TensorType{ElementType::kU64, x.dims()});
  Dims dims = ReduceDims(c, 1, x.rank());
  return {Finish(c, e.Reduce(bits, e.Scalar(0, ElementType::kU64), dims, "xor"), x, dims, c.bool_arg(2, false))};
}
std::vector<Val> LowerAmin(LowerCtx& c) { return LowerAmaxAmin(c, false); }
// torch's checks for empty inputs, which the Meta kernels skip (raised when the graph runs).
void CheckNonEmptyAll(const Val& x, const char* name) {
  if (x.numel() == 0) {
    throw std::invalid_argument(std::string(name) +
                                "(): Expected reduction dim to be specified for input.numel() == 0. Specify the "
                                "reduction dim with the 'dim' argument.");
  }
}
std::vector<Val> LowerMaxAll(LowerCtx& c) {
  Val x = c.tensor(0);
  CheckNonEmptyAll(x, "max");
  return {Finish(c, ReduceMax(c.e, x, NormDims({}, x.rank()), true), x, {}, false)};
}
std::vector<Val> LowerMinAll(LowerCtx& c) {
  Val x = c.tensor(0);
  CheckNonEmptyAll(x, "min");
  return {Finish(c, ReduceMax(c.e, x, NormDims({}, x.rank()), false), x, {}, false)};
}

// (value, index) of the max (or min) along `dim`; ties and NaNs resolve like torch
// (FirstExtremeIndex). The value is read back at the index, so the max of [-0., 0.] has the first
// zero's sign, as on the CPU.
std::pair<Val, Val> ArgReduce(Emitter& e, const Val& x, int64_t dim, bool max) {
  Val index = FirstExtremeIndex(e, x, dim, max);
  Val value = GatherAlong(e, x, KeepDims(e, index, x.dims(), {dim}), dim);
  return {e.Reshape(value, index.dims()), index};
}

// argmax(self, dim=None, keepdim=False)
std::vector<Val> LowerArgMaxMin(LowerCtx& c, bool max) {
  Val x = c.tensor(0);
  if (x.dtype() == ElementType::kBool) {  // torch's check (raised when the graph runs)
    throw std::invalid_argument(std::string(max ? "argmax" : "argmin") + "(): does not support bool input");
  }
  if (c.is_none(1)) {
    Val flat = c.e.Reshape(x, {x.numel()});
    return {c.e.Reshape(FirstExtremeIndex(c.e, flat, 0, max), c.out().dims)};
  }
  int64_t dim = NormDim(c.int_arg(1), x.rank());
  if (x.rank() == 0) return {c.e.Full(0, c.out())};
  return {c.e.Reshape(FirstExtremeIndex(c.e, x, dim, max), c.out().dims)};
}
std::vector<Val> LowerArgmax(LowerCtx& c) { return LowerArgMaxMin(c, true); }
std::vector<Val> LowerArgmin(LowerCtx& c) { return LowerArgMaxMin(c, false); }

// max.dim(self, dim, keepdim=False) -> (values, indices)
std::vector<Val> LowerMaxMinDim(LowerCtx& c, bool max) {
  Val x = c.tensor(0);
  if (x.rank() == 0) return {x, c.e.Full(0, c.out(1))};
  int64_t dim = NormDim(c.int_arg(1), x.rank());
  if (x.dims()[dim] == 0) {
    // torch raises IndexError; a failing graph can only raise RuntimeError, but not a silent
    // (inf, 0) either.
    throw std::invalid_argument(std::string(max ? "max" : "min") + "(): Expected reduction dim " +
                                std::to_string(dim) + " to have non-zero size.");
  }
  auto [v, i] = ArgReduce(c.e, x, dim, max);
  return {c.e.Reshape(v, c.out(0).dims), c.e.Reshape(i, c.out(1).dims)};
}
std::vector<Val> LowerMaxDim(LowerCtx& c) { return LowerMaxMinDim(c, true); }
std::vector<Val> LowerMinDim(LowerCtx& c) { return LowerMaxMinDim(c, false); }

std::vector<Val> LowerProdDim(LowerCtx& c) {  // prod.dim_int(self, dim, keepdim=False, *, dtype)
  Val x = InResultDtype(c.e, c.tensor(0), c.out().dtype);
  Dims dims = x.rank() == 0 ? Dims{} : Dims{NormDim(c.int_arg(1), x.rank())};
  ElementType acc = Opmath(c.out().dtype);
  Val r = c.e.Reduce(c.e.Convert(x, acc), c.e.Scalar(1, acc), dims, "multiply");
  return {Finish(c, r, x, dims, c.bool_arg(2, false))};
}
std::vector<Val> LowerProd(LowerCtx& c) {  // prod(self, *, dtype)
  Val x = InResultDtype(c.e, c.tensor(0), c.out().dtype);
  ElementType acc = Opmath(c.out().dtype);
  Dims dims = NormDims({}, x.rank());
  return {Finish(c, c.e.Reduce(c.e.Convert(x, acc), c.e.Scalar(1, acc), dims, "multiply"), x, dims, false)};
}

// Variance with Bessel-style correction. torch's CPU kernels accumulate in double for every
// floating type (Welford), so float32 values near the top of their range have a finite mean and
// standard deviation there: computed in float64 here too (float64 itself with a mean that cannot
// overflow). The results are rounded to the output type.
std::pair<Val, Val> VarMean(LowerCtx& c, const Val& x, const Dims& dims, double correction) {
  if (!IsFloating(x.dtype()) && !IsComplex(x.dtype())) {
    throw std::invalid_argument("std and var only support floating point and complex dtypes");
  }
  ElementType acc = IsComplex(x.dtype()) ? x.dtype() : ElementType::kF64;
  Val xc = c.e.Convert(x, acc);
  Val mean = ScaledMean(c.e, xc, dims);
  Dims kept;
  for (int64_t i = 0; i < xc.rank(); ++i) {
    bool reduced = false;
    for (int64_t d : dims) reduced |= d == i;
    if (!reduced) kept.push_back(i);
  }
  Val centered = c.e.Binary("subtract", xc, c.e.BroadcastInDim(mean, xc.dims(), kept));
  Val ss = SumDims(c.e, c.e.Binary("multiply", centered, centered), dims, acc);
  double n = static_cast<double>(Count(x, dims)) - correction;
  Val var = c.e.Binary("divide", ss, c.e.Full(n > 0 ? n : 0.0, ss.type));
  return {var, mean};
}
double Correction(LowerCtx& c, size_t i) { return c.is_none(i) ? 1.0 : c.double_arg(i); }

// var.correction(self, dim=None, *, correction=None, keepdim=False)
std::vector<Val> LowerVar(LowerCtx& c) {
  Val x = c.tensor(0);
  Dims dims = ReduceDims(c, 1, x.rank());
  return {Finish(c, VarMean(c, x, dims, Correction(c, 2)).first, x, dims, c.bool_arg(3, false))};
}
std::vector<Val> LowerStd(LowerCtx& c) {
  Val x = c.tensor(0);
  Dims dims = ReduceDims(c, 1, x.rank());
  Val v = VarMean(c, x, dims, Correction(c, 2)).first;
  return {Finish(c, c.e.Unary("sqrt", v), x, dims, c.bool_arg(3, false))};
}
std::vector<Val> LowerVarMean(LowerCtx& c) {  // var_mean.correction -> (var, mean)
  Val x = c.tensor(0);
  Dims dims = ReduceDims(c, 1, x.rank());
  bool keep = c.bool_arg(3, false);
  auto [v, m] = VarMean(c, x, dims, Correction(c, 2));
  return {Finish(c, v, x, dims, keep, 0), Finish(c, m, x, dims, keep, 1)};
}
std::vector<Val> LowerStdMean(LowerCtx& c) {
  Val x = c.tensor(0);
  Dims dims = ReduceDims(c, 1, x.rank());
  bool keep = c.bool_arg(3, false);
  auto [v, m] = VarMean(c, x, dims, Correction(c, 2));
  return {Finish(c, c.e.Unary("sqrt", v), x, dims, keep, 0), Finish(c, m, x, dims, keep, 1)};
}

// linalg_vector_norm(self, ord=2, dim=None, keepdim=False, *, dtype=None); ord is structural.
std::vector<Val> LowerVectorNorm(LowerCtx& c) {
  Val x = c.tensor(0);
  Dims dims = ReduceDims(c, 2, x.rank());
  ElementType acc = Opmath(c.out().dtype);
  Val a = c.e.Unary("abs", c.e.Convert(x, acc));
  double p = c.is_none(1) ? 2.0 : c.scalar_constant(1);
  // One element per result: CPU eager's loop computes the power and its root in double there, so
  // the norm is |x| (a float32 9.2e18 cubed would overflow: seed 3316).
  Val r = Count(x, dims) == 1 && p != 0 ? SumDims(c.e, a, dims, acc) : PNorm(c.e, a, p, dims);
  return {Finish(c, r, x, dims, c.bool_arg(3, false))};
}

// The legacy norm overloads as linalg_vector_norm (the table's entry, so complex inputs take
// complex.cc's route): norm.Scalar(self, p=2), norm.ScalarOpt_dtype(self, p?, *, dtype),
// norm.ScalarOpt_dim(self, p?, dim, keepdim=False), norm.ScalarOpt_dim_dtype(..., *, dtype).
std::vector<Val> AsVectorNorm(LowerCtx& c, bool has_dim, bool has_dtype) {
  static const LowerFn vector_norm = Table()[FindLowering("linalg_vector_norm")].fn;
  Arg ord = c.is_none(1) ? Arg::Double(2.0) : c.arg(1);
  Arg dim = has_dim ? c.arg(2) : Arg::None();
  Arg keepdim = has_dim ? c.arg(3) : Arg::Bool(false);
  size_t dtype_i = has_dim ? 4 : 2;
  Arg dtype = has_dtype ? c.arg(dtype_i) : Arg::None();
  std::vector<Arg> args{c.arg(0), ord, dim, keepdim, dtype};
  return c.LowerElement(0, vector_norm, &args);
}
std::vector<Val> LowerNormScalar(LowerCtx& c) { return AsVectorNorm(c, false, false); }
std::vector<Val> LowerNormDtype(LowerCtx& c) { return AsVectorNorm(c, false, true); }
std::vector<Val> LowerNormDim(LowerCtx& c) { return AsVectorNorm(c, true, false); }
std::vector<Val> LowerNormDimDtype(LowerCtx& c) { return AsVectorNorm(c, true, true); }

// renorm(self, p, dim, maxnorm): each slice along `dim` whose p-norm exceeds maxnorm is scaled
// by maxnorm / (norm + 1e-7), like torch's CPU kernel; the factor is rounded to self's type
// where that differs from the norm's (half types, complex).
std::vector<Val> LowerRenorm(LowerCtx& c) {
  Emitter& e = c.e;
  Val x = c.tensor(0);
  ElementType t = c.out().dtype;
  ElementType acc = Opmath(ComplexPartType(t));
  int64_t dim = NormDims({c.int_arg(2)}, x.rank())[0];
  Dims others;
  for (int64_t i = 0; i < x.rank(); ++i) {
    if (i != dim) others.push_back(i);
  }
  Val a = e.Convert(Magnitude(e, x), acc);
  Val norm = e.BroadcastInDim(PNorm(e, a, c.scalar_constant(1), others), x.dims(), {dim});
  Val maxnorm = e.BroadcastTo(c.scalar(3, acc), x.dims());
  Val scaled = e.Binary("divide", maxnorm, e.Binary("add", norm, e.Full(1e-7, norm.type)));
  Val factor = e.Select(e.Compare("GT", norm, maxnorm), scaled, e.Full(1, norm.type));
  if (acc != t) factor = ConvertTo(e, ConvertTo(e, factor, ComplexPartType(t)), t);
  return {e.Binary("multiply", ConvertTo(e, x, factor.dtype()), factor)};
}

// any.dims / all.dims (self, dim=None, keepdim=False), any / all (self)
std::vector<Val> AnyAll(LowerCtx& c, bool any, bool has_dims) {
  Val x = c.tensor(0);
  Dims dims = has_dims ? ReduceDims(c, 1, x.rank()) : NormDims({}, x.rank());
  Val b = c.e.Convert(x, ElementType::kBool);
  Val r = c.e.Reduce(b, c.e.Scalar(any ? 0 : 1, ElementType::kBool), dims, any ? "or" : "and");
  return {Finish(c, r, x, dims, has_dims && c.bool_arg(2, false))};
}
std::vector<Val> LowerAnyDims(LowerCtx& c) { return AnyAll(c, true, true); }
std::vector<Val> LowerAllDims(LowerCtx& c) { return AnyAll(c, false, true); }
std::vector<Val> LowerAny(LowerCtx& c) { return AnyAll(c, true, false); }
std::vector<Val> LowerAll(LowerCtx& c) { return AnyAll(c, false, false); }
std::vector<Val> LowerAnyDim(LowerCtx& c) {  // any.dim(self, int dim, keepdim=False)
  return AnyAll(c, true, true);
}
std::vector<Val> LowerAllDim(LowerCtx& c) { return AnyAll(c, false, true); }

// ------------------------------------------------------------ softmax

// Broadcasts a keepdim-style reduction result back over `dim`.
Val Expand(Emitter& e, const Val& reduced, const Dims& full, int64_t dim) {
  Dims mapping;
  for (int64_t i = 0; i < static_cast<int64_t>(full.size()); ++i) {
    if (i != dim) mapping.push_back(i);
  }
  return e.BroadcastInDim(reduced, full, mapping);
}

// A 0-d tensor is a softmax over one element (1, or NaN for a NaN or infinite input like CPU
// eager's), computed as a [1] tensor.
Val AsVector(Emitter& e, const Val& x) { return x.rank() == 0 ? e.Reshape(x, {1}) : x; }

std::vector<Val> Softmax(LowerCtx& c, bool log) {  // _softmax(self, dim, half_to_float)
  Val x = AsVector(c.e, c.tensor(0));
  int64_t dim = NormDim(c.int_arg(1), x.rank());
  ElementType acc = Opmath(c.out().dtype);
  Emitter& e = c.e;
  Val xc = e.Convert(x, acc);
  Val shifted = e.Binary("subtract", xc, Expand(e, ReduceMax(e, xc, {dim}, true), xc.dims(), dim));
  Val ex = e.Unary("exponential", shifted);
  Val sum = Expand(e, SumDims(e, ex, {dim}, acc), xc.dims(), dim);
  if (!log) return {e.Reshape(e.Convert(e.Binary("divide", ex, sum), c.out().dtype), c.out().dims)};
  Val log_sum = e.Unary("log", sum);
  if (dim == x.rank() - 1) {
    // CPU's last-dim kernel keeps a half type's sum and its log in the type (scalar_t buffers),
    // then computes x - max - log_sum in float.
    log_sum = RoundedTo(e, e.Unary("log", RoundedTo(e, sum, c.out().dtype)), c.out().dtype);
  }
  return {e.Reshape(e.Convert(e.Binary("subtract", shifted, log_sum), c.out().dtype), c.out().dims)};
}
std::vector<Val> LowerSoftmax(LowerCtx& c) { return Softmax(c, false); }
std::vector<Val> LowerLogSoftmax(LowerCtx& c) { return Softmax(c, true); }

// _softmax_backward_data(grad_output, output, dim, input_dtype): y * (g - sum(g * y))
std::vector<Val> LowerSoftmaxBackward(LowerCtx& c) {
  Val g = AsVector(c.e, c.tensor(0)), y = AsVector(c.e, c.tensor(1));
  int64_t dim = NormDim(c.int_arg(2), y.rank());
  ElementType acc = Opmath(c.out().dtype);
  Emitter& e = c.e;
  Val gc = e.Convert(g, acc), yc = e.Convert(y, acc);
  Val dot = Expand(e, SumDims(e, e.Binary("multiply", gc, yc), {dim}, acc), yc.dims(), dim);
  return {e.Reshape(e.Convert(e.Binary("multiply", yc, e.Binary("subtract", gc, dot)), c.out().dtype), c.out().dims)};
}
// _log_softmax_backward_data(grad_output, output, dim, input_dtype): g - exp(y) * sum(g)
std::vector<Val> LowerLogSoftmaxBackward(LowerCtx& c) {
  Val g = AsVector(c.e, c.tensor(0)), y = AsVector(c.e, c.tensor(1));
  int64_t dim = NormDim(c.int_arg(2), y.rank());
  ElementType acc = Opmath(c.out().dtype);
  Emitter& e = c.e;
  Val gc = e.Convert(g, acc), yc = e.Convert(y, acc);
  Val sum = Expand(e, SumDims(e, gc, {dim}, acc), yc.dims(), dim);
  return {e.Reshape(e.Convert(e.Binary("subtract", gc, e.Binary("multiply", e.Unary("exponential", yc), sum)),
                              c.out().dtype), c.out().dims)};
}

// logsumexp(self, dim, keepdim=False). Complex inputs shift by their largest real part, as CPU
// eager does.
std::vector<Val> LowerLogsumexp(LowerCtx& c) {
  Val x = c.tensor(0);
  Dims dims = ReduceDims(c, 1, x.rank());
  ElementType acc = Opmath(c.out().dtype);
  Emitter& e = c.e;
  Val xc = ConvertTo(e, x, acc);
  Val m = ReduceMax(e, RealPart(e, xc), dims, true);
  // A row of -inf would give inf - inf; shift by 0 there instead.
  m = e.Select(e.Compare("EQ", e.Unary("abs", m), e.Full(INFINITY, m.type)), e.Full(0, m.type), m);
  Val finite_m = ConvertTo(e, m, acc);
  Dims kept;
  for (int64_t i = 0; i < xc.rank(); ++i) {
    bool reduced = false;
    for (int64_t d : dims) reduced |= d == i;
    if (!reduced) kept.push_back(i);
  }
  Val shifted = e.Binary("subtract", xc, e.BroadcastInDim(finite_m, xc.dims(), kept));
  Val s = SumDims(e, e.Unary("exponential", shifted), dims, acc);
  Val r = e.Binary("add", e.Unary("log", s), finite_m);
  return {Finish(c, r, x, dims, c.bool_arg(2, false))};
}

}  // namespace

void RegisterReductionOps(Registry& r) {
  r.Add("sum.dim_IntList", LowerSumDim);
  r.Add("sum", LowerSum);
  r.Add("nansum", LowerNansum);
  r.Add("mean.dim", LowerMeanDim);
  r.Add("mean", LowerMean);
  r.Add("amax", LowerAmax);
  r.Add("hash_tensor", LowerHashTensor);
  r.Add("amin", LowerAmin);
  r.Add("max", LowerMaxAll);
  r.Add("min", LowerMinAll);
  r.Add("max.dim", LowerMaxDim);
  r.Add("min.dim", LowerMinDim);
  r.Add("argmax", LowerArgmax);
  r.Add("argmin", LowerArgmin);
  r.Add("prod.dim_int", LowerProdDim);
  r.Add("prod", LowerProd);
  // The correction shapes the program (it divides by n - correction): structural.
  r.Add("var.correction", LowerVar).structural_scalars = {2};
  r.Add("std.correction", LowerStd).structural_scalars = {2};
  r.Add("var_mean.correction", LowerVarMean).structural_scalars = {2};
  r.Add("std_mean.correction", LowerStdMean).structural_scalars = {2};
  r.Add("linalg_vector_norm", LowerVectorNorm).structural_scalars = {1};
  r.Add("norm.Scalar", LowerNormScalar).structural_scalars = {1};
  r.Add("norm.ScalarOpt_dtype", LowerNormDtype).structural_scalars = {1};
  r.Add("norm.ScalarOpt_dim", LowerNormDim).structural_scalars = {1};
  r.Add("norm.ScalarOpt_dim_dtype", LowerNormDimDtype).structural_scalars = {1};
  OpLowering& renorm = r.Add("renorm", LowerRenorm);
  renorm.structural_scalars = {1};
  renorm.checked_scalars = {3};  // maxnorm >= 0
  r.Add("any.dims", LowerAnyDims);
  r.Add("all.dims", LowerAllDims);
  r.Add("any.dim", LowerAnyDim);
  r.Add("all.dim", LowerAllDim);
  r.Add("any", LowerAny);
  r.Add("all", LowerAll);
  r.Add("_softmax", LowerSoftmax);
  r.Add("_log_softmax", LowerLogSoftmax);
  r.Add("_softmax_backward_data", LowerSoftmaxBackward);
  r.Add("_log_softmax_backward_data", LowerLogSoftmaxBackward);
  r.Add("logsumexp", LowerLogsumexp);
}

}  // namespace torch_pjrt::lowering
