// The host kernel for the 2-d max pooling backward (float32): torch's own CPU kernel. XLA:CPU ran
// the lowering's backward (one compare-select-pad per window tap) 4-5x slower than eager's
// (docs/design.md, XLA CPU performance notes), and ResNet's stem pools every step. The forward is
// XLA's (lowering/pooling.cc: its taps fuse with the ops around them). Target:
//   torch_pjrt_max_pool2d_backward(grad_y, x, indices) -> grad_x.
// Attributes: kernel, stride, padding, dilation (i64 arrays), ceil_mode (i64); channels_last (i64)
// when x, the indices and the gradients are [N, H, W, C] arrays.
#include <ATen/ATen.h>

#include "host_kernels/host_kernels.h"

namespace torch_pjrt::host_kernels {
namespace {

struct PoolArgs {
  std::vector<int64_t> kernel, stride, padding, dilation;
  bool ceil_mode;
};

PoolArgs ReadPoolArgs(const XLA_FFI_CallFrame* frame) {
  return PoolArgs{runtime::FfiIntArrayAttr(frame, "kernel"), runtime::FfiIntArrayAttr(frame, "stride"),
                  runtime::FfiIntArrayAttr(frame, "padding"), runtime::FfiIntArrayAttr(frame, "dilation"),
                  runtime::FfiIntAttr(frame, "ceil_mode", 0) != 0};
}

XLA_FFI_Error* MaxPool2dBackward(XLA_FFI_CallFrame* frame) {
  return RunHandler(frame, "torch_pjrt_max_pool2d_backward", [frame] {
    PoolArgs a = ReadPoolArgs(frame);
    at::Tensor grad_x = ActivationRet(frame, 0);
    at::max_pool2d_with_indices_backward_out(grad_x, ActivationArg(frame, 0), ActivationArg(frame, 1), a.kernel,
                                             a.stride, a.padding, a.dilation, a.ceil_mode, ActivationArg(frame, 2));
  });
}

const bool registered = (runtime::AddFfiHandler("torch_pjrt_max_pool2d_backward", MaxPool2dBackward), true);

}  // namespace
}  // namespace torch_pjrt::host_kernels
