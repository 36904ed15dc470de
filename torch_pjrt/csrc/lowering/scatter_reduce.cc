// Scatter and index reductions: scatter_reduce.two, index_reduce, index_add, index_copy,
// index_fill, masked_scatter (and its backward), take and put. Index arguments are checked by
// the graph (lowering table `index_checks`, design "Index bounds"); negative indices wrap where
// torch's CPU kernels accept them (index_fill, take, put).
#include <cmath>
#include <stdexcept>

#include "lowering/scan_sort.h"

namespace torch_pjrt::lowering {

namespace {

// x.scatter_(dim, index, updates) combined with `combine` ("" replaces).
Val ScatterElements(Emitter& e, const Val& x, int64_t dim, const Val& index, const Val& updates,
                    std::string_view combine) {
  if (index.numel() == 0) return x;
  Emitter::ScatterDims s;
  for (int64_t i = 0; i < x.rank(); ++i) {
    s.inserted_window_dims.push_back(i);
    s.scatter_dims_to_operand_dims.push_back(i);
  }
  s.index_vector_dim = index.rank();
  return e.Scatter(x, DimIndices(e, index, dim, x.rank(), x.dims()[dim]), updates, s, combine);
}

// Slices of `updates` (x's shape with dim of size k) into x at the k positions `index` along dim.
Val ScatterSlices(Emitter& e, const Val& x, int64_t dim, const Val& index, const Val& updates,
                  std::string_view combine) {
  int64_t k = index.numel();
  if (k == 0) return x;
  Emitter::ScatterDims s;
  for (int64_t i = 0; i < x.rank(); ++i) {
    if (i != dim) s.update_window_dims.push_back(i);
  }
  s.inserted_window_dims = {dim};
  s.scatter_dims_to_operand_dims = {dim};
  s.index_vector_dim = 1;
  Val idx = e.Reshape(WrapNegative(e, e.Reshape(index, {k}), x.dims()[dim]), {k, 1});
  return e.Scatter(x, idx, updates, s, combine);
}

// [n] bool: which positions along a dim of size n `index` names.
Val Touched(Emitter& e, const Val& index, int64_t n) {
  int64_t k = index.numel();
  TensorType bt{ElementType::kBool, {n}};
  if (k == 0) return e.Full(0, bt);
  Emitter::ScatterDims s;
  s.inserted_window_dims = {0};
  s.scatter_dims_to_operand_dims = {0};
  s.index_vector_dim = 1;
  Val idx = e.Reshape(WrapNegative(e, e.Reshape(index, {k}), n), {k, 1});
  return e.Scatter(e.Full(0, bt), idx, e.Full(1, TensorType{ElementType::kBool, {k}}), s, "");
}

// A [n] vector along `dim` of `dims`, broadcast.
Val AlongDim(Emitter& e, const Val& v, const Dims& dims, int64_t dim) {
  return e.BroadcastInDim(v, dims, {dim});
}

// The combining op of a reduction name; bool uses the logical ops.
std::string_view CombineOp(const std::string& reduce, ElementType t) {
  bool b = t == ElementType::kBool;
  if (reduce == "sum" || reduce == "mean") return b ? "or" : "add";
  if (reduce == "prod") return b ? "and" : "multiply";
  if (reduce == "amax") return b ? "or" : "maximum";
  if (reduce == "amin") return b ? "and" : "minimum";
  throw std::invalid_argument("reduce argument must be either sum, prod, mean, amax or amin, got " + reduce);
}

double Identity(const std::string& reduce, ElementType t) {
  if (reduce == "prod") return 1;
  if (reduce == "amax") return LowestValue(t);
  if (reduce == "amin") return HighestValue(t);
  return 0;
}

// sum / count like torch's mean: true division for floating types, floor division otherwise.
Val DivideByCount(Emitter& e, const Val& sum, const Val& count) {
  ElementType t = sum.dtype();
  if (IsFloating(t) || IsComplex(t)) {
    ElementType acc = Opmath(t);
    return e.Convert(e.Binary("divide", e.Convert(sum, acc), e.Convert(count, acc)), t);
  }
  Val cnt = e.Convert(count, t);
  Val q = e.Binary("divide", sum, cnt);
  if (IsUnsigned(t) || t == ElementType::kBool) return q;
  // Counts are positive: truncation differs from floor for negative sums with a remainder.
  Val rem = e.Binary("remainder", sum, cnt);
  Val zero = e.Full(0, sum.type);
  Val adjust = e.Binary("and", e.Compare("NE", rem, zero), e.Compare("LT", sum, zero));
  return e.Select(adjust, e.Binary("subtract", q, e.Full(1, q.type)), q);
}

// 0-d operands of scatter-like ops behave as 1-element vectors.
Val AsVector(Emitter& e, const Val& v) { return v.rank() == 0 ? e.Reshape(v, {1}) : v; }

// scatter_reduce.two(self, dim, index, src, reduce, *, include_self=True)
std::vector<Val> LowerScatterReduceTwo(LowerCtx& c) {
  Emitter& e = c.e;
  Val self = c.tensor(0);
  Val x = AsVector(e, self), index = AsVector(e, c.tensor(2)), src = AsVector(e, c.tensor(3));
  int64_t dim = NormDim(c.int_arg(1), self.rank());
  const std::string& reduce = c.string_arg(4);
  bool include_self = c.bool_arg(5, true);
  ElementType t = x.dtype();
  if (index.numel() == 0) return {self};
  Val updates = e.Convert(src, t);
  if (!(updates.dims() == index.dims())) updates = e.Slice(updates, Dims(updates.rank(), 0), index.dims(), Dims(updates.rank(), 1));
  Val base = x;
  if (!include_self) {
    Val touched = ScatterElements(e, e.Full(0, TensorType{ElementType::kBool, x.dims()}), dim, index,
                                  e.Full(1, TensorType{ElementType::kBool, index.dims()}), "");
    base = e.Select(touched, e.Full(Identity(reduce, t), x.type), x);
  }
  Val r = ScatterElements(e, base, dim, index, updates, CombineOp(reduce, t));
  if (reduce == "mean") {
    TensorType ct{ElementType::kS64, x.dims()};
    Val count = ScatterElements(e, e.Full(include_self ? 1 : 0, ct), dim, index,
                                e.Full(1, TensorType{ElementType::kS64, index.dims()}), "add");
    count = e.Binary("maximum", count, e.Full(1, ct));
    r = DivideByCount(e, r, count);
  }
  return {e.Reshape(r, self.dims())};
}

// index_reduce(self, dim, index, source, reduce, *, include_self=True)
std::vector<Val> LowerIndexReduce(LowerCtx& c) {
  Emitter& e = c.e;
  Val self = c.tensor(0);
  Val x = AsVector(e, self), index = c.tensor(2), source = AsVector(e, c.tensor(3));
  int64_t dim = NormDim(c.int_arg(1), self.rank());
  const std::string& reduce = c.string_arg(4);
  bool include_self = c.bool_arg(5, true);
  ElementType t = x.dtype();
  int64_t n = x.dims()[dim];
  if (index.numel() == 0) return {self};
  Val base = x;
  if (!include_self) {
    Val touched = AlongDim(e, Touched(e, index, n), x.dims(), dim);
    base = e.Select(touched, e.Full(Identity(reduce, t), x.type), x);
  }
  Val r = ScatterSlices(e, base, dim, index, e.Convert(source, t), CombineOp(reduce, t));
  if (reduce == "mean") {
    int64_t k = index.numel();
    TensorType ct{ElementType::kS64, {n}};
    Emitter::ScatterDims s;
    s.inserted_window_dims = {0};
    s.scatter_dims_to_operand_dims = {0};
    s.index_vector_dim = 1;
    Val idx = e.Reshape(WrapNegative(e, e.Reshape(index, {k}), n), {k, 1});
    Val count = e.Scatter(e.Full(include_self ? 1 : 0, ct), idx, e.Full(1, TensorType{ElementType::kS64, {k}}), s, "add");
    count = e.Binary("maximum", count, e.Full(1, ct));
    r = DivideByCount(e, r, AlongDim(e, count, x.dims(), dim));
  }
  return {e.Reshape(r, self.dims())};
}

// index_add(self, dim, index, source, *, alpha=1)
std::vector<Val> LowerIndexAdd(LowerCtx& c) {
  Emitter& e = c.e;
  Val self = c.tensor(0);
  Val x = AsVector(e, self), source = AsVector(e, e.Convert(c.tensor(3), self.dtype()));
  int64_t dim = NormDim(c.int_arg(1), self.rank());
  ElementType t = x.dtype();
  bool is_bool = t == ElementType::kBool;
  if (!c.is_none(4) && (c.is_tensor(4) || c.double_arg(4) != 1)) {
    source = e.Binary(is_bool ? "and" : "multiply", source, e.BroadcastTo(c.scalar(4, t), source.dims()));
  }
  return {e.Reshape(ScatterSlices(e, x, dim, c.tensor(2), source, is_bool ? "or" : "add"), self.dims())};
}

// index_copy(self, dim, index, source)
std::vector<Val> LowerIndexCopy(LowerCtx& c) {
  Emitter& e = c.e;
  Val self = c.tensor(0);
  Val x = AsVector(e, self), source = AsVector(e, e.Convert(c.tensor(3), self.dtype()));
  int64_t dim = NormDim(c.int_arg(1), self.rank());
  return {e.Reshape(ScatterSlices(e, x, dim, c.tensor(2), source, ""), self.dims())};
}

// index_fill.int_Scalar / int_Tensor(self, dim, index, value)
std::vector<Val> LowerIndexFill(LowerCtx& c) {
  Emitter& e = c.e;
  Val self = c.tensor(0);
  Val x = AsVector(e, self);
  int64_t dim = NormDim(c.int_arg(1), self.rank());
  Val value = e.Reshape(c.scalar(3, x.dtype()), {});
  Val mask = AlongDim(e, Touched(e, c.tensor(2), x.dims()[dim]), x.dims(), dim);
  return {e.Reshape(e.Select(mask, e.BroadcastTo(value, x.dims()), x), self.dims())};
}

// For each position of the flattened `mask` (bool [n]): how many true values precede it.
Val TrueBefore(Emitter& e, const Val& mask) {
  Val ones = e.Convert(mask, ElementType::kS64);
  return e.Binary("subtract", CumulativeSum(e, ones, 0), ones);
}

// masked_scatter(self, mask, source): the masked positions of self, in order, take source's
// elements in order. A source shorter than the mask's count raises when the graph runs (the
// table's value_checks, CPU's message).
std::vector<Val> LowerMaskedScatter(LowerCtx& c) {
  Emitter& e = c.e;
  const TensorType& out = c.out();  // self and mask broadcast together
  Val x = e.BroadcastTo(c.tensor(0), out.dims), source = c.tensor(2);
  int64_t n = x.numel(), s = source.numel();
  if (n == 0 || s == 0) return {x};
  Val mask = e.Reshape(e.BroadcastTo(e.Convert(c.tensor(1), ElementType::kBool), out.dims), {n});
  Val pos = e.Binary("minimum", TrueBefore(e, mask), e.Full(static_cast<double>(s - 1), TensorType{ElementType::kS64, {n}}));
  Val taken = GatherFlat(e, e.Reshape(e.Convert(source, x.dtype()), {s}), pos);
  return {e.Reshape(e.Select(mask, taken, e.Reshape(x, {n})), out.dims)};
}

// masked_scatter_backward(grad_output, mask, sizes): grad_output.masked_select(mask) zero-padded
// to prod(sizes) elements.
std::vector<Val> LowerMaskedScatterBackward(LowerCtx& c) {
  Emitter& e = c.e;
  Val g = c.tensor(0), m = c.tensor(1);
  const TensorType& out = c.out();
  int64_t total = NumElements(out.dims);
  // masked_select broadcasts grad and mask together.
  Dims common = g.rank() >= m.rank() ? g.dims() : m.dims();
  const Val& other = g.rank() >= m.rank() ? m : g;
  for (int64_t i = 0; i < other.rank(); ++i) {
    int64_t j = static_cast<int64_t>(common.size()) - other.rank() + i;
    if (common[j] == 1) common[j] = other.dims()[i];
  }
  int64_t n = NumElements(common);
  if (n == 0 || total == 0) return {e.Full(0, out)};
  Val mask = e.Reshape(e.BroadcastTo(e.Convert(m, ElementType::kBool), common), {n});
  Val grad = e.Reshape(e.BroadcastTo(e.Convert(g, out.dtype), common), {n});
  TensorType it{ElementType::kS64, {n}};
  Val pos = TrueBefore(e, mask);
  Val keep = e.Binary("and", mask, e.Compare("LT", pos, e.Full(static_cast<double>(total), it)));
  Val target = e.Select(keep, pos, e.Full(static_cast<double>(total), it));
  Emitter::ScatterDims s;
  s.inserted_window_dims = {0};
  s.scatter_dims_to_operand_dims = {0};
  s.index_vector_dim = 1;
  Val r = e.Scatter(e.Full(0, TensorType{out.dtype, {total + 1}}), e.Reshape(target, {n, 1}), grad, s, "");
  return {e.Reshape(e.SliceDim(r, 0, 0, total), out.dims)};
}

// take(self, index): self flattened, negative indices from the end.
std::vector<Val> LowerTake(LowerCtx& c) {
  Emitter& e = c.e;
  Val x = c.tensor(0), index = c.tensor(1);
  int64_t n = x.numel();
  if (n == 0 || index.numel() == 0) return {e.Full(0, c.out())};
  return {GatherFlat(e, e.Reshape(x, {n}), WrapNegative(e, index, n))};
}

// put(self, index, source, accumulate=False): writes (or adds) source's elements at the
// flattened positions `index`.
std::vector<Val> LowerPut(LowerCtx& c) {
  Emitter& e = c.e;
  Val x = c.tensor(0), index = c.tensor(1);
  int64_t n = x.numel(), k = index.numel();
  if (n == 0 || k == 0) return {x};
  ElementType t = x.dtype();
  Val updates = e.Reshape(e.Convert(c.tensor(2), t), {k});
  Val idx = e.Reshape(WrapNegative(e, index, n), {k, 1});
  Emitter::ScatterDims s;
  s.inserted_window_dims = {0};
  s.scatter_dims_to_operand_dims = {0};
  s.index_vector_dim = 1;
  std::string_view combine = c.bool_arg(3, false) ? (t == ElementType::kBool ? "or" : "add") : "";
  return {e.Reshape(e.Scatter(e.Reshape(x, {n}), idx, updates, s, combine), x.dims())};
}

}  // namespace

void RegisterScatterReduceOps(Registry& r) {
  // (indices, source, dim argument): indices along `dim` of self.
  const IndexArgSpec along_dim{2, 0, 1};
  const IndexArgSpec along_dim_wrapping{2, 0, 1, -1, true};
  r.Add("scatter_reduce.two", LowerScatterReduceTwo).index_checks = {WithRuntimeError(along_dim)};  // as CPU's
  r.Add("index_reduce", LowerIndexReduce).index_checks = {along_dim};
  r.Add("index_add", LowerIndexAdd).index_checks = {along_dim};
  r.Add("index_copy", LowerIndexCopy).index_checks = {along_dim};
  r.Add("index_fill.int_Scalar", LowerIndexFill).index_checks = {along_dim_wrapping};
  r.Add("index_fill.int_Tensor", LowerIndexFill).index_checks = {along_dim_wrapping};
  r.Add("masked_scatter", LowerMaskedScatter).value_checks = {
      {1, CheckRule::kCountAtMost, "Number of elements of source < number of ones in mask", 2}};
  r.Add("masked_scatter_backward", LowerMaskedScatterBackward);
  // take/put index the flattened self, -numel <= i < numel.
  const IndexArgSpec flat{1, 0, -1, -1, true, IndexArgSpec::Bound::kNumel};
  r.Add("take", LowerTake).index_checks = {flat};
  r.Add("put", LowerPut).index_checks = {flat};
}

}  // namespace torch_pjrt::lowering
