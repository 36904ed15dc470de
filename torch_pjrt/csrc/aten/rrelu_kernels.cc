// rrelu_with_noise (nn.functional.rrelu, nn.RReLU): torch's CPU kernel as lowered ops. In training
// each element x <= 0 is scaled by its own draw r ~ U(lower, upper) from the pjrt generator, and
// `noise` (an argument the op writes, even in its functional form) receives r there and 1
// elsewhere, for the backward (rrelu_with_noise_backward, a composite of lowered ops). In
// evaluation it is leaky_relu with slope (lower + upper) / 2 and `noise` is left alone.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/leaky_relu.h>
#include <ATen/ops/where.h>
#include <torch/library.h>

#include "aten/kernel_util.h"
#include "aten/torch_errors.h"

namespace torch_pjrt::aten {

namespace {

at::Tensor RreluWithNoise(const at::Tensor& self, const at::Tensor& noise, const c10::Scalar& lower,
                          const c10::Scalar& upper, bool training, std::optional<at::Generator> generator) {
  if (!training) {
    return at::leaky_relu(self, (lower.toDouble() + upper.toDouble()) / 2);
  }
  at::Tensor draws = at::empty_like(self).uniform_(lower.toDouble(), upper.toDouble(), std::move(generator));
  at::Tensor scaled = self.le(0);
  noise.copy_(at::where(scaled, draws, 1));
  return at::where(scaled, self.mul(draws), self);
}

// The functional form's result is contiguous, as the CPU kernel's (empty_like(self,
// LEGACY_CONTIGUOUS_MEMORY_FORMAT)) whatever self's layout.
at::Tensor RreluWithNoiseKernel(const at::Tensor& self, at::Tensor& noise, const c10::Scalar& lower,
                                const c10::Scalar& upper, bool training, std::optional<at::Generator> generator) {
  return WithTorchErrors(
      [&] { return RreluWithNoise(self, noise, lower, upper, training, std::move(generator)).contiguous(); });
}

at::Tensor& RreluWithNoiseInPlaceKernel(at::Tensor& self, at::Tensor& noise, const c10::Scalar& lower,
                                        const c10::Scalar& upper, bool training,
                                        std::optional<at::Generator> generator) {
  return WithTorchErrors([&]() -> at::Tensor& {
    return self.copy_(RreluWithNoise(self, noise, lower, upper, training, std::move(generator)));
  });
}

at::Tensor& RreluWithNoiseOutKernel(const at::Tensor& self, at::Tensor& noise, const c10::Scalar& lower,
                                    const c10::Scalar& upper, bool training, std::optional<at::Generator> generator,
                                    at::Tensor& out) {
  return WithTorchErrors([&]() -> at::Tensor& {
    WriteOut(out, RreluWithNoise(self, noise, lower, upper, training, std::move(generator)));
    return out;
  });
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("rrelu_with_noise", &RreluWithNoiseKernel);
  m.impl("rrelu_with_noise_", &RreluWithNoiseInPlaceKernel);
  m.impl("rrelu_with_noise.out", &RreluWithNoiseOutKernel);
}

}  // namespace torch_pjrt::aten
