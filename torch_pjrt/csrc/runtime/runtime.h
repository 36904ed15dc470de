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
// Capabilities of the plugin whose client is running (empty before it starts).
const std::map<std::string, std::string>& ActiveCapabilities();

// Releases our reference to the client (at interpreter exit, after all buffers are gone).
void ShutdownClient();
// True once ShutdownClient ran: late destructors must not touch PJRT any more.
bool IsShutDown();

}  // namespace torch_pjrt::runtime
