// The ops registered directly rather than through a lowering: tensor creation, copies between
// devices, reading a scalar, storage resizing and re-pointing, and the view ops that only change
// metadata (PyTorch's own implementations work unchanged on our storages).
#include <ATen/EmptyTensor.h>
#include <ATen/ExpandUtils.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/ScalarType.h>
#include <torch/library.h>

#include <chrono>

#include "aten/cpu_probe.h"
#include "aten/lazy_tensor.h"
#include "aten/torch_errors.h"
#include "aten/transfer.h"
#include "graph/executor.h"
#include "graph/metrics.h"

namespace torch_pjrt::aten {

namespace {

c10::DeviceIndex ResolveDevice(std::optional<c10::Device> device) {
  c10::DeviceIndex index = device && device->has_index() ? device->index() : CurrentDevice();
  CheckDeviceIndex(index);
  return index;
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory,
                               std::optional<c10::MemoryFormat> memory_format) {
  TORCH_CHECK(!layout || *layout == c10::kStrided, "pjrt tensors are strided; layout ", *layout,
              " is not supported");
  c10::DeviceIndex index = ResolveDevice(device);
  c10::ScalarType st = dtype.value_or(c10::get_default_dtype_as_scalartype());
  auto format = memory_format.value_or(c10::MemoryFormat::Contiguous);
  if (format == c10::MemoryFormat::Contiguous) return EmptyContiguous(size, st, index);
  // torch's own stride rules and errors (e.g. channels_last needs rank 4), from a meta tensor.
  at::Tensor meta = at::empty(size, at::TensorOptions().dtype(st).device(c10::kMeta), format);
  return EmptyStrided(size, meta.strides(), st, index);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                         std::optional<c10::Device> device, std::optional<bool> pin_memory) {
  TORCH_CHECK(!layout || *layout == c10::kStrided, "pjrt tensors are strided; layout ", *layout,
              " is not supported");
  c10::DeviceIndex index = ResolveDevice(device);
  return EmptyStrided(size, stride, dtype.value_or(c10::get_default_dtype_as_scalartype()), index);
}

// The checks CPU's copy_ makes through TensorIterator, in its order (overlap, then shape), for a
// pjrt destination; a CPU destination's own copy_ makes them.
void CheckCopyInto(const at::Tensor& dst, const at::Tensor& src) {
  if (!IsPjrt(dst)) return;
  CheckCopyOverlap(dst, src);
  std::vector<int64_t> shape = at::infer_size(dst.sizes(), src.sizes());
  TORCH_CHECK(dst.sizes() == c10::IntArrayRef(shape), "output with shape ", dst.sizes(),
              " doesn't match the broadcast shape ", c10::IntArrayRef(shape));
}

// Views of the same data: torch's copy_ returns at once (copy_impl's is_same_data), before its
// overlap checks, so `x.copy_(x.detach())` of an expanded x is no error.
bool SameData(const at::Tensor& a, const at::Tensor& b) {
  return a.is_alias_of(b) && a.storage_offset() == b.storage_offset() && a.strides() == b.strides() &&
         a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() && a.is_conj() == b.is_conj() &&
         a.is_neg() == b.is_neg();
}

at::Tensor _copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  if (SameData(dst, self)) return dst;
  CheckCopyInto(dst, self);
  WithTorchErrors([&] { CopyBetweenDevices(self, dst, non_blocking); });
  return dst;
}

at::Tensor _copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.sizes() != self.sizes()) dst.resize_(self.sizes());
  WithTorchErrors([&] { CopyBetweenDevices(self, dst); });
  return dst;
}

at::Scalar _local_scalar_dense(const at::Tensor& self) {
  TORCH_CHECK(self.numel() == 1, "a Tensor with ", self.numel(),
              " elements cannot be converted to Scalar");
  at::Tensor cpu = at::empty({}, self.options().device(c10::kCPU));
  WithTorchErrors([&] { CopyToHost(self.reshape({}), cpu, graph::SyncCause::kItem); });
  return cpu.item();
}

// Grows the storage of `self` so that it holds `nbytes` (PyTorch never shrinks storages).
void EnsureStorageBytes(const at::Tensor& self, size_t nbytes) {
  c10::StorageImpl* storage = self.storage().unsafeGetStorageImpl();
  if (nbytes <= storage->nbytes()) return;
  TORCH_CHECK(storage->resizable(), "Trying to resize storage that is not resizable");
  ResizeStorage(self.storage(), nbytes);
}

// As CPU's resize_: the same sizes keep the strides (an expanded out= stays expanded, and the op
// writing it then refuses it as CPU's does); new sizes are contiguous; a memory format restrides.
const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format) {
  TORCH_CHECK(memory_format != c10::MemoryFormat::Preserve, "Unsupported memory format", c10::MemoryFormat::Preserve);
  auto* impl = self.unsafeGetTensorImpl();
  if (self.sizes() != size) impl->set_sizes_contiguous(size);
  if (memory_format) impl->empty_tensor_restride(*memory_format);
  size_t nbytes = at::detail::computeStorageNbytes(self.sizes(), self.strides(), self.dtype().itemsize(),
                                                   self.storage_offset());
  EnsureStorageBytes(self, nbytes);
  return self;
}

at::Tensor& set_source_Storage_storage_offset_(at::Tensor& self, c10::Storage source,
                                                int64_t storage_offset, c10::IntArrayRef size,
                                                c10::IntArrayRef stride) {
  TORCH_CHECK(source.device().type() == c10::DeviceType::PrivateUse1,
              "pjrt: set_ needs a pjrt storage, got one on ", source.device());
  auto* impl = self.unsafeGetTensorImpl();
  if (!impl->storage().is_alias_of(source)) impl->set_storage_keep_dtype(std::move(source));
  impl->set_storage_offset(storage_offset);
  impl->set_sizes_and_strides(size, stride);
  size_t nbytes = at::detail::computeStorageNbytes(size, stride, self.dtype().itemsize(), storage_offset);
  EnsureStorageBytes(self, nbytes);
  return self;
}

at::Tensor& set_source_Storage_(at::Tensor& self, c10::Storage source) {
  int64_t n = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  return set_source_Storage_storage_offset_(self, std::move(source), 0, {n}, {1});
}

at::Tensor& set_source_Tensor_(at::Tensor& self, const at::Tensor& source) {
  if (self.is_same(source)) return self;
  return set_source_Storage_storage_offset_(self, source.storage(), source.storage_offset(),
                                            source.sizes(), source.strides());
}

at::Tensor& set_(at::Tensor& self) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0,
                       AllocateLazyStorage(0, self.device().index()),
                       c10::GetAllocator(c10::DeviceType::PrivateUse1), /*resizable=*/true);
  return set_source_Storage_storage_offset_(self, std::move(storage), 0, {0}, {1});
}

// Whether `self` may take over `from`'s data in place (`param.data = other`, Module.to()). torch
// only knows its built-in dense backends; dense pjrt and CPU tensors are interchangeable, so
// Module.to("pjrt") keeps the same Parameter objects (and lazy parameters stay lazy).
bool _has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  auto dense = [](const at::Tensor& t) {
    return t.layout() == c10::kStrided && (t.device().is_cpu() || IsPjrt(t));
  };
  return dense(self) && dense(from);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type", _has_compatible_shallow_copy_type);
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("_copy_from", _copy_from);
  m.impl("_copy_from_and_resize", _copy_from_and_resize);
  m.impl("_local_scalar_dense", _local_scalar_dense);
  m.impl("resize_", resize_);
  m.impl("set_.source_Storage_storage_offset", set_source_Storage_storage_offset_);
  m.impl("set_.source_Storage", set_source_Storage_);
  m.impl("set_.source_Tensor", set_source_Tensor_);
  m.impl("set_", set_);
  // Metadata-only views: PyTorch's generic implementations alias our storage correctly.
  m.impl("view", at::native::view);
  m.impl("as_strided", at::native::as_strided_tensorimpl);
  m.impl("_reshape_alias", at::native::_reshape_alias);
  m.impl("unfold", at::native::unfold);
  // Complex <-> (real, imag) pairs: the storage keeps its element type and reads of the view
  // reinterpret it (pjrt::view_read's dtype).
  m.impl("view_as_real", at::native::view_as_real);
  m.impl("view_as_complex", at::native::view_as_complex);
}

}  // namespace torch_pjrt::aten
