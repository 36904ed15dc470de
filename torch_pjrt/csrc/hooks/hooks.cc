// Everything PyTorch asks of a PrivateUse1 backend besides kernels: the hooks interface, the
// device guard (devices, the one stream per device, events, synchronizeDevice), the device
// allocator with stats, the pinned host allocator, and per-device default generators.
#include <ATen/EmptyTensor.h>
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/CallOnce.h>

#include <chrono>
#include <cstdlib>
#include <mutex>
#include <set>

#include "aten/lazy_tensor.h"
#include "aten/torch_errors.h"
#include "aten/transfer.h"
#include "graph/executor.h"
#include "hooks/generator.h"
#include "runtime/buffer.h"
#include "runtime/runtime.h"

namespace torch_pjrt::hooks {

namespace {

constexpr c10::DeviceType kPjrt = c10::DeviceType::PrivateUse1;

c10::DeviceIndex SafeDeviceCount() noexcept {
  try {
    return static_cast<c10::DeviceIndex>(runtime::GetClient()->device_count());
  } catch (...) {
    return 0;  // a broken or missing plugin means no devices, never a crash
  }
}

// What the device guard answers. The autograd engine asks every registered guard at its first
// backward, CPU-only ones included, to size its per-device worker threads: starting the client
// there made a CPU program's first backward load the plugin (+26 ms, +63 MB, 5 threads). Before
// the device starts, one device is the answer: pjrt backwards run in the calling thread
// (RunBackwardsInThisThread, aten/lazy_tensor.cc), not on those workers.
c10::DeviceIndex GuardDeviceCount() noexcept {
  return runtime::PeekClient() != nullptr ? SafeDeviceCount() : 1;
}

// ---------------------------------------------------------------- device guard

// A device with its index filled in (torch passes index -1 for "the current device").
c10::Device Resolve(c10::Device d) {
  return d.has_index() && d.index() >= 0 ? d : c10::Device(kPjrt, aten::CurrentDevice());
}
c10::DeviceIndex ResolveIndex(c10::DeviceIndex index) {
  return index >= 0 ? index : aten::CurrentDevice();
}

struct PjrtEvent {
  c10::DeviceIndex device;
  std::chrono::steady_clock::time_point recorded_at;
  bool recorded = false;
};

struct PjrtGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kPjrt; }
  c10::Device exchangeDevice(c10::Device d) const override {
    c10::Device old = getDevice();
    setDevice(d);
    return old;
  }
  c10::Device getDevice() const override { return c10::Device(kPjrt, aten::CurrentDevice()); }
  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == kPjrt, "pjrt device guard given a ", d.type(), " device");
    if (d.index() >= 0) aten::SetCurrentDevice(d.index());
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.index() >= 0) aten::SetCurrentDevice(d.index());
  }
  c10::Stream getStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, Resolve(d));
  }
  c10::Stream getDefaultStream(c10::Device d) const override { return getStream(d); }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool) const override { return getStream(d); }
  c10::Stream getNewStream(c10::Device d, int) const override { return getStream(d); }
  c10::Stream exchangeStream(c10::Stream s) const override { return getStream(s.device()); }
  c10::DeviceIndex deviceCount() const noexcept override { return GuardDeviceCount(); }

  // Events: recording flushes the pending graph, so "work before the event" is work started.
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag) const override {
    c10::DeviceIndex device = device_index >= 0 ? device_index : ResolveIndex(stream.device_index());
    auto* e = static_cast<PjrtEvent*>(*event);
    if (e == nullptr) {
      e = new PjrtEvent{device, {}, false};
      *event = e;
    }
    aten::WithTorchErrors([&] {
      graph::SyncDevice(device, graph::SyncCause::kEvent);
      graph::WaitDevice(device);
    });
    e->recorded_at = std::chrono::steady_clock::now();
    e->recorded = true;
  }
  void block(void*, const c10::Stream&) const override {}  // one stream per device: already ordered
  bool queryEvent(void* event) const override {
    auto* e = static_cast<PjrtEvent*>(event);
    return e == nullptr || !e->recorded || graph::DeviceIdle(e->device);
  }
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    delete static_cast<PjrtEvent*>(event);
  }
  void synchronizeEvent(void* event) const override {
    auto* e = static_cast<PjrtEvent*>(event);
    if (e != nullptr && e->recorded) aten::WithTorchErrors([&] { graph::WaitDevice(e->device); });
  }
  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    auto* a = static_cast<PjrtEvent*>(start);
    auto* b = static_cast<PjrtEvent*>(end);
    TORCH_CHECK(a && b && a->recorded && b->recorded,
                "Both events must be recorded before calculating elapsed time.");
    return std::chrono::duration<double, std::milli>(b->recorded_at - a->recorded_at).count();
  }
  bool queryStream(const c10::Stream& s) const override {
    return graph::DeviceIdle(ResolveIndex(s.device_index()));
  }
  void synchronizeStream(const c10::Stream& s) const override { synchronizeDevice(s.device_index()); }
  // "All pending work on the device is done": materialize the trace, then wait for it.
  void synchronizeDevice(const c10::DeviceIndex device) const override {
    c10::DeviceIndex d = ResolveIndex(device);
    aten::WithTorchErrors([&] {
      graph::SyncDevice(d, graph::SyncCause::kAccelerator);
      graph::WaitDevice(d);
    });
  }
  void recordDataPtrOnStream(const c10::DataPtr&, const c10::Stream&) const override {}
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, PjrtGuardImpl);

// ---------------------------------------------------------------- device allocator

struct PjrtAllocator final : public c10::DeviceAllocator {
  c10::DataPtr allocate(size_t nbytes) override {
    return aten::AllocateLazyStorage(nbytes, aten::CurrentDevice());
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void*, const void*, std::size_t) const override {
    TORCH_CHECK(false, "pjrt storages are lazy values, not memory: copy them with Tensor.copy_()");
  }
  bool initialized() override { return true; }
  void emptyCache(c10::MempoolId_t) override {}
  void recordStream(const c10::DataPtr&, c10::Stream) override {}
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    c10::CachingDeviceAllocator::DeviceStats stats;
    graph::StorageStats s = graph::LazyStorage::Stats(device);
    constexpr auto kAll = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    auto& bytes = stats.allocated_bytes[kAll];
    bytes.current = s.live_bytes;
    bytes.peak = s.peak_bytes;
    bytes.allocated = s.allocated_bytes;
    bytes.freed = s.freed_bytes;
    stats.active_bytes[kAll] = bytes;
    stats.requested_bytes[kAll] = bytes;
    stats.allocation[kAll].current = s.live_count;
    stats.allocation[kAll].allocated = s.allocations;
    // "Reserved" is what the device really holds: materialized buffers.
    int64_t live = runtime::Buffer::LiveBytes(device);
    stats.reserved_bytes[kAll].current = live;
    stats.reserved_bytes[kAll].peak = std::max(live, s.peak_bytes);
    return stats;
  }
  void resetAccumulatedStats(c10::DeviceIndex device) override {
    graph::LazyStorage::ResetAccumulated(device);
  }
  void resetPeakStats(c10::DeviceIndex device) override { graph::LazyStorage::ResetPeakBytes(device); }
};

PjrtAllocator g_allocator;
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_allocator);

// ---------------------------------------------------------------- pinned host allocator

std::mutex g_pinned_mutex;
std::set<const void*> g_pinned;

void FreePinned(void* ptr) {
  if (ptr == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(g_pinned_mutex);
    g_pinned.erase(ptr);
  }
  std::free(ptr);
}

// 64-byte aligned host memory: the alignment PJRT's CPU client needs to alias host buffers
// instead of copying them.
struct PjrtHostAllocator final : public at::HostAllocator {
  at::DataPtr allocate(size_t nbytes) override {
    void* ptr = nullptr;
    if (nbytes > 0) {
      TORCH_CHECK(posix_memalign(&ptr, 64, (nbytes + 63) & ~size_t{63}) == 0,
                  "pjrt: could not allocate ", nbytes, " bytes of pinned host memory");
      std::lock_guard<std::mutex> lock(g_pinned_mutex);
      g_pinned.insert(ptr);
    }
    return {ptr, ptr, &FreePinned, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &FreePinned; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
  bool record_event(void*, void*, c10::Stream) override { return true; }
  void empty_cache() override {}
  at::HostStats get_stats() override { return at::HostStats(); }
  void reset_accumulated_stats() override {}
  void reset_peak_stats() override {}
};

PjrtHostAllocator g_host_allocator;

bool IsPinned(const void* data) {
  std::lock_guard<std::mutex> lock(g_pinned_mutex);
  auto it = g_pinned.upper_bound(data);
  if (it == g_pinned.begin()) return false;
  --it;
  return *it == data;  // allocations are only recognized by their start address
}

}  // namespace

REGISTER_HOST_ALLOCATOR(at::kPrivateUse1, &g_host_allocator)

// ---------------------------------------------------------------- generator

PjrtGenerator::PjrtGenerator(c10::DeviceIndex device)
    : c10::GeneratorImpl(c10::Device(kPjrt, device), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      seed_(c10::default_rng_seed_val) {}

void PjrtGenerator::set_current_seed(uint64_t seed) {
  seed_ = seed;
  offset_ = 0;
}

uint64_t PjrtGenerator::seed() {
  uint64_t s = c10::detail::getNonDeterministicRandom();
  set_current_seed(s);
  return s;
}

void PjrtGenerator::set_state(const c10::TensorImpl& new_state) {
  TORCH_CHECK(new_state.numel() == 16 && new_state.dtype() == caffe2::TypeMeta::Make<uint8_t>(),
              "pjrt generator state must be a 16-byte uint8 tensor (seed, offset)");
  const auto* p = static_cast<const uint64_t*>(new_state.data());
  seed_ = p[0];
  offset_ = p[1];
}

c10::intrusive_ptr<c10::TensorImpl> PjrtGenerator::get_state() const {
  at::Tensor state = at::detail::empty_cpu({16}, c10::ScalarType::Byte, std::nullopt, std::nullopt,
                                           std::nullopt, std::nullopt);
  auto* p = static_cast<uint64_t*>(state.data_ptr());
  p[0] = seed_;
  p[1] = offset_;
  return state.getIntrusivePtr();
}

PjrtGenerator* PjrtGenerator::clone_impl() const {
  auto* g = new PjrtGenerator(device().index());
  g->seed_ = seed_;
  g->offset_ = offset_;
  return g;
}

namespace {
std::mutex g_generator_mutex;
std::vector<at::Generator>* g_generators = new std::vector<at::Generator>();
uint64_t g_all_seed = c10::default_rng_seed_val;
}  // namespace

const at::Generator& DefaultGenerator(c10::DeviceIndex device) {
  std::lock_guard<std::mutex> lock(g_generator_mutex);
  if (device < 0) device = aten::CurrentDevice();
  while (static_cast<c10::DeviceIndex>(g_generators->size()) <= device) {
    auto index = static_cast<c10::DeviceIndex>(g_generators->size());
    g_generators->push_back(at::make_generator<PjrtGenerator>(index));
    g_generators->back().set_current_seed(g_all_seed);
  }
  return (*g_generators)[device];
}

void SeedAllGenerators(uint64_t seed) {
  std::lock_guard<std::mutex> lock(g_generator_mutex);
  g_all_seed = seed;
  for (at::Generator& g : *g_generators) g.set_current_seed(seed);
}

// ---------------------------------------------------------------- hooks interface

namespace {

struct PjrtHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return SafeDeviceCount() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return runtime::PeekClient() != nullptr; }
  void init() const override {
    try {
      runtime::GetClient();
    } catch (const std::exception& e) {
      TORCH_CHECK(false, e.what());
    }
  }
  c10::DeviceIndex deviceCount() const override { return SafeDeviceCount(); }
  void setCurrentDevice(c10::DeviceIndex device) const override { aten::SetCurrentDevice(device); }
  c10::DeviceIndex getCurrentDevice() const override { return aten::CurrentDevice(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    c10::DeviceIndex old = aten::CurrentDevice();
    if (device >= 0) aten::SetCurrentDevice(device);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override {
    return exchangeDevice(device);
  }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex device) const override {
    return DefaultGenerator(device);
  }
  at::Generator getNewGenerator(c10::DeviceIndex device) const override {
    return at::make_generator<PjrtGenerator>(device < 0 ? aten::CurrentDevice() : device);
  }
  at::Device getDeviceFromPtr(void* data) const override {
    uint64_t address = reinterpret_cast<uint64_t>(data);
    TORCH_CHECK(address >> 60 == 1, "pjrt: ", data, " is not a pjrt storage address");
    return at::Device(kPjrt, static_cast<c10::DeviceIndex>((address >> 52) & 0xff));
  }
  bool isPinnedPtr(const void* data) const override { return IsPinned(data); }
  at::Allocator* getPinnedMemoryAllocator() const override { return &g_host_allocator; }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    aten::ResizeStorage(storage, newsize);
  }
};

}  // namespace

void RegisterHooks() {
  static c10::once_flag once;
  c10::call_once(once, [] { at::RegisterPrivateUse1HooksInterface(new PjrtHooks()); });
}

}  // namespace torch_pjrt::hooks
