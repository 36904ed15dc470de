// Meta-kernel guards. Why this file exists: the generic kernel (aten/lowered_kernel.cc) decides
// between the lowering and the CPU path by running the op's Meta kernel alone, and torch's Meta
// kernels accept inputs that the CPU kernels reject (bool topk/median/searchsorted, complex sorts,
// integer logcumsumexp/histc, complex nansum, index_reduce without self on bool/complex, bernoulli
// probabilities that do not expand to self, index_put values of another dtype or shape), so the
// lowering would compute a result where CPU eager raises. A guard raises for those calls, so the
// generic kernel takes the CPU path, which raises CPU's own error; every other call gets the op's
// own Meta results. Registered through FindMetaOverride (meta_overrides.cc).
#pragma once

#include "aten/meta_overrides.h"

namespace torch_pjrt::aten {

// The guard for an op by its full name ("aten::sort.stable"), or null.
MetaOverride FindMetaGuard(const std::string& name);

// The op's own Meta results for its functional arguments `a` (name "aten::x", overload "" or
// "dim"): what guards and overrides adjust.
void RunOwnMeta(const char* name, const char* overload, c10::ArrayRef<c10::IValue> a, torch::jit::Stack* results);

}  // namespace torch_pjrt::aten
