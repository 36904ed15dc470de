// The contents of one torch Storage on a pjrt device (design decision 1). A storage holds, at any
// moment, exactly one of: nothing yet (reads as zeros), a device buffer, or a pending IR value that
// the next sync materializes. Either way the value is an array whose row-major order is the
// storage's memory order; tensors are views of it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/errors.h"
#include "graph/node.h"

namespace torch_pjrt::graph {

// Per-device storage statistics (what torch.pjrt.memory_allocated and friends report).
struct StorageStats {
  int64_t live_bytes = 0;
  int64_t peak_bytes = 0;
  int64_t allocated_bytes = 0;  // cumulative
  int64_t freed_bytes = 0;      // cumulative
  int64_t live_count = 0;
  int64_t allocations = 0;      // cumulative
};

class LazyStorage {
 public:
  LazyStorage(int device, size_t nbytes);
  ~LazyStorage();
  LazyStorage(const LazyStorage&) = delete;
  LazyStorage& operator=(const LazyStorage&) = delete;

  int device() const { return device_; }
  size_t nbytes() const { return nbytes_; }
  uint64_t id() const { return id_; }

  bool has_buffer() const { return static_cast<bool>(buffer_); }
  bool has_pending() const { return pending_.valid(); }
  const std::shared_ptr<runtime::Buffer>& buffer() const { return buffer_; }
  const Value& pending() const { return pending_; }
  // Set when the graph that was to compute this storage failed; reads rethrow it.
  const DeferredErrorPtr& error() const { return error_; }

  void SetBuffer(std::shared_ptr<runtime::Buffer> buffer);
  void SetPending(Value v);
  void SetError(DeferredErrorPtr error);
  void Clear();  // back to "never written"

  // Bookkeeping owned by the trace (see trace.cc): the param node that reads our buffer in the
  // current trace epoch, and our slot in the epoch's dirty list.
  Node* param_node = nullptr;
  uint64_t param_epoch = 0;
  uint64_t dirty_epoch = 0;
  size_t dirty_index = 0;

  // Every live storage, for shutdown (buffers must go before the client) and debugging.
  template <class F>
  static void ForEach(F&& f);
  static int64_t LiveCount();
  static StorageStats Stats(int device);
  static void ResetPeakBytes(int device);
  static void ResetAccumulated(int device);

 private:
  int device_;
  size_t nbytes_;
  uint64_t id_;
  std::shared_ptr<runtime::Buffer> buffer_;
  Value pending_;
  DeferredErrorPtr error_;
  LazyStorage* prev_ = nullptr;
  LazyStorage* next_ = nullptr;
  static LazyStorage* head_;
};

template <class F>
void LazyStorage::ForEach(F&& f) {
  for (LazyStorage* s = head_; s != nullptr; s = s->next_) f(s);
}

}  // namespace torch_pjrt::graph
