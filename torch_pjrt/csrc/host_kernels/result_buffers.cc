#include "host_kernels/result_buffers.h"

#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>

#include <mutex>
#include <set>

#include "graph/metrics.h"

namespace torch_pjrt::host_kernels {
namespace {

// A result buffer a kernel's allocation may take.
struct Target {
  void* data;
  size_t nbytes;
  bool taken = false;
};

// The targets of the ComputeInto running on this thread (none: nullptr).
thread_local std::vector<Target>* current_targets = nullptr;

// The context of a DataPtr over a result buffer. It differs from the data pointer, so
// Allocator::raw_allocate (which would hand the pointer to the base allocator's deleter) rejects it.
char result_buffer_context;
void KeepResultBuffer(void*) {}  // the program owns the buffer

void* TakeTarget(size_t nbytes) {
  if (current_targets == nullptr) return nullptr;
  for (Target& t : *current_targets) {
    if (!t.taken && t.nbytes == nbytes) {
      t.taken = true;
      return t.data;
    }
  }
  return nullptr;
}

// Torch's CPU allocator, except that an allocation a ComputeInto on this thread expects gets the
// result buffer. Every other allocation (other threads, other sizes, no ComputeInto) goes to the
// allocator it replaced, at the cost of one thread-local read.
class ResultBufferAllocator final : public c10::Allocator {
 public:
  explicit ResultBufferAllocator(c10::Allocator* base) : base_(base) {}

  c10::DataPtr allocate(size_t nbytes) override {
    if (void* data = TakeTarget(nbytes)) {
      return {data, &result_buffer_context, &KeepResultBuffer, c10::Device(c10::kCPU)};
    }
    return base_->allocate(nbytes);
  }
  c10::DeleterFnPtr raw_deleter() const override { return base_->raw_deleter(); }
  bool is_simple_data_ptr(const c10::DataPtr& data_ptr) const override { return base_->is_simple_data_ptr(data_ptr); }
  void copy_data(void* dest, const void* src, size_t count) const override { base_->copy_data(dest, src, count); }

 private:
  c10::Allocator* base_;
};

// The allocator, installed as torch's CPU allocator on the first call (when a host kernel first
// offers a buffer, so a process that never does keeps torch's own; torch's slot is a plain
// pointer, written once here while other threads may read it). Null where it is not (or no
// longer) the CPU allocator: an allocator registered with a higher priority keeps its place, and
// the kernels then copy their results as before.
ResultBufferAllocator* InstalledAllocator() {
  static ResultBufferAllocator* allocator = [] {
    auto* a = new ResultBufferAllocator(c10::GetCPUAllocator());  // never freed: tensors may outlive us
    c10::SetCPUAllocator(a);  // priority 0, as torch's own registration
    return a;
  }();
  return c10::GetCPUAllocator() == allocator ? allocator : nullptr;
}

// Whether `result` already is `ret`: the same memory, shape and strides.
bool IsInPlace(const at::Tensor& result, const at::Tensor& ret) {
  return result.data_ptr() == ret.data_ptr() && result.sizes() == ret.sizes() && result.strides() == ret.strides();
}

bool InTargetBuffer(const at::Tensor& t, const std::vector<Target>& targets) {
  const void* data = t.storage().data();
  for (const Target& target : targets) {
    if (target.data == data) return true;
  }
  return false;
}

// Result sizes no longer offered. oneDNN's own buffers (scratchpads, packed weights) come from
// torch's CPU allocator through raw_allocate, which frees them with the allocator's raw deleter
// and so asserts that the pointer is the allocation's own context: a result buffer, whose context
// is not, makes it throw instead of being freed as heap memory. Such an allocation of exactly a
// result's size is a coincidence of shapes that would repeat on every call, so after the first the
// results of that size are copied as before.
class CollidingSizes {
 public:
  bool Contains(size_t nbytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    return sizes_.count(nbytes) > 0;
  }
  void Add(size_t nbytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    sizes_.insert(nbytes);
  }

 private:
  std::mutex mutex_;
  std::set<size_t> sizes_;
};

CollidingSizes& colliding_sizes() {
  static auto* sizes = new CollidingSizes();
  return *sizes;
}

// Runs `compute` with `targets` offered to this thread's allocations.
std::vector<at::Tensor> ComputeWithTargets(std::vector<Target>& targets,
                                           const std::function<std::vector<at::Tensor>()>& compute) {
  struct Offer {
    explicit Offer(std::vector<Target>* t) { current_targets = t; }
    ~Offer() { current_targets = nullptr; }
  } offer(&targets);
  return compute();
}

// `compute`'s results, computed with `targets` offered where the allocator is in place.
std::vector<at::Tensor> Compute(std::vector<Target>& targets, const std::function<std::vector<at::Tensor>()>& compute) {
  if (targets.empty() || InstalledAllocator() == nullptr) return compute();
  try {
    return ComputeWithTargets(targets, compute);
  } catch (const std::exception&) {
    std::vector<at::Tensor> results = compute();  // a kernel's own error repeats here
    for (const Target& t : targets) colliding_sizes().Add(t.nbytes);
    return results;
  }
}

}  // namespace

void ComputeInto(const std::vector<ResultBuffer>& rets, const std::function<std::vector<at::Tensor>()>& compute) {
  std::vector<Target> targets;
  for (const ResultBuffer& r : rets) {
    if (r.ret.defined() && r.offered && !colliding_sizes().Contains(r.ret.nbytes())) {
      targets.push_back({r.ret.data_ptr(), r.ret.nbytes()});
    }
  }
  std::vector<at::Tensor> results = Compute(targets, compute);
  TORCH_INTERNAL_ASSERT(results.size() == rets.size(), "a host kernel returned ", results.size(), " results for ",
                        rets.size(), " buffers");
  // A result sitting in a buffer meant for another (a temporary of its size took that buffer
  // first) moves out before any copy below writes there.
  for (size_t i = 0; i < rets.size(); ++i) {
    if (results[i].defined() && !IsInPlace(results[i], rets[i].ret) && InTargetBuffer(results[i], targets)) {
      results[i] = results[i].clone();
    }
  }
  for (size_t i = 0; i < rets.size(); ++i) {
    if (!results[i].defined()) continue;
    bool in_place = IsInPlace(results[i], rets[i].ret);
    if (!in_place) rets[i].ret.copy_(results[i]);
    graph::Metrics::Increment(in_place ? graph::Counter::kHostKernelResultsInPlace
                                       : graph::Counter::kHostKernelResultsCopied);
  }
}

}  // namespace torch_pjrt::host_kernels
