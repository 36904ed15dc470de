// What autograd is doing on the calling thread, for decisions the trace makes per op. Kept apart
// from the kernels: torch's autograd headers are heavy and only this file needs them.
#pragma once

namespace torch_pjrt::aten {

// Whether an op traced now belongs to a training step: grad mode is on (autograd records it), or
// the thread is running a backward pass (whose ops run with grad mode off).
bool TracingForAutograd();
// Whether the calling thread is running a backward pass (the autograd engine's graph task).
bool InBackwardPass();

}  // namespace torch_pjrt::aten
