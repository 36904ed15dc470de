// torch.histogram on the device. Each element's bin is where it falls among the bin edges
// (searchsorted, the last edge closing the last bin), elements outside the edges (and NaN) count
// nowhere, and the counts (or weights) are summed with index_add: what torch's CPU kernel
// (HistogramKernel.cpp) computes with its local search. With a bin count and no range, the range
// is the input's min and max: read from the device in one data_dependent_shape sync, as the CPU
// kernel reads them, so the edges are torch's linspace of the same two doubles.
#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/linspace.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/searchsorted.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <cmath>

#include "aten/transfer.h"
#include "aten/torch_errors.h"

namespace torch_pjrt::aten {

namespace {

void CheckInputs(const at::Tensor& self, const std::optional<at::Tensor>& weight) {
  TORCH_CHECK_NOT_IMPLEMENTED(c10::isFloatingType(self.scalar_type()), "\"histogramdd\" not implemented for '",
                              self.scalar_type(), "'");
  if (weight.has_value() && weight->defined()) {
    TORCH_CHECK(weight->sizes() == self.sizes(),
                "torch.histogramdd: if weight tensor is provided it should have the same shape as the input tensor "
                "excluding its innermost dimension, but got input with shape ", self.reshape({-1, 1}).sizes(),
                " and weight with shape ", weight->sizes());
    TORCH_CHECK(weight->scalar_type() == self.scalar_type(),
                "torch.histogramdd: if weight tensor is provided, input tensor and weight tensor should have the "
                "same dtype, but got input ", self.scalar_type(), ", and weight ", weight->scalar_type());
  }
}

// Counts (or summed weights) of flattened `self` per bin of `edges`; density divides by the
// total and by each bin's width, in the CPU kernel's order.
at::Tensor Counts(const at::Tensor& self, const at::Tensor& edges, const std::optional<at::Tensor>& weight,
                  bool density) {
  int64_t bins = edges.numel() - 1;
  at::Tensor x = self.reshape({-1});
  at::Tensor bin = at::searchsorted(edges, x, /*out_int32=*/false, /*right=*/true).sub(1).clamp(0, bins - 1);
  at::Tensor inside = x.ge(edges[0]).logical_and(x.le(edges[-1]));
  at::Tensor w = weight.has_value() && weight->defined() ? weight->reshape({-1}) : at::ones_like(x);
  at::Tensor hist = at::zeros({bins}, self.options()).index_add_(0, bin, at::where(inside, w, 0));
  if (density) hist = hist.div(hist.sum()).div(edges.diff());
  return hist;
}

// The range of a bin count histogram: `range`, or the data's min and max (one read).
std::pair<double, double> Range(const at::Tensor& self, std::optional<at::ArrayRef<double>> range) {
  if (range.has_value()) {
    TORCH_CHECK(range->size() == 2, "torch.histogramdd: for 1 dimension, range should have 2 elements, but got ",
                range->size());
    return {(*range)[0], (*range)[1]};
  }
  if (self.numel() == 0) return {0.0, 1.0};
  at::Tensor bounds = at::stack({self.min(), self.max()}).to(c10::kDouble);
  at::Tensor host = at::empty({2}, at::TensorOptions().dtype(c10::kDouble));
  CopyToHost(bounds, host, graph::SyncCause::kDataDependentShape);
  return {host.const_data_ptr<double>()[0], host.const_data_ptr<double>()[1]};
}

std::tuple<at::Tensor, at::Tensor> HistogramBinCount(const at::Tensor& self, int64_t bins,
                                                     std::optional<at::ArrayRef<double>> range,
                                                     const std::optional<at::Tensor>& weight, bool density) {
  CheckInputs(self, weight);
  TORCH_CHECK(bins > 0, "torch.histogram(): bins must be > 0, but got ", bins, " for dimension 0");
  auto [left, right] = Range(self, range);
  TORCH_CHECK(left <= right, "torch.histogramdd: min should not exceed max, but got min ", left, " max ", right,
              " for dimension 0");
  TORCH_CHECK(std::isfinite(left) && std::isfinite(right), "torch.histogramdd: dimension 0's range [", left, ", ",
              right, "] is not finite");
  if (left == right) {
    left -= 0.5;
    right += 0.5;
  }
  at::Tensor edges = at::linspace(left, right, bins + 1, self.options());
  return {Counts(self, edges, weight, density), edges};
}

std::tuple<at::Tensor, at::Tensor> HistogramBinEdges(const at::Tensor& self, const at::Tensor& bins,
                                                     const std::optional<at::Tensor>& weight, bool density) {
  CheckInputs(self, weight);
  TORCH_CHECK(bins.dim() == 1, "torch.histogramdd: expected bins[0] to be a 1D tensor, but got ", bins.dim(), "D");
  TORCH_CHECK(bins.numel() > 0, "torch.histogramdd: bins[0] should have at least 1 element for dimension 0");
  TORCH_CHECK(bins.scalar_type() == self.scalar_type(), "torch.histogramdd: input tensor and bins tensors should "
              "have the same dtype, but got input with dtype ", self.scalar_type(), " and bins[0] with dtype ",
              bins.scalar_type());
  if (bins.numel() == 1) return {at::zeros({0}, self.options()), bins.clone()};
  return {Counts(self, bins, weight, density), bins.clone()};
}

void WriteOut(at::Tensor& out, const at::Tensor& value) {
  at::native::resize_output(out, value.sizes());
  out.copy_(value);
}

std::tuple<at::Tensor, at::Tensor> BinCountKernel(const at::Tensor& self, int64_t bins,
                                                  std::optional<at::ArrayRef<double>> range,
                                                  const std::optional<at::Tensor>& weight, bool density) {
  return WithTorchErrors([&] { return HistogramBinCount(self, bins, range, weight, density); });
}

std::tuple<at::Tensor&, at::Tensor&> BinCountOutKernel(const at::Tensor& self, int64_t bins,
                                                       std::optional<at::ArrayRef<double>> range,
                                                       const std::optional<at::Tensor>& weight, bool density,
                                                       at::Tensor& hist, at::Tensor& bin_edges) {
  WithTorchErrors([&] {
    auto [h, e] = HistogramBinCount(self, bins, range, weight, density);
    WriteOut(hist, h);
    WriteOut(bin_edges, e);
  });
  return {hist, bin_edges};
}

std::tuple<at::Tensor, at::Tensor> BinEdgesKernel(const at::Tensor& self, const at::Tensor& bins,
                                                  const std::optional<at::Tensor>& weight, bool density) {
  return WithTorchErrors([&] { return HistogramBinEdges(self, bins, weight, density); });
}

std::tuple<at::Tensor&, at::Tensor&> BinEdgesOutKernel(const at::Tensor& self, const at::Tensor& bins,
                                                       const std::optional<at::Tensor>& weight, bool density,
                                                       at::Tensor& hist, at::Tensor& bin_edges) {
  WithTorchErrors([&] {
    auto [h, e] = HistogramBinEdges(self, bins, weight, density);
    WriteOut(hist, h);
    WriteOut(bin_edges, e);
  });
  return {hist, bin_edges};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("histogram.bin_ct", &BinCountKernel);
  m.impl("histogram.bin_ct_out", &BinCountOutKernel);
  m.impl("histogram.bins_tensor", &BinEdgesKernel);
  m.impl("histogram.bins_tensor_out", &BinEdgesOutKernel);
}

}  // namespace torch_pjrt::aten
