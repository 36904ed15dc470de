#include "runtime/buffer.h"

#include <array>
#include <cstring>
#include <mutex>

#include "runtime/executable.h"

namespace torch_pjrt::runtime {

namespace {

constexpr int kMaxTrackedDevices = 256;
std::array<std::atomic<int64_t>, kMaxTrackedDevices> g_live_bytes{};
std::array<std::atomic<int64_t>, kMaxTrackedDevices> g_peak_bytes{};

void AddLiveBytes(int device, int64_t delta) {
  if (device < 0 || device >= kMaxTrackedDevices) return;
  int64_t now = g_live_bytes[device] += delta;
  int64_t peak = g_peak_bytes[device].load();
  while (now > peak && !g_peak_bytes[device].compare_exchange_weak(peak, now)) {
  }
}

}  // namespace

PJRT_Buffer_Type ToPjrtType(ElementType t) {
  switch (t) {
    case ElementType::kBool: return PJRT_Buffer_Type_PRED;
    case ElementType::kS8: return PJRT_Buffer_Type_S8;
    case ElementType::kS16: return PJRT_Buffer_Type_S16;
    case ElementType::kS32: return PJRT_Buffer_Type_S32;
    case ElementType::kS64: return PJRT_Buffer_Type_S64;
    case ElementType::kU8: return PJRT_Buffer_Type_U8;
    case ElementType::kU16: return PJRT_Buffer_Type_U16;
    case ElementType::kU32: return PJRT_Buffer_Type_U32;
    case ElementType::kU64: return PJRT_Buffer_Type_U64;
    case ElementType::kF16: return PJRT_Buffer_Type_F16;
    case ElementType::kBF16: return PJRT_Buffer_Type_BF16;
    case ElementType::kF32: return PJRT_Buffer_Type_F32;
    case ElementType::kF64: return PJRT_Buffer_Type_F64;
    case ElementType::kC64: return PJRT_Buffer_Type_C64;
    case ElementType::kC128: return PJRT_Buffer_Type_C128;
    case ElementType::kF8E5M2: return PJRT_Buffer_Type_F8E5M2;
    case ElementType::kF8E4M3FN: return PJRT_Buffer_Type_F8E4M3FN;
    default: return PJRT_Buffer_Type_INVALID;
  }
}

ElementType FromPjrtType(PJRT_Buffer_Type t) {
  for (int i = 1; i < static_cast<int>(ElementType::kNumTypes); ++i) {
    auto e = static_cast<ElementType>(i);
    if (ToPjrtType(e) == t) return e;
  }
  return ElementType::kInvalid;
}

namespace {

PJRT_Client_BufferFromHostBuffer_Args HostBufferArgs(const Client& client, int device,
                                                     ElementType type,
                                                     const std::vector<int64_t>& dims,
                                                     const void* data) {
  auto args = PJRT_ARGS(PJRT_Client_BufferFromHostBuffer);
  args.client = client.raw();
  args.data = data;
  args.type = ToPjrtType(type);
  args.dims = dims.data();
  args.num_dims = dims.size();
  args.device = client.device(device);
  return args;
}

// PJRT_Event_OnReady callback of an asynchronous host-to-device copy: PJRT no longer reads the
// host memory, so its owner may go. Runs on a plugin thread; a failed copy reports its error to
// whoever reads the buffer, so the error here is only freed.
void ReleaseHostSource(PJRT_Error* error, void* user_arg) {
  auto* source = static_cast<std::pair<const Plugin*, std::shared_ptr<void>>*>(user_arg);
  if (error != nullptr) source->first->TakeMessage(error);
  delete source;
}

}  // namespace

std::shared_ptr<Buffer> Buffer::FromHostAsync(const std::shared_ptr<Client>& client, int device,
                                              ElementType type, const std::vector<int64_t>& dims,
                                              const void* data, std::shared_ptr<void> keep_alive) {
  const Plugin& plugin = client->plugin();
  auto args = HostBufferArgs(*client, device, type, dims, data);
  args.host_buffer_semantics = PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes;
  PJRT_CALL(plugin, PJRT_Client_BufferFromHostBuffer, &args);
  auto buffer = std::make_shared<Buffer>(client, args.buffer, device);
  if (args.done_with_host_buffer == nullptr) return buffer;  // the plugin copied during the call
  auto on_ready = PJRT_ARGS(PJRT_Event_OnReady);
  on_ready.event = args.done_with_host_buffer;
  on_ready.callback = &ReleaseHostSource;
  on_ready.user_arg = new std::pair<const Plugin*, std::shared_ptr<void>>(&plugin, std::move(keep_alive));
  PJRT_Error* error = plugin.api()->PJRT_Event_OnReady(&on_ready);
  if (error != nullptr) {  // no callback will come: wait for the copy here instead
    plugin.TakeMessage(error);
    try {
      plugin.AwaitAndDestroy(args.done_with_host_buffer, "host-to-device transfer");
    } catch (const PjrtError&) {  // the buffer carries the failure to its readers
    }
    ReleaseHostSource(nullptr, on_ready.user_arg);
    return buffer;
  }
  // PJRT lets an event be destroyed before it is ready; the callback stays registered.
  plugin.DestroyEvent(args.done_with_host_buffer);
  return buffer;
}

std::shared_ptr<Buffer> Buffer::FromHost(const std::shared_ptr<Client>& client, int device,
                                         ElementType type, const std::vector<int64_t>& dims,
                                         const void* data, const int64_t* byte_strides) {
  const Plugin& plugin = client->plugin();
  auto args = HostBufferArgs(*client, device, type, dims, data);
  if (byte_strides != nullptr) {
    args.byte_strides = byte_strides;
    args.num_byte_strides = dims.size();
  }
  // The host memory belongs to a torch tensor that may change right after we return, so PJRT
  // must finish reading it during the call.
  args.host_buffer_semantics = PJRT_HostBufferSemantics_kImmutableOnlyDuringCall;
  PJRT_CALL(plugin, PJRT_Client_BufferFromHostBuffer, &args);
  plugin.AwaitAndDestroy(args.done_with_host_buffer, "host-to-device transfer");
  return std::make_shared<Buffer>(client, args.buffer, device);
}

void ReadHandleType(const Plugin& plugin, PJRT_Buffer* handle, ElementType* type, std::vector<int64_t>* dims) {
  auto element_type = PJRT_ARGS(PJRT_Buffer_ElementType);
  element_type.buffer = handle;
  PJRT_CALL(plugin, PJRT_Buffer_ElementType, &element_type);
  auto dimensions = PJRT_ARGS(PJRT_Buffer_Dimensions);
  dimensions.buffer = handle;
  PJRT_CALL(plugin, PJRT_Buffer_Dimensions, &dimensions);
  *type = FromPjrtType(element_type.type);
  dims->assign(dimensions.dims, dimensions.dims + dimensions.num_dims);
}

void DestroyHandle(const Plugin& plugin, PJRT_Buffer* handle) {
  auto destroy = PJRT_ARGS(PJRT_Buffer_Destroy);
  destroy.buffer = handle;
  PJRT_Error* error = plugin.api()->PJRT_Buffer_Destroy(&destroy);
  if (error) plugin.TakeMessage(error);
}

namespace {

size_t ByteSize(ElementType type, const std::vector<int64_t>& dims) {
  size_t n = type == ElementType::kInvalid ? 0 : ItemSize(type);
  for (int64_t d : dims) n *= static_cast<size_t>(d);
  return n;
}

}  // namespace

Buffer::Buffer(std::shared_ptr<Client> client, PJRT_Buffer* buffer, int device, bool counted)
    : client_(std::move(client)), buffer_(buffer), device_(device), counted_(counted) {
  // Never throws: execution outputs are wrapped right after launch, when a throw would leak the
  // remaining outputs. A buffer whose metadata cannot be read has an invalid type, which every
  // later use (argument checks, reads) rejects.
  try {
    ReadHandleType(client_->plugin(), buffer, &type_, &dims_);
  } catch (const std::exception&) {
    type_ = ElementType::kInvalid;
    dims_.clear();
  }
  nbytes_ = ByteSize(type_, dims_);
  if (counted_) AddLiveBytes(device_, static_cast<int64_t>(nbytes_));
}

Buffer::Buffer(std::shared_ptr<Client> client, std::shared_ptr<PendingOutputs> pending, size_t index,
               ElementType type, std::vector<int64_t> dims, int device)
    : client_(std::move(client)), pending_(std::move(pending)), pending_index_(index), type_(type),
      dims_(std::move(dims)), device_(device), nbytes_(ByteSize(type_, dims_)) {
  AddLiveBytes(device_, static_cast<int64_t>(nbytes_));
}

PJRT_Buffer* Buffer::AwaitHandle() const {
  PJRT_Buffer* b = pending_->Wait(pending_index_);
  buffer_.store(b, std::memory_order_release);
  return b;
}

void PendingOutputs::Fill(const std::vector<PJRT_Buffer*>& handles) {
  std::vector<PJRT_Buffer*> orphans;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t i = 0; i < handles_.size(); ++i) {
      PJRT_Buffer* h = i < handles.size() ? handles[i] : nullptr;
      if (orphaned_[i]) {
        orphans.push_back(h);
      } else {
        handles_[i] = h;
      }
    }
    done_ = true;
  }
  done_cv_.notify_all();
  for (PJRT_Buffer* h : orphans) {
    if (h != nullptr) DestroyHandle(plugin_, h);
  }
}

void PendingOutputs::Fail(const std::string& error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = error.empty() ? "the launch failed" : error;
    done_ = true;
  }
  done_cv_.notify_all();
}

PJRT_Buffer* PendingOutputs::Wait(size_t i) {
  std::unique_lock<std::mutex> lock(mutex_);
  done_cv_.wait(lock, [&] { return done_; });
  if (!error_.empty()) throw PjrtError(error_);
  return handles_[i];
}

bool PendingOutputs::Done() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

PJRT_Buffer* PendingOutputs::Release(size_t i) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!done_) {
    orphaned_[i] = true;
    return nullptr;
  }
  PJRT_Buffer* h = handles_[i];
  handles_[i] = nullptr;
  return h;
}

void Buffer::MarkDonated() {
  if (!donated_ && counted_) AddLiveBytes(device_, -static_cast<int64_t>(nbytes_));  // its memory is the output's now
  donated_ = true;
}

Buffer::~Buffer() {
  view_.reset();  // the view's memory is ours: it goes first
  if (!donated_ && counted_) AddLiveBytes(device_, -static_cast<int64_t>(nbytes_));
  PJRT_Buffer* handle = pending_ ? pending_->Release(pending_index_) : buffer_.load();
  // Null: a queued launch's output, which the launch destroys (or there is none).
  if (handle != nullptr) DestroyHandle(client_->plugin(), handle);
}

namespace {

// Whether `buffer`'s memory is dense row-major (what ToHost writes): PJRT's default layout, major
// to minor, untiled.
bool DenseRowMajor(const Plugin& plugin, PJRT_Buffer* buffer, size_t rank) {
  if (plugin.api()->PJRT_Buffer_GetMemoryLayout == nullptr) return false;
  auto args = PJRT_ARGS(PJRT_Buffer_GetMemoryLayout);
  args.buffer = buffer;
  PJRT_Error* error = plugin.api()->PJRT_Buffer_GetMemoryLayout(&args);
  if (error != nullptr) {
    plugin.TakeMessage(error);
    return false;
  }
  if (args.layout.type != PJRT_Buffer_MemoryLayout_Type_Tiled) return false;
  const PJRT_Buffer_MemoryLayout_Tiled& tiled = args.layout.tiled;
  if (tiled.num_tiles != 0 || tiled.minor_to_major_size != rank) return false;
  for (size_t i = 0; i < rank; ++i) {
    if (tiled.minor_to_major[i] != static_cast<int64_t>(rank - 1 - i)) return false;
  }
  return true;
}

}  // namespace

const void* Buffer::DirectAddress() const {
  std::call_once(direct_once_, [&] {
    if (!client_->host_memory() || type_ == ElementType::kInvalid || nbytes_ == 0) return;
    const Plugin& plugin = client_->plugin();
    if (plugin.api()->PJRT_Buffer_UnsafePointer == nullptr || !DenseRowMajor(plugin, raw(), dims_.size())) return;
    auto args = PJRT_ARGS(PJRT_Buffer_UnsafePointer);
    args.buffer = raw();
    PJRT_Error* error = plugin.api()->PJRT_Buffer_UnsafePointer(&args);
    if (error != nullptr) {
      plugin.TakeMessage(error);
      return;
    }
    direct_ = reinterpret_cast<const void*>(args.buffer_pointer);
  });
  return direct_;
}

bool Buffer::ToHost(void* dst, size_t dst_size) const {
  if (donated_) throw PjrtError("internal error: reading a buffer that was donated to an execution");
  const Plugin& plugin = client_->plugin();
  if (dst_size == nbytes_ && DirectAddress() != nullptr) {
    // The caller holds this Buffer, so no launch can donate it meanwhile (graph::SoleHolder).
    plugin.AwaitAndDestroy(ReadyEvent(), "device-to-host transfer");
    std::memcpy(dst, direct_, dst_size);
    return true;
  }
  auto args = PJRT_ARGS(PJRT_Buffer_ToHostBuffer);
  args.src = raw();
  args.dst = dst;
  args.dst_size = dst_size;
  PJRT_CALL(plugin, PJRT_Buffer_ToHostBuffer, &args);
  plugin.AwaitAndDestroy(args.event, "device-to-host transfer");
  return false;
}

std::shared_ptr<Buffer> Buffer::CopyToDevice(int device) const {
  const Plugin& plugin = client_->plugin();
  auto args = PJRT_ARGS(PJRT_Buffer_CopyToDevice);
  args.buffer = raw();
  args.dst_device = client_->device(device);
  PJRT_CALL(plugin, PJRT_Buffer_CopyToDevice, &args);
  return std::make_shared<Buffer>(client_, args.dst_buffer, device);
}

std::shared_ptr<Buffer> Buffer::ViewOn(const std::shared_ptr<Client>& client, void (*on_delete)(void*, void*),
                                       void* arg) const {
  AwaitReady();
  const void* address = DirectAddress();
  if (address == nullptr) {
    throw std::logic_error("pjrt: a program on a second client reads a buffer that is not host memory");
  }
  const Plugin& plugin = client->plugin();
  auto args = PJRT_ARGS(PJRT_Client_CreateViewOfDeviceBuffer);
  args.client = client->raw();
  args.device_buffer_ptr = const_cast<void*>(address);
  args.dims = dims_.data();
  args.num_dims = dims_.size();
  args.element_type = ToPjrtType(type_);
  args.device = client->device(device_);
  // Not optional in practice: the CPU plugin calls the callback unchecked when the view dies.
  args.on_delete_callback = on_delete;
  args.on_delete_callback_arg = arg;
  PJRT_CALL(plugin, PJRT_Client_CreateViewOfDeviceBuffer, &args);
  return std::make_shared<Buffer>(client, args.buffer, device_, /*counted=*/false);
}

PJRT_Buffer* Buffer::RawFor(const std::shared_ptr<Client>& client) const {
  if (client == client_) return raw();
  std::call_once(view_once_, [&] {
    if (nbytes_ == 0 && type_ != ElementType::kInvalid) {  // no memory to view: an empty array there
      static const char kNothing = 0;
      view_ = FromHost(client, device_, type_, dims_, &kNothing);
      return;
    }
    // The memory stays ours: freed with this Buffer, after the view.
    view_ = ViewOn(client, [](void*, void*) {}, nullptr);
  });
  if (view_->client_ != client) throw std::logic_error("pjrt: a buffer read by programs of three clients");
  return view_->raw();
}

std::shared_ptr<Buffer> Buffer::DonatableView(const std::shared_ptr<Buffer>& owner,
                                              const std::shared_ptr<Client>& client) {
  auto* held = new std::shared_ptr<Buffer>(owner);
  try {
    return owner->ViewOn(
        client, [](void*, void* arg) { delete static_cast<std::shared_ptr<Buffer>*>(arg); }, held);
  } catch (...) {
    delete held;
    throw;
  }
}

PJRT_Event* Buffer::ReadyEvent() const {
  auto args = PJRT_ARGS(PJRT_Buffer_ReadyEvent);
  args.buffer = raw();
  PJRT_CALL(client_->plugin(), PJRT_Buffer_ReadyEvent, &args);
  return args.event;
}

void Buffer::AwaitReady() const {
  if (donated_) return;
  client_->plugin().AwaitAndDestroy(ReadyEvent(), "waiting for a device buffer");
}

bool Buffer::Ready() const {
  if (donated_) return true;
  if (pending_ && buffer_.load(std::memory_order_acquire) == nullptr) {
    if (!pending_->Done()) return false;
    try {
      raw();
    } catch (const std::exception&) {
      return true;  // the launch failed: ready, and its reader reports the error
    }
  }
  const Plugin& plugin = client_->plugin();
  PJRT_Event* event = ReadyEvent();
  bool ready = true;
  try {
    ready = plugin.EventReady(event);
  } catch (const std::exception&) {
    // a broken event: ready, and its reader reports the error
  }
  plugin.DestroyEvent(event);
  return ready;
}

int64_t Buffer::LiveBytes(int device) {
  FreeRetiredArguments();
  return device >= 0 && device < kMaxTrackedDevices ? g_live_bytes[device].load() : 0;
}

int64_t Buffer::PeakBytes(int device) {
  return device >= 0 && device < kMaxTrackedDevices ? g_peak_bytes[device].load() : 0;
}

void Buffer::ResetPeakBytes(int device) {
  if (device >= 0 && device < kMaxTrackedDevices) g_peak_bytes[device] = g_live_bytes[device].load();
}

namespace {

std::mutex& ReadCountMutex() {
  static std::mutex mutex;
  return mutex;
}

}  // namespace

bool Buffer::SoleHolderApartFromReads(const std::shared_ptr<Buffer>& buffer) {
  std::lock_guard<std::mutex> lock(ReadCountMutex());
  return buffer.use_count() - buffer->inflight_reads() == 1;
}

void Buffer::EndRead(std::shared_ptr<Buffer> buffer) {
  std::shared_ptr<Buffer> last;  // destroyed after the lock: freeing device memory takes a while
  {
    std::lock_guard<std::mutex> lock(ReadCountMutex());
    buffer->inflight_reads_.fetch_sub(1, std::memory_order_acq_rel);
    if (buffer.use_count() == 1) {
      last = std::move(buffer);
    } else {
      buffer.reset();
    }
  }
}

}  // namespace torch_pjrt::runtime
