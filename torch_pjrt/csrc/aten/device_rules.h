// Which devices an op's tensor arguments may be on, as CUDA has it: every tensor on one pjrt
// device, except 0-d CPU tensors (scalars) and, for advanced indexing, CPU index tensors (which
// torch moves to the indexed tensor's device). Both the lowered kernels and the CPU fallback
// check arguments here, so an op without a lowering refuses what a lowered one refuses.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

namespace torch_pjrt::aten {

// torch's device-mismatch error ("Expected all tensors to be on the same device, ...").
[[noreturn]] void DeviceMismatch(const c10::Device& a, const c10::Device& b);

// The index of the one pjrt device the tensors in `args` are on (-1: none is a pjrt tensor).
// Raises DeviceMismatch for tensors on two pjrt devices, and, where some tensor is a pjrt one, for
// a CPU tensor that is not 0-d or a tensor of another device type. With `cpu_index_lists`, CPU
// tensors inside list arguments (index's and index_put's indices) are allowed. Where no argument
// is a pjrt tensor, `device_if_none` (a factory's device argument) is the device the others are
// checked against; -1 checks nothing.
int CommonPjrtDevice(c10::ArrayRef<c10::IValue> args, bool cpu_index_lists = false, int device_if_none = -1);

// Whether `op` is advanced indexing (index, index_put, _index_put_impl, _unsafe_index and
// _unsafe_index_put, any overload), whose index tensors may be on the CPU.
bool TakesCpuIndices(const c10::OperatorHandle& op);

// Advanced indexing of a pjrt tensor with CPU index tensors: moves those indices (in the list
// arguments among the last `num_args` of `stack`) to the indexed tensor's device, as torch does.
void MoveCpuIndicesToDevice(torch::jit::Stack* stack, size_t num_args);

}  // namespace torch_pjrt::aten
