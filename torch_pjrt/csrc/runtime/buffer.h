// A device buffer: an owned PJRT_Buffer plus the metadata we validate executions against (PJRT's
// Execute does not check argument dtypes or layouts itself).
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/errors.h"
#include "runtime/client.h"

namespace torch_pjrt::runtime {

PJRT_Buffer_Type ToPjrtType(ElementType t);
ElementType FromPjrtType(PJRT_Buffer_Type t);

// The element type and dimensions PJRT reports for `handle`. Throws PjrtError.
void ReadHandleType(const Plugin& plugin, PJRT_Buffer* handle, ElementType* type, std::vector<int64_t>* dims);
// Destroys a handle no Buffer owns (or the one a dying Buffer owned); a failure is dropped.
void DestroyHandle(const Plugin& plugin, PJRT_Buffer* handle);

// The outputs of a launch queued for the launch thread (Executable::ExecuteQueued): their PJRT
// handles exist once that thread has launched the program.
class PendingOutputs {
 public:
  PendingOutputs(const Plugin& plugin, size_t n) : plugin_(plugin), handles_(n, nullptr), orphaned_(n, false) {}
  // The launch thread: the program was launched with these outputs, or failed with `error`.
  void Fill(const std::vector<PJRT_Buffer*>& handles);
  void Fail(const std::string& error);
  // Waits for Fill or Fail: output `i`'s handle, or throws the launch's error as a PjrtError.
  PJRT_Buffer* Wait(size_t i);
  bool Done() const;
  // Output `i`'s Buffer died: returns its handle to destroy, or null where there is none yet (Fill
  // destroys it) or the launch failed.
  PJRT_Buffer* Release(size_t i);

 private:
  const Plugin& plugin_;
  mutable std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::string error_;
  std::vector<PJRT_Buffer*> handles_;
  std::vector<bool> orphaned_;
};

class Buffer {
 public:
  // Copies `data` (laid out with `byte_strides`, or dense row-major when null) to `device`.
  // Returns once the host memory may be reused.
  static std::shared_ptr<Buffer> FromHost(const std::shared_ptr<Client>& client, int device,
                                          ElementType type, const std::vector<int64_t>& dims,
                                          const void* data, const int64_t* byte_strides = nullptr);
  // Starts copying dense row-major `data` to `device` and returns at once: PJRT reads the host
  // memory while the caller goes on, and `keep_alive` (the owner of `data`) is released once it
  // has (PJRT's done_with_host_buffer event). Readers of the buffer wait for the copy. The
  // caller promises what CUDA's non_blocking copies ask: nobody writes `data` meanwhile.
  static std::shared_ptr<Buffer> FromHostAsync(const std::shared_ptr<Client>& client, int device,
                                               ElementType type, const std::vector<int64_t>& dims,
                                               const void* data, std::shared_ptr<void> keep_alive);
  // Takes ownership of `buffer` (an execution output or a copy). `counted`: in LiveBytes (a view
  // of another Buffer's memory is not: its memory is counted as its owner's).
  Buffer(std::shared_ptr<Client> client, PJRT_Buffer* buffer, int device, bool counted = true);
  // Output `index` of a queued launch, of the type the executable declares: its handle is waited
  // for by whatever needs it (raw(), reads); until then Ready() is false.
  Buffer(std::shared_ptr<Client> client, std::shared_ptr<PendingOutputs> pending, size_t index, ElementType type,
         std::vector<int64_t> dims, int device);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  // Blocks until the contents are in `dst` (row-major, `nbytes()` bytes). On a host-memory
  // device (Client::host_memory) a dense buffer is copied directly once its execution has
  // finished: the plugin's transfer runs as a task of its own that queues behind the programs
  // launched after this buffer's (a training step's loss, read while the backward and the
  // optimizer's programs run, waited for both).
  // Returns whether it copied directly.
  bool ToHost(void* dst, size_t dst_size) const;
  std::shared_ptr<Buffer> CopyToDevice(int device) const;
  void AwaitReady() const;
  // Whether the contents are computed (or their computation failed), without waiting.
  bool Ready() const;
  // The buffer was donated to an execution: PJRT deleted its memory, only the handle remains.
  void MarkDonated();
  bool donated() const { return donated_; }
  // Set when the contents were computed from something invalid (an out-of-range index found
  // after the execution ran): whoever reads them gets this error instead.
  void Poison(DeferredErrorPtr error) { poison_ = std::move(error); }
  const DeferredErrorPtr& poison() const { return poison_; }

  // Waits for a queued launch to create the handle; throws its error where it failed.
  PJRT_Buffer* raw() const {
    PJRT_Buffer* b = buffer_.load(std::memory_order_acquire);
    return b != nullptr || !pending_ ? b : AwaitHandle();
  }
  // This buffer as an argument of a program on `client`: raw() on its own client; on another
  // client of the same host-memory plugin (runtime.h's small programs' client), a view of the same
  // memory, made once (the first call waits until the contents are computed: the other client
  // does not know this one's pending executions) and destroyed with this Buffer, which therefore
  // must outlive the executions reading the view (Executable::Execute's keep_alive).
  PJRT_Buffer* RawFor(const std::shared_ptr<Client>& client) const;
  // A view of `owner`'s memory on another client, for an execution there to donate (write its
  // output in place): the view's delete callback holds `owner` until PJRT is done with the memory
  // (the output it became, or the view itself where PJRT copied instead). Waits until `owner` is
  // computed. The caller marks `owner` donated once the launch succeeded, and promises that no
  // execution still reads it (inflight_reads() == 0): the other client would not wait for them.
  static std::shared_ptr<Buffer> DonatableView(const std::shared_ptr<Buffer>& owner,
                                               const std::shared_ptr<Client>& client);
  ElementType type() const { return type_; }
  const std::vector<int64_t>& dims() const { return dims_; }
  int device() const { return device_; }
  size_t nbytes() const { return nbytes_; }
  const std::shared_ptr<Client>& client() const { return client_; }
  // How many of the references to this Buffer are held by executions still running that read
  // it (Executable::Execute's keep_alive). Those references only keep the memory alive for the
  // reader; they must not decide whether a later program may donate the buffer, or the same
  // step would compile with or without donation depending on whether the previous step had
  // finished (PJRT orders a donating execution after earlier readers of the buffer).
  int inflight_reads() const { return inflight_reads_.load(std::memory_order_acquire); }
  void AddInflightRead() { inflight_reads_.fetch_add(1, std::memory_order_acq_rel); }
  // Whether `buffer` is the only reference to its Buffer apart from the executions reading it.
  // Read under the lock EndRead takes: a finished execution's arguments are dropped on another
  // thread (executable.cc's reaper), and a count read between one argument's uncounted read and
  // its dropped reference said "held elsewhere", so a training step's program was compiled
  // without a donation now and then (a BatchNorm's running statistics, read by the backward).
  static bool SoleHolderApartFromReads(const std::shared_ptr<Buffer>& buffer);
  // Ends one execution's read of `buffer`: its count and its reference go together.
  static void EndRead(std::shared_ptr<Buffer> buffer);

  // Bytes held by live buffers on each device (what memory_reserved reports; a donated buffer's
  // bytes count once, as its output's), and their peak since the last reset.
  static int64_t LiveBytes(int device);
  static int64_t PeakBytes(int device);
  static void ResetPeakBytes(int device);

 private:
  const void* DirectAddress() const;
  // A view of this buffer's (computed, non-empty) memory on `client`, not counted in LiveBytes;
  // PJRT calls `on_delete(address, arg)` when it is done with the memory.
  std::shared_ptr<Buffer> ViewOn(const std::shared_ptr<Client>& client, void (*on_delete)(void*, void*),
                                 void* arg) const;
  PJRT_Event* ReadyEvent() const;  // the caller destroys it
  PJRT_Buffer* AwaitHandle() const;

  std::shared_ptr<Client> client_;
  // Null until a queued launch made it (pending_); set once, by whichever thread waits first.
  mutable std::atomic<PJRT_Buffer*> buffer_{nullptr};
  std::shared_ptr<PendingOutputs> pending_;
  size_t pending_index_ = 0;
  ElementType type_ = ElementType::kInvalid;
  std::vector<int64_t> dims_;
  int device_;
  size_t nbytes_ = 0;
  bool donated_ = false;
  std::atomic<int> inflight_reads_{0};
  // Where ToHost may copy this buffer's bytes itself (DirectAddress): its host address, once
  // found, or nullptr where it must ask the plugin (a device that is not host memory, a layout
  // that is not dense row-major). Set by the first read.
  mutable std::once_flag direct_once_;
  mutable const void* direct_ = nullptr;
  DeferredErrorPtr poison_;
  const bool counted_ = true;  // in LiveBytes (see the constructor)
  mutable std::once_flag view_once_;
  mutable std::shared_ptr<Buffer> view_;  // RawFor's view on the other client
};

}  // namespace torch_pjrt::runtime
