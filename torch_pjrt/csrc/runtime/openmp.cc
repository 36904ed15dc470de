#include "runtime/openmp.h"

#include <dlfcn.h>

#include <functional>

namespace torch_pjrt::runtime {

namespace {

// libgomp as torch loaded it (RTLD_NOLOAD: never load a second copy), or null.
void* Libgomp() {
  static void* gomp = dlopen("libgomp.so.1", RTLD_NOW | RTLD_NOLOAD);
  return gomp;
}

template <typename F>
F* Symbol(const char* name) {
  void* gomp = Libgomp();
  return gomp == nullptr ? nullptr : reinterpret_cast<F*>(dlsym(gomp, name));
}

// A parallel region's body and how it learns its thread's number (GOMP_parallel passes one pointer).
struct Region {
  const std::function<void(int)>* body;
  int (*thread_num)();
};

void RunRegionBody(void* region) {
  auto* r = static_cast<Region*>(region);
  (*r->body)(r->thread_num());
}

}  // namespace

void SetCallerOpenMPTeamSize(int threads) {
  static auto* set = Symbol<void(int)>("omp_set_num_threads");
  if (set != nullptr) set(threads);
}

void ReleaseCallerOpenMPTeam() {
  // omp_pause_soft (1) on the initial (host) device; OpenMP 5.0, in libgomp since GCC 9.
  constexpr int kPauseSoft = 1;
  static auto* pause = Symbol<int(int, int)>("omp_pause_resource");
  static auto* initial_device = Symbol<int()>("omp_get_initial_device");
  if (pause != nullptr && initial_device != nullptr) pause(kPauseSoft, initial_device());
}

bool RunOnCallerOpenMPTeam(const std::function<void(int)>& body) {
  static auto* parallel = Symbol<void(void (*)(void*), void*, unsigned, unsigned)>("GOMP_parallel");
  static auto* thread_num = Symbol<int()>("omp_get_thread_num");
  if (parallel == nullptr || thread_num == nullptr) return false;
  Region region{&body, thread_num};
  parallel(&RunRegionBody, &region, /*num_threads: the team's size*/ 0, /*flags*/ 0);
  return true;
}

}  // namespace torch_pjrt::runtime
