// ATen's own C++ Meta kernels, called directly, for ops where torch registers a Python reference
// as the Meta kernel. Why: torch._meta_registrations puts Python references (torch._refs) over
// the C++ structured Meta kernels of ~300 ops, and the generic kernel runs a Meta kernel for every
// op it traces. The Python ones import sympy (torch.fx.experimental.symbolic_shapes, 0.25 s) on
// their first call, most of the first op's time in a fresh process, and cost tens of µs per call
// after. The C++ functions (at::meta::<op>) are the structured kernels' meta functions, the very
// ones the CPU kernels run: CPU eager's shapes, dtypes, strides and error messages.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include "aten/meta_overrides.h"

#include <string>
#include <vector>

namespace torch_pjrt::aten {

// The C++ Meta kernel of a functional op by its full name ("aten::add.Tensor"), or null when
// torch's own Meta dispatch is to be used.
MetaOverride FindNativeMeta(const std::string& name);

// Full names of the ops in the table (tests).
std::vector<std::string> NativeMetaOps();

// Runs `op`'s Meta kernel on `stack` (meta tensors in, results out): the native one when the
// table has it, else torch's through the dispatcher.
void RunMetaKernel(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// "aten::name.overload" of `op`.
std::string FullName(const c10::OperatorHandle& op);

}  // namespace torch_pjrt::aten
