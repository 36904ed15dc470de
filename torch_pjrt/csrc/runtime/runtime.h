// The process-wide PJRT runtime: which sub-plugin is in use and its client, created on first use.
// Which plugin to load and with which options is decided above us (Python's DevicePlugin); we only
// receive a PluginConfig through a provider, so this layer never names a chip.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/client.h"

namespace torch_pjrt::runtime {

struct PluginConfig {
  std::string name;          // the sub-plugin's name, e.g. "cpu"
  std::string library_path;  // the PJRT plugin shared library
  std::vector<NamedOption> options;
  // The sub-plugin's capabilities as strings ("supported_dtypes" -> "float32,int64", ...).
  // The runtime only carries them; the layers above interpret them.
  std::map<std::string, std::string> capabilities;
};

// Plugins to try, best first. Unless `strict` (the user named one), a plugin that fails to load
// or start is reported through the warning handler and the next one is tried.
struct RuntimeConfig {
  std::vector<PluginConfig> candidates;
  bool strict = false;
};

using ConfigProvider = std::function<RuntimeConfig()>;
void SetConfigProvider(ConfigProvider provider);
void SetWarningHandler(std::function<void(const std::string&)> handler);

// The client, created on the first call. A failure is remembered and rethrown, with the same
// message, on every later call (a broken plugin never half-initializes).
std::shared_ptr<Client> GetClient();
// The client if it was already created, else null. Never starts one.
std::shared_ptr<Client> PeekClient();
// Capabilities of the plugin whose client is running (empty before it starts).
const std::map<std::string, std::string>& ActiveCapabilities();

// Releases our reference to the client (at interpreter exit, after all buffers are gone).
void ShutdownClient();
// True once ShutdownClient ran: late destructors must not touch PJRT any more.
bool IsShutDown();

}  // namespace torch_pjrt::runtime
