#include "graph/lazy_storage.h"

#include <algorithm>
#include <array>

#include "graph/device_graph.h"
#include "graph/trace.h"

namespace torch_pjrt::graph {

LazyStorage* LazyStorage::head_ = nullptr;

namespace {
uint64_t g_next_id = 1;
int64_t g_live_count = 0;
constexpr int kMaxDevices = 256;
std::array<StorageStats, kMaxDevices> g_stats{};
}  // namespace

LazyStorage::LazyStorage(int device, size_t nbytes) : device_(device), nbytes_(nbytes) {
  GraphLock lock;
  id_ = g_next_id++;
  next_ = head_;
  if (head_) head_->prev_ = this;
  head_ = this;
  ++g_live_count;
  if (device_ >= 0 && device_ < kMaxDevices) {
    StorageStats& st = g_stats[device_];
    st.live_bytes += static_cast<int64_t>(nbytes_);
    st.peak_bytes = std::max(st.peak_bytes, st.live_bytes);
    st.allocated_bytes += static_cast<int64_t>(nbytes_);
    ++st.live_count;
    ++st.allocations;
  }
}

LazyStorage::~LazyStorage() {
  GraphLock lock;
  OrphanGraphStorage(this);  // a device graph that reads or writes us keeps our contents
  ForgetDirty(this);
  if (prev_) prev_->next_ = next_;
  else head_ = next_;
  if (next_) next_->prev_ = prev_;
  --g_live_count;
  if (device_ >= 0 && device_ < kMaxDevices) {
    StorageStats& st = g_stats[device_];
    st.live_bytes -= static_cast<int64_t>(nbytes_);
    st.freed_bytes += static_cast<int64_t>(nbytes_);
    --st.live_count;
  }
  pending_ = Value();
  buffer_.reset();
}

void LazyStorage::SetBuffer(std::shared_ptr<runtime::Buffer> buffer) {
  buffer_ = std::move(buffer);
  pending_ = Value();
  error_.reset();
}

void LazyStorage::SetPending(Value v) {
  pending_ = std::move(v);
  buffer_.reset();
  error_.reset();
  MarkDirty(this);
}

void LazyStorage::SetError(DeferredErrorPtr error) {
  pending_ = Value();
  buffer_.reset();
  error_ = std::move(error);
}

void LazyStorage::Clear() {
  pending_ = Value();
  buffer_.reset();
  error_.reset();
}

int64_t LazyStorage::LiveCount() {
  GraphLock lock;
  return g_live_count;
}

StorageStats LazyStorage::Stats(int device) {
  GraphLock lock;
  return device >= 0 && device < kMaxDevices ? g_stats[device] : StorageStats{};
}

void LazyStorage::ResetPeakBytes(int device) {
  GraphLock lock;
  if (device >= 0 && device < kMaxDevices) g_stats[device].peak_bytes = g_stats[device].live_bytes;
}

void LazyStorage::ResetAccumulated(int device) {
  GraphLock lock;
  if (device >= 0 && device < kMaxDevices) {
    g_stats[device].allocated_bytes = 0;
    g_stats[device].freed_bytes = 0;
    g_stats[device].allocations = 0;
  }
}

}  // namespace torch_pjrt::graph
