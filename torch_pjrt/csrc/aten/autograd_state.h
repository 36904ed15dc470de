// What autograd is doing on the calling thread, for decisions the trace makes per op. Kept apart
// from the kernels: torch's autograd headers are heavy and only this file needs them.
#pragma once

namespace torch_pjrt::aten {

// Whether the calling thread is running a backward pass (the autograd engine's graph task), whose
// ops run with grad mode off.
bool InBackwardPass();

}  // namespace torch_pjrt::aten
