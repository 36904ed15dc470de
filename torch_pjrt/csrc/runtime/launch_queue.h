// The launch thread: launches queued by Executable::ExecuteQueued are made there, one after
// another in the order they were queued: a launch whose program is still compiling waits there,
// not on the tracing thread (docs/design.md, "Compiling while the step goes on").
#pragma once

#include <functional>

namespace torch_pjrt::runtime {

// Queues `launch`; it runs after every launch queued before it. It must not throw.
void QueueLaunch(std::function<void()> launch);
// Returns once every launch queued before the call has been made (not finished executing).
void DrainLaunches();
// Whether a queued launch has not been made yet.
bool LaunchesPending();

}  // namespace torch_pjrt::runtime
