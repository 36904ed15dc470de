// tril_indices / triu_indices: the coordinates of a row x col matrix's lower (upper) triangle.
// Their count follows from the arguments alone, so they are a nonzero_static (lowered) of the
// triangle's mask at that size: computed on the device, with no constant baked into the graph.
#include <ATen/core/Tensor.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/nonzero_static.h>
#include <torch/library.h>

#include <algorithm>

#include "aten/torch_errors.h"

namespace torch_pjrt::aten {

namespace {

// Elements of row r in the lower triangle: columns [0, r + offset], clipped to [0, col].
int64_t LowerTriangleSize(int64_t row, int64_t col, int64_t offset) {
  int64_t count = 0;
  for (int64_t r = 0; r < row; ++r) count += std::clamp<int64_t>(r + offset + 1, 0, col);
  return count;
}

at::Tensor TriangleIndices(int64_t row, int64_t col, int64_t offset, bool lower, std::optional<c10::ScalarType> dtype,
                           std::optional<c10::Layout> layout, std::optional<c10::Device> device) {
  const char* name = lower ? "tril_indices" : "triu_indices";
  c10::ScalarType type = dtype.value_or(c10::kLong);
  TORCH_CHECK_NOT_IMPLEMENTED(type == c10::kLong || type == c10::kInt, "\"", name, "\" not implemented for '", type,
                              "'");
  TORCH_CHECK(row >= 0, "row must be non-negative, got", row);
  TORCH_CHECK(col >= 0, "col must be non-negative, got", col);
  TORCH_CHECK(layout.value_or(c10::kStrided) == c10::kStrided, "only support layout=torch.strided, got",
              layout.value_or(c10::kStrided));
  // The upper triangle from offset is the complement of the lower one up to offset - 1.
  int64_t count = lower ? LowerTriangleSize(row, col, offset) : row * col - LowerTriangleSize(row, col, offset - 1);
  auto options = at::TensorOptions().dtype(c10::kLong).device(device);
  at::Tensor rows = at::arange(row, options).unsqueeze(1), cols = at::arange(col, options).unsqueeze(0);
  at::Tensor diagonal = cols.sub(rows);
  at::Tensor mask = lower ? diagonal.le(offset) : diagonal.ge(offset);
  return at::nonzero_static(mask, count).t().to(type).contiguous();
}

at::Tensor TrilIndices(int64_t row, int64_t col, int64_t offset, std::optional<c10::ScalarType> dtype,
                       std::optional<c10::Layout> layout, std::optional<c10::Device> device, std::optional<bool>) {
  return WithTorchErrors([&] { return TriangleIndices(row, col, offset, true, dtype, layout, device); });
}

at::Tensor TriuIndices(int64_t row, int64_t col, int64_t offset, std::optional<c10::ScalarType> dtype,
                       std::optional<c10::Layout> layout, std::optional<c10::Device> device, std::optional<bool>) {
  return WithTorchErrors([&] { return TriangleIndices(row, col, offset, false, dtype, layout, device); });
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("tril_indices", &TrilIndices);
  m.impl("triu_indices", &TriuIndices);
}

}  // namespace torch_pjrt::aten
