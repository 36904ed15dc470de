#include "runtime/ffi.h"

#include <cstring>
#include <utility>

namespace torch_pjrt::runtime {

namespace {

// PJRT's FFI extension (xla/pjrt/c/pjrt_c_api_ffi_extension.h as of PJRT C API 0.8x, where
// only typed FFI handlers exist and the registration args lost their `api_version` field): the
// base, then three functions; we call only register_handler.
struct FfiRegisterHandlerArgs {
  size_t struct_size;
  const char* target_name;
  size_t target_name_size;
  void* handler;  // XLA_FFI_Handler*
  const char* platform_name;
  size_t platform_name_size;
  uint32_t traits;
};
struct FfiExtension {
  PJRT_Extension_Base base;
  void* type_id_register;
  void* user_data_add;
  PJRT_Error* (*register_handler)(FfiRegisterHandlerArgs* args);
};

std::vector<std::pair<const char*, XLA_FFI_Handler*>>& Handlers() {
  static auto* handlers = new std::vector<std::pair<const char*, XLA_FFI_Handler*>>();
  return *handlers;
}

const FfiExtension* FindFfiExtension(const PJRT_Api* api) {
  for (const PJRT_Extension_Base* e = api->extension_start; e != nullptr; e = e->next) {
    if (e->type == PJRT_Extension_Type_FFI && e->struct_size >= sizeof(FfiExtension)) {
      return reinterpret_cast<const FfiExtension*>(e);
    }
  }
  return nullptr;
}

constexpr int kMetadataExtension = 1;
constexpr int kExecuteStage = 3;
constexpr int kScalarAttr = 3;
constexpr int kArrayAttr = 1;
constexpr int kS64 = 5;

// Index of attribute `name`, or -1.
int64_t FindAttr(const XLA_FFI_CallFrame* frame, const char* name) {
  const size_t len = std::strlen(name);
  for (int64_t i = 0; i < frame->attrs.size; ++i) {
    const XLA_FFI_ByteSpan* n = frame->attrs.names[i];
    if (n->len == len && std::memcmp(n->ptr, name, len) == 0) return i;
  }
  return -1;
}

}  // namespace

void AddFfiHandler(const char* name, XLA_FFI_Handler* handler) { Handlers().emplace_back(name, handler); }

void RegisterFfiHandler(const Plugin& plugin, const std::string& platform, const std::string& name,
                        XLA_FFI_Handler* handler) {
  const FfiExtension* ffi = FindFfiExtension(plugin.api());
  if (ffi == nullptr || ffi->register_handler == nullptr) {
    throw PjrtError("PJRT plugin '" + plugin.name() + "' declares host_kernels but has no FFI extension");
  }
  FfiRegisterHandlerArgs args;
  std::memset(&args, 0, sizeof(args));
  args.struct_size = sizeof(args);
  args.target_name = name.data();
  args.target_name_size = name.size();
  args.handler = reinterpret_cast<void*>(handler);
  args.platform_name = platform.data();
  args.platform_name_size = platform.size();
  plugin.Check(ffi->register_handler(&args), "PJRT_FFI_Register_Handler");
}

void RegisterFfiHandlers(const Plugin& plugin, const std::string& platform) {
  for (const auto& [name, handler] : Handlers()) RegisterFfiHandler(plugin, platform, name, handler);
}

std::vector<std::string> FfiHandlerNames() {
  std::vector<std::string> names;
  for (const auto& entry : Handlers()) names.emplace_back(entry.first);
  return names;
}

bool IsMetadataQuery(XLA_FFI_CallFrame* frame) {
  XLA_FFI_Extension_Base* ext = frame->extension_start;
  if (ext == nullptr || ext->type != kMetadataExtension) return false;
  auto* metadata = reinterpret_cast<XLA_FFI_Metadata_Extension*>(ext)->metadata;
  // Our handlers use the call frame's original fields only: any 0.x runtime can call them.
  metadata->api_version.major_version = frame->api->api_version.major_version;
  metadata->api_version.minor_version = frame->api->api_version.minor_version;
  metadata->traits = 0;
  return true;
}

bool IsExecution(const XLA_FFI_CallFrame* frame) { return frame->stage == kExecuteStage; }

XLA_FFI_Error* FfiError(const XLA_FFI_CallFrame* frame, const std::string& message) {
  XLA_FFI_Error_Create_Args args;
  std::memset(&args, 0, sizeof(args));
  args.struct_size = sizeof(args);
  args.message = message.c_str();
  args.errc = 13;  // INTERNAL
  return frame->api->XLA_FFI_Error_Create(&args);
}

int64_t FfiIntAttr(const XLA_FFI_CallFrame* frame, const char* name, int64_t fallback) {
  int64_t i = FindAttr(frame, name);
  if (i < 0 || frame->attrs.types[i] != kScalarAttr) return fallback;
  const auto* scalar = static_cast<const XLA_FFI_Scalar*>(frame->attrs.attrs[i]);
  if (scalar->dtype != kS64) return fallback;
  return *static_cast<const int64_t*>(scalar->value);
}

std::vector<int64_t> FfiIntArrayAttr(const XLA_FFI_CallFrame* frame, const char* name) {
  int64_t i = FindAttr(frame, name);
  if (i < 0 || frame->attrs.types[i] != kArrayAttr) return {};
  const auto* array = static_cast<const XLA_FFI_Array*>(frame->attrs.attrs[i]);
  if (array->dtype != kS64) return {};
  const auto* data = static_cast<const int64_t*>(array->data);
  return std::vector<int64_t>(data, data + array->size);
}

}  // namespace torch_pjrt::runtime
