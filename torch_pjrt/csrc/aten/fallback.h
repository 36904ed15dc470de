#pragma once

#include <set>
#include <string>

namespace torch_pjrt::aten {

// Whether the first CPU fallback of each op warns (TORCH_PJRT_FALLBACK_WARNINGS=0 turns it off).
bool FallbackWarningsEnabled();
void SetFallbackWarningsEnabled(bool enabled);

}  // namespace torch_pjrt::aten
