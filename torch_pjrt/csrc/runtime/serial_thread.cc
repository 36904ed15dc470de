#include "runtime/serial_thread.h"

#include <thread>

#include <pthread.h>
#include <unistd.h>

namespace torch_pjrt::runtime {

void SerialThread::Push(std::function<void()> job) {
  std::lock_guard<std::mutex> lock(mutex_);
  queue_.push_back(std::move(job));
  EnsureThread();
  wake_.notify_one();
}

void SerialThread::Drain() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (queue_.empty() && !busy_) return;
  EnsureThread();
  drained_.wait(lock, [&] { return queue_.empty() && !busy_; });
}

bool SerialThread::Pending() {
  std::lock_guard<std::mutex> lock(mutex_);
  return !queue_.empty() || busy_;
}

void SerialThread::EnsureThread() {
  if (owner_ == getpid()) return;
  owner_ = getpid();
  busy_ = false;
  std::thread([this] { Serve(); }).detach();
}

void SerialThread::Serve() {
  pthread_setname_np(pthread_self(), name_);  // told apart from XLA's threads in profiles
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return !queue_.empty(); });
    std::function<void()> job = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    job();
    job = nullptr;  // its captures go before the queue counts as drained
    lock.lock();
    busy_ = false;
    if (queue_.empty()) drained_.notify_all();
  }
}

}  // namespace torch_pjrt::runtime
