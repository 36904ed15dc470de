// XLA's FFI (typed custom calls) as far as we use it: the C ABI of a handler's call frame
// (declared here after xla/ffi/api/c_api.h, FFI API 0.x, which no installed package ships) and
// registration through the plugin's PJRT FFI extension. Handlers are plain C functions; which
// exist is decided above us (host_kernels/), so this layer never names an op.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/plugin.h"

extern "C" {

struct XLA_FFI_Error;
struct XLA_FFI_Api;

struct XLA_FFI_Extension_Base {
  size_t struct_size;
  int type;  // 1: metadata (the runtime asks the handler for its API version and traits)
  XLA_FFI_Extension_Base* next;
};

struct XLA_FFI_Api_Version {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  int major_version;
  int minor_version;
};

// Element types: xla::PrimitiveType's numbers.
enum XLA_FFI_DataType : int {
  XLA_FFI_DataType_F32 = 11,
  XLA_FFI_DataType_F64 = 12,
  XLA_FFI_DataType_BF16 = 16,
  XLA_FFI_DataType_F16 = 10,
  XLA_FFI_DataType_S64 = 5,
};

struct XLA_FFI_Buffer {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  int dtype;  // XLA_FFI_DataType
  void* data;
  int64_t rank;
  int64_t* dims;
};

struct XLA_FFI_ByteSpan {
  const char* ptr;
  size_t len;
};

struct XLA_FFI_Scalar {
  int dtype;
  void* value;
};

struct XLA_FFI_Array {
  int dtype;
  size_t size;
  void* data;
};

struct XLA_FFI_Args {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  int64_t size;
  int* types;  // 1: buffer
  void** args;
};

struct XLA_FFI_Rets {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  int64_t size;
  int* types;  // 1: buffer
  void** rets;
};

// Sorted by name.
struct XLA_FFI_Attrs {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  int64_t size;
  int* types;  // 1: array, 2: dictionary, 3: scalar, 4: string
  XLA_FFI_ByteSpan** names;
  void** attrs;
};

struct XLA_FFI_CallFrame {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  const XLA_FFI_Api* api;
  void* ctx;
  int stage;  // 3: execute
  XLA_FFI_Args args;
  XLA_FFI_Rets rets;
  XLA_FFI_Attrs attrs;
  void* future;
};

struct XLA_FFI_Metadata {
  size_t struct_size;
  XLA_FFI_Api_Version api_version;
  uint32_t traits;
};

struct XLA_FFI_Metadata_Extension {
  XLA_FFI_Extension_Base extension_base;
  XLA_FFI_Metadata* metadata;
};

struct XLA_FFI_Error_Create_Args {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  const char* message;
  int errc;  // absl status code
};

struct XLA_FFI_Api {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  XLA_FFI_Api_Version api_version;
  void* internal_api;
  XLA_FFI_Error* (*XLA_FFI_Error_Create)(XLA_FFI_Error_Create_Args* args);
  // More functions follow; we use none of them.
};

typedef XLA_FFI_Error* XLA_FFI_Handler(XLA_FFI_CallFrame* call_frame);

}  // extern "C"

namespace torch_pjrt::runtime {

// Adds a handler for custom-call target `name` (registered with every plugin that offers host
// kernels, when its client starts). Called at static initialization by the handlers' files.
void AddFfiHandler(const char* name, XLA_FFI_Handler* handler);
// Registers every added handler with `plugin` for `platform`. Throws PjrtError when the plugin
// has no FFI extension.
void RegisterFfiHandlers(const Plugin& plugin, const std::string& platform);
// The targets of the added handlers (what a compile worker registers stand-ins for).
std::vector<std::string> FfiHandlerNames();
// Registers one handler; throws like RegisterFfiHandlers.
void RegisterFfiHandler(const Plugin& plugin, const std::string& platform, const std::string& name,
                        XLA_FFI_Handler* handler);

// For handlers: answers the runtime's metadata query (returns true: the call is done), or says
// the call frame is an execution (false for the other stages, which handlers ignore).
bool IsMetadataQuery(XLA_FFI_CallFrame* frame);
bool IsExecution(const XLA_FFI_CallFrame* frame);
// An FFI error carrying `message` (the execution fails with it).
XLA_FFI_Error* FfiError(const XLA_FFI_CallFrame* frame, const std::string& message);
// Attribute `name` as an int64 scalar, or `fallback` when absent.
int64_t FfiIntAttr(const XLA_FFI_CallFrame* frame, const char* name, int64_t fallback);
// Attribute `name` as an int64 array (empty when absent).
std::vector<int64_t> FfiIntArrayAttr(const XLA_FFI_CallFrame* frame, const char* name);

}  // namespace torch_pjrt::runtime
