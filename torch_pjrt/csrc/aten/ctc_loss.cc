// _ctc_loss and _ctc_loss_backward (nn.functional.ctc_loss) on the device: torch's Meta kernel
// checks the arguments (its CPU kernel's checks), the targets become a padded [N, L] tensor
// (L the longest target), the lengths small s64 tensors, and the internal ops of
// lowering/ctc_loss.cc compute the loss and its gradient. Lengths are values, not attributes: a
// batch with other lengths but the same longest target reuses the compiled graph.
#include <ATen/core/Tensor.h>
#include <ATen/ops/_ctc_loss.h>
#include <ATen/ops/constant_pad_nd.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/take.h>
#include <ATen/ops/tensor.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include "aten/kernel_util.h"
#include "aten/lazy_tensor.h"
#include "aten/torch_errors.h"

namespace torch_pjrt::aten {

namespace {

at::Tensor OnDevice(c10::IntArrayRef values, const at::Tensor& like) {
  return at::tensor(values, at::TensorOptions().dtype(c10::kLong)).to(like.device());
}

// Targets as [N, L]: a 2-d targets tensor cut to L columns, or concatenated 1-d targets gathered
// per batch element (positions past a target's length repeat an in-range one; nothing reads them).
at::Tensor PaddedTargets(const at::Tensor& targets, c10::IntArrayRef target_lengths, int64_t longest) {
  if (targets.dim() == 2) return targets.narrow(1, 0, longest).to(c10::kLong);
  int64_t batch = static_cast<int64_t>(target_lengths.size());
  std::vector<int64_t> index(batch * longest, 0);
  int64_t offset = 0, last = std::max<int64_t>(targets.numel() - 1, 0);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t j = 0; j < longest; ++j) {
      index[b * longest + j] = std::min(offset + std::min(j, std::max<int64_t>(target_lengths[b] - 1, 0)), last);
    }
    offset += target_lengths[b];
  }
  if (targets.numel() == 0) return at::zeros({batch, longest}, targets.options().dtype(c10::kLong));
  at::Tensor idx = at::tensor(index, at::TensorOptions().dtype(c10::kLong)).to(targets.device()).view({batch, longest});
  return at::take(targets, idx).to(c10::kLong);
}

int64_t Longest(c10::IntArrayRef lengths) {
  int64_t l = 0;
  for (int64_t v : lengths) l = std::max(l, v);
  return l;
}

std::tuple<at::Tensor, at::Tensor> CtcLoss(const at::Tensor& log_probs, const at::Tensor& targets,
                                           c10::IntArrayRef input_lengths, c10::IntArrayRef target_lengths,
                                           int64_t blank, bool zero_infinity) {
  // torch's Meta kernel runs the CPU kernel's checks and gives the result shapes.
  auto meta = at::_ctc_loss(MetaOf(log_probs), MetaOf(targets), input_lengths, target_lengths, blank, zero_infinity);
  const at::Tensor& alpha_meta = std::get<1>(meta);
  int64_t longest = Longest(target_lengths);
  at::Tensor padded = PaddedTargets(targets, target_lengths, longest);
  std::vector<graph::Value> v = TraceInternalOp(
      "pjrt::ctc_loss", {log_probs, padded, OnDevice(input_lengths, log_probs), OnDevice(target_lengths, log_probs)},
      {blank},
      {graph::TensorType{ToElementType(log_probs.scalar_type()), {log_probs.size(1)}},
       graph::TensorType{ToElementType(log_probs.scalar_type()), Dims(alpha_meta.sizes().begin(), alpha_meta.sizes().end())}});
  int device = log_probs.device().index();
  return {TensorOfValue(v[0], {log_probs.size(1)}, log_probs.scalar_type(), device),
          TensorOfValue(v[1], alpha_meta.sizes(), log_probs.scalar_type(), device)};
}

at::Tensor CtcLossBackward(const at::Tensor& grad, const at::Tensor& log_probs, const at::Tensor& targets,
                           c10::IntArrayRef input_lengths, c10::IntArrayRef target_lengths,
                           const at::Tensor& neg_log_likelihood, const at::Tensor& log_alpha, int64_t blank,
                           bool zero_infinity) {
  TORCH_CHECK(log_alpha.dim() == 3 && log_alpha.size(2) % 2 == 1, "ctc_loss_backward: log_alpha must be [N, T, 2 L + 1]");
  int64_t longest = (log_alpha.size(2) - 1) / 2;
  at::Tensor padded = PaddedTargets(targets, target_lengths, std::min(longest, Longest(target_lengths)));
  if (padded.size(1) < longest) padded = at::constant_pad_nd(padded, {0, longest - padded.size(1)}, blank);
  std::vector<graph::Value> v = TraceInternalOp(
      "pjrt::ctc_loss_backward",
      {grad, log_probs, padded, OnDevice(input_lengths, log_probs), OnDevice(target_lengths, log_probs),
       neg_log_likelihood, log_alpha},
      {blank, zero_infinity ? 1 : 0},
      {graph::TensorType{ToElementType(log_probs.scalar_type()), Dims(log_probs.sizes().begin(), log_probs.sizes().end())}});
  return TensorOfValue(v[0], log_probs.sizes(), log_probs.scalar_type(), log_probs.device().index());
}

// The .Tensor overloads read their lengths to the host, as the CPU kernel does.
std::vector<int64_t> HostLengths(const at::Tensor& lengths, const char* name) {
  TORCH_CHECK(c10::isIntegralType(lengths.scalar_type(), /*includeBool=*/false), name, " must be integral");
  at::Tensor host = lengths.to(c10::kCPU, c10::kLong).contiguous();
  return std::vector<int64_t>(host.const_data_ptr<int64_t>(), host.const_data_ptr<int64_t>() + host.numel());
}

std::tuple<at::Tensor, at::Tensor> CtcLossKernel(const at::Tensor& log_probs, const at::Tensor& targets,
                                                 c10::IntArrayRef input_lengths, c10::IntArrayRef target_lengths,
                                                 int64_t blank, bool zero_infinity) {
  return WithTorchErrors([&] { return CtcLoss(log_probs, targets, input_lengths, target_lengths, blank, zero_infinity); });
}

std::tuple<at::Tensor, at::Tensor> CtcLossTensorKernel(const at::Tensor& log_probs, const at::Tensor& targets,
                                                       const at::Tensor& input_lengths, const at::Tensor& target_lengths,
                                                       int64_t blank, bool zero_infinity) {
  return WithTorchErrors([&] {
    return CtcLoss(log_probs, targets, HostLengths(input_lengths, "input_lengths"),
                   HostLengths(target_lengths, "target_lengths"), blank, zero_infinity);
  });
}

at::Tensor CtcLossBackwardKernel(const at::Tensor& grad, const at::Tensor& log_probs, const at::Tensor& targets,
                                 c10::IntArrayRef input_lengths, c10::IntArrayRef target_lengths,
                                 const at::Tensor& neg_log_likelihood, const at::Tensor& log_alpha, int64_t blank,
                                 bool zero_infinity) {
  return WithTorchErrors([&] {
    return CtcLossBackward(grad, log_probs, targets, input_lengths, target_lengths, neg_log_likelihood, log_alpha,
                           blank, zero_infinity);
  });
}

at::Tensor CtcLossBackwardTensorKernel(const at::Tensor& grad, const at::Tensor& log_probs, const at::Tensor& targets,
                                       const at::Tensor& input_lengths, const at::Tensor& target_lengths,
                                       const at::Tensor& neg_log_likelihood, const at::Tensor& log_alpha,
                                       int64_t blank, bool zero_infinity) {
  return WithTorchErrors([&] {
    return CtcLossBackward(grad, log_probs, targets, HostLengths(input_lengths, "input_lengths"),
                           HostLengths(target_lengths, "target_lengths"), neg_log_likelihood, log_alpha, blank,
                           zero_infinity);
  });
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_ctc_loss", &CtcLossKernel);
  m.impl("_ctc_loss.Tensor", &CtcLossTensorKernel);
  m.impl("_ctc_loss_backward", &CtcLossBackwardKernel);
  m.impl("_ctc_loss_backward.Tensor", &CtcLossBackwardTensorKernel);
}

}  // namespace torch_pjrt::aten
