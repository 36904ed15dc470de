// torch.autocast("pjrt"): registers the AutocastPrivateUse1 kernels with the same op lists and
// cast policies CUDA uses. Without them any op under autocast fails with "Could not run ... with
// arguments from the 'Autocastpjrt' backend". Which lower-precision dtype is allowed comes from
// the active sub-plugin (torch.pjrt.get_amp_supported_dtype()).
#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace at::autocast {
namespace {

#ifndef ADD_NS
#define ADD_NS(RAW_OP) at::RAW_OP
#endif

Tensor BinaryCrossEntropyBanned(const Tensor&, const Tensor&, const std::optional<Tensor>&, int64_t) {
  TORCH_CHECK(false,
              "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast "
              "(their reduced-precision gradients are unstable). Use "
              "torch.nn.functional.binary_cross_entropy_with_logits or torch.nn.BCEWithLogitsLoss, "
              "which combine the sigmoid and the loss and are safe under autocast.");
}

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
#define PJRT_LOWER_PRECISION_FP(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
  AT_FORALL_LOWER_PRECISION_FP(PJRT_LOWER_PRECISION_FP)
  // Our convolutions dispatch through convolution_overrideable.
  KERNEL_PRIVATEUSEONE(convolution_overrideable, lower_precision_fp)
  // nn.LSTM runs as one mkldnn_rnn_layer per layer (torch_pjrt/rnn.py), which CPU autocast lists
  // too; CUDA's list has the per-step cells its LSTM runs instead.
  KERNEL_PRIVATEUSEONE(mkldnn_rnn_layer, lower_precision_fp)

#define PJRT_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
  AT_FORALL_FP32(PJRT_FP32)

#define PJRT_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
  AT_FORALL_FP32_SET_OPT_DTYPE(PJRT_FP32_SET_OPT_DTYPE)

  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)

#define PJRT_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_PROMOTE(PJRT_PROMOTE)

  // binary_cross_entropy is unsafe in reduced precision; autocast bans it as on CUDA.
  m.impl(TORCH_SELECTIVE_NAME("aten::binary_cross_entropy"), TORCH_FN((&BinaryCrossEntropyBanned)));
}

}  // namespace
}  // namespace at::autocast
