#include "graph/metrics.h"

#include <array>
#include <atomic>
#include <mutex>

#include "lowering/lowering.h"

namespace torch_pjrt::graph {

namespace {

constexpr int kCounters = static_cast<int>(Counter::kNumCounters);
constexpr int kTimers = static_cast<int>(Timer::kNumTimers);
constexpr int kMaxLoweredOps = 4096;

struct State {
  std::array<std::atomic<int64_t>, kCounters> counters{};
  std::mutex mutex;  // guards everything below
  std::array<TimerStats, kTimers> timers{};
  std::map<std::string, int64_t> named;
  std::array<std::atomic<int64_t>, kMaxLoweredOps> lowered{};
};

State& state() {
  static State* s = new State();
  return *s;
}

}  // namespace

const char* Metrics::Name(Counter c) {
  switch (c) {
    case Counter::kNodesTraced: return "NodesTraced";
    case Counter::kGraphsCompiled: return "GraphsCompiled";
    case Counter::kCompilesInWorker: return "CompilesInWorker";
    case Counter::kCacheHitsMemory: return "CacheHitsMemory";
    case Counter::kCacheHitsDisk: return "CacheHitsDisk";
    case Counter::kCacheCorruptEntries: return "CacheCorruptEntries";
    case Counter::kGraphsLowered: return "GraphsLowered";
    case Counter::kExecutions: return "Executions";
    case Counter::kSmallProgramExecutions: return "SmallProgramExecutions";
    case Counter::kDonatedBuffers: return "DonatedBuffers";
    case Counter::kTransfersToDevice: return "TransfersToDevice";
    case Counter::kTransferBytesToDevice: return "TransferBytesToDevice";
    case Counter::kAsyncTransfersToDevice: return "AsyncTransfersToDevice";
    case Counter::kTransfersFromDevice: return "TransfersFromDevice";
    case Counter::kDirectTransfersFromDevice: return "DirectTransfersFromDevice";
    case Counter::kTransferBytesFromDevice: return "TransferBytesFromDevice";
    case Counter::kDeviceToDeviceCopies: return "DeviceToDeviceCopies";
    case Counter::kFallbackOps: return "FallbackOps";
    case Counter::kGraphsCaptured: return "GraphsCaptured";
    case Counter::kGraphReplays: return "GraphReplays";
    case Counter::kRememberedReads: return "RememberedReads";
    case Counter::kValuesComputedAhead: return "ValuesComputedAhead";
    case Counter::kHostKernelResultsInPlace: return "HostKernelResultsInPlace";
    case Counter::kHostKernelResultsCopied: return "HostKernelResultsCopied";
    case Counter::kMaxPoolsMovedFirst: return "MaxPoolsMovedFirst";
    default: return "?";
  }
}

const char* Metrics::Name(Timer t) {
  switch (t) {
    case Timer::kCompile: return "CompileTime";
    case Timer::kLowering: return "LoweringTime";
    case Timer::kExecute: return "ExecuteTime";
    case Timer::kTransferToDevice: return "TransferToDeviceTime";
    case Timer::kTransferFromDevice: return "TransferFromDeviceTime";
    case Timer::kSync: return "SyncTime";
    default: return "?";
  }
}

void Metrics::Increment(Counter c, int64_t by) {
  state().counters[static_cast<int>(c)].fetch_add(by, std::memory_order_relaxed);
}

int64_t Metrics::Get(Counter c) { return state().counters[static_cast<int>(c)].load(); }

void Metrics::IncrementNamed(const std::string& name, int64_t by) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.named[name] += by;
}

void Metrics::CountLoweredOp(int index) {
  if (index >= 0 && index < kMaxLoweredOps) state().lowered[index].fetch_add(1, std::memory_order_relaxed);
}

void Metrics::AddTime(Timer t, int64_t ns) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  TimerStats& st = s.timers[static_cast<int>(t)];
  ++st.count;
  st.total_ns += ns;
  if (ns > st.max_ns) st.max_ns = ns;
}

TimerStats Metrics::GetTimer(Timer t) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.timers[static_cast<int>(t)];
}

std::map<std::string, int64_t> Metrics::Counters() {
  State& s = state();
  std::map<std::string, int64_t> out;
  for (int i = 0; i < kCounters; ++i) out[Name(static_cast<Counter>(i))] = s.counters[i].load();
  const auto& table = lowering::Table();
  for (size_t i = 0; i < table.size() && i < kMaxLoweredOps; ++i) {
    if (int64_t n = s.lowered[i].load()) out["Lowered::" + table[i].schema] = n;
  }
  std::lock_guard<std::mutex> lock(s.mutex);
  for (const auto& kv : s.named) out[kv.first] = kv.second;
  return out;
}

std::map<std::string, TimerStats> Metrics::Timers() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  std::map<std::string, TimerStats> out;
  for (int i = 0; i < kTimers; ++i) out[Name(static_cast<Timer>(i))] = s.timers[i];
  return out;
}

void Metrics::Reset() {
  State& s = state();
  for (auto& c : s.counters) c.store(0);
  for (auto& c : s.lowered) c.store(0);
  std::lock_guard<std::mutex> lock(s.mutex);
  s.timers = {};
  s.named.clear();
}

}  // namespace torch_pjrt::graph
