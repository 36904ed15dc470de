// The bridge between at::Tensor and the graph layer: dtype mapping, finding a tensor's
// LazyStorage, describing it as a strided view, creating empty pjrt tensors.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>

#include <utility>

#include "graph/trace.h"

namespace torch_pjrt::aten {

// Raises TypeError naming the dtype when pjrt cannot hold it.
ElementType ToElementType(c10::ScalarType t);
c10::ScalarType ToScalarType(ElementType t);

bool IsPjrt(const at::Tensor& t);
// The LazyStorage behind a pjrt tensor (never null for a tensor made by us).
graph::LazyStorage* StorageOf(const at::Tensor& t);
graph::LazyStorage* StorageOf(const c10::Storage& s);
graph::TensorView ViewOf(const at::Tensor& t);

// A new storage of `nbytes` on `device`, never written (reads as zeros).
c10::Storage NewStorage(size_t nbytes, c10::DeviceIndex device);
// A pjrt tensor viewing `storage` with these sizes, strides and storage offset.
at::Tensor TensorOver(c10::Storage storage, c10::IntArrayRef sizes, c10::IntArrayRef strides, int64_t offset,
                      c10::ScalarType dtype);

// An uninitialized pjrt tensor (reads as zeros) with exactly these sizes and strides.
at::Tensor EmptyStrided(c10::IntArrayRef sizes, c10::IntArrayRef strides, c10::ScalarType dtype,
                        c10::DeviceIndex device);
at::Tensor EmptyContiguous(c10::IntArrayRef sizes, c10::ScalarType dtype, c10::DeviceIndex device);

// The lazily evaluated value of a pjrt tensor, and writing one into it. Both honor torch's lazy
// conjugate/negative bits (the value is the logical one; the storage keeps the raw one).
graph::Value ReadValue(const at::Tensor& t);
void WriteValue(const at::Tensor& t, graph::Value v);

// Traces the internal op `name` ("pjrt::<op>", a lowering of our own) over `inputs` (pjrt
// tensors of one device) with one int attribute per `ints`; returns its results' values.
std::vector<graph::Value> TraceInternalOp(const char* name, const std::vector<at::Tensor>& inputs,
                                          const std::vector<int64_t>& ints, std::vector<graph::TensorType> outs);
// The same with attributes of any kind (graph::Arg::Bool, Arg::Double, ...) after the tensors.
std::vector<graph::Value> TraceInternalOpWith(const char* name, const std::vector<at::Tensor>& inputs,
                                              const graph::ArgList& attrs, std::vector<graph::TensorType> outs);
// A new contiguous pjrt tensor of `sizes`/`dtype` on `device` holding `v`.
at::Tensor TensorOfValue(graph::Value v, c10::IntArrayRef sizes, c10::ScalarType dtype, int device);

// Converts `v` to `dtype` and broadcasts it to `sizes` (no nodes when already matching).
graph::Value Coerce(graph::Value v, ElementType dtype, c10::IntArrayRef sizes, int device);

// The default generator of pjrt device `device` (random ops without a generator argument, the
// random offsets of captured calls and device graphs).
at::Generator DefaultGenerator(int device);

// Reserves `increment` counter values of the pjrt generator `gen`: returns its seed and the first
// reserved offset (random ops read both as value scalars).
std::pair<uint64_t, uint64_t> ReserveRandomOffsets(at::Generator gen, uint64_t increment);

// The calling thread's current pjrt device (what torch.pjrt.set_device and device guards change).
c10::DeviceIndex CurrentDevice();
void SetCurrentDevice(c10::DeviceIndex index);

// Validates a device index against the active plugin (starting it if needed).
void CheckDeviceIndex(c10::DeviceIndex index);

// The DataPtr deleter of pjrt storages (identifies them).
void DeleteLazyStorage(void* ctx);
// A DataPtr for a new storage of `nbytes` on `device`: a reserved address that is never
// dereferenced, with a LazyStorage as its context.
c10::DataPtr AllocateLazyStorage(size_t nbytes, c10::DeviceIndex device);

}  // namespace torch_pjrt::aten
