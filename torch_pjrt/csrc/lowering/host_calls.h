// Calls of host kernels (TargetOptions::host_kernels: torch's own CPU kernels inside the program,
// host_kernels/*.cc) whose 2-d activations travel channels-last.
//
// torch's CPU max pooling runs 12-15x faster on channels-last memory than on NCHW (2x2 over
// [64, 32, 32, 32]: 0.6 against 7.1 ms), and its oneDNN convolution skips the reorders of its
// input and output there (NCHW ones go to a blocked layout and back on every call). So such a
// call fixes the memory layout of each [N, C, H, W] operand and result as N, H, W, C (the custom
// call's operand_layouts and result_layouts), and the handler views it so. XLA's layout
// assignment then gives the fusions between two host kernels (batch norm, activations, pooling)
// that layout, so a network of convolutions keeps its activations channels-last without the
// lowering of any other op knowing (docs/design.md, "Channels-last host kernels"). Until
// 2026-11-30 the call took explicit [N, H, W, C] transposes instead: the fusions then ended in a
// transposing copy, which XLA:CPU never split across its threads.
#pragma once

#include <string>
#include <vector>

#include "lowering/lowering.h"

namespace torch_pjrt::lowering {

// An operand of a host-kernel call, and whether it is an activation ([N, C, H, W]: passed
// channels-last) or not (a weight, passed as it is).
struct HostOperand {
  Val value;
  bool activation;
};
struct HostResult {
  TensorType type;
  bool activation;
};

// Emits the FFI call `target(operands) -> results` with attributes `attrs`. With `channels_last`
// and 4-d activations, the activations are laid out channels-last and `channels_last = 1` is
// added to the attributes (the handler reads them so); every other value is row-major.
std::vector<Val> CallHostKernel(Emitter& e, const std::string& target, const std::vector<HostOperand>& operands,
                                const std::vector<HostResult>& results, std::string attrs, bool channels_last);

// Whether a 2-d convolution with input x, weight w and output y runs channels-last: when its
// activations (input and output elements) are at least 4x its weight's. oneDNN packs the weight
// on every call, and channels-last first copies it to [O, H, W, I] (ATen's
// `weight.contiguous(channels_last)`), a second pass over it; NCHW pays a reorder of the input
// and of the output instead. One thread, torch's kernel (docs/design.md, "Channels-last host
// kernels"): batch 2, 256 -> 256 channels at 4x4 (activations 0.03x the weight) 1.9x slower
// channels-last; batch 64, 3 -> 32 at 32x32 7x faster; between 1x and 8x within 10% either way.
bool ConvPrefersChannelsLast(const TensorType& x, const TensorType& w, const TensorType& y);

}  // namespace torch_pjrt::lowering
