// The process-wide PJRT runtime: which sub-plugin is in use and its client, created on first use.
// Which plugin to load and with which options is decided above us (Python's DevicePlugin); we only
// receive a PluginConfig through a provider, so this layer never names a chip.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/client.h"
#include "runtime/executable.h"

namespace torch_pjrt::runtime {

struct PluginConfig {
  std::string name;          // the sub-plugin's name, e.g. "cpu"
  std::string library_path;  // the PJRT plugin shared library
  std::vector<NamedOption> options;
  // The sub-plugin's capabilities as strings ("supported_dtypes" -> "float32,int64", ...).
  // The runtime only carries them; the layers above interpret them.
  std::map<std::string, std::string> capabilities;
  // Given when the plugin runs collectives across processes (see KeyValueStore).
  std::shared_ptr<KeyValueStore> kv_store;
  // The command that starts a compile worker for this plugin (runtime/compile_worker.h); empty:
  // programs compile in this process.
  std::vector<std::string> compile_worker;
  // A second client of the same plugin for small programs: started with these environment
  // variables set (the CPU plugin's PJRT_NPROC=1: a one-thread pool), it runs every program whose
  // arithmetic (lowering::Emitter::work) is below `small_program_max_work`, and every program a
  // training step launches while its host goes on tracing whose work per op is below
  // `small_program_max_work_per_op` (0: none). Empty: one client. Only for plugins whose buffers
  // are host memory: a program reads the other client's buffers as views of the same memory
  // (Buffer::RawFor).
  std::map<std::string, std::string> small_program_env;
  int64_t small_program_max_work = 0;
  int64_t small_program_max_work_per_op = 0;
};

// One plugin to try. Candidates are asked for one at a time, best first, so that only the ones
// actually tried are configured (configuring sets process state such as XLA_FLAGS). Unless
// `strict` (the user named the plugin), a candidate that cannot be configured (`skip` says why)
// or fails to load or start is reported through the warning handler and the next one is tried.
struct Candidate {
  PluginConfig config;
  bool strict = false;
  std::string skip;
};
// Returns candidate `index`, configured, or nothing past the last one. It runs Python: the runtime
// never calls it with a lock held.
using CandidateProvider = std::function<std::optional<Candidate>(int index)>;
void SetCandidateProvider(CandidateProvider provider);
void SetWarningHandler(std::function<void(const std::string&)> handler);

// The client, created on the first call. A failure is remembered and rethrown, with the same
// message, on every later call (a broken plugin never half-initializes). Concurrent first calls
// start one client. Lock order: the provider (Python, the GIL) is called with no runtime lock
// held; starting a plugin holds the start lock but never waits for the GIL.
std::shared_ptr<Client> GetClient();
// The client if it was already created, else null. Never starts one.
std::shared_ptr<Client> PeekClient();
// Every started client: the one above, then the small programs' client if there is one (empty
// before the start). Never starts one.
std::vector<std::shared_ptr<Client>> PeekClients();
// What the choice of a program's client looks at.
struct ProgramShape {
  int64_t work = 0;         // lowering::Emitter::work
  int64_t ops = 0;          // the program's ops
  bool overlapped = false;  // launched by a training step that goes on tracing while it executes
  bool replicated = false;  // has collectives: bound to the job's devices
};
// The client that runs a program: the small programs' client below its bounds
// (PluginConfig::small_program_max_work, small_program_max_work_per_op), else GetClient()'s. A
// replicated program always runs on GetClient()'s.
std::shared_ptr<Client> ClientForProgram(const ProgramShape& program);
// Capabilities of the plugin whose client is running (empty before it starts).
const std::map<std::string, std::string>& ActiveCapabilities();

// Compiles a program for `client` (one of PeekClients()): a portable one (no `replica_devices`) in a
// compile worker when there is one, else here. Thread-safe: each worker compiles one program at a
// time, and a large program that finds every worker busy starts a second one (at most two); a
// worker that is still starting is waited for. `serialized` receives the worker's serialized
// executable (what the disk cache must store: the CPU plugin re-serializes a
// loaded executable without its code), and stays empty when the program compiled here. Throws
// PjrtError with the compiler's message on a bad program; a worker that died is reported once as a
// warning and replaced by compiling here.
std::shared_ptr<Executable> CompileProgram(const std::shared_ptr<Client>& client, const std::string& mlir_text,
                                           const std::vector<int64_t>& replica_devices,
                                           std::string* serialized);

// The first compile worker's process id (-1: none), whether its client started, and how many
// workers run (a second starts when a large program finds the first busy). Never blocks long.
struct CompileWorkerStatus {
  int pid = -1;
  bool started = false;
  int workers = 0;
};
CompileWorkerStatus GetCompileWorkerStatus();

// Releases our reference to the client (at interpreter exit, after all buffers are gone).
void ShutdownClient();
// True once ShutdownClient ran: late destructors must not touch PJRT any more.
bool IsShutDown();

}  // namespace torch_pjrt::runtime
