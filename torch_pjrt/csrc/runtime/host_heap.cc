#include "runtime/host_heap.h"

#include <cstdlib>
#include <cstring>

#ifdef __GLIBC__
#include <malloc.h>
#endif

extern char** environ;

namespace torch_pjrt::runtime {
namespace {

// A user's own MALLOC_*_ variables or GLIBC_TUNABLES win over ours.
bool UserConfiguredMalloc() {
  for (char** e = environ; e && *e; ++e) {
    if (std::strncmp(*e, "MALLOC_", 7) == 0 || std::strncmp(*e, "GLIBC_TUNABLES=", 15) == 0) return true;
  }
  return false;
}

}  // namespace

// XLA:CPU allocates each execution's temporary buffer (67 MB for the GPT example's training step)
// on its worker threads and frees it at the end. With glibc's defaults that block is larger than
// the 32 MB mmap ceiling of a thread's arena, so it is mmap'ed and unmapped every execution, and
// the kernel zero-fills its pages again: a quarter of the step's CPU time went to page faults.
// One arena (worker threads share the main heap), a 1 GiB mmap threshold and no trimming of the
// heap's top let the next execution reuse the block. Peak RSS does not change (measured: 564 MB
// both ways); memory freed at the top of the heap is kept for reuse instead of being returned.
std::string KeepFreedBlocksInHeap() {
#ifdef __GLIBC__
  if (UserConfiguredMalloc()) return "left alone: MALLOC_* or GLIBC_TUNABLES is set";
  bool ok = mallopt(M_ARENA_MAX, 1) == 1;
  ok &= mallopt(M_MMAP_THRESHOLD, 1 << 30) == 1;
  ok &= mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1;
  return ok ? "arena_max=1 mmap_threshold=1GiB trim_threshold=1GiB" : "mallopt refused a setting";
#else
  return "left alone: not glibc";
#endif
}

}  // namespace torch_pjrt::runtime
