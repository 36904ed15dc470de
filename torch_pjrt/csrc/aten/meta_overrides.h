// Result shapes for ops whose own Meta kernel is missing or wrong: each computes them from meta
// tensors (often through an equivalent op's Meta kernel). Add an op here when torch has no Meta
// kernel for it; the generic kernel then traces it like any other.
#pragma once

#include <ATen/core/stack.h>

#include <string>

namespace torch_pjrt::aten {

// Pushes the op's results (meta tensors, or None) for its functional arguments `meta_args`.
using MetaOverride = void (*)(c10::ArrayRef<c10::IValue> meta_args, torch::jit::Stack* results);

// The override for an op by its full name ("aten::name" or "aten::name.overload"), or null.
MetaOverride FindMetaOverride(const std::string& name);

}  // namespace torch_pjrt::aten
