#include "runtime/runtime.h"

#include "runtime/compile_worker.h"
#include "runtime/ffi.h"

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
  std::mutex compile_mutex;               // serializes compiles in the worker; guards `worker`
  std::unique_ptr<CompileWorker> worker;  // null: compile here
};

// Programs this small compile here while the worker is still starting: the first op after start
// should not wait for a second process (a few hundred bytes compile in milliseconds).
constexpr size_t kWaitForWorkerBytes = 32 << 10;

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

void StartCompileWorker(State& s, const PluginConfig& config) {
  if (config.compile_worker.empty()) return;
  try {
    // The worker starts its twin of the small programs' client when it is first asked for it.
    auto worker = std::make_unique<CompileWorker>(config.compile_worker, config.name, config.library_path,
                                                  config.options, config.small_program_env);
    std::lock_guard<std::mutex> lock(s.compile_mutex);
    s.worker = std::move(worker);
  } catch (const CompileWorkerLost& e) {
    Warn(s, std::string(e.what()) + " -- compiling in this process");
  }
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

}  // namespace

std::shared_ptr<Executable> CompileProgram(const std::shared_ptr<Client>& client, const std::string& mlir_text,
                                           const std::vector<int64_t>& replica_devices,
                                           std::string* serialized) {
  State& s = state();
  serialized->clear();
  if (replica_devices.empty()) {
    std::unique_lock<std::mutex> lock(s.compile_mutex);
    try {
      // Started() too finds a worker that exited before it started.
      if (s.worker && (s.worker->Started() || mlir_text.size() >= kWaitForWorkerBytes)) {
        *serialized = s.worker->Compile(mlir_text, client == SmallProgramClient(s));
        lock.unlock();
        return Executable::Deserialize(client, *serialized);
      }
    } catch (const CompileWorkerLost& e) {
      std::unique_ptr<CompileWorker> lost = std::move(s.worker);
      lock.unlock();
      Warn(s, std::string(e.what()) + " -- compiling in this process from now on");
    }
  }
  return Executable::Compile(client, mlir_text, replica_devices);
}

CompileWorkerStatus GetCompileWorkerStatus() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.compile_mutex);
  CompileWorkerStatus status;
  if (!s.worker) return status;
  status.pid = s.worker->pid();
  try {
    status.started = s.worker->Started();
  } catch (const CompileWorkerLost&) {
    status.started = false;  // the next compile reports it
  }
  return status;
}

void ShutdownClient() {
  {
    std::lock_guard<std::mutex> lock(state().compile_mutex);
    state().worker.reset();
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
