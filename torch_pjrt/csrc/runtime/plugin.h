// A loaded PJRT plugin library: dlopen, GetPjrtApi, version checks, PJRT_Plugin_Initialize, and the
// translation of every PJRT_Error into a C++ exception carrying the plugin's own message.
#pragma once

#include <pjrt_c_api.h>

#include <cstddef>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace torch_pjrt::runtime {

// Everything that goes wrong in or around a PJRT plugin. `code` is the PJRT_Error_Code when the
// plugin reported it, -1 when the problem was found by our own checks.
class PjrtError : public std::runtime_error {
 public:
  explicit PjrtError(const std::string& message, int code = -1)
      : std::runtime_error(message), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

// Zero-initialized PJRT argument struct with its struct_size set, as the C API requires.
template <class T>
T MakeArgs(size_t struct_size) {
  T args;
  std::memset(&args, 0, sizeof(args));
  args.struct_size = struct_size;
  return args;
}
#define PJRT_ARGS(T) ::torch_pjrt::runtime::MakeArgs<T##_Args>(T##_Args_STRUCT_SIZE)

// Calls PJRT function `fn` of `plugin` with `args`, throwing PjrtError on failure. Functions past
// the end of an older plugin's PJRT_Api struct are reported as missing instead of being called.
#define PJRT_CALL(plugin, fn, args) \
  (plugin).Call(&PJRT_Api::fn, offsetof(PJRT_Api, fn), (args), #fn)

class Plugin {
 public:
  // Loads the shared library at `path` for the sub-plugin called `name`. Throws PjrtError naming
  // the plugin and the cause: missing file, dlopen failure, no GetPjrtApi symbol, incompatible
  // API version, or a failing PJRT_Plugin_Initialize.
  static std::shared_ptr<Plugin> Load(const std::string& name, const std::string& path);
  ~Plugin();

  const PJRT_Api* api() const { return api_; }
  const std::string& name() const { return name_; }
  const std::string& path() const { return path_; }
  int api_major() const { return api_->pjrt_api_version.major_version; }
  int api_minor() const { return api_->pjrt_api_version.minor_version; }
  // Plugin attributes (PJRT_Plugin_Attributes), rendered as strings.
  const std::vector<std::pair<std::string, std::string>>& attributes() const {
    return attributes_;
  }

  template <class Fn, class Args>
  void Call(Fn* PJRT_Api::*member, size_t offset, Args* args, const char* what) const {
    if (offset + sizeof(void*) > api_->struct_size || api_->*member == nullptr) {
      throw PjrtError("PJRT plugin '" + name_ + "' does not implement " + what + " (its PJRT API is " +
                      std::to_string(api_major()) + "." + std::to_string(api_minor()) + ")");
    }
    Check((api_->*member)(args), what);
  }

  // Throws PjrtError for a non-null error (and destroys it); no-op for nullptr.
  void Check(PJRT_Error* error, const char* what) const;
  // Returns the message of `error` and destroys it.
  std::string TakeMessage(PJRT_Error* error, int* code = nullptr) const;
  // Whether `event` has finished (successfully or not); throws PjrtError if it cannot say.
  bool EventReady(PJRT_Event* event) const;
  // Destroys an event after waiting for it; throws the event's error if it failed.
  void AwaitAndDestroy(PJRT_Event* event, const char* what) const;
  // Destroys an event without waiting (PJRT allows it before the event is ready).
  void DestroyEvent(PJRT_Event* event) const;

 private:
  Plugin() = default;
  std::string name_;
  std::string path_;
  void* handle_ = nullptr;
  const PJRT_Api* api_ = nullptr;
  std::vector<std::pair<std::string, std::string>> attributes_;
};

}  // namespace torch_pjrt::runtime
