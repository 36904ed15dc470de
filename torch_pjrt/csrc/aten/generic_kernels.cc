// torch kernels that are compositions of other ops (device-generic) but registered for CPU and
// CUDA only, registered for pjrt as they are: without them such calls would take the CPU
// fallback although every op they run is lowered.
// - mvlgamma.out: mvlgamma (composite: lgamma of a shifted range, summed) written into `out`.
// - _embedding_bag_backward: picks _embedding_bag_dense_backward (lowered) or the sparse one.
#include <ATen/core/Tensor.h>
#include <ATen/ops/_embedding_bag_backward_native.h>
#include <ATen/ops/mvlgamma_native.h>
#include <torch/library.h>

namespace torch_pjrt::aten {

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("mvlgamma.out", static_cast<at::Tensor& (*)(const at::Tensor&, int64_t, at::Tensor&)>(&at::native::mvlgamma_out));
  m.impl("_embedding_bag_backward", TORCH_FN(at::native::_embedding_bag_backward_symint));
}

}  // namespace torch_pjrt::aten
