#include "runtime/plugin.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <chrono>

namespace torch_pjrt::runtime {

namespace {

// How long a wait polls its event before it blocks. Blocking puts the caller to sleep, and waking
// it (a futex, then a reschedule beside XLA:CPU's still-spinning pool workers) cost 20-40 µs per
// read of a small execution on the 2-core machine: the compiled 1000-op chain's call plus read
// took 75-100 µs blocking and ~42 µs polling first. A long execution loses at most this much of
// one core per wait (the GPT example and the MLP measured unchanged).
constexpr auto kPollBeforeBlocking = std::chrono::microseconds(50);

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Returns once `event` is ready or kPollBeforeBlocking has passed (or the plugin cannot say).
void PollBriefly(const Plugin& plugin, PJRT_Event* event) {
  const auto until = std::chrono::steady_clock::now() + kPollBeforeBlocking;
  try {
    while (!plugin.EventReady(event) && std::chrono::steady_clock::now() < until) CpuRelax();
  } catch (const PjrtError&) {
    // the Await that follows reports a broken event
  }
}

std::string NamedValueToString(const PJRT_NamedValue& v) {
  switch (v.type) {
    case PJRT_NamedValue_kString:
      return std::string(v.string_value, v.value_size);
    case PJRT_NamedValue_kInt64:
      return std::to_string(v.int64_value);
    case PJRT_NamedValue_kInt64List: {
      std::string s = "[";
      for (size_t i = 0; i < v.value_size; ++i) {
        s += (i ? "," : "") + std::to_string(v.int64_array_value[i]);
      }
      return s + "]";
    }
    case PJRT_NamedValue_kFloat:
      return std::to_string(v.float_value);
    case PJRT_NamedValue_kBool:
      return v.bool_value ? "true" : "false";
  }
  return "?";
}

}  // namespace

std::shared_ptr<Plugin> Plugin::Load(const std::string& name, const std::string& path) {
  const std::string who = "PJRT plugin '" + name + "'";
  struct stat st;
  if (path.empty()) {
    throw PjrtError(who + " has no library path; its DevicePlugin.library_path() returned nothing");
  }
  if (stat(path.c_str(), &st) != 0) {
    throw PjrtError(who + ": library not found at " + path +
                    " (is the package that ships it installed?)");
  }
  // RTLD_LOCAL: plugins bundle their own copies of LLVM/absl/protobuf that must not be
  // interposed with torch's. Plugins are never dlclose'd: most cannot be unloaded safely.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* err = dlerror();
    throw PjrtError(who + ": cannot load " + path + ": " + (err ? err : "unknown dlopen error"));
  }
  using GetPjrtApiFn = const PJRT_Api* (*)();
  auto get_api = reinterpret_cast<GetPjrtApiFn>(dlsym(handle, "GetPjrtApi"));
  if (get_api == nullptr) {
    throw PjrtError(who + ": " + path + " is not a PJRT plugin (it does not export GetPjrtApi)");
  }
  const PJRT_Api* api = get_api();
  if (api == nullptr) {
    throw PjrtError(who + ": GetPjrtApi() in " + path + " returned null");
  }
  if (api->struct_size < offsetof(PJRT_Api, PJRT_Plugin_Initialize) + sizeof(void*)) {
    throw PjrtError(who + ": " + path + " implements a PJRT C API too old to use (PJRT_Api is " +
                    std::to_string(api->struct_size) + " bytes)");
  }
  if (api->pjrt_api_version.major_version != PJRT_API_MAJOR) {
    throw PjrtError(who + ": incompatible PJRT C API version " +
                    std::to_string(api->pjrt_api_version.major_version) + "." +
                    std::to_string(api->pjrt_api_version.minor_version) + " in " + path +
                    "; torch_pjrt was built against " + std::to_string(PJRT_API_MAJOR) + "." +
                    std::to_string(PJRT_API_MINOR) + " and needs the same major version");
  }
  std::shared_ptr<Plugin> plugin(new Plugin());
  plugin->name_ = name;
  plugin->path_ = path;
  plugin->handle_ = handle;
  plugin->api_ = api;

  auto init = PJRT_ARGS(PJRT_Plugin_Initialize);
  try {
    PJRT_CALL(*plugin, PJRT_Plugin_Initialize, &init);
  } catch (const PjrtError& e) {
    throw PjrtError(who + " failed to initialize: " + e.what(), e.code());
  }
  if (api->struct_size >= offsetof(PJRT_Api, PJRT_Plugin_Attributes) + sizeof(void*) &&
      api->PJRT_Plugin_Attributes != nullptr) {
    auto attrs = PJRT_ARGS(PJRT_Plugin_Attributes);
    PJRT_CALL(*plugin, PJRT_Plugin_Attributes, &attrs);
    for (size_t i = 0; i < attrs.num_attributes; ++i) {
      const PJRT_NamedValue& v = attrs.attributes[i];
      plugin->attributes_.emplace_back(std::string(v.name, v.name_size), NamedValueToString(v));
    }
  }
  return plugin;
}

Plugin::~Plugin() = default;

std::string Plugin::TakeMessage(PJRT_Error* error, int* code) const {
  auto msg = PJRT_ARGS(PJRT_Error_Message);
  msg.error = error;
  api_->PJRT_Error_Message(&msg);
  std::string text(msg.message, msg.message_size);
  if (code != nullptr) {
    auto get_code = PJRT_ARGS(PJRT_Error_GetCode);
    get_code.error = error;
    PJRT_Error* code_error = api_->PJRT_Error_GetCode(&get_code);
    *code = code_error ? -1 : static_cast<int>(get_code.code);
    if (code_error) {
      auto destroy = PJRT_ARGS(PJRT_Error_Destroy);
      destroy.error = code_error;
      api_->PJRT_Error_Destroy(&destroy);
    }
  }
  auto destroy = PJRT_ARGS(PJRT_Error_Destroy);
  destroy.error = error;
  api_->PJRT_Error_Destroy(&destroy);
  return text;
}

void Plugin::Check(PJRT_Error* error, const char* what) const {
  if (error == nullptr) return;
  int code = -1;
  std::string text = TakeMessage(error, &code);
  throw PjrtError(std::string(what) + " failed in PJRT plugin '" + name_ + "': " + text, code);
}

bool Plugin::EventReady(PJRT_Event* event) const {
  auto ready = PJRT_ARGS(PJRT_Event_IsReady);
  ready.event = event;
  PJRT_CALL(*this, PJRT_Event_IsReady, &ready);
  return ready.is_ready;
}

void Plugin::AwaitAndDestroy(PJRT_Event* event, const char* what) const {
  if (event == nullptr) return;
  PollBriefly(*this, event);
  auto await = PJRT_ARGS(PJRT_Event_Await);
  await.event = event;
  PJRT_Error* error = api_->PJRT_Event_Await(&await);
  DestroyEvent(event);
  Check(error, what);
}

void Plugin::DestroyEvent(PJRT_Event* event) const {
  auto destroy = PJRT_ARGS(PJRT_Event_Destroy);
  destroy.event = event;
  api_->PJRT_Event_Destroy(&destroy);
}

}  // namespace torch_pjrt::runtime
