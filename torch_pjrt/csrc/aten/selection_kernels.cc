// Kernels registered directly, next to the lowered ones of lowering/sorting.cc and scans.cc,
// for two ops the generic kernel (aten/lowered_kernel.cc) cannot trace:
// - equal returns a host bool, not a tensor, so it cannot be a traced node: it is the lowered
//   comparison eq(...).all(), read by one `.item()` (the sync torch.equal implies anyway).
// - cumprod_backward is CompositeImplicitAutograd, so it never reaches the PrivateUse1 kernel:
//   torch's decomposition syncs on "any zero?" and uses masked_select. It is lowered whole
//   (lowering/scans.cc) through this autograd kernel, which runs torch's differentiable
//   decomposition instead when the result must itself be differentiable (double backward,
//   forward AD).
#include <ATen/core/Tensor.h>
#include <ATen/ops/all.h>
#include <ATen/ops/cumprod_backward.h>
#include <ATen/ops/cumprod_backward_native.h>
#include <ATen/ops/eq.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <torch/library.h>

#include "aten/kernel_util.h"

namespace torch_pjrt::aten {

namespace {

bool Equal(const at::Tensor& self, const at::Tensor& other) {
  TORCH_CHECK(self.device() == other.device(), "Cannot compare two tensors on different devices. Got: ",
              self.device(), " and ", other.device());
  if (!self.is_same_size(other)) return false;
  return at::eq(self, other).all().item<bool>();
}

at::Tensor CumprodBackwardAutograd(const at::Tensor& grad, const at::Tensor& input, int64_t dim,
                                   const at::Tensor& output) {
  if (NeedsDifferentiableResult(grad) || NeedsDifferentiableResult(input) || NeedsDifferentiableResult(output)) {
    return at::native::cumprod_backward(grad, input, dim, output);
  }
  at::AutoDispatchBelowADInplaceOrView guard;
  return at::_ops::cumprod_backward::call(grad, input, dim, output);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { m.impl("equal", Equal); }

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) { m.impl("cumprod_backward", CumprodBackwardAutograd); }

}  // namespace torch_pjrt::aten
