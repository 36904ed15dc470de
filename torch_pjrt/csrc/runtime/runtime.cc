#include "runtime/runtime.h"

#include <mutex>

namespace torch_pjrt::runtime {

namespace {

struct State {
  std::mutex mutex;
  ConfigProvider provider;
  std::function<void(const std::string&)> warn;
  std::shared_ptr<Client> client;
  std::map<std::string, std::string> capabilities;
  std::string error;  // set once creation failed
  bool shut_down = false;
};

// Leaked on purpose: destroying PJRT objects from static destructors races with the plugin's own
// teardown. Orderly destruction happens in ShutdownClient (called at interpreter exit).
State& state() {
  static State* s = new State();
  return *s;
}

}  // namespace

void SetConfigProvider(ConfigProvider provider) {
  std::lock_guard<std::mutex> lock(state().mutex);
  state().provider = std::move(provider);
}

void SetWarningHandler(std::function<void(const std::string&)> handler) {
  std::lock_guard<std::mutex> lock(state().mutex);
  state().warn = std::move(handler);
}

namespace {

std::shared_ptr<Client> StartClient(const PluginConfig& config) {
  auto plugin = Plugin::Load(config.name, config.library_path);
  auto client = std::make_shared<Client>(plugin, config.options);
  if (client->device_count() == 0) {
    throw PjrtError("PJRT plugin '" + config.name + "' started but reports no addressable devices");
  }
  return client;
}

}  // namespace

std::shared_ptr<Client> GetClient() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.client) return s.client;
  if (s.shut_down) throw PjrtError("the pjrt runtime was shut down (the interpreter is exiting)");
  if (!s.error.empty()) throw PjrtError(s.error);
  try {
    if (!s.provider) {
      throw PjrtError("no PJRT plugin configuration: torch_pjrt's Python package was not initialized");
    }
    RuntimeConfig config = s.provider();
    std::string failures;
    for (const PluginConfig& candidate : config.candidates) {
      try {
        s.client = StartClient(candidate);
        s.capabilities = candidate.capabilities;
        break;
      } catch (const std::exception& e) {
        if (config.strict) throw;
        failures += std::string(failures.empty() ? "" : "; ") + e.what();
        if (s.warn) s.warn(std::string(e.what()) + " -- skipping it");
      }
    }
    if (!s.client) {
      throw PjrtError("no PJRT plugin could be started: " + (failures.empty() ? "none configured" : failures));
    }
  } catch (const std::exception& e) {
    s.error = e.what();
    throw PjrtError(s.error);
  }
  return s.client;
}

const std::map<std::string, std::string>& ActiveCapabilities() {
  std::lock_guard<std::mutex> lock(state().mutex);
  return state().capabilities;  // written once, before the client is published
}

std::shared_ptr<Client> PeekClient() {
  std::lock_guard<std::mutex> lock(state().mutex);
  return state().client;
}

void ShutdownClient() {
  std::shared_ptr<Client> client;
  {
    std::lock_guard<std::mutex> lock(state().mutex);
    state().shut_down = true;
    client = std::move(state().client);
  }
  // `client` dies here, outside the lock, once every buffer and executable has let go of it.
}

bool IsShutDown() {
  std::lock_guard<std::mutex> lock(state().mutex);
  return state().shut_down;
}

}  // namespace torch_pjrt::runtime
