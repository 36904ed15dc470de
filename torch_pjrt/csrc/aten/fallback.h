#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

namespace torch_pjrt::aten {

// Runs `op` on the CPU with its pjrt tensors copied over and results copied back; counted per op
// and warned about once per op (unless disabled), the warning saying `why`.
void RunCpuFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack, const char* why);

// Whether the first CPU fallback of each op warns (TORCH_PJRT_FALLBACK_WARNINGS=0 turns it off).
bool FallbackWarningsEnabled();
void SetFallbackWarningsEnabled(bool enabled);

}  // namespace torch_pjrt::aten
