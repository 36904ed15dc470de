// Kernels that are compositions of lowered ops, registered for pjrt so such calls do not take the
// CPU fallback although every op they run is lowered:
// - torch's device-generic kernels registered for CPU and CUDA only:
//   - mvlgamma.out: mvlgamma (composite: lgamma of a shifted range, summed) written into `out`.
//   - _embedding_bag_backward: picks _embedding_bag_dense_backward (lowered) or the sparse one.
// - out= forms the lowered kernel cannot derive because the functional op also writes arguments:
//   - _native_batch_norm_legit.out and _batch_norm_with_update.out (the functional ops update the
//     running statistics; torch has no Meta kernel for these out= forms).
#include <ATen/core/Tensor.h>
#include <ATen/ops/_embedding_bag_backward_native.h>
#include <ATen/ops/_batch_norm_with_update.h>
#include <ATen/ops/_native_batch_norm_legit.h>
#include <ATen/ops/mvlgamma_native.h>
#include <torch/library.h>

#include "aten/kernel_util.h"
#include "aten/torch_errors.h"

namespace torch_pjrt::aten {

namespace {

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> BatchNormLegitOut(
    const at::Tensor& input, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    at::Tensor& running_mean, at::Tensor& running_var, bool training, double momentum, double eps, at::Tensor& out,
    at::Tensor& save_mean, at::Tensor& save_invstd) {
  WithTorchErrors([&] {
    auto r = at::_native_batch_norm_legit(input, weight, bias, running_mean, running_var, training, momentum, eps);
    WriteOut(out, std::get<0>(r));
    WriteOut(save_mean, std::get<1>(r));
    WriteOut(save_invstd, std::get<2>(r));
  });
  return {out, save_mean, save_invstd};
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&, at::Tensor&> BatchNormWithUpdateOut(
    const at::Tensor& input, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    at::Tensor& running_mean, at::Tensor& running_var, double momentum, double eps, at::Tensor& out,
    at::Tensor& save_mean, at::Tensor& save_invstd, at::Tensor& reserve) {
  WithTorchErrors([&] {
    auto r = at::_batch_norm_with_update(input, weight, bias, running_mean, running_var, momentum, eps);
    WriteOut(out, std::get<0>(r));
    WriteOut(save_mean, std::get<1>(r));
    WriteOut(save_invstd, std::get<2>(r));
    WriteOut(reserve, std::get<3>(r));
  });
  return {out, save_mean, save_invstd, reserve};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("mvlgamma.out", static_cast<at::Tensor& (*)(const at::Tensor&, int64_t, at::Tensor&)>(&at::native::mvlgamma_out));
  m.impl("_embedding_bag_backward", TORCH_FN(at::native::_embedding_bag_backward_symint));
  m.impl("_native_batch_norm_legit.out", &BatchNormLegitOut);
  m.impl("_batch_norm_with_update.out", &BatchNormWithUpdateOut);
}

}  // namespace torch_pjrt::aten
