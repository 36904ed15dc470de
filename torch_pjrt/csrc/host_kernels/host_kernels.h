// torch's own CPU kernels inside compiled programs, for plugins whose device memory is host memory
// (capability `host_kernels`: the CPU plugin). XLA:CPU's Eigen convolutions trail torch's oneDNN
// ones by 2-50x at the small spatial sizes of real models (docs/design.md, "XLA CPU performance
// notes"); the lowering (lowering/nn.cc) emits float32 convolutions as typed FFI custom calls
// whose handlers (convolution.cc) call ATen on the program's buffers. Targets:
//   torch_pjrt_conv(x, w) -> y: at::convolution without bias;
//   torch_pjrt_conv_backward(grad_y, x, w) -> (grad_x, grad_w): at::convolution_backward.
// Attributes: stride, padding, dilation, output_padding (i64 arrays), transposed, groups, and for
// the backward grad_input/grad_weight (i64: which results to compute); channels_last (i64) when
// the activations (x, y and their gradients, not the weight) are [N, H, W, C] arrays.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <string>

#include "runtime/ffi.h"

namespace torch_pjrt::host_kernels {

// A CPU tensor over an FFI buffer (no copy).
at::Tensor Wrap(const XLA_FFI_Buffer* buffer);
// Argument / result `i` of a call frame: the FFI buffer, and as a CPU tensor over it (no copy).
const XLA_FFI_Buffer* ArgBuffer(const XLA_FFI_CallFrame* frame, int i);
const XLA_FFI_Buffer* RetBuffer(const XLA_FFI_CallFrame* frame, int i);
at::Tensor Arg(const XLA_FFI_CallFrame* frame, int i);
at::Tensor Ret(const XLA_FFI_CallFrame* frame, int i);
// Whether the frame passes its 4-d activations channels-last, as [N, H, W, C] arrays (attribute
// channels_last; lowering/host_calls.h).
bool ChannelsLast(const XLA_FFI_CallFrame* frame);
// Activation argument / result `i` as torch indexes it, [N, C, ...]: over a channels-last array,
// a view with channels-last strides (torch's kernels then run their channels-last paths).
at::Tensor ActivationArg(const XLA_FFI_CallFrame* frame, int i);
at::Tensor ActivationRet(const XLA_FFI_CallFrame* frame, int i);

// Runs `kernel` on the one thread that runs every host kernel, and waits for it. XLA calls
// handlers from whichever of its worker threads is free; torch's kernels parallelize with
// OpenMP, which keeps a thread team per calling thread, so calling them from several threads
// would start several teams competing for the cores. Returns the kernel's error message, or "".
std::string RunOnKernelThread(const std::function<void()>& kernel);

// Every handler's body: answers the runtime's metadata query, ignores the stages before
// execution, runs `kernel` and turns its exception into an FFI error that names `target`.
// `flops` (when given) estimates the kernel's arithmetic from the frame: a small kernel runs
// inline on the calling XLA worker with OpenMP limited to that thread (no team to compete),
// any other on the kernel thread.
XLA_FFI_Error* RunHandler(XLA_FFI_CallFrame* frame, const char* target, const std::function<void()>& kernel,
                          int64_t (*flops)(const XLA_FFI_CallFrame*) = nullptr);

}  // namespace torch_pjrt::host_kernels
