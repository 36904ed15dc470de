// nn.functional.embedding_bag: _embedding_bag / _embedding_bag_forward_only (sum, mean and max
// over bags of rows), _embedding_bag_dense_backward and _embedding_bag_per_sample_weights_backward.
// The auxiliary results have the shapes of torch's Meta kernels (offset2bag [N] always,
// max_indices [B, D] for max and [0] otherwise) and the meaning of its CPU kernel (EmbeddingBag.cpp):
// offset2bag is each index's bag, bag_size the bag's count of indices other than padding_idx,
// max_indices the row each maximum came from (the first on ties). Sums accumulate in float for half
// types, as the CPU kernel does. scale_grad_by_freq divides each row's gradient by how often its
// index occurs (the documented meaning, and CUDA's); torch's CPU kernel divides the g-th distinct
// index's rows by the count of sorted_indices[g] instead, a bug we do not reproduce.
#include "lowering/lowering.h"
#include "lowering/pointwise_util.h"
#include "lowering/scan_sort.h"

namespace torch_pjrt::lowering {

namespace {

using namespace pw;

constexpr int64_t kSum = 0, kMean = 1, kMax = 2;
constexpr ElementType kS64 = ElementType::kS64;

Val Iota1(Emitter& e, int64_t n) { return e.Iota(TensorType{kS64, {n}}, 0); }

// out[index[i], :] combine= rows[i, :] into `init` [M, D]; `combine` "add", "maximum", "minimum".
Val ScatterRows(Emitter& e, const Val& init, const Val& index, const Val& rows, std::string_view combine) {
  Emitter::ScatterDims s;
  s.update_window_dims = {1};
  s.inserted_window_dims = {0};
  s.scatter_dims_to_operand_dims = {0};
  s.index_vector_dim = 1;
  return e.Scatter(init, e.Reshape(index, {index.numel(), 1}), rows, s, combine);
}
// out[index[i]] += values[i] into [m] zeros.
Val ScatterAdd(Emitter& e, const Val& index, const Val& values, int64_t m) {
  Emitter::ScatterDims s;
  s.inserted_window_dims = {0};
  s.scatter_dims_to_operand_dims = {0};
  s.index_vector_dim = 1;
  return e.Scatter(e.Full(0, TensorType{values.dtype(), {m}}), e.Reshape(index, {index.numel(), 1}), values, s, "add");
}

// Each index's bag: how many of offsets[1..bags) are <= its position (torch's make_offset2bag:
// a 1 at each bag start after the first, then a cumulative sum).
Val BagOfEachIndex(Emitter& e, const Val& offsets, int64_t bags, int64_t n) {
  if (bags <= 1 || n == 0) return e.Full(0, TensorType{kS64, {n}});
  Val starts = e.SliceDim(e.Convert(offsets, kS64), 0, 1, bags);
  Val marks = ScatterAdd(e, starts, e.Full(1, TensorType{kS64, {bags - 1}}), n + 1);  // starts past n drop
  return e.SliceDim(CumulativeSum(e, marks, 0), 0, 0, n);
}

struct Bags {
  Val index;      // [N] s64 rows of weight
  Val bag;        // [N] s64 offset2bag
  Val counted;    // [N] pred: not padding_idx
  int64_t n, bags, dim;
};
Bags Describe(LowerCtx& c, size_t weight_i, size_t indices_i, size_t offsets_i, int64_t bags, int64_t padding_idx) {
  Emitter& e = c.e;
  Val index = e.Convert(e.Reshape(c.tensor(indices_i), {c.tensor(indices_i).numel()}), kS64);
  int64_t n = index.numel();
  Val bag = BagOfEachIndex(e, c.tensor(offsets_i), bags, n);
  Val counted = e.Compare("NE", index, e.Full(static_cast<double>(padding_idx), index.type));
  return {index, bag, counted, n, bags, c.tensor(weight_i).dims()[1]};
}

Val BagSizes(Emitter& e, const Bags& b) {
  return ScatterAdd(e, b.bag, e.Convert(b.counted, kS64), b.bags);
}

// The maximum over each bag and the row it came from; empty bags are 0 with row 0.
std::pair<Val, Val> BagMaxima(Emitter& e, const Val& rows, const Bags& b) {
  Dims nd{b.n, b.dim};
  Val counted = e.BroadcastInDim(b.counted, nd, {0});
  Val lowest = e.Full(-INFINITY, TensorType{rows.dtype(), nd});
  Val max = ScatterRows(e, e.Full(-INFINITY, TensorType{rows.dtype(), {b.bags, b.dim}}), b.bag,
                        e.Select(counted, rows, lowest), "maximum");
  // The first position reaching its bag's maximum gives max_indices.
  Val reached = e.Binary("and", counted, e.Compare("EQ", rows, TakeRows(e, max, b.bag)));
  Val position = e.BroadcastInDim(Iota1(e, b.n), nd, {0});
  Val none = e.Full(static_cast<double>(b.n), TensorType{kS64, nd});
  Val first = ScatterRows(e, e.Full(static_cast<double>(b.n), TensorType{kS64, {b.bags, b.dim}}), b.bag,
                          e.Select(reached, position, none), "minimum");
  Val padded_index = e.Concatenate({b.index, e.Full(0, TensorType{kS64, {1}})}, 0);  // position n: row 0
  Emitter::GatherDims g;
  g.collapsed_slice_dims = {0};
  g.start_index_map = {0};
  g.index_vector_dim = 2;
  g.slice_sizes = {1};
  Val which = e.Gather(padded_index, e.Reshape(first, {b.bags, b.dim, 1}), g, TensorType{kS64, {b.bags, b.dim}});
  Val empty = e.Compare("EQ", first, e.Full(static_cast<double>(b.n), first.type));
  max = e.Select(empty, e.Full(0, max.type), max);
  return {max, which};
}

// _embedding_bag[_forward_only](weight, indices, offsets, scale_grad_by_freq, mode, sparse,
//   per_sample_weights, include_last_offset, padding_idx) -> (output, offset2bag, bag_size, max_indices)
std::vector<Val> LowerEmbeddingBag(LowerCtx& c) {
  Emitter& e = c.e;
  const TensorType& out = c.out(0);
  int64_t mode = c.int_arg(4), bags = out.dims[0];
  Bags b = Describe(c, 0, 1, 2, bags, c.int_arg(8, -1));
  ElementType acc = Opmath(out.dtype);
  Val rows = TakeRows(e, e.Convert(c.tensor(0), acc), b.index);  // [N, D]
  Val sizes = BagSizes(e, b);
  Val offset2bag = e.Convert(b.bag, c.out(1).dtype);
  Val max_indices = e.Full(0, c.out(3));
  Val result;
  if (mode == kMax) {
    auto [max, which] = BagMaxima(e, rows, b);
    result = max;
    max_indices = e.Convert(which, c.out(3).dtype);
  } else {
    if (c.is_tensor(6)) rows = Mul(e, rows, e.BroadcastInDim(e.Convert(c.tensor(6), acc), rows.dims(), {0}));
    Val kept = e.Select(e.BroadcastInDim(b.counted, rows.dims(), {0}), rows, e.Full(0, rows.type));
    result = ScatterRows(e, e.Full(0, TensorType{acc, {bags, b.dim}}), b.bag, kept, "add");
    if (mode == kMean) {
      Val divisor = e.Convert(e.Binary("maximum", sizes, e.Full(1, sizes.type)), acc);
      result = Div(e, result, e.BroadcastInDim(divisor, result.dims(), {0}));
    }
  }
  // With include_last_offset the Meta kernel sizes bag_size like offsets: one more, left 0.
  int64_t size_slots = c.out(2).dims[0];
  if (size_slots > bags) sizes = e.Pad(sizes, e.Scalar(0, kS64), {0}, {size_slots - bags}, {0});
  return {e.Convert(result, out.dtype), offset2bag, e.Convert(sizes, c.out(2).dtype), max_indices};
}

// _embedding_bag_dense_backward(grad, indices, offset2bag, bag_size, maximum_indices, num_weights,
//   scale_grad_by_freq, mode, per_sample_weights, padding_idx) -> grad_weight [num_weights, D]
std::vector<Val> LowerEmbeddingBagDenseBackward(LowerCtx& c) {
  Emitter& e = c.e;
  const TensorType& out = c.out();
  ElementType acc = Opmath(out.dtype);
  Val grad = e.Convert(c.tensor(0), acc);  // [B, D]
  int64_t num_weights = out.dims[0], d = out.dims[1], bags = grad.dims()[0];
  int64_t mode = c.int_arg(7), padding_idx = c.int_arg(9, -1);
  Val zero = e.Full(0, TensorType{acc, {num_weights, d}});
  // bag_size may have a slot past the last bag (include_last_offset): one per bag here.
  Val bag_size = e.SliceDim(e.Convert(c.tensor(3), kS64), 0, 0, bags);
  if (mode == kMax) {
    // Each maximum's gradient goes to the row it came from (bags with no counted index give none).
    Val which = e.Convert(c.tensor(4), kS64);  // [B, D]
    Val nonempty = e.Compare("GT", bag_size, e.Full(0, TensorType{kS64, {bags}}));
    Val g = e.Select(e.BroadcastInDim(nonempty, grad.dims(), {0}), grad, e.Full(0, grad.type));
    Val column = e.Iota(TensorType{kS64, {bags, d, 1}}, 1);
    Val coords = e.Concatenate({e.Reshape(which, {bags, d, 1}), column}, 2);
    Emitter::ScatterDims s;
    s.inserted_window_dims = {0, 1};
    s.scatter_dims_to_operand_dims = {0, 1};
    s.index_vector_dim = 2;
    return {e.Convert(e.Scatter(zero, coords, g, s, "add"), out.dtype)};
  }
  Val index = e.Convert(e.Reshape(c.tensor(1), {c.tensor(1).numel()}), kS64);
  int64_t n = index.numel();
  Val bag = e.Convert(c.tensor(2), kS64);
  Val rows = TakeRows(e, grad, bag);  // [N, D]
  if (mode == kMean) {
    Val sizes = e.Convert(bag_size, acc);
    Val per_index = GatherFlat(e, sizes, bag);
    rows = Div(e, rows, e.BroadcastInDim(per_index, rows.dims(), {0}));
  }
  if (c.is_tensor(8)) rows = Mul(e, rows, e.BroadcastInDim(e.Convert(c.tensor(8), acc), rows.dims(), {0}));
  if (c.bool_arg(6)) {  // scale_grad_by_freq: each row's gradient over how often its index occurs
    Val counts = ScatterAdd(e, index, e.Full(1, TensorType{acc, {n}}), num_weights);
    Val per_index = GatherFlat(e, counts, index);
    rows = Div(e, rows, e.BroadcastInDim(per_index, rows.dims(), {0}));
  }
  Val counted = e.Compare("NE", index, e.Full(static_cast<double>(padding_idx), index.type));
  rows = e.Select(e.BroadcastInDim(counted, rows.dims(), {0}), rows, e.Full(0, rows.type));
  return {e.Convert(ScatterRows(e, zero, index, rows, "add"), out.dtype)};
}

// _embedding_bag_per_sample_weights_backward(grad, weight, indices, offsets, offset2bag, mode,
//   padding_idx) -> [N]: <grad[bag of i], weight[indices[i]]>, 0 for padding_idx.
std::vector<Val> LowerEmbeddingBagPerSampleWeightsBackward(LowerCtx& c) {
  Emitter& e = c.e;
  ElementType acc = Opmath(c.out().dtype);
  Val index = e.Convert(e.Reshape(c.tensor(2), {c.tensor(2).numel()}), kS64);
  Val rows = TakeRows(e, e.Convert(c.tensor(1), acc), index);
  Val grads = TakeRows(e, e.Convert(c.tensor(0), acc), e.Convert(c.tensor(4), kS64));
  Val dot = SumDims(e, Mul(e, rows, grads), {1}, acc);
  Val counted = e.Compare("NE", index, e.Full(static_cast<double>(c.int_arg(6, -1)), index.type));
  return {e.Convert(e.Select(counted, dot, e.Full(0, dot.type)), c.out().dtype)};
}

}  // namespace

void RegisterEmbeddingBagOps(Registry& r) {
  // Indices must be rows of weight; per_sample_weights only come with mode sum (torch checks).
  // Their CPU kernels trust offsets (zero stand-ins with include_last_offset crash them): no probe;
  // the Meta kernels check the dtypes.
  // RuntimeError as CPU's ("Index 0 of input takes value 3 which is not in ...").
  const IndexArgSpec rows = WithRuntimeError({1, 0, -1, -1});
  for (const char* schema : {"_embedding_bag", "_embedding_bag_forward_only"}) {
    OpLowering& op = r.Add(schema, LowerEmbeddingBag);
    op.index_checks = {rows};
    op.cpu_probe = false;
  }
  r.Add("_embedding_bag_dense_backward", LowerEmbeddingBagDenseBackward);
  r.Add("_embedding_bag_per_sample_weights_backward", LowerEmbeddingBagPerSampleWeightsBackward);
}

}  // namespace torch_pjrt::lowering
