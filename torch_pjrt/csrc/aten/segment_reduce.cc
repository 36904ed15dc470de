// segment_reduce and _segment_reduce_backward on the device (lowering/segment_reduce.cc): the
// segments become bounds [B, S + 1] (offsets as given, lengths as their running sum), the data a
// [B, L, R] array around the axis, the initial value a 0-d tensor. torch's Meta kernel checks the
// arguments and gives the result shape; the CPU kernel's data checks of lengths (no negative
// length, rows summing to the axis size) run with the graph instead of reading the lengths.
#include <ATen/core/Tensor.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/ops/_segment_reduce_backward.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/segment_reduce.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include "aten/kernel_util.h"
#include "aten/lazy_tensor.h"
#include "aten/torch_errors.h"

namespace torch_pjrt::aten {

namespace {

bool Given(const std::optional<at::Tensor>& t) { return t.has_value() && t->defined(); }

int64_t ReduceCode(c10::string_view reduce) {
  static const char* names[] = {"sum", "mean", "max", "min", "prod"};
  for (int64_t i = 0; i < 5; ++i) {
    if (reduce == names[i]) return i;
  }
  TORCH_CHECK(false, "reduce argument must be either sum, prod, mean, amax or amin, got ", reduce);
}

// The op's shapes around the axis: B (dims before it), L (its size), R (dims after it).
struct Layout {
  int64_t batch = 1, length = 0, rest = 1;
};
Layout LayoutOf(const at::Tensor& data, int64_t axis) {
  Layout l;
  for (int64_t d = 0; d < axis; ++d) l.batch *= data.size(d);
  l.length = data.size(axis);
  for (int64_t d = axis + 1; d < data.dim(); ++d) l.rest *= data.size(d);
  return l;
}

// Segment bounds [B, S + 1]: offsets, or 0 followed by the running sum of lengths.
at::Tensor Bounds(const std::optional<at::Tensor>& lengths, const std::optional<at::Tensor>& offsets, int64_t batch) {
  if (Given(offsets)) return offsets->to(c10::kLong).reshape({batch, -1});
  at::Tensor l = lengths->to(c10::kLong).reshape({batch, -1});
  return at::cat({at::zeros({batch, 1}, l.options()), l.cumsum(1)}, 1);
}

at::Tensor InitialValue(const std::optional<c10::Scalar>& initial, const at::Tensor& data) {
  return at::scalar_tensor(initial.value_or(0), data.options());
}

// What both internal ops take: the reduction's code, the layout around the axis and the bounds.
struct SegmentCall {
  int64_t code;
  Layout layout;
  at::Tensor bounds;
  int64_t segments;
  std::vector<int64_t> ints;  // the internal op's attributes: reduction, has initial
};
SegmentCall Prepare(const at::Tensor& data, c10::string_view reduce, const std::optional<at::Tensor>& lengths,
                    const std::optional<at::Tensor>& offsets, int64_t axis, const std::optional<c10::Scalar>& initial) {
  SegmentCall s;
  s.code = ReduceCode(reduce);
  s.layout = LayoutOf(data, at::maybe_wrap_dim(axis, data.dim()));
  s.bounds = Bounds(lengths, offsets, s.layout.batch);
  s.segments = s.bounds.size(1) - 1;
  s.ints = {s.code, initial.has_value() ? 1 : 0};
  return s;
}

// The CPU kernel's checks of lengths (unless unsafe), as deferred checks of `result`.
void CheckLengthsWhenRun(const at::Tensor& lengths, int64_t axis_size, const at::Tensor& result) {
  at::Tensor l = lengths.to(c10::kLong);
  CheckRangeWhenRun(l, result, 0, kNoUpperBound, "lengths contains negative value!");
  CheckRangeWhenRun(l.sum(-1).sub(axis_size), result, 0, 1,
                    "segment_reduce(): Expected all rows of lengths along axis to sum to "
                    "data.size(lengths.dim()-1) when !unsafe.");
}

at::Tensor SegmentReduce(const at::Tensor& data, c10::string_view reduce, const std::optional<at::Tensor>& lengths,
                         const std::optional<at::Tensor>& indices, const std::optional<at::Tensor>& offsets,
                         int64_t axis, bool unsafe, const std::optional<c10::Scalar>& initial) {
  at::Tensor meta = at::segment_reduce(MetaOf(data), reduce, MetaOf(lengths), MetaOf(indices), MetaOf(offsets), axis,
                                       unsafe, initial);
  SegmentCall s = Prepare(data, reduce, lengths, offsets, axis, initial);
  const Layout& l = s.layout;
  std::vector<graph::Value> v = TraceInternalOp(
      "pjrt::segment_reduce", {data.reshape({l.batch, l.length, l.rest}), s.bounds, InitialValue(initial, data)},
      s.ints, {graph::TensorType{ToElementType(data.scalar_type()), {l.batch, s.segments, l.rest}}});
  at::Tensor result = TensorOfValue(v[0], meta.sizes(), data.scalar_type(), data.device().index());
  if (!unsafe && Given(lengths) && !Given(offsets) && result.numel() > 0) CheckLengthsWhenRun(*lengths, l.length, result);
  return result;
}

at::Tensor SegmentReduceBackward(const at::Tensor& grad, const at::Tensor& output, const at::Tensor& data,
                                 c10::string_view reduce, const std::optional<at::Tensor>& lengths,
                                 const std::optional<at::Tensor>& offsets, int64_t axis,
                                 const std::optional<c10::Scalar>& initial) {
  TORCH_CHECK(Given(lengths) || Given(offsets), "segment_reduce(): Either lengths or offsets must be defined.");
  SegmentCall s = Prepare(data, reduce, lengths, offsets, axis, initial);
  const Layout& l = s.layout;
  std::vector<graph::Value> v = TraceInternalOp(
      "pjrt::segment_reduce_backward",
      {grad.reshape({l.batch, s.segments, l.rest}), output.reshape({l.batch, s.segments, l.rest}),
       data.reshape({l.batch, l.length, l.rest}), s.bounds, InitialValue(initial, data)},
      s.ints,
      {graph::TensorType{ToElementType(data.scalar_type()), {l.batch, l.length, l.rest}}});
  return TensorOfValue(v[0], data.sizes(), data.scalar_type(), data.device().index());
}

at::Tensor SegmentReduceKernel(const at::Tensor& data, c10::string_view reduce, const std::optional<at::Tensor>& lengths,
                               const std::optional<at::Tensor>& indices, const std::optional<at::Tensor>& offsets,
                               int64_t axis, bool unsafe, const std::optional<c10::Scalar>& initial) {
  return WithTorchErrors([&] { return SegmentReduce(data, reduce, lengths, indices, offsets, axis, unsafe, initial); });
}

at::Tensor SegmentReduceBackwardKernel(const at::Tensor& grad, const at::Tensor& output, const at::Tensor& data,
                                       c10::string_view reduce, const std::optional<at::Tensor>& lengths,
                                       const std::optional<at::Tensor>& offsets, int64_t axis,
                                       const std::optional<c10::Scalar>& initial) {
  return WithTorchErrors(
      [&] { return SegmentReduceBackward(grad, output, data, reduce, lengths, offsets, axis, initial); });
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("segment_reduce", &SegmentReduceKernel);
  m.impl("_segment_reduce_backward", &SegmentReduceBackwardKernel);
}

}  // namespace torch_pjrt::aten
