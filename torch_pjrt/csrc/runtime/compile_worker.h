// Compiling in a helper process. XLA:CPU's compiler makes hundreds of MB of short-lived small
// allocations; in the process that traces and runs the graphs they leave the heap fragmented,
// and every later step ran 15-40% slower there (host tracing and the executions both) than in a
// process that loaded the same executable from the disk cache (docs/design.md, "Compiling in a
// worker process"). A plugin that declares the capability `compile_worker` gets a worker: a
// second process with its own client of the same plugin that compiles portable programs and
// sends back serialized executables, which this process loads as it loads disk-cache entries.
// The compiler's peak memory is then the worker's, not the training process's.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "runtime/client.h"

namespace torch_pjrt::runtime {

// The worker cannot be reached: it failed to start, died, or broke the protocol.
class CompileWorkerLost : public PjrtError {
 public:
  using PjrtError::PjrtError;
};

class CompileWorker {
 public:
  // Spawns `argv` (whose process must run compile_worker/main.cc's entry point on file
  // descriptors 3, its requests, and 4, its replies) and sends it the plugin to load, with the
  // environment the parent's small programs' client started under (empty: it has none). Does not
  // wait for it to start. Throws CompileWorkerLost when the process cannot be spawned.
  // A worker that has not reported its start `start_timeout` after its spawn is given up as lost
  // when a compile waits for it (a plugin whose client start hangs must not hang every compile).
  CompileWorker(const std::vector<std::string>& argv, const std::string& plugin_name,
                const std::string& library_path, const std::vector<NamedOption>& options,
                const std::map<std::string, std::string>& small_program_environment,
                std::chrono::milliseconds start_timeout);
  ~CompileWorker();
  CompileWorker(const CompileWorker&) = delete;
  CompileWorker& operator=(const CompileWorker&) = delete;

  // True once the worker has reported that its client started (never blocks).
  bool Started();
  // The serialized executable of the portable program `mlir_text` (waits for the start first),
  // compiled by a client like the one it will run on: the worker's twin of the small programs'
  // client when `for_small_client`. XLA:CPU's executables are made for the pool of the client
  // that compiles them; one compiled for the main pool ran 3-5x slower on the one-thread client
  // (docs/design.md, "Compiling for the client that runs the program").
  // Throws PjrtError with the compiler's message for a bad program, CompileWorkerLost when the
  // worker is gone. Not thread-safe: the caller serializes compiles.
  std::string Compile(const std::string& mlir_text, bool for_small_client);
  pid_t pid() const { return pid_; }

 private:
  void AwaitStart();
  pid_t pid_ = -1;
  int requests_ = -1;  // our end of the worker's fd 3
  int replies_ = -1;   // our end of the worker's fd 4
  bool started_ = false;
  std::chrono::steady_clock::time_point start_deadline_;
  std::chrono::milliseconds start_timeout_;
  std::string plugin_name_;
};

}  // namespace torch_pjrt::runtime
