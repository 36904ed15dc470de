#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <exception>

#include "host_kernels/host_kernels.h"
#include "host_kernels/result_buffers.h"

namespace torch_pjrt::host_kernels {
namespace {

struct ConvArgs {
  std::vector<int64_t> stride, padding, dilation, output_padding;
  bool transposed;
  int64_t groups;
};

ConvArgs ReadConvArgs(const XLA_FFI_CallFrame* frame) {
  return ConvArgs{runtime::FfiIntArrayAttr(frame, "stride"), runtime::FfiIntArrayAttr(frame, "padding"),
                  runtime::FfiIntArrayAttr(frame, "dilation"), runtime::FfiIntArrayAttr(frame, "output_padding"),
                  runtime::FfiIntAttr(frame, "transposed", 0) != 0, runtime::FfiIntAttr(frame, "groups", 1)};
}

int64_t Numel(const XLA_FFI_Buffer* b, int first_dim = 0, int end_dim = -1) {
  int64_t n = 1;
  for (int64_t d = first_dim; d < (end_dim < 0 ? b->rank : end_dim); ++d) n *= b->dims[d];
  return n;
}

// Multiply-adds x2 of a convolution: every weight element meets every batch element at every
// spatial position of the output (of the input, for a transposed one).
int64_t ConvFlops(const XLA_FFI_CallFrame* frame, const XLA_FFI_Buffer* x, const XLA_FFI_Buffer* w,
                  const XLA_FFI_Buffer* y) {
  const XLA_FFI_Buffer* spatial = runtime::FfiIntAttr(frame, "transposed", 0) != 0 ? x : y;
  int64_t positions = Numel(spatial, 2);
  return 2 * x->dims[0] * positions * Numel(w);
}

int64_t ForwardFlops(const XLA_FFI_CallFrame* frame) {
  return ConvFlops(frame, ArgBuffer(frame, 0), ArgBuffer(frame, 1), RetBuffer(frame, 0));
}

// Both gradients: about twice the forward's work.
int64_t BackwardFlops(const XLA_FFI_CallFrame* frame) {
  return 2 * ConvFlops(frame, ArgBuffer(frame, 1), ArgBuffer(frame, 2), ArgBuffer(frame, 0));
}

// torch_pjrt_conv(x, w) -> y, without bias (the program adds it).
XLA_FFI_Error* Convolution(XLA_FFI_CallFrame* frame) {
  return RunHandler(frame, "torch_pjrt_conv", [frame] {
    ConvArgs a = ReadConvArgs(frame);
    ComputeInto({{ActivationRet(frame, 0), ChannelsLast(frame)}}, [&]() -> std::vector<at::Tensor> {
      return {at::convolution(ActivationArg(frame, 0), Arg(frame, 1), std::nullopt, a.stride, a.padding, a.dilation,
                              a.transposed, a.output_padding, a.groups)};
    });
  }, ForwardFlops);
}

// torch_pjrt_conv_backward(grad_y, x, w) -> (grad_x, grad_w); the results not asked for by the
// grad_input/grad_weight attributes are left unwritten (the program does not read them).
XLA_FFI_Error* ConvolutionBackward(XLA_FFI_CallFrame* frame) {
  return RunHandler(frame, "torch_pjrt_conv_backward", [frame] {
    ConvArgs a = ReadConvArgs(frame);
    std::array<bool, 3> mask{runtime::FfiIntAttr(frame, "grad_input", 1) != 0,
                             runtime::FfiIntAttr(frame, "grad_weight", 1) != 0, false};
    // The weight's gradient is not offered: oneDNN computes it in a blocked layout of the same size.
    ComputeInto({{mask[0] ? ActivationRet(frame, 0) : at::Tensor(), ChannelsLast(frame)},
                 {mask[1] ? Ret(frame, 1) : at::Tensor(), false}},
                [&]() -> std::vector<at::Tensor> {
                  auto [grad_x, grad_w, grad_b] = at::convolution_backward(
                      ActivationArg(frame, 0), ActivationArg(frame, 1), Arg(frame, 2), std::nullopt, a.stride,
                      a.padding, a.dilation, a.transposed, a.output_padding, a.groups, mask);
                  return {grad_x, grad_w};
                });
  }, BackwardFlops);
}

const bool registered = (runtime::AddFfiHandler("torch_pjrt_conv", Convolution),
                         runtime::AddFfiHandler("torch_pjrt_conv_backward", ConvolutionBackward), true);

}  // namespace
}  // namespace torch_pjrt::host_kernels
