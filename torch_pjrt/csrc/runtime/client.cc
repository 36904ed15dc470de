#include "runtime/client.h"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <utility>

namespace torch_pjrt::runtime {

PJRT_Error* KvGet(PJRT_KeyValueGetCallback_Args* args) {
  auto* kv = static_cast<KeyValueStore*>(args->user_arg);
  try {
    std::string value = kv->get(std::string(args->key, args->key_size), args->timeout_in_ms);
    args->value = new char[value.size()];
    std::memcpy(args->value, value.data(), value.size());
    args->value_size = value.size();
    args->value_deleter_callback = [](char* v) { delete[] v; };
    return nullptr;
  } catch (const std::exception& e) {
    std::string message = std::string("torch.distributed store get failed: ") + e.what();
    return (*args->callback_error)(PJRT_Error_Code_DEADLINE_EXCEEDED, message.data(), message.size());
  }
}

PJRT_Error* KvPut(PJRT_KeyValuePutCallback_Args* args) {
  auto* kv = static_cast<KeyValueStore*>(args->user_arg);
  try {
    kv->put(std::string(args->key, args->key_size), std::string(args->value, args->value_size));
    return nullptr;
  } catch (const std::exception& e) {
    std::string message = std::string("torch.distributed store set failed: ") + e.what();
    return (*args->callback_error)(PJRT_Error_Code_UNAVAILABLE, message.data(), message.size());
  }
}

Client::Client(std::shared_ptr<Plugin> plugin, const std::vector<NamedOption>& options,
               std::shared_ptr<KeyValueStore> kv)
    : plugin_(std::move(plugin)), kv_(std::move(kv)) {
  std::vector<PJRT_NamedValue> values(options.size());
  for (size_t i = 0; i < options.size(); ++i) {
    const NamedOption& o = options[i];
    PJRT_NamedValue& v = values[i];
    std::memset(&v, 0, sizeof(v));
    v.struct_size = PJRT_NamedValue_STRUCT_SIZE;
    v.name = o.name.c_str();
    v.name_size = o.name.size();
    v.value_size = 1;
    switch (o.kind) {
      case NamedOption::Kind::kString:
        v.type = PJRT_NamedValue_kString;
        v.string_value = o.string_value.c_str();
        v.value_size = o.string_value.size();
        break;
      case NamedOption::Kind::kInt64:
        v.type = PJRT_NamedValue_kInt64;
        v.int64_value = o.int_value;
        break;
      case NamedOption::Kind::kInt64List:
        v.type = PJRT_NamedValue_kInt64List;
        v.int64_array_value = o.int_list.data();
        v.value_size = o.int_list.size();
        break;
      case NamedOption::Kind::kFloat:
        v.type = PJRT_NamedValue_kFloat;
        v.float_value = o.float_value;
        break;
      case NamedOption::Kind::kBool:
        v.type = PJRT_NamedValue_kBool;
        v.bool_value = o.bool_value;
        break;
    }
  }
  auto create = PJRT_ARGS(PJRT_Client_Create);
  create.create_options = values.empty() ? nullptr : values.data();
  create.num_options = values.size();
  if (kv_ && *kv_) {
    create.kv_get_callback = KvGet;
    create.kv_get_user_arg = kv_.get();
    create.kv_put_callback = KvPut;
    create.kv_put_user_arg = kv_.get();
  }
  try {
    PJRT_CALL(*plugin_, PJRT_Client_Create, &create);
  } catch (const PjrtError& e) {
    throw PjrtError("PJRT plugin '" + plugin_->name() + "' could not start a client: " + e.what(),
                    e.code());
  }
  client_ = create.client;

  auto name = PJRT_ARGS(PJRT_Client_PlatformName);
  name.client = client_;
  PJRT_CALL(*plugin_, PJRT_Client_PlatformName, &name);
  platform_name_.assign(name.platform_name, name.platform_name_size);
  auto version = PJRT_ARGS(PJRT_Client_PlatformVersion);
  version.client = client_;
  PJRT_CALL(*plugin_, PJRT_Client_PlatformVersion, &version);
  platform_version_.assign(version.platform_version, version.platform_version_size);

  auto devices = PJRT_ARGS(PJRT_Client_AddressableDevices);
  devices.client = client_;
  PJRT_CALL(*plugin_, PJRT_Client_AddressableDevices, &devices);
  devices_.assign(devices.addressable_devices,
                  devices.addressable_devices + devices.num_addressable_devices);
  if (!devices_.empty()) {
    auto desc = PJRT_ARGS(PJRT_Device_GetDescription);
    desc.device = devices_[0];
    PJRT_CALL(*plugin_, PJRT_Device_GetDescription, &desc);
    auto kind = PJRT_ARGS(PJRT_DeviceDescription_Kind);
    kind.device_description = desc.device_description;
    PJRT_CALL(*plugin_, PJRT_DeviceDescription_Kind, &kind);
    device_kind_.assign(kind.device_kind, kind.device_kind_size);
  }
}

namespace {

// Sets environment variables for as long as it lives, then restores the old values.
class ScopedEnvironment {
 public:
  explicit ScopedEnvironment(const std::map<std::string, std::string>& values) {
    for (const auto& [name, value] : values) {
      const char* old = std::getenv(name.c_str());
      saved_.push_back({name, old ? std::optional<std::string>(old) : std::nullopt});
      setenv(name.c_str(), value.c_str(), 1);
    }
  }
  ~ScopedEnvironment() {
    for (const auto& [name, old] : saved_) {
      if (old) {
        setenv(name.c_str(), old->c_str(), 1);
      } else {
        unsetenv(name.c_str());
      }
    }
  }
  ScopedEnvironment(const ScopedEnvironment&) = delete;
  ScopedEnvironment& operator=(const ScopedEnvironment&) = delete;

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

}  // namespace

std::shared_ptr<Client> StartClientUnder(const std::map<std::string, std::string>& environment,
                                         std::shared_ptr<Plugin> plugin, const std::vector<NamedOption>& options) {
  ScopedEnvironment env(environment);
  return std::make_shared<Client>(std::move(plugin), options);
}

Client::~Client() {
  if (client_ == nullptr) return;
  auto destroy = PJRT_ARGS(PJRT_Client_Destroy);
  destroy.client = client_;
  PJRT_Error* error = plugin_->api()->PJRT_Client_Destroy(&destroy);
  if (error) plugin_->TakeMessage(error);  // nothing useful to do with it at teardown
}

PJRT_Device* Client::device(int index) const {
  if (index < 0 || index >= device_count()) {
    throw PjrtError("pjrt device index " + std::to_string(index) + " is out of range: plugin '" +
                    plugin_->name() + "' has " + std::to_string(device_count()) +
                    " device(s), valid indices are 0.." + std::to_string(device_count() - 1));
  }
  return devices_[index];
}

int Client::device_index(PJRT_Device* device) const {
  auto it = std::find(devices_.begin(), devices_.end(), device);
  return it == devices_.end() ? -1 : static_cast<int>(it - devices_.begin());
}

int64_t Client::global_device_id(int index) const {
  auto desc = PJRT_ARGS(PJRT_Device_GetDescription);
  desc.device = device(index);
  PJRT_CALL(*plugin_, PJRT_Device_GetDescription, &desc);
  auto id = PJRT_ARGS(PJRT_DeviceDescription_Id);
  id.device_description = desc.device_description;
  PJRT_CALL(*plugin_, PJRT_DeviceDescription_Id, &id);
  return id.id;
}

}  // namespace torch_pjrt::runtime
