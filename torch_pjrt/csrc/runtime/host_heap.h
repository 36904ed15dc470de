// Heap settings for plugins whose device buffers are ordinary host allocations (the CPU plugin).
#pragma once

#include <string>

namespace torch_pjrt::runtime {

// Keeps large freed blocks in the process heap so that an execution's temporary buffer is reused
// by the next execution instead of being mapped and zero-filled again. Call before the plugin
// starts its threads. Does nothing (and says so in the returned text) when the user configured
// glibc's malloc through the environment or the C library is not glibc; returns what it set.
std::string KeepFreedBlocksInHeap();

}  // namespace torch_pjrt::runtime
