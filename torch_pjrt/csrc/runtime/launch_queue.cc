#include "runtime/launch_queue.h"

#include "runtime/serial_thread.h"

namespace torch_pjrt::runtime {

namespace {

SerialThread& Queue() {
  static auto* queue = new SerialThread("pjrt_launch");  // never destroyed: launches may be queued until exit
  return *queue;
}

}  // namespace

void QueueLaunch(std::function<void()> launch) { Queue().Push(std::move(launch)); }
void DrainLaunches() { Queue().Drain(); }
bool LaunchesPending() { return Queue().Pending(); }

}  // namespace torch_pjrt::runtime
