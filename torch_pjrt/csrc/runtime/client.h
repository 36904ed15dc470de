// A PJRT client: created from a loaded plugin with the sub-plugin's create options, it owns the
// addressable devices. Buffers and executables keep their client alive.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/plugin.h"

namespace torch_pjrt::runtime {

// One PJRT_Client create option. The type is explicit because plugins read options with a fixed
// type and some abort the process on a mismatch (the CPU plugin's cpu_device_count must be int64).
struct NamedOption {
  enum class Kind { kString, kInt64, kInt64List, kFloat, kBool };
  std::string name;
  Kind kind = Kind::kInt64;
  std::string string_value;
  int64_t int_value = 0;
  std::vector<int64_t> int_list;
  float float_value = 0;
  bool bool_value = false;
};

// The store a plugin that runs collectives across processes uses to find its peers (PJRT's
// kv_get/kv_put callbacks at client creation): torch.distributed's store, given by the layers above.
// `get` blocks until the key exists or `timeout_ms` passed, then throws. Both are called from the
// plugin's threads and must be thread-safe.
struct KeyValueStore {
  std::function<std::string(const std::string& key, int timeout_ms)> get;
  std::function<void(const std::string& key, const std::string& value)> put;
  explicit operator bool() const { return get && put; }
};

// PJRT's key-value callbacks over the KeyValueStore in `user_arg`: a store failure (a get that
// timed out) becomes a PJRT error made with the plugin's `callback_error`, never an exception.
PJRT_Error* KvGet(PJRT_KeyValueGetCallback_Args* args);
PJRT_Error* KvPut(PJRT_KeyValuePutCallback_Args* args);

// A client of `plugin` started while the variables in `environment` are set (the old values are
// restored before it returns). XLA's CPU client reads its pool size (PJRT_NPROC) when it starts,
// so this is how a second client with another pool is made (runtime.cc's small programs' client,
// and its twin in the compile worker). setenv is not safe against getenv on other threads: callers
// start it where nothing else runs (the start lock right after the main client started, the
// compile worker's one thread).
class Client;
std::shared_ptr<Client> StartClientUnder(const std::map<std::string, std::string>& environment,
                                         std::shared_ptr<Plugin> plugin, const std::vector<NamedOption>& options);

class Client {
 public:
  // `kv` (may be empty) must outlive the client: the plugin may call it at any time.
  Client(std::shared_ptr<Plugin> plugin, const std::vector<NamedOption>& options,
         std::shared_ptr<KeyValueStore> kv = nullptr);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const Plugin& plugin() const { return *plugin_; }
  const std::shared_ptr<Plugin>& plugin_ptr() const { return plugin_; }
  PJRT_Client* raw() const { return client_; }
  int device_count() const { return static_cast<int>(devices_.size()); }
  // Throws PjrtError with the valid range when `index` is out of range.
  PJRT_Device* device(int index) const;
  int device_index(PJRT_Device* device) const;  // -1 if not addressable
  // The job-wide id of addressable device `index` (what compile options' device assignment
  // names); equals `index` on a single-process client.
  int64_t global_device_id(int index) const;
  const std::string& platform_name() const { return platform_name_; }
  const std::string& platform_version() const { return platform_version_; }
  const std::string& device_kind() const { return device_kind_; }
  // Whether the plugin's device buffers are plain memory of this process (the sub-plugin's
  // host_memory capability): a read of a finished buffer then copies its bytes itself
  // (Buffer::ToHost) instead of asking the plugin for a transfer.
  bool host_memory() const { return host_memory_; }
  void set_host_memory(bool on) { host_memory_ = on; }

 private:
  std::shared_ptr<Plugin> plugin_;
  std::shared_ptr<KeyValueStore> kv_;
  PJRT_Client* client_ = nullptr;
  std::vector<PJRT_Device*> devices_;
  std::string platform_name_;
  std::string platform_version_;
  std::string device_kind_;
  bool host_memory_ = false;
};

}  // namespace torch_pjrt::runtime
