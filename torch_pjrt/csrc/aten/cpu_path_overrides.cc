// CompositeImplicitAutograd ops whose decomposition takes another path on the CPU than on any other
// device, with a visible difference: the autograd kernel here gives pjrt the CPU's result.
// - max_pool1d: on a CPU tensor that needs no gradient, torch runs its own kernel
//   (max_pool1d_impl), which writes a new contiguous tensor; elsewhere (and with a gradient) the
//   result is max_pool1d_with_indices's, laid out like the input, so a transposed input gave a
//   transposed result (fuzz seed 5012217 with --focus cast,inplace,setitem,view,grad).
#include <ATen/core/Tensor.h>
#include <ATen/ops/max_pool1d_native.h>
#include <torch/library.h>

#include "aten/kernel_util.h"

namespace torch_pjrt::aten {

namespace {

at::Tensor MaxPool1d(const at::Tensor& self, at::IntArrayRef kernel_size, at::IntArrayRef stride,
                     at::IntArrayRef padding, at::IntArrayRef dilation, bool ceil_mode) {
  at::Tensor out = at::native::max_pool1d(self, kernel_size, stride, padding, dilation, ceil_mode);
  // torch's condition for max_pool1d_with_indices on a CPU tensor (the gradient needs the indices).
  return NeedsDifferentiableResult(self) ? out : out.contiguous();
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) { m.impl("max_pool1d", MaxPool1d); }

}  // namespace torch_pjrt::aten
