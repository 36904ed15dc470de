// Data-dependent result sizes (nonzero, masked_select, unique, boolean-mask indexing): see
// dynamic_shape.cc.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace torch_pjrt::aten {

// Whether an index list argument holds a boolean (or uint8) mask.
bool HasMaskIndices(c10::ArrayRef<c10::IValue> args);
// Runs an indexing op (index, index_put...) whose last `num_args` stack entries hold mask
// indices: each mask becomes the integer coordinates of its true elements (nonzero, computed on
// the device), and the op is called again with them.
void RunWithIntegerIndices(const c10::OperatorHandle& op, torch::jit::Stack* stack, size_t num_args);

}  // namespace torch_pjrt::aten
