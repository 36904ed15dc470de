// Counters and timers behind torch.pjrt.metrics: what was compiled, cached, executed, transferred,
// which ops fell back to the CPU and what forced each sync. Hot-path counters are fixed slots;
// per-op and per-cause counters are named; natively traced ops count per lowering-table entry.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>

namespace torch_pjrt::graph {

enum class Counter : int {
  kNodesTraced,
  kGraphsCompiled,     // compiled by the plugin (a miss in both caches)
  kCompilesInWorker,   // of those, compiled by the compile worker process (runtime/compile_worker.h)
  kCacheHitsMemory,
  kCacheHitsDisk,
  kCacheCorruptEntries,
  kGraphsLowered,      // StableHLO text emitted (every miss; never on a memory/disk hit)
  kExecutions,
  kSmallProgramExecutions,  // of those, on the small programs' client (runtime::ClientForProgram)
  kDonatedBuffers,
  kTransfersToDevice,
  kTransferBytesToDevice,
  kAsyncTransfersToDevice,  // of those, non_blocking copies that returned before PJRT read the host
  kTransfersFromDevice,
  kTransferBytesFromDevice,
  kDirectTransfersFromDevice,  // of the transfers, host-memory buffers copied directly (Buffer::ToHost)
  kDeviceToDeviceCopies,
  kFallbackOps,        // total CPU fallback calls
  kGraphsCaptured,     // graphs captured for replay: torch.compile first calls, torch.accelerator.Graph
  kGraphReplays,       // replays of captured graphs (no tracing: graph/capture.h, graph/device_graph.h)
  kRememberedReads,    // reads answered by an earlier read's result, no sync (graph/read_memo.h)
  kValuesComputedAhead,  // small reads computed alone, the trace left uncut (graph/read_memo.h)
  kHostKernelResultsInPlace,  // host-kernel results torch computed in the program's buffer
  kHostKernelResultsCopied,   // and those copied there (host_kernels/result_buffers.h)
  kMaxPoolsMovedFirst,  // max poolings lowered ahead of the batch norm / ReLU before them (graph/pool_through.h)
  kNumCounters
};

enum class Timer : int {
  kCompile,
  kLowering,
  kExecute,        // host time to launch (execution is asynchronous)
  kTransferToDevice,
  kTransferFromDevice,
  kSync,
  kNumTimers
};

struct TimerStats {
  int64_t count = 0;
  int64_t total_ns = 0;
  int64_t max_ns = 0;
};

class Metrics {
 public:
  static void Increment(Counter c, int64_t by = 1);
  static int64_t Get(Counter c);
  static void IncrementNamed(const std::string& name, int64_t by = 1);
  // An op traced natively through lowering-table entry `index` (reported as
  // "Lowered::<schema>"): tests check it to know the native path ran, not a fallback.
  static void CountLoweredOp(int index);
  static void AddTime(Timer t, int64_t ns);
  static TimerStats GetTimer(Timer t);
  static const char* Name(Counter c);
  static const char* Name(Timer t);
  // Every counter (fixed and named) by name, and every timer.
  static std::map<std::string, int64_t> Counters();
  static std::map<std::string, TimerStats> Timers();
  static void Reset();
};

class ScopedTimer {
 public:
  explicit ScopedTimer(Timer t) : timer_(t), start_(std::chrono::steady_clock::now()) {}
  ~ScopedTimer() {
    Metrics::AddTime(timer_, std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 std::chrono::steady_clock::now() - start_)
                                 .count());
  }

 private:
  Timer timer_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace torch_pjrt::graph
