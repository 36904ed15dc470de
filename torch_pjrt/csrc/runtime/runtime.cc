#include "runtime/runtime.h"

#include "runtime/compile_worker.h"
#include "runtime/ffi.h"
#include "runtime/launch_queue.h"

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <optional>

namespace torch_pjrt::runtime {

namespace {

struct State {
  std::mutex mutex;        // guards the fields below; held only for short reads and writes
  std::mutex start_mutex;  // serializes plugin starts; never held while calling the provider
  CandidateProvider provider;
  std::function<void(const std::string&)> warn;
  std::shared_ptr<Client> client;
  std::shared_ptr<Client> small_client;  // null: every program runs on `client`
  int64_t small_program_max_work = 0;
  int64_t small_program_max_work_per_op = 0;
  std::map<std::string, std::string> capabilities;
  std::string error;  // set once creation failed
  bool shut_down = false;
  // Compile workers: each compiles one program at a time. The first starts with the client; a
  // second when a large program finds the first busy (a training step's programs compile while the
  // step goes on, graph::BackgroundCompiles). None: compile here.
  struct WorkerSlot {
    std::unique_ptr<CompileWorker> worker;
    bool busy = false;
  };
  std::mutex compile_mutex;  // guards the fields below
  std::condition_variable worker_freed;
  std::vector<WorkerSlot> workers;
  std::optional<PluginConfig> worker_config;  // to start another; unset once one died
};

// At most this many compile workers: on two cores two compiles already keep both busy (one keeps
// ~1.3), and each worker holds ~100 MB.
constexpr size_t kMaxCompileWorkers = 2;

// A program this large that finds every worker busy starts another (up to kMaxCompileWorkers);
// smaller ones wait for a worker. Every program waits for a worker still starting rather than
// compiling here: a compile in this process pages in ~30 MB of the plugin's compiler code, which
// stays in its RSS, for ~20 ms saved once (docs/design.md, "Compiling in a worker process").
constexpr size_t kSecondWorkerBytes = 32 << 10;

// Leaked on purpose: destroying PJRT objects from static destructors races with the plugin's own
// teardown. Orderly destruction happens in ShutdownClient (called at interpreter exit).
State& state() {
  static State* s = new State();
  return *s;
}

}  // namespace

void SetCandidateProvider(CandidateProvider provider) {
  std::lock_guard<std::mutex> lock(state().mutex);
  state().provider = std::move(provider);
}

void SetWarningHandler(std::function<void(const std::string&)> handler) {
  std::lock_guard<std::mutex> lock(state().mutex);
  state().warn = std::move(handler);
}

namespace {

// Whether the sub-plugin declares boolean capability `name` ("1"; capability_strings in base.py).
bool Declares(const PluginConfig& config, const char* name) {
  auto it = config.capabilities.find(name);
  return it != config.capabilities.end() && it->second == "1";
}

std::shared_ptr<Client> StartClient(const PluginConfig& config) {
  auto plugin = Plugin::Load(config.name, config.library_path);
  auto client = std::make_shared<Client>(plugin, config.options, config.kv_store);
  if (Declares(config, "host_kernels")) RegisterFfiHandlers(*plugin, client->platform_name());
  client->set_host_memory(Declares(config, "host_memory"));
  if (client->device_count() == 0) {
    throw PjrtError("PJRT plugin '" + config.name + "' started but reports no addressable devices");
  }
  return client;
}

// The small programs' client (PluginConfig::small_program_env), or null when the configuration
// asks for none or it fails to start (then everything runs on `main`, with a warning).
std::shared_ptr<Client> StartSmallProgramClient(const PluginConfig& config, const Client& main,
                                                std::string* failure) {
  if (config.small_program_env.empty() || config.small_program_max_work <= 0 || !main.host_memory()) return nullptr;
  try {
    auto client = StartClientUnder(config.small_program_env, main.plugin_ptr(), config.options);
    client->set_host_memory(true);
    if (client->device_count() != main.device_count()) throw PjrtError("it reports another device count");
    return client;
  } catch (const std::exception& e) {
    *failure = std::string("the small programs' client of PJRT plugin '") + config.name +
               "' did not start (" + e.what() + "); every program runs on one client";
    return nullptr;
  }
}

// The client if it exists; throws the remembered failure or the shutdown. Null: not started yet.
std::shared_ptr<Client> ExistingClient(State& s) {
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.client) return s.client;
  if (s.shut_down) throw PjrtError("the pjrt runtime was shut down (the interpreter is exiting)");
  if (!s.error.empty()) throw PjrtError(s.error);
  return nullptr;
}

void Warn(State& s, const std::string& message) {
  std::function<void(const std::string&)> warn;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    warn = s.warn;
  }
  if (warn) warn(message);  // Python warnings: no lock held
}

// How long a compile waits for a worker to report its start before compiling here instead
// (TORCH_PJRT_COMPILE_WORKER_START_TIMEOUT, seconds). A worker's client starts in 0.1-0.5 s, a few
// seconds on a loaded machine; one whose start hangs must not hang every compile.
std::chrono::milliseconds WorkerStartTimeout() {
  const char* env = std::getenv("TORCH_PJRT_COMPILE_WORKER_START_TIMEOUT");
  double seconds = env ? std::atof(env) : 0;
  if (!(seconds > 0)) seconds = 60;
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

// Starts a compile worker for `config`'s plugin; null (with a warning) where it cannot be spawned.
std::unique_ptr<CompileWorker> SpawnCompileWorker(State& s, const PluginConfig& config) {
  try {
    // The worker starts its twin of the small programs' client when it is first asked for it.
    return std::make_unique<CompileWorker>(config.compile_worker, config.name, config.library_path, config.options,
                                           config.small_program_env, WorkerStartTimeout());
  } catch (const CompileWorkerLost& e) {
    Warn(s, std::string(e.what()) + " -- compiling in this process");
    return nullptr;
  }
}

void StartCompileWorker(State& s, const PluginConfig& config) {
  if (config.compile_worker.empty()) return;
  auto worker = SpawnCompileWorker(s, config);
  std::lock_guard<std::mutex> lock(s.compile_mutex);
  if (!worker) return;
  s.workers.push_back({std::move(worker), false});
  s.worker_config = config;
}

// Tries candidate after candidate until one starts. Returns the client (possibly one another
// thread started meanwhile).
std::shared_ptr<Client> StartFirstWorkingCandidate(State& s) {
  CandidateProvider provider;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    provider = s.provider;
  }
  if (!provider) {
    throw PjrtError("no PJRT plugin configuration: torch_pjrt's Python package was not initialized");
  }
  std::string failures;
  for (int index = 0;; ++index) {
    std::optional<Candidate> candidate = provider(index);
    if (!candidate) break;
    std::string failure = candidate->skip;
    if (failure.empty()) {
      std::lock_guard<std::mutex> start(s.start_mutex);
      if (auto existing = ExistingClient(s)) return existing;
      try {
        auto client = StartClient(candidate->config);
        std::string small_failure;
        auto small_client = StartSmallProgramClient(candidate->config, *client, &small_failure);
        if (!small_failure.empty()) Warn(s, small_failure);
        StartCompileWorker(s, candidate->config);
        std::lock_guard<std::mutex> lock(s.mutex);
        s.capabilities = candidate->config.capabilities;
        s.small_client = std::move(small_client);
        s.small_program_max_work = candidate->config.small_program_max_work;
        s.small_program_max_work_per_op = candidate->config.small_program_max_work_per_op;
        s.client = client;
        return client;
      } catch (const std::exception& e) {
        if (candidate->strict) throw;
        failure = e.what();
        Warn(s, failure + " -- skipping it");
      }
    }
    failures += (failures.empty() ? "" : "; ") + failure;
  }
  throw PjrtError("no PJRT plugin could be started: " + (failures.empty() ? "none configured" : failures));
}

}  // namespace

std::shared_ptr<Client> GetClient() {
  State& s = state();
  if (auto existing = ExistingClient(s)) return existing;
  try {
    return StartFirstWorkingCandidate(s);
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.client) return s.client;  // another thread's start succeeded
    if (s.error.empty()) s.error = e.what();
    throw PjrtError(s.error);
  }
}

const std::map<std::string, std::string>& ActiveCapabilities() {
  std::lock_guard<std::mutex> lock(state().mutex);
  return state().capabilities;  // written once, before the client is published
}

std::shared_ptr<Client> PeekClient() {
  std::lock_guard<std::mutex> lock(state().mutex);
  return state().client;
}

std::vector<std::shared_ptr<Client>> PeekClients() {
  std::lock_guard<std::mutex> lock(state().mutex);
  std::vector<std::shared_ptr<Client>> clients;
  if (state().client) clients.push_back(state().client);
  if (state().small_client) clients.push_back(state().small_client);
  return clients;
}

std::shared_ptr<Client> ClientForProgram(const ProgramShape& program) {
  auto client = GetClient();
  std::lock_guard<std::mutex> lock(state().mutex);
  const State& s = state();
  if (!s.small_client || program.replicated) return client;
  const bool small = program.work < s.small_program_max_work;
  // Fine-grained programs gain less from a second pool thread than the host's tracing, which
  // runs beside them, loses to it (docs/design.md, "A second client for small programs").
  const bool fine_grained = program.overlapped &&
                            program.work < s.small_program_max_work_per_op * std::max<int64_t>(program.ops, 1);
  return small || fine_grained ? s.small_client : client;
}

namespace {

std::shared_ptr<Client> SmallProgramClient(State& s) {
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.small_client;
}

// Whether `slot`'s worker is still there (false: gone, `lost` says why). A busy one's compile
// reports its loss.
bool SlotAlive(const State::WorkerSlot& slot, std::string* lost) {
  try {
    slot.worker->Started();  // also finds a worker that exited before it started
    return true;
  } catch (const CompileWorkerLost& e) {
    if (slot.busy) return true;
    *lost = e.what();
    return false;
  }
}

// Takes a compile worker for one program of `bytes` bytes of StableHLO: a free one (started or
// still starting: its compile waits for the start), else for a large program a new one while
// there are fewer than kMaxCompileWorkers, else the next to be freed. Null: compile here (no
// worker left). Under `lock`; `lost` receives why a worker was dropped.
CompileWorker* AcquireWorker(State& s, std::unique_lock<std::mutex>& lock, size_t bytes, std::string* lost) {
  const bool large = bytes >= kSecondWorkerBytes;
  for (;;) {
    for (auto slot = s.workers.begin(); slot != s.workers.end();) {
      if (!SlotAlive(*slot, lost)) {  // dropped, and no new worker after one died
        slot = s.workers.erase(slot);
        s.worker_config.reset();
        continue;
      }
      if (!slot->busy) {
        slot->busy = true;
        return slot->worker.get();
      }
      ++slot;
    }
    if (s.workers.empty()) return nullptr;
    if (large && s.workers.size() < kMaxCompileWorkers && s.worker_config) {
      auto worker = SpawnCompileWorker(s, *s.worker_config);
      if (worker) {
        s.workers.push_back({std::move(worker), true});
        return s.workers.back().worker.get();
      }
      s.worker_config.reset();
    }
    s.worker_freed.wait(lock);
  }
}

// Returns `worker` to the pool, or drops it where it was lost.
void ReleaseWorker(State& s, CompileWorker* worker, bool lost) {
  std::unique_ptr<CompileWorker> dropped;  // destroyed outside the lock
  {
    std::lock_guard<std::mutex> lock(s.compile_mutex);
    for (auto it = s.workers.begin(); it != s.workers.end(); ++it) {
      if (it->worker.get() != worker) continue;
      if (lost) {
        dropped = std::move(it->worker);
        s.workers.erase(it);
        s.worker_config.reset();  // no new worker after one died
      } else {
        it->busy = false;
      }
      break;
    }
  }
  s.worker_freed.notify_all();
}

}  // namespace

std::shared_ptr<Executable> CompileProgram(const std::shared_ptr<Client>& client, const std::string& mlir_text,
                                           const std::vector<int64_t>& replica_devices,
                                           std::string* serialized) {
  State& s = state();
  serialized->clear();
  if (replica_devices.empty()) {
    CompileWorker* worker = nullptr;
    std::string lost;
    {
      std::unique_lock<std::mutex> lock(s.compile_mutex);
      worker = AcquireWorker(s, lock, mlir_text.size(), &lost);
    }
    if (!lost.empty()) Warn(s, lost + " -- compiling in this process from now on");
    if (worker != nullptr) {
      // The worker goes back to the pool once, as soon as it has answered (the load below may
      // throw too, and by then another compile may be using it).
      bool answered = false;
      try {
        *serialized = worker->Compile(mlir_text, client == SmallProgramClient(s));
        answered = true;
      } catch (const CompileWorkerLost& e) {
        ReleaseWorker(s, worker, true);
        Warn(s, std::string(e.what()) + " -- compiling in this process from now on");
      } catch (...) {
        ReleaseWorker(s, worker, false);
        throw;
      }
      if (answered) {
        ReleaseWorker(s, worker, false);
        return Executable::Deserialize(client, *serialized);
      }
    }
  }
  return Executable::Compile(client, mlir_text, replica_devices);
}

CompileWorkerStatus GetCompileWorkerStatus() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.compile_mutex);
  CompileWorkerStatus status;
  if (s.workers.empty()) return status;
  CompileWorker& first = *s.workers.front().worker;
  status.pid = first.pid();
  status.workers = static_cast<int>(s.workers.size());
  try {
    status.started = first.Started();
  } catch (const CompileWorkerLost&) {
    status.started = false;  // the next compile reports it
  }
  return status;
}

void ShutdownClient() {
  DrainLaunches();  // launches still waiting for a compile
  {
    // A compile nobody launches any more (graph::CompileAhead's, where the checks it waited for
    // failed) may still be running in a worker: it finishes first.
    State& s = state();
    std::unique_lock<std::mutex> lock(s.compile_mutex);
    s.worker_freed.wait(lock, [&] {
      return std::none_of(s.workers.begin(), s.workers.end(), [](const State::WorkerSlot& w) { return w.busy; });
    });
    s.workers.clear();
    s.worker_config.reset();
  }
  std::shared_ptr<Client> client, small_client;
  {
    std::lock_guard<std::mutex> lock(state().mutex);
    state().shut_down = true;
    client = std::move(state().client);
    small_client = std::move(state().small_client);
  }
  // The clients die here, outside the lock, once every buffer and executable has let go of them.
}

bool IsShutDown() {
  std::lock_guard<std::mutex> lock(state().mutex);
  return state().shut_down;
}

}  // namespace torch_pjrt::runtime
