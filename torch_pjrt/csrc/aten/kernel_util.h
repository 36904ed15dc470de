// Small pieces shared by the handwritten ATen kernels (ops written as compositions of lowered ops
// or internal ops rather than through the generic lowered kernel).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/grad_mode.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/empty.h>

#include <cstdint>
#include <optional>

#include "aten/lazy_tensor.h"
#include "aten/transfer.h"
#include "graph/index_checks.h"

namespace torch_pjrt::aten {

// Whether an op's result must itself be differentiable in `t` (grad mode and requires_grad, or a
// forward-mode tangent): where torch's own kernels switch to their differentiable path.
inline bool NeedsDifferentiableResult(const at::Tensor& t) {
  return t.defined() && ((at::GradMode::is_enabled() && t.requires_grad()) || t._fw_grad(/*level=*/0).defined());
}

// Writes `value` into an out= tensor as torch's out= kernels do: resized (with torch's warning
// when a non-empty tensor changes shape), then copied.
inline const at::Tensor& WriteOut(const at::Tensor& out, const at::Tensor& value) {
  at::native::resize_output(out, value.sizes());
  out.copy_(value);
  return out;
}

// A meta tensor with t's sizes and dtype: an argument for running torch's Meta kernel of an op,
// which makes the CPU kernel's argument checks and gives the result shapes.
inline at::Tensor MetaOf(const at::Tensor& t) { return at::empty(t.sizes(), t.options().device(c10::kMeta)); }
inline std::optional<at::Tensor> MetaOf(const std::optional<at::Tensor>& t) {
  if (!t.has_value() || !t->defined()) return std::nullopt;
  return MetaOf(*t);
}

// A few values computed on the device, read to a new host tensor of `type` in one
// data_dependent_shape sync (the size or range a data-dependent op needs before it is traced).
inline at::Tensor ReadSizes(const at::Tensor& values, c10::ScalarType type) {
  at::Tensor host = at::empty(values.sizes(), at::TensorOptions().dtype(type));
  CopyToHost(values.to(type).contiguous(), host, graph::SyncCause::kDataDependentShape);
  return host;
}

// An upper bound for checks that only exclude negative values.
constexpr int64_t kNoUpperBound = int64_t{1} << 62;

// Records that integer `values` must lie in [lo, hi) when `result` is computed; else the next
// sync point raises RuntimeError(message): the CPU kernel's check of the data, deferred to the
// graph instead of read (graph::AddValueRangeCheck).
inline void CheckRangeWhenRun(const at::Tensor& values, const at::Tensor& result, int64_t lo, int64_t hi,
                              const char* message) {
  graph::GraphLock lock;
  graph::AddValueRangeCheck(result.device().index(), ReadValue(values), ReadValue(result), lo, hi, message);
}

}  // namespace torch_pjrt::aten
