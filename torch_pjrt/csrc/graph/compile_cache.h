// Compiled graphs, keyed by graph hash: an in-memory LRU in front of an on-disk cache of
// serialized executables. Disk entries are keyed by graph hash + plugin identity + package version;
// a truncated or corrupt entry is recompiled with a warning, never trusted.
#pragma once

#include <chrono>
#include <cstdint>
#include <future>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "lowering/emitter.h"
#include "runtime/executable.h"

namespace torch_pjrt::graph {

struct CompiledGraph {
  // Null while `compiling` (a training step's first launches compile on a thread of their own,
  // docs/design.md "Compiling while the step goes on"); ReadyExecutable() fetches it from there.
  mutable std::shared_ptr<runtime::Executable> executable;
  std::shared_future<std::shared_ptr<runtime::Executable>> compiling;
  // The client the program runs on (known before it is compiled) and its results' types.
  std::shared_ptr<runtime::Client> client;
  std::vector<runtime::Executable::OutputType> output_types;
  // Argument types the program expects, checked before every execution (PJRT does not).
  std::vector<lowering::TensorType> arg_types;
  // Op sequence of the graph, kept only while compile logging is on (to explain later misses).
  std::string summary;
  // Per index check of the graph (its last output packs them): the outputs computed from the op
  // the check guards, poisoned if the check fails.
  std::vector<std::vector<int>> check_dependents;
  // The program may call host kernels (torch's CPU kernels on the host-kernel thread): launching it
  // frees the launching thread's OpenMP team first (runtime/openmp.h).
  bool calls_host_kernels = false;
  // The executable is loaded on the small programs' client (runtime::ClientForProgram).
  bool small_program = false;
  // Compiled ahead of its launch (executor.cc's CompileAhead) and not looked up since.
  bool compiled_ahead = false;

  // The executable, or null while it is still compiling. Rethrows a failed compile's error.
  const std::shared_ptr<runtime::Executable>& ReadyExecutable() const {
    if (!executable && compiling.valid() &&
        compiling.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
      executable = compiling.get();
    }
    return executable;
  }
  // The executable, waiting for its compile.
  const std::shared_ptr<runtime::Executable>& Executable() const {
    if (!executable && compiling.valid()) executable = compiling.get();
    return executable;
  }
};

class CompileCache {
 public:
  static CompileCache& Get();

  std::shared_ptr<CompiledGraph> Find(uint64_t key);
  void Insert(uint64_t key, std::shared_ptr<CompiledGraph> entry);
  void Clear();
  size_t size() const { return map_.size(); }
  size_t capacity() const { return capacity_; }
  void set_capacity(size_t n);
  // The cached graph whose summary shares the longest prefix with `summary` (for logging).
  std::shared_ptr<CompiledGraph> Nearest(const std::string& summary, uint64_t* key) const;

  // Disk cache. An empty directory disables it.
  const std::string& directory() const { return directory_; }
  void set_directory(std::string dir) { directory_ = std::move(dir); }
  // `fingerprint` identifies plugin + platform version + package version.
  // `directory`: the cache directory when the graph was traced (directory()); these two run on a
  // background compile's thread too (executor.cc), which must not read it while it changes.
  static std::shared_ptr<runtime::Executable> LoadFromDisk(const std::string& directory, uint64_t key,
                                                          const std::string& fingerprint,
                                                   const std::shared_ptr<runtime::Client>& client);
  // `serialized`: the executable's bytes when it was loaded from them (a compile worker's): a
  // loaded executable serializes without its code on the CPU plugin. Empty: serialize `exe`.
  static void StoreToDisk(const std::string& directory, uint64_t key, const std::string& fingerprint,
                          const runtime::Executable& exe,
                   std::string serialized = {});

 private:
  CompileCache();
  static std::string PathFor(const std::string& directory, uint64_t key, const std::string& fingerprint);
  size_t capacity_;
  std::string directory_;
  std::list<uint64_t> lru_;  // most recent first
  struct Slot {
    std::shared_ptr<CompiledGraph> entry;
    std::list<uint64_t>::iterator position;
  };
  std::unordered_map<uint64_t, Slot> map_;
};

// mkdir -p; false if the directory cannot be created.
bool EnsureDirectory(const std::string& path);

// Where warnings from below the ATen layer go (set by the Python layer; stderr by default).
void SetWarningHandler(std::function<void(const std::string&)> handler);
void Warn(const std::string& message);

}  // namespace torch_pjrt::graph
