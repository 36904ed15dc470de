// scaled_dot_product_attention on the device as one op each way. torch asks a PrivateUse1 device
// which SDPA backend to use (`_fused_sdp_choice_stub`); we answer "overrideable" for the calls
// lowering/attention.cc computes, and torch then calls `_scaled_dot_product_fused_attention_overrideable`
// (autograd: its `_backward`), implemented here over the internal ops pjrt::attention and
// pjrt::attention_backward. Everything else (dropout, which draws through native_dropout, and
// shapes or dtypes the math path must refuse with its own errors) gets torch's math path, which is
// what every call took before. A mask together with is_causal is taken where CPU's flash kernel
// takes it (it applies both; the math path refuses the pair).
#include <ATen/Context.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/grad_mode.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/SDPBackend.h>
#include <c10/core/Contiguity.h>
#include <ATen/ExpandUtils.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <tuple>
#include <vector>

#include "aten/kernel_util.h"
#include "aten/lazy_tensor.h"
#include "aten/torch_errors.h"
#include "graph/metrics.h"

namespace torch_pjrt::aten {

namespace {

using at::SDPBackend;

bool IsAttentionDtype(c10::ScalarType t) {
  return t == c10::kFloat || t == c10::kDouble || t == c10::kBFloat16 || t == c10::kHalf;
}

// A mask the lowering adds as it is: none, or a boolean or query-dtype tensor on the query's
// device that broadcasts to the scores [B, Hq, L, S] (3-d inputs: [Hq, L, S]) without growing.
bool IsAddableMask(const std::optional<at::Tensor>& mask, const at::Tensor& q, const at::Tensor& k) {
  if (!mask.has_value() || !mask->defined()) return true;
  const at::Tensor& m = *mask;
  if (m.is_nested() || m.device() != q.device()) return false;
  if (m.scalar_type() != c10::kBool && m.scalar_type() != q.scalar_type()) return false;
  std::vector<int64_t> scores = q.sizes().vec();
  scores.back() = k.size(-2);
  return at::is_expandable_to(m.sizes(), scores);
}

// Whether lowering/attention.cc computes this call exactly as torch's math path would.
bool Supported(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const std::optional<at::Tensor>& mask,
               double dropout_p, bool is_causal, bool enable_gqa) {
  if (dropout_p != 0.0) return false;  // drawn through native_dropout on the math path
  if (q.is_nested() || k.is_nested() || v.is_nested()) return false;
  if (q.dim() != k.dim() || q.dim() != v.dim() || (q.dim() != 3 && q.dim() != 4)) return false;
  if (k.device() != q.device() || v.device() != q.device()) return false;
  if (!IsAttentionDtype(q.scalar_type()) || k.scalar_type() != q.scalar_type() || v.scalar_type() != q.scalar_type()) {
    return false;
  }
  if (q.numel() == 0 || k.numel() == 0 || v.numel() == 0) return false;
  if (q.dim() == 4 && (k.size(0) != q.size(0) || v.size(0) != q.size(0))) return false;
  int64_t hq = q.size(-3), hk = k.size(-3);
  if (v.size(-3) != hk || k.size(-2) != v.size(-2) || k.size(-1) != q.size(-1)) return false;
  if (hq != hk && !(enable_gqa && hq % hk == 0)) return false;
  if (is_causal && mask.has_value() && mask->defined()) {
    // CPU's flash kernel applies both; where it cannot run (3-d inputs, a mask that needs its
    // gradient) CPU takes the math path, which refuses the pair: so do we.
    if (q.dim() != 4 || (at::GradMode::is_enabled() && mask->requires_grad())) return false;
  }
  return IsAddableMask(mask, q, k);
}

int64_t FusedSdpChoice(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                       const std::optional<at::Tensor>& mask, double dropout_p, bool is_causal,
                       std::optional<double> /*scale*/, bool enable_gqa) {
  // torch.nn.attention.sdpa_kernel's choice of backends, as CUDA honours it: with neither
  // allowed (or only ours, for a call it cannot take) torch raises "No viable backend".
  const at::Context& ctx = at::globalContext();
  if (ctx.userEnabledOverrideableSDP() && Supported(q, k, v, mask, dropout_p, is_causal, enable_gqa)) {
    return static_cast<int64_t>(SDPBackend::overrideable);
  }
  return static_cast<int64_t>(ctx.userEnabledMathSDP() ? SDPBackend::math : SDPBackend::error);
}

// The attributes after the tensors: is_causal, and the scale (torch's default 1 / sqrt(E)).
graph::ArgList AttentionAttrs(const at::Tensor& q, bool is_causal, std::optional<double> scale) {
  double s = scale.has_value() ? *scale : 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  graph::ArgList attrs;
  attrs.push_back(graph::Arg::Bool(is_causal));
  attrs.push_back(graph::Arg::Double(s));
  return attrs;
}

graph::TensorType TypeOf(c10::IntArrayRef sizes, c10::ScalarType dtype) {
  return graph::TensorType{ToElementType(dtype), Dims(sizes.begin(), sizes.end())};
}

// The strides empty_like gives a tensor of these sizes and strides: the same when they are dense
// and non-overlapping, else dense in the same order of dimensions. (Computed here: empty_like's
// Meta kernel is a Python reference, ~200 us a call.)
std::vector<int64_t> LikeStrides(c10::IntArrayRef sizes, c10::IntArrayRef strides) {
  if (c10::_compute_non_overlapping_and_dense(sizes, strides)) return strides.vec();
  return at::infer_dense_strides(sizes, strides);
}

// A new pjrt tensor of `sizes` and `strides` holding `v`.
at::Tensor TensorWithStrides(graph::Value v, c10::IntArrayRef sizes, c10::IntArrayRef strides, c10::ScalarType dtype,
                             int device) {
  at::Tensor t = EmptyStrided(sizes, strides, dtype, device);
  if (t.numel() > 0) {
    graph::GraphLock lock;
    WriteValue(t, std::move(v));
  }
  return t;
}

// The output's strides as torch's Meta kernel (alloc_with_matching_layout) and CPU's kernel lay it
// out: like the query's. For 4-d inputs of one head size, empty_like of the query with dims 1 and 2
// swapped, swapped back; otherwise the query's order of dimensions, densely.
std::vector<int64_t> OutputStrides(const at::Tensor& q, c10::IntArrayRef out_sizes) {
  if (q.dim() == 4 && out_sizes == q.sizes()) {
    std::vector<int64_t> sizes = q.sizes().vec(), strides = q.strides().vec();
    std::swap(sizes[1], sizes[2]);
    std::swap(strides[1], strides[2]);
    std::vector<int64_t> like = LikeStrides(sizes, strides);
    std::swap(like[1], like[2]);
    return like;
  }
  std::vector<int64_t> order(q.dim());
  for (int64_t i = 0; i < q.dim(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return q.stride(a) > q.stride(b); });
  std::vector<int64_t> strides(q.dim());
  int64_t next = 1;
  for (int64_t i = q.dim() - 1; i >= 0; --i) {
    strides[order[i]] = next;
    next *= out_sizes[order[i]];
  }
  return strides;
}

std::vector<at::Tensor> AttentionInputs(std::vector<at::Tensor> tensors, const std::optional<at::Tensor>& bias) {
  if (bias.has_value() && bias->defined()) tensors.push_back(*bias);
  return tensors;
}

void CountAttention(const char* op) { graph::Metrics::CountLoweredOp(graph::InternalOp(op)); }

using AttentionResult = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt,
                                   at::Tensor, at::Tensor, at::Tensor>;

AttentionResult Attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const std::optional<at::Tensor>& bias, double dropout_p, bool is_causal,
                          std::optional<double> scale) {
  TORCH_CHECK(dropout_p == 0.0, "pjrt: _scaled_dot_product_fused_attention_overrideable has no dropout; "
              "call scaled_dot_product_attention, which takes the math path for dropout_p > 0");
  TORCH_CHECK(Supported(q, k, v, bias, 0.0, is_causal, /*enable_gqa=*/true),
              "pjrt: _scaled_dot_product_fused_attention_overrideable got inputs it does not support (q ", q.sizes(),
              ", k ", k.sizes(), ", v ", v.sizes(), "); call scaled_dot_product_attention instead");
  int device = q.device().index();
  std::vector<int64_t> out_sizes = q.sizes().vec();
  out_sizes.back() = v.size(-1);
  std::vector<int64_t> lse_sizes = {q.dim() == 4 ? q.size(0) : 1, q.size(-3), q.size(-2)};
  std::vector<graph::Value> r = TraceInternalOpWith(
      "pjrt::attention", AttentionInputs({q, k, v}, bias), AttentionAttrs(q, is_causal, scale),
      {TypeOf(out_sizes, q.scalar_type()), TypeOf(lse_sizes, c10::kFloat), TypeOf({}, c10::kLong),
       TypeOf({}, c10::kLong)});
  CountAttention("pjrt::attention");
  at::Tensor out = TensorWithStrides(r[0], out_sizes, OutputStrides(q, out_sizes), q.scalar_type(), device);
  at::Tensor lse = TensorOfValue(r[1], lse_sizes, c10::kFloat, device);
  // No dropout: the philox seed and offset are 0-d zeros. They are results of the op, not empty
  // tensors: AOTAutograd saves them for the backward, and a torch.compile capture can only replay
  // results its graph computes.
  at::Tensor seed = TensorOfValue(r[2], {}, c10::kLong, device), offset = TensorOfValue(r[3], {}, c10::kLong, device);
  return {out, lse, at::Tensor(), at::Tensor(), q.size(-2), k.size(-2), seed, offset, at::Tensor()};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> AttentionBackward(
    const at::Tensor& grad, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& bias,
    std::array<bool, 4> mask, bool is_causal, std::optional<double> scale) {
  int device = q.device().index();
  bool bias_grad = bias.defined() && mask[3];
  std::vector<graph::TensorType> outs = {TypeOf(q.sizes(), q.scalar_type()), TypeOf(k.sizes(), k.scalar_type()),
                                         TypeOf(v.sizes(), v.scalar_type())};
  if (bias_grad) outs.push_back(TypeOf(bias.sizes(), bias.scalar_type()));
  std::vector<graph::Value> r = TraceInternalOpWith(
      "pjrt::attention_backward", AttentionInputs({grad, q, k, v}, bias.defined() ? std::optional(bias) : std::nullopt),
      AttentionAttrs(q, is_causal, scale), std::move(outs));
  CountAttention("pjrt::attention_backward");
  // Gradients laid out like their inputs (torch's Meta kernel: empty_like).
  auto like = [&](size_t i, const at::Tensor& t) {
    if (!mask[i]) return at::Tensor();
    return TensorWithStrides(r[i], t.sizes(), LikeStrides(t.sizes(), t.strides()), t.scalar_type(), device);
  };
  return {like(0, q), like(1, k), like(2, v), bias_grad ? like(3, bias) : at::Tensor()};
}

AttentionResult AttentionKernel(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const std::optional<at::Tensor>& bias, double dropout_p, bool is_causal,
                                bool /*return_debug_mask*/, std::optional<double> scale) {
  return WithTorchErrors([&] { return Attention(q, k, v, bias, dropout_p, is_causal, scale); });
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> AttentionBackwardKernel(
    const at::Tensor& grad, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& bias,
    std::array<bool, 4> mask, const at::Tensor& /*out*/, const at::Tensor& /*logsumexp*/,
    const at::Tensor& /*cum_seq_q*/, const at::Tensor& /*cum_seq_k*/, c10::SymInt /*max_q*/, c10::SymInt /*max_k*/,
    double dropout_p, bool is_causal, const at::Tensor& /*philox_seed*/, const at::Tensor& /*philox_offset*/,
    std::optional<double> scale) {
  TORCH_CHECK(dropout_p == 0.0, "pjrt: _scaled_dot_product_fused_attention_overrideable_backward has no dropout");
  return WithTorchErrors([&] { return AttentionBackward(grad, q, k, v, bias, mask, is_causal, scale); });
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_scaled_dot_product_fused_attention_overrideable", &AttentionKernel);
  m.impl("_scaled_dot_product_fused_attention_overrideable_backward", &AttentionBackwardKernel);
}

}  // namespace torch_pjrt::aten

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &torch_pjrt::aten::FusedSdpChoice)
}  // namespace at::native
