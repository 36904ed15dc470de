#include "runtime/openmp.h"

#include <dlfcn.h>

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

}  // namespace torch_pjrt::runtime
