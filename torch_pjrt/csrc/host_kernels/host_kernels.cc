#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <stdexcept>
#include <string>
#include <mutex>
#include <pthread.h>
#include <thread>

#include "host_kernels/host_kernels.h"
#include "runtime/openmp.h"

namespace torch_pjrt::host_kernels {

at::Tensor Wrap(const XLA_FFI_Buffer* buffer) {
  c10::ScalarType type;
  switch (buffer->dtype) {
    case XLA_FFI_DataType_F32: type = at::kFloat; break;
    case XLA_FFI_DataType_F64: type = at::kDouble; break;
    case XLA_FFI_DataType_BF16: type = at::kBFloat16; break;
    case XLA_FFI_DataType_F16: type = at::kHalf; break;
    case XLA_FFI_DataType_S64: type = at::kLong; break;
    default: throw std::invalid_argument("unsupported element type " + std::to_string(buffer->dtype));
  }
  return at::from_blob(buffer->data, at::IntArrayRef(buffer->dims, buffer->rank), at::TensorOptions().dtype(type));
}

const XLA_FFI_Buffer* ArgBuffer(const XLA_FFI_CallFrame* frame, int i) {
  return static_cast<const XLA_FFI_Buffer*>(frame->args.args[i]);
}

const XLA_FFI_Buffer* RetBuffer(const XLA_FFI_CallFrame* frame, int i) {
  return static_cast<const XLA_FFI_Buffer*>(frame->rets.rets[i]);
}

at::Tensor Arg(const XLA_FFI_CallFrame* frame, int i) {
  return Wrap(ArgBuffer(frame, i));
}

at::Tensor Ret(const XLA_FFI_CallFrame* frame, int i) {
  return Wrap(RetBuffer(frame, i));
}

bool ChannelsLast(const XLA_FFI_CallFrame* frame) { return runtime::FfiIntAttr(frame, "channels_last", 0) != 0; }

namespace {
// A 4-d [N, C, H, W] activation the program laid out channels-last (the lowering fixes its layout
// as N, H, W, C: lowering/host_calls.h): the same sizes with channels-last strides.
at::Tensor Activation(const XLA_FFI_CallFrame* frame, const XLA_FFI_Buffer* buffer) {
  at::Tensor t = Wrap(buffer);
  if (!ChannelsLast(frame)) return t;
  const int64_t* d = buffer->dims;
  return t.as_strided({d[0], d[1], d[2], d[3]}, {d[1] * d[2] * d[3], 1, d[3] * d[1], d[1]});
}
}  // namespace

at::Tensor ActivationArg(const XLA_FFI_CallFrame* frame, int i) { return Activation(frame, ArgBuffer(frame, i)); }
at::Tensor ActivationRet(const XLA_FFI_CallFrame* frame, int i) { return Activation(frame, RetBuffer(frame, i)); }

namespace {

// Kernels below this much arithmetic run inline on the XLA worker that calls them, on one core:
// on the 2-core machine a hand-off to the kernel thread and a wake-up of its OpenMP team cost more
// than splitting such a kernel saves, and the team's spinning took the core XLA's other worker
// needed for the fusions around it. MobileNetV3-small (53 convolutions, all < 2.4 MFLOP at 64x64)
// inference went from 12.2 to 8.1-9.8 ms per step, training from 41-54 to 25-36 ms; ResNet-18's
// (~38 MFLOP convolutions) did not move (docs/design.md, "Host kernels"). Only convolutions give
// an estimate: the max pooling backward is memory-bound and stays on the kernel thread (the
// forward, a host kernel until 2026-11-29, is 2 MFLOP over 8 MB for a 2x2 pool of [64, 32, 32, 32],
// and inline it had taken bench/run.py's small CNN from ~3100 to ~2000 images/s).
constexpr int64_t kSerialKernelFlops = 4'000'000;

// Runs `kernel`, returning its exception's message ("" when it succeeded).
std::string RunGuarded(const std::function<void()>& kernel) {
  try {
    kernel();
  } catch (const std::exception& e) {
    std::string error = e.what();
    return error.empty() ? "unknown error" : error;
  }
  return "";
}

// Runs `kernel` on the calling (XLA worker) thread, its OpenMP team limited to that thread.
std::string RunInline(const std::function<void()>& kernel) {
  thread_local bool serial = (runtime::SetCallerOpenMPTeamSize(1), true);
  (void)serial;
  c10::InferenceMode inference;
  return RunGuarded(kernel);
}

struct Job {
  const std::function<void()>* kernel;
  std::string error;
  bool done = false;
};

// How long the kernel thread waits for a job before it exits. libgomp keeps a team of threads per
// thread that starts parallel regions, and once it manages more threads than there are cores it
// stops spinning at barriers and hands off through futexes: with the kernel thread's team alive
// beside the main thread's, every parallel CPU eager op in the process ran 2-3.5x slower for the
// rest of its life (a layer norm over [2, 8, 8, 80] 48 -> 171 us, a depthwise convolution 128 ->
// 488). A thread that exits frees its team; the next job starts a new one (~0.1 ms), which a
// training or inference loop's gaps between executions (a few ms) never wait out
// (docs/design.md, "Host kernels and CPU eager in one process").
constexpr auto kIdleExit = std::chrono::milliseconds(50);

// How long the team's workers may spin for the next job. Between parallel regions libgomp's
// workers spin (GOMP_SPINCOUNT, milliseconds) before they sleep, and on two cores a spinning worker
// takes the core XLA's fusions need: ViT-tiny inference, whose one convolution on this thread
// starts its program, lost ~45% of all CPU samples to it. Gaps between a program's convolutions
// are mostly under 0.2 ms (ResNet-18: 97%), so the team spins that long and then sleeps, at once
// where the previous wait was longer (docs/design.md, "The kernel thread's team between jobs").
constexpr auto kTeamSpin = std::chrono::microseconds(300);

using Clock = std::chrono::steady_clock;

class KernelThread {
 public:
  std::string Run(const std::function<void()>& kernel) {
    Job job{&kernel};
    std::unique_lock<std::mutex> lock(mutex_);
    queue_.push_back(&job);
    if (running_) {
      wake_.notify_one();
      // Wake sleeping workers together with the kernel thread, not after it (a no-op when the
      // team is not asleep: WaitWithTeamAsleep resets the flag before it opens its region).
      WakeTeam();
    } else {
      running_ = true;
      std::thread([this] { Loop(); }).detach();
    }
    done_.wait(lock, [&] { return job.done; });
    return job.error;
  }

 private:
  void Loop() {
    // Named so that profiles tell the kernels (and the OpenMP team this thread starts, which
    // inherits the name) from XLA's threads.
    pthread_setname_np(pthread_self(), "pjrt_hostkern");
    // Torch's thread count for this thread's OpenMP team (as torch's own threads do), before the
    // first WaitForJob opens a region of that team.
    at::init_num_threads();
    c10::InferenceMode inference;
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      if (!WaitForJob(lock)) {
        running_ = false;  // under the lock: the next Run starts a new thread
        return;
      }
      Job* job = queue_.front();
      queue_.pop_front();
      lock.unlock();
      job->error = RunGuarded(*job->kernel);
      lock.lock();
      job->done = true;
      done_.notify_all();
    }
  }

  // Waits for a job, the team spinning for kTeamSpin (skipped where the last wait outlasted it)
  // and then asleep, up to kIdleExit in all. False when none came.
  bool WaitForJob(std::unique_lock<std::mutex>& lock) {
    auto start = Clock::now();
    bool got = (!last_wait_long_ && wake_.wait_for(lock, kTeamSpin, [&] { return HasJob(); })) ||
               WaitWithTeamAsleep(lock);
    last_wait_long_ = Clock::now() - start > kTeamSpin;
    return got;
  }

  // The team's workers wait inside a parallel region of this thread's team, on a condition
  // variable instead of libgomp's spin; this thread waits for the job in the same region.
  bool WaitWithTeamAsleep(std::unique_lock<std::mutex>& lock) {
    if (HasJob()) return true;
    team_released_ = false;
    lock.unlock();
    bool parked = runtime::RunOnCallerOpenMPTeam([this](int thread) {
      std::unique_lock<std::mutex> region_lock(mutex_);
      if (thread == 0) {
        wake_.wait_for(region_lock, kIdleExit, [&] { return HasJob(); });
        WakeTeam();
      } else {
        team_wake_.wait(region_lock, [&] { return team_released_; });
      }
    });
    lock.lock();
    if (!parked) wake_.wait_for(lock, kIdleExit, [&] { return HasJob(); });
    return HasJob();
  }

  void WakeTeam() {  // under mutex_
    team_released_ = true;
    team_wake_.notify_all();
  }

  bool HasJob() const { return !queue_.empty(); }  // under mutex_

  std::mutex mutex_;
  std::condition_variable wake_, done_, team_wake_;
  std::deque<Job*> queue_;
  bool running_ = false;         // a thread is in Loop
  bool team_released_ = false;   // its workers may leave that region
  bool last_wait_long_ = true;   // the last wait for a job outlasted kTeamSpin
  // All guarded by mutex_.
};

}  // namespace

std::string RunOnKernelThread(const std::function<void()>& kernel) {
  static auto* thread = new KernelThread();  // never destroyed: handlers may run until exit
  return thread->Run(kernel);
}

XLA_FFI_Error* RunHandler(XLA_FFI_CallFrame* frame, const char* target, const std::function<void()>& kernel,
                          int64_t (*flops)(const XLA_FFI_CallFrame*)) {
  if (runtime::IsMetadataQuery(frame) || !runtime::IsExecution(frame)) return nullptr;
  bool small = flops != nullptr && flops(frame) < kSerialKernelFlops;
  std::string error = small ? RunInline(kernel) : RunOnKernelThread(kernel);
  return error.empty() ? nullptr : runtime::FfiError(frame, std::string(target) + ": " + error);
}

}  // namespace torch_pjrt::host_kernels
