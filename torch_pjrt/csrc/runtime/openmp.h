// The OpenMP runtime torch loaded (libgomp), reached without a link-time dependency: torch's CPU
// kernels, which host kernels call inside programs (host_kernels/), parallelize with it, and how
// many OpenMP thread teams the process keeps decides how fast every one of them runs
// (docs/design.md, "Host kernels and CPU eager in one process"). Each function is a no-op where
// torch was built without OpenMP.
#pragma once

#include <functional>

namespace torch_pjrt::runtime {

// Sets the calling thread's OpenMP team size (a per-thread setting: omp_set_num_threads).
void SetCallerOpenMPTeamSize(int threads);

// Frees the calling thread's OpenMP thread team, if it has one (omp_pause_resource on the host:
// its worker threads exit; the thread's next parallel region starts a new team). libgomp stops
// spinning at barriers once it manages more threads than there are cores, so a team left behind
// by CPU work on the thread that launches programs (building the model, preparing batches) beside
// the host-kernel thread's team made every host kernel hand off through futexes: ConvNeXt-atto
// training 40-42 -> 26-28 ms per step without it. A no-op inside a parallel region.
void ReleaseCallerOpenMPTeam();

// Runs `body(thread_number)` on every thread of the calling thread's OpenMP team, as one parallel
// region (0 is the calling thread). False where torch has no OpenMP runtime (`body` did not run).
bool RunOnCallerOpenMPTeam(const std::function<void(int)>& body);

}  // namespace torch_pjrt::runtime
