#include "aten/transfer.h"

#include <ATen/ops/empty.h>

#include "aten/lazy_tensor.h"
#include "aten/torch_errors.h"
#include "graph/device_graph.h"
#include "graph/index_checks.h"
#include "graph/metrics.h"
#include "graph/read_memo.h"
#include "runtime/runtime.h"

namespace torch_pjrt::aten {

bool CoversStorage(const at::Tensor& t) {
  return t.storage_offset() == 0 && t.is_contiguous() &&
         static_cast<size_t>(t.numel()) * t.dtype().itemsize() == t.storage().nbytes();
}

namespace {

using graph::Counter;
using graph::Metrics;

// A pjrt tensor holding the logical value of `t` (conj/neg bits applied) that covers its own
// storage (t itself when it already does).
at::Tensor Standalone(const at::Tensor& t) {
  if (CoversStorage(t) && !t.is_conj() && !t.is_neg()) return t;
  at::Tensor copy = EmptyContiguous(t.sizes(), t.scalar_type(), t.device().index());
  graph::GraphLock lock;
  WriteValue(copy, ReadValue(t));
  return copy;
}

// The buffer holding the whole storage of `t` after syncing its device; null if never written.
// Settles the index checks that guard it first (reading waits for the graph anyway), so a value
// computed from an out-of-range index raises instead of being returned.
std::shared_ptr<runtime::Buffer> MaterializedBuffer(const at::Tensor& t, graph::SyncCause cause) {
  // Inside a device-graph capture a read is guarded or refused (graph/read_memo.h), naming this
  // line (found before locking: it runs Python).
  int device = t.device().index();
  std::string where = graph::CapturingDeviceGraph(device) ? graph::SourceLocation() : std::string();
  graph::GraphLock lock;
  graph::LazyStorage* s = StorageOf(t);
  // A read that launches waits for that launch, and so for all of its checks; a read of a value
  // computed earlier waits only for the checks that guard it (graph/index_checks.h).
  bool launches = s->has_pending();
  if (launches) graph::SyncForRead(s, cause, std::move(where));
  DeferredErrorPtr failure = launches || !s->has_buffer()
                                 ? graph::ResolveIndexChecks(s->device())
                                 : graph::ResolveIndexChecksGuarding(s->device(), s->buffer().get());
  if (s->error()) RaiseTorchError(*s->error());
  if (s->has_buffer() && s->buffer()->poison()) RaiseTorchError(*s->buffer()->poison());
  if (failure) RaiseTorchError(*failure);
  return s->buffer();
}

}  // namespace

void CopyToHost(const at::Tensor& src, const at::Tensor& dst, graph::SyncCause cause) {
  if (src.numel() == 0) return;
  at::Tensor whole = Standalone(src);
  std::shared_ptr<runtime::Buffer> buffer = MaterializedBuffer(whole, cause);
  if (!buffer) {  // never written: zeros
    dst.zero_();
    return;
  }
  graph::ScopedTimer timer(graph::Timer::kTransferFromDevice);
  bool direct = dst.is_contiguous() && dst.scalar_type() == src.scalar_type() &&
                dst.sizes() == src.sizes() && !dst.is_conj() && !dst.is_neg();
  at::Tensor host = direct ? dst : at::empty(src.sizes(), src.options().device(c10::kCPU));
  try {
    if (buffer->ToHost(host.data_ptr(), buffer->nbytes())) Metrics::Increment(Counter::kDirectTransfersFromDevice);
  } catch (const std::exception& e) {
    TORCH_CHECK(false, e.what());
  }
  Metrics::Increment(Counter::kTransfersFromDevice);
  Metrics::Increment(Counter::kTransferBytesFromDevice, static_cast<int64_t>(buffer->nbytes()));
  if (!direct) dst.copy_(host);
}

namespace {

// Whether the copy of `host` may finish after _copy_from returns. Only memory from the pjrt
// pinned allocator (what non_blocking copies are for) or a staging copy nobody else sees: their
// deleters need no GIL, which matters because PJRT releases them on one of its threads.
bool MayCopyAsync(const at::Tensor& host, const at::Tensor& src, bool non_blocking) {
  if (!non_blocking) return false;
  return !host.storage().is_alias_of(src.storage()) || host.is_pinned();
}

// `whole_storage`: the buffer becomes a storage's array (docs/design.md, "Flat storages");
// otherwise it has the host tensor's shape.
std::shared_ptr<runtime::Buffer> UploadDense(const at::Tensor& host, ElementType type, int device,
                                             bool async, bool whole_storage) {
  std::vector<int64_t> dims(host.sizes().begin(), host.sizes().end());
  if (whole_storage) {
    const Dims array = graph::StorageArrayType({type, Dims(dims.begin(), dims.end())}).dims;
    dims.assign(array.begin(), array.end());
  }
  graph::ScopedTimer timer(graph::Timer::kTransferToDevice);
  try {
    if (!async) return runtime::Buffer::FromHost(runtime::GetClient(), device, type, dims, host.data_ptr());
    // The storage, not the tensor: the copy must keep the memory, not the autograd history.
    auto keep_alive = std::shared_ptr<void>(new c10::Storage(host.storage()),
                                            [](void* s) { delete static_cast<c10::Storage*>(s); });
    Metrics::Increment(Counter::kAsyncTransfersToDevice);
    return runtime::Buffer::FromHostAsync(runtime::GetClient(), device, type, dims, host.data_ptr(),
                                          std::move(keep_alive));
  } catch (const std::exception& e) {
    TORCH_CHECK(false, e.what());
  }
}

}  // namespace

void CopyFromHost(const at::Tensor& src, const at::Tensor& dst, bool non_blocking) {
  if (dst.numel() == 0) return;
  at::Tensor host = src;
  if (host.scalar_type() != dst.scalar_type()) host = host.to(dst.scalar_type());
  if (host.sizes() != dst.sizes()) host = host.expand(dst.sizes());
  host = host.contiguous();
  const bool whole_storage = CoversStorage(dst) && !dst.is_conj() && !dst.is_neg();
  std::shared_ptr<runtime::Buffer> buffer = UploadDense(host, ToElementType(dst.scalar_type()), dst.device().index(),
                                                        MayCopyAsync(host, src, non_blocking), whole_storage);
  Metrics::Increment(Counter::kTransfersToDevice);
  Metrics::Increment(Counter::kTransferBytesToDevice, static_cast<int64_t>(buffer->nbytes()));
  graph::GraphLock lock;
  if (whole_storage) {
    StorageOf(dst)->SetBuffer(std::move(buffer));
  } else {
    WriteValue(dst, graph::BufferValue(std::move(buffer)));
  }
}

void CopyBetweenDevices(const at::Tensor& src_in, const at::Tensor& dst, bool non_blocking) {
  if (!IsPjrt(dst)) {
    TORCH_CHECK(dst.device().is_cpu(), "pjrt: cannot copy to a tensor on ", dst.device());
    at::Tensor staging = src_in;
    if (dst.sizes() != src_in.sizes()) staging = src_in.expand(dst.sizes());
    CopyToHost(staging, dst, graph::SyncCause::kToCpu);  // CPU copy_ applies dst's conj/neg bits
    return;
  }
  // ReadValue and WriteValue apply conj/neg bits, so host data is passed as its logical value.
  if (!IsPjrt(src_in)) {
    CopyFromHost(src_in.resolve_conj().resolve_neg(), dst, non_blocking);
    return;
  }
  const at::Tensor& src = src_in;
  int dst_device = dst.device().index();
  graph::GraphLock lock;
  graph::Value value;
  if (src.device().index() == dst_device) {
    value = ReadValue(src);
  } else {
    at::Tensor whole = Standalone(src);
    std::shared_ptr<runtime::Buffer> buffer = MaterializedBuffer(whole, graph::SyncCause::kDeviceCopy);
    if (!buffer) {
      value = ReadValue(EmptyContiguous(src.sizes(), src.scalar_type(), dst_device));
    } else {
      try {
        value = graph::BufferValue(buffer->CopyToDevice(dst_device));
      } catch (const std::exception& e) {
        TORCH_CHECK(false, e.what());
      }
      Metrics::Increment(Counter::kDeviceToDeviceCopies);
      // The copy holds the whole (contiguous) storage of `whole`: view it with the source's shape.
      value = graph::ViewOfValue(std::move(value), ViewOf(whole));
    }
  }
  WriteValue(dst, Coerce(std::move(value), ToElementType(dst.scalar_type()), dst.sizes(), dst_device));
}

void ResizeStorage(const c10::Storage& storage, size_t nbytes) {
  graph::LazyStorage* old = StorageOf(storage);
  c10::DataPtr fresh = AllocateLazyStorage(nbytes, old->device());
  auto* grown = static_cast<graph::LazyStorage*>(fresh.get_context());
  {
    graph::GraphLock lock;
    if (old->has_pending() || old->has_buffer()) {
      graph::Value v = graph::StorageValue(old, ElementType::kU8);
      ElementType t = v.type().dtype;
      if (nbytes % ItemSize(t) != 0 || old->nbytes() % ItemSize(t) != 0) {
        graph::TensorView bytes{ElementType::kU8, {static_cast<int64_t>(old->nbytes())}, {1}, 0};
        v = graph::ReadTensor(old, bytes);
        t = ElementType::kU8;
      }
      static const int resize = graph::InternalOp("pjrt::resize_storage");
      int64_t n = static_cast<int64_t>(nbytes / ItemSize(t));
      grown->SetPending(graph::MakeOp(resize, old->device(), {v},
                                      {graph::Arg::Tensor(0), graph::Arg::Int(n)}, {},
                                      {graph::TensorType{t, {n}}})[0]);
    }
  }
  c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
  impl->set_data_ptr_noswap(std::move(fresh));
  impl->set_nbytes(nbytes);
}

}  // namespace torch_pjrt::aten
