// A thread of its own that runs jobs one after another, in the order they were queued: the launch
// thread (runtime/launch_queue.h) and the thread that frees finished programs' arguments
// (executable.cc's reaper). Started on first use, again in a forked child (which has none).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>

#include <sys/types.h>

namespace torch_pjrt::runtime {

class SerialThread {
 public:
  // `name`: the thread's name in profiles and debuggers (at most 15 characters).
  explicit SerialThread(const char* name) : name_(name) {}
  SerialThread(const SerialThread&) = delete;
  SerialThread& operator=(const SerialThread&) = delete;

  // Queues `job`, which must not throw.
  void Push(std::function<void()> job);
  // Returns once every job queued before the call has run (and its captures are gone).
  void Drain();
  // Whether a queued job has not finished.
  bool Pending();

 private:
  void EnsureThread();  // under mutex_
  void Serve();

  const char* name_;
  std::mutex mutex_;
  std::condition_variable wake_, drained_;
  std::deque<std::function<void()>> queue_;
  pid_t owner_ = 0;    // the process whose thread serves the queue
  bool busy_ = false;  // that thread is running a job
  // All guarded by mutex_.
};

}  // namespace torch_pjrt::runtime
