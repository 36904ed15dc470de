// torch.histogram and torch.histogramdd on the device. Along each dim an element's bin is where
// it falls among that dim's edges (searchsorted, the last edge closing the last bin); elements
// outside the edges (and NaN) count nowhere; the bins' flat index takes an index_add of the counts
// or weights: what torch's CPU kernel (HistogramKernel.cpp) computes with its local search. With
// bin counts and no range, each dim's range is its data's min and max: read from the device in one
// data_dependent_shape sync, as the CPU kernel reads them, so the edges are torch's linspace of
// the same doubles. histogram is the one-dim case (input flattened to [N, 1]).
#include <ATen/core/Tensor.h>
#include <ATen/ops/amax.h>
#include <ATen/ops/amin.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/linspace.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/searchsorted.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <cmath>
#include <vector>

#include "aten/kernel_util.h"

namespace torch_pjrt::aten {

namespace {

using Edges = std::vector<at::Tensor>;

// Checks of the input [..., D] and weight, as the CPU kernel makes them.
void CheckInputs(const at::Tensor& self, const std::optional<at::Tensor>& weight) {
  TORCH_CHECK_NOT_IMPLEMENTED(c10::isFloatingType(self.scalar_type()), "\"histogramdd\" not implemented for '",
                              self.scalar_type(), "'");
  TORCH_CHECK(self.dim() >= 2, "torch.histogramdd: input tensor should have at least 2 dimensions");
  if (weight.has_value() && weight->defined()) {
    auto expected = self.sizes().slice(0, self.dim() - 1);
    TORCH_CHECK(weight->sizes() == expected,
                "torch.histogramdd: if weight tensor is provided it should have the same shape as the input tensor "
                "excluding its innermost dimension, but got input with shape ", self.sizes(), " and weight with shape ",
                weight->sizes());
    TORCH_CHECK(weight->scalar_type() == self.scalar_type(),
                "torch.histogramdd: if weight tensor is provided, input tensor and weight tensor should have the "
                "same dtype, but got input ", self.scalar_type(), ", and weight ", weight->scalar_type());
  }
}

// The counts (or summed weights) of the rows of `x` [N, D] per bin of `edges`: [bins_0, ...].
// density divides by the total and by each bin's width along every dim, in the CPU kernel's order.
at::Tensor Counts(const at::Tensor& x, const Edges& edges, const std::optional<at::Tensor>& weight, bool density) {
  int64_t n = x.size(0);
  std::vector<int64_t> shape;
  at::Tensor flat = at::zeros({n}, x.options().dtype(c10::kLong));
  at::Tensor inside = at::ones({n}, x.options().dtype(c10::kBool));
  for (size_t d = 0; d < edges.size(); ++d) {
    int64_t bins = edges[d].numel() - 1;
    at::Tensor column = x.select(1, static_cast<int64_t>(d));
    at::Tensor bin = at::searchsorted(edges[d], column, /*out_int32=*/false, /*right=*/true).sub(1).clamp(0, bins - 1);
    flat = flat.mul(bins).add(bin);
    inside = inside.logical_and(column.ge(edges[d][0])).logical_and(column.le(edges[d][-1]));
    shape.push_back(bins);
  }
  at::Tensor w = weight.has_value() && weight->defined() ? weight->reshape({-1}) : at::ones({n}, x.options());
  int64_t total = 1;
  for (int64_t b : shape) total *= b;
  at::Tensor hist = at::zeros({total}, x.options()).index_add_(0, flat, at::where(inside, w, 0)).view(shape);
  if (density) {
    hist = hist.div(hist.sum());
    for (size_t d = 0; d < edges.size(); ++d) {
      std::vector<int64_t> along(edges.size(), 1);
      along[d] = -1;
      hist = hist.div(edges[d].diff().view(along));
    }
  }
  return hist;
}

// Each dim's (min, max): `range`, or the data's (one read for every dim).
std::vector<std::pair<double, double>> Ranges(const at::Tensor& x, std::optional<at::ArrayRef<double>> range) {
  int64_t dims = x.size(1);
  std::vector<std::pair<double, double>> out(dims, {0.0, 1.0});
  if (range.has_value()) {
    TORCH_CHECK(static_cast<int64_t>(range->size()) == 2 * dims, "torch.histogramdd: for a ", dims,
                "-dimensional histogram range should have ", 2 * dims, " elements, but got ", range->size());
    for (int64_t d = 0; d < dims; ++d) out[d] = {(*range)[2 * d], (*range)[2 * d + 1]};
    return out;
  }
  if (x.size(0) == 0) return out;
  at::Tensor host = ReadSizes(at::stack({at::amin(x, 0), at::amax(x, 0)}), c10::kDouble);
  const double* p = host.const_data_ptr<double>();
  for (int64_t d = 0; d < dims; ++d) out[d] = {p[d], p[dims + d]};
  return out;
}

// Evenly spaced edges from bin counts, with the CPU kernel's checks.
Edges EdgesFromCounts(const at::Tensor& x, at::IntArrayRef bins, std::optional<at::ArrayRef<double>> range) {
  TORCH_CHECK(static_cast<int64_t>(bins.size()) == x.size(1),
              "histogramdd: The size of bins must be equal to the innermost dimension of the input.");
  for (size_t d = 0; d < bins.size(); ++d) {
    TORCH_CHECK(bins[d] > 0, "torch.histogram(): bins must be > 0, but got ", bins[d], " for dimension ", d);
  }
  Edges edges;
  auto ranges = Ranges(x, range);
  for (size_t d = 0; d < bins.size(); ++d) {
    auto [left, right] = ranges[d];
    TORCH_CHECK(left <= right, "torch.histogramdd: min should not exceed max, but got min ", left, " max ", right,
                " for dimension ", d);
    TORCH_CHECK(std::isfinite(left) && std::isfinite(right), "torch.histogramdd: dimension ", d, "'s range [", left,
                ", ", right, "] is not finite");
    if (left == right) {
      left -= 0.5;
      right += 0.5;
    }
    edges.push_back(at::linspace(left, right, bins[d] + 1, x.options()));
  }
  return edges;
}

void CheckEdges(const at::Tensor& x, at::TensorList bins) {
  TORCH_CHECK(static_cast<int64_t>(bins.size()) == x.size(1),
              "histogramdd: The size of bins must be equal to the innermost dimension of the input.");
  for (size_t d = 0; d < bins.size(); ++d) {
    TORCH_CHECK(bins[d].dim() == 1, "torch.histogramdd: bins tensor should have one dimension, but got ",
                bins[d].dim(), " dimensions in the bins tensor for dimension ", d);
    TORCH_CHECK(bins[d].numel() > 0, "torch.histogramdd: bins tensor should have at least 1 element, but got ",
                bins[d].numel(), " elements for dimension ", d);
    TORCH_CHECK(bins[d].scalar_type() == x.scalar_type(), "torch.histogramdd: input tensor and bins tensors should "
                "have the same dtype, but got input with dtype ", x.scalar_type(), " and bins for dimension ", d,
                " with dtype ", bins[d].scalar_type());
  }
}

at::Tensor Rows(const at::Tensor& self) { return self.reshape({-1, self.size(-1)}); }

// ----------------------------------------------------------------------------- kernels

std::tuple<at::Tensor, at::Tensor> HistogramBinCount(const at::Tensor& self, int64_t bins,
                                                     std::optional<at::ArrayRef<double>> range,
                                                     const std::optional<at::Tensor>& weight, bool density) {
  at::Tensor x = self.reshape({-1, 1});
  std::optional<at::Tensor> w = weight.has_value() && weight->defined() ? std::optional(weight->reshape({-1})) : weight;
  TORCH_CHECK_NOT_IMPLEMENTED(c10::isFloatingType(self.scalar_type()), "\"histogramdd\" not implemented for '",
                              self.scalar_type(), "'");
  if (w.has_value()) {
    TORCH_CHECK(weight->sizes() == self.sizes(), "torch.histogramdd: if weight tensor is provided it should have the "
                "same shape as the input tensor excluding its innermost dimension, but got input with shape ",
                x.sizes(), " and weight with shape ", weight->sizes());
  }
  CheckInputs(x, w);
  Edges edges = EdgesFromCounts(x, {bins}, range);
  return {Counts(x, edges, w, density), edges[0]};
}

std::tuple<at::Tensor, at::Tensor> HistogramBinEdges(const at::Tensor& self, const at::Tensor& bins,
                                                     const std::optional<at::Tensor>& weight, bool density) {
  at::Tensor x = self.reshape({-1, 1});
  std::optional<at::Tensor> w = weight.has_value() && weight->defined() ? std::optional(weight->reshape({-1})) : weight;
  CheckInputs(x, w);
  CheckEdges(x, {bins});
  if (bins.numel() == 1) return {at::zeros({0}, self.options()), bins.clone()};
  return {Counts(x, {bins}, w, density), bins.clone()};
}

std::vector<at::Tensor> HistogramddBinEdges(const at::Tensor& self, at::IntArrayRef bins,
                                            std::optional<at::ArrayRef<double>> range,
                                            const std::optional<at::Tensor>& weight, bool density) {
  CheckInputs(self, weight);
  return EdgesFromCounts(Rows(self), bins, range);
}

at::Tensor HistogramddFromBinCounts(const at::Tensor& self, at::IntArrayRef bins,
                                    std::optional<at::ArrayRef<double>> range, const std::optional<at::Tensor>& weight,
                                    bool density) {
  CheckInputs(self, weight);
  at::Tensor x = Rows(self);
  return Counts(x, EdgesFromCounts(x, bins, range), weight, density);
}

at::Tensor HistogramddFromBinTensors(const at::Tensor& self, at::TensorList bins,
                                     const std::optional<at::Tensor>& weight, bool density) {
  CheckInputs(self, weight);
  at::Tensor x = Rows(self);
  CheckEdges(x, bins);
  return Counts(x, Edges(bins.begin(), bins.end()), weight, density);
}

std::tuple<at::Tensor&, at::Tensor&> BinCountOut(const at::Tensor& self, int64_t bins,
                                                 std::optional<at::ArrayRef<double>> range,
                                                 const std::optional<at::Tensor>& weight, bool density,
                                                 at::Tensor& hist, at::Tensor& bin_edges) {
  auto [h, e] = HistogramBinCount(self, bins, range, weight, density);
  WriteOut(hist, h);
  WriteOut(bin_edges, e);
  return {hist, bin_edges};
}

std::tuple<at::Tensor&, at::Tensor&> BinEdgesOut(const at::Tensor& self, const at::Tensor& bins,
                                                 const std::optional<at::Tensor>& weight, bool density,
                                                 at::Tensor& hist, at::Tensor& bin_edges) {
  auto [h, e] = HistogramBinEdges(self, bins, weight, density);
  WriteOut(hist, h);
  WriteOut(bin_edges, e);
  return {hist, bin_edges};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  // The checks raise c10 errors (torch's exception types) directly; no lowering runs here.
  m.impl("histogram.bin_ct", &HistogramBinCount);
  m.impl("histogram.bin_ct_out", &BinCountOut);
  m.impl("histogram.bins_tensor", &HistogramBinEdges);
  m.impl("histogram.bins_tensor_out", &BinEdgesOut);
  m.impl("_histogramdd_bin_edges", &HistogramddBinEdges);
  m.impl("_histogramdd_from_bin_cts", &HistogramddFromBinCounts);
  m.impl("_histogramdd_from_bin_tensors", &HistogramddFromBinTensors);
}

}  // namespace torch_pjrt::aten
