// Compiling StableHLO text into a loaded executable, serializing it for the disk cache, and running
// it asynchronously on one device.
#pragma once

#include <future>
#include <memory>
#include <string>
#include <vector>

#include "runtime/buffer.h"

namespace torch_pjrt::runtime {

// Serialized xla.CompileOptionsProto for a single-replica, single-partition executable that can run
// on any addressable device (compile_portable_executable), so one compile serves every device.
// Never empty: an empty options string aborts the CPU plugin.
std::string PortableCompileOptions();
// Options for a program with collectives: one replica per process of a group, replica r on the
// device whose job-wide id is replica_devices[r] (num_replicas = its size). Empty: portable.
std::string ReplicatedCompileOptions(const std::vector<int64_t>& replica_devices);

class ReadArguments;  // executable.cc: argument buffers held until their execution finished

class Executable {
 public:
  // Throws PjrtError with the compiler's message (line:col and the failing op) on a bad program.
  // `replica_devices` as in ReplicatedCompileOptions (empty for an ordinary graph).
  static std::shared_ptr<Executable> Compile(const std::shared_ptr<Client>& client,
                                             const std::string& mlir_text,
                                             const std::vector<int64_t>& replica_devices = {});
  static std::shared_ptr<Executable> Deserialize(const std::shared_ptr<Client>& client,
                                                 const std::string& bytes, bool portable = true);
  ~Executable();
  Executable(const Executable&) = delete;
  Executable& operator=(const Executable&) = delete;

  std::string Serialize() const;
  const std::shared_ptr<Client>& client() const { return client_; }
  size_t num_outputs() const { return num_outputs_; }

  // Starts the program on `device` and returns its outputs at once; they become ready when the
  // device finishes. Inputs listed in the program's tf.aliasing_output attributes are consumed:
  // `donated` (their Buffers) are marked donated once the launch succeeded, before the outputs are
  // counted, so memory statistics never count a donated input and its output at once.
  // `keep_alive` (the argument buffers) is held until the execution finished: dropping the last
  // reference to an argument earlier would block the host until then. `non_donatable`: aliased
  // inputs (argument indices) that others still hold; PJRT copies them instead of consuming them.
  std::vector<std::shared_ptr<Buffer>> Execute(const std::vector<PJRT_Buffer*>& args, int device,
                                               const std::vector<Buffer*>& donated = {},
                                               std::vector<std::shared_ptr<Buffer>> keep_alive = {},
                                               const std::vector<int64_t>& non_donatable = {}) const;
  // What a program returns, known before it is compiled (ExecuteQueued).
  struct OutputType {
    ElementType type;
    std::vector<int64_t> dims;
  };
  // Launches the portable program `executable` will hold (it may still be compiling on another
  // thread) on the launch thread (runtime/launch_queue.h), after every launch queued before it,
  // and returns its outputs at once: Buffers of `outputs`' types on `client` whose handles exist
  // once the launch is made. The handles of `args` are taken then, so they may be outputs of
  // earlier queued launches; those of another client are read through views (Buffer::RawFor).
  // `donated` (of `client`) are marked donated here. A failed compile or launch, or a program
  // whose outputs differ from `outputs`, fails the outputs: whoever waits for them gets the error.
  static std::vector<std::shared_ptr<Buffer>> ExecuteQueued(
      std::shared_future<std::shared_ptr<Executable>> executable, const std::shared_ptr<Client>& client,
      const std::vector<OutputType>& outputs, std::vector<std::shared_ptr<Buffer>> args, int device,
      const std::vector<Buffer*>& donated, std::vector<int64_t> non_donatable);
  // Runs a replicated program on all its replicas at once, when this process addresses every
  // device of its assignment (one process with several CPU devices): args[r] are replica r's.
  // Waits for the results. Lets tests run the collectives' programs without a multi-process job.
  std::vector<std::vector<std::shared_ptr<Buffer>>> ExecuteAllReplicas(
      const std::vector<std::vector<PJRT_Buffer*>>& args, const std::vector<int>& devices) const;

 private:
  Executable(std::shared_ptr<Client> client, PJRT_LoadedExecutable* loaded);
  // Execute's arguments for this executable with default `options` (filled in here).
  PJRT_LoadedExecutable_Execute_Args ExecuteArgs(PJRT_ExecuteOptions* options) const;
  // Launches on one device and returns the output handles; `keep_alive` then joins the
  // executions in flight. Throws (PjrtError) only before the launch.
  std::vector<PJRT_Buffer*> Launch(const std::vector<PJRT_Buffer*>& args, int device, ReadArguments keep_alive,
                                   const std::vector<int64_t>& non_donatable) const;
  std::shared_ptr<Client> client_;
  PJRT_LoadedExecutable* loaded_;
  size_t num_outputs_ = 0;
  // False for a replicated program: it runs only on the device its assignment gives this process.
  bool portable_ = true;
};

// Blocks until every execution started on `device` (-1: on any device) has finished; rethrows the
// first execution error seen.
void WaitForExecutions(const Client& client, int device);
// Returns once the argument buffers of every execution retired so far are freed (launches hand
// them to a thread of their own); waits and the memory statistics call it.
void FreeRetiredArguments();
// True when no execution started on `device` is still running.
bool ExecutionsDone(const Client& client, int device);

}  // namespace torch_pjrt::runtime
