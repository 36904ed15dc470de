#include "distributed/host_collectives.h"

#include <ATen/ATen.h>

#include <functional>
#include <mutex>
#include <optional>

#include "distributed/graph_collectives.h"
#include "distributed/reduction.h"
#include "graph/metrics.h"

namespace torch_pjrt::distributed {
namespace {

using CopyBack = std::vector<std::pair<at::Tensor, at::Tensor>>;  // (host, pjrt)

void CopyBackAll(const CopyBack& copy_back) {
  for (const auto& [host, device] : copy_back) device.copy_(host);
}

// A future already holding `result`: what DDP's reducer and the functional collectives read.
c10::intrusive_ptr<c10::ivalue::Future> CompletedFuture(const std::vector<at::Tensor>& result) {
  auto future = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::ofTensors());
  future->markCompleted(c10::IValue(result));
  return future;
}

// A collective that has finished: wait() returns at once and the future holds its results, as
// DDP's reducer reads them.
class CompletedWork : public c10d::Work {
 public:
  CompletedWork(int rank, c10d::OpType type, std::vector<at::Tensor> result)
      : Work(rank, type), result_(std::move(result)), future_(CompletedFuture(result_)) {
    finish();
  }
  bool isCompleted() override { return true; }
  bool isSuccess() const override { return true; }
  bool wait(std::chrono::milliseconds /*timeout*/) override { return true; }
  std::vector<at::Tensor> result() override { return result_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  std::vector<at::Tensor> result_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// A receive still under way: peers may send only after they receive, so receives cannot wait
// when issued (a send's host copy goes out asynchronously on its own). The copy back into the pjrt
// tensors happens in the first wait(), or in isCompleted() once the host receive is done.
class ReceiveWork : public c10d::Work {
 public:
  ReceiveWork(int rank, c10d::OpType type, c10::intrusive_ptr<c10d::Work> host, CopyBack copy_back,
              std::vector<at::Tensor> result)
      : Work(rank, type), host_(std::move(host)), copy_back_(std::move(copy_back)),
        result_(std::move(result)) {}
  bool wait(std::chrono::milliseconds timeout) override {
    host_->wait(timeout);
    CopyBackOnce();
    return true;
  }
  bool isCompleted() override {
    if (!host_->isCompleted()) return false;
    CopyBackOnce();
    return true;
  }
  bool isSuccess() const override { return host_->isSuccess(); }
  std::exception_ptr exception() const override { return host_->exception(); }
  int sourceRank() const override { return host_->sourceRank(); }
  std::vector<at::Tensor> result() override { return result_; }
  // Waits: the future must hold the pjrt tensors' received values.
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    wait(kNoTimeout);
    return CompletedFuture(result_);
  }

 private:
  void CopyBackOnce() {
    std::lock_guard<std::mutex> lock(copy_mutex_);
    CopyBackAll(copy_back_);
    copy_back_.clear();
  }
  c10::intrusive_ptr<c10d::Work> host_;
  std::mutex copy_mutex_;
  CopyBack copy_back_;
  std::vector<at::Tensor> result_;
};

enum class Access { kRead, kReadWrite, kWrite };

// The host tensors one collective runs on. pjrt tensors get host copies (only their shape when
// the collective just writes them) and written ones are copied back after the host work ends;
// CPU tensors are used as they are.
class HostStaging {
 public:
  explicit HostStaging(const char* collective) : collective_(collective) {}

  at::Tensor Stage(const at::Tensor& t, Access access) {
    if (!t.defined() || t.device().is_cpu()) return t;
    TORCH_CHECK(t.device().is_privateuseone(), "the pjrt process-group backend got a tensor on ",
                t.device(), " in ", collective_, "; it takes pjrt and CPU tensors (give other "
                "devices their own backend, e.g. init_process_group(\"cpu:gloo,pjrt:pjrt\"))");
    staged_any_ = true;
    at::Tensor host = access == Access::kWrite ? at::empty_like(t, t.options().device(at::kCPU))
                                               : t.to(at::kCPU);
    if (access != Access::kRead) copy_back_.emplace_back(host, t);
    return host;
  }
  std::vector<at::Tensor> Stage(const std::vector<at::Tensor>& ts, Access access) {
    std::vector<at::Tensor> host;
    host.reserve(ts.size());
    for (const auto& t : ts) host.push_back(Stage(t, access));
    return host;
  }
  std::vector<std::vector<at::Tensor>> Stage(const std::vector<std::vector<at::Tensor>>& lists,
                                             Access access) {
    std::vector<std::vector<at::Tensor>> host;
    host.reserve(lists.size());
    for (const auto& ts : lists) host.push_back(Stage(ts, access));
    return host;
  }

  // Waits for the host work, runs `after_host` (AVG's division), copies written tensors back;
  // `result` is what Work::result() and the future give (the collective's user-visible outputs).
  c10::intrusive_ptr<c10d::Work> Finish(const c10d::Backend& backend,
                                        const c10::intrusive_ptr<c10d::Work>& work,
                                        c10d::OpType type, std::vector<at::Tensor> result,
                                        const std::function<void()>& after_host = nullptr) {
    work->wait();
    if (after_host) after_host();
    CopyBackAll(copy_back_);
    Count();
    return c10::make_intrusive<CompletedWork>(backend.getRank(), type, std::move(result));
  }
  // For sends and receives: the host work goes on; a receive copies back when waited for.
  c10::intrusive_ptr<c10d::Work> Defer(const c10d::Backend& backend,
                                       c10::intrusive_ptr<c10d::Work> work, c10d::OpType type,
                                       std::vector<at::Tensor> result) {
    Count();
    if (copy_back_.empty()) return work;
    return c10::make_intrusive<ReceiveWork>(backend.getRank(), type, std::move(work),
                                            std::move(copy_back_), std::move(result));
  }

 private:
  // Collectives that moved pjrt tensors (torch.pjrt.metrics.collectives()); CPU-only ones did not.
  void Count() const {
    if (staged_any_) graph::Metrics::IncrementNamed(std::string("Collectives::") + collective_);
  }

  const char* collective_;
  bool staged_any_ = false;
  CopyBack copy_back_;
};

template <typename Options>
Options OnHost(Options opts, const Reduction& reduction) {
  opts.reduceOp = reduction.op();
  return opts;
}

bool AllPjrt(const std::vector<at::Tensor>& ts) {
  for (const auto& t : ts) {
    if (!t.defined() || !t.device().is_privateuseone()) return false;
  }
  return !ts.empty();
}

std::vector<at::Tensor> Flatten(const std::vector<std::vector<at::Tensor>>& lists) {
  std::vector<at::Tensor> all;
  for (const auto& ts : lists) all.insert(all.end(), ts.begin(), ts.end());
  return all;
}

using c10d::OpType;
using WorkPtr = c10::intrusive_ptr<c10d::Work>;
using Tensors = std::vector<at::Tensor>;
using TensorLists = std::vector<std::vector<at::Tensor>>;

// Each collective: stage, run on the host backend, finish. Options pass through unchanged, so
// every ReduceOp, root, tag and timeout behaves as gloo's. With a GraphGroup (a plugin that runs
// collectives across processes), all-reduce, broadcast, all-gather and reduce-scatter of pjrt
// tensors enter the lazy graph instead (graph_collectives.h); the rest keeps the host path.
class HostCopyBackend : public c10d::Backend {
 public:
  HostCopyBackend(c10::intrusive_ptr<c10d::Backend> host, std::optional<GraphGroup> graph)
      : Backend(host->getRank(), host->getSize()), host_(std::move(host)), graph_(std::move(graph)) {}

  const std::string getBackendName() const override { return "pjrt"; }
  void setTimeout(std::chrono::milliseconds timeout) override { host_->setTimeout(timeout); }
  void setSequenceNumberForGroup() override { host_->setSequenceNumberForGroup(); }
  uint64_t getSequenceNumberForGroup() override { return host_->getSequenceNumberForGroup(); }
  void setGroupUid(const std::string& uid) override {
    Backend::setGroupUid(uid);
    host_->setGroupUid(uid);
  }

  WorkPtr broadcast(Tensors& tensors, const c10d::BroadcastOptions& opts) override {
    if (InGraph(tensors)) {
      GraphBroadcast(tensors, static_cast<int>(opts.rootRank), *graph_);
      return Completed(OpType::BROADCAST, tensors);
    }
    HostStaging s("broadcast");
    auto host = s.Stage(tensors, Access::kReadWrite);
    return s.Finish(*this, host_->broadcast(host, opts), OpType::BROADCAST, tensors);
  }
  WorkPtr allreduce(Tensors& tensors, const c10d::AllreduceOptions& opts) override {
    if (InGraph(tensors) && GraphReducible(opts.reduceOp)) {
      GraphAllReduce(tensors, opts.reduceOp, *graph_);
      return Completed(OpType::ALLREDUCE, tensors);
    }
    return ReduceInPlace("allreduce", OpType::ALLREDUCE, tensors, opts,
                         [&](Tensors& host, const auto& o) { return host_->allreduce(host, o); });
  }
  WorkPtr allreduce_coalesced(Tensors& tensors,
                              const c10d::AllreduceCoalescedOptions& opts) override {
    if (InGraph(tensors) && GraphReducible(opts.reduceOp)) {
      GraphAllReduce(tensors, opts.reduceOp, *graph_);
      return Completed(OpType::ALLREDUCE_COALESCED, tensors);
    }
    return ReduceInPlace("allreduce_coalesced", OpType::ALLREDUCE_COALESCED, tensors, opts,
                         [&](Tensors& host, const auto& o) { return host_->allreduce_coalesced(host, o); });
  }
  WorkPtr reduce(Tensors& tensors, const c10d::ReduceOptions& opts) override {
    return ReduceInPlace("reduce", OpType::REDUCE, tensors, opts,
                         [&](Tensors& host, const auto& o) { return host_->reduce(host, o); });
  }
  WorkPtr allgather(TensorLists& outputs, Tensors& inputs,
                    const c10d::AllgatherOptions& opts) override {
    if (inputs.size() == 1 && outputs.size() == 1 && InGraph(outputs[0]) && InGraph(inputs)) {
      at::Tensor gathered = at::empty({inputs[0].numel() * getSize()}, inputs[0].options());
      GraphAllGather(gathered, inputs[0], *graph_);
      auto chunks = gathered.chunk(getSize());
      for (int r = 0; r < getSize(); ++r) outputs[0][r].copy_(chunks[r].view(outputs[0][r].sizes()));
      return Completed(OpType::ALLGATHER, outputs[0]);
    }
    return OutOfPlace("allgather", OpType::ALLGATHER, outputs, inputs, Flatten(outputs),
                      [&](auto& out, auto& in) { return host_->allgather(out, in, opts); });
  }
  WorkPtr _allgather_base(at::Tensor& output, at::Tensor& input,
                          const c10d::AllgatherOptions& opts) override {
    if (InGraph({output, input})) {
      GraphAllGather(output, input, *graph_);
      return Completed(OpType::_ALLGATHER_BASE, {output});
    }
    return OutOfPlace("allgather_into_tensor", OpType::_ALLGATHER_BASE, output, input, {output},
                      [&](auto& out, auto& in) { return host_->_allgather_base(out, in, opts); });
  }
  WorkPtr allgather_coalesced(TensorLists& outputs, Tensors& inputs,
                              const c10d::AllgatherOptions& opts) override {
    return OutOfPlace("allgather_coalesced", OpType::ALLGATHER_COALESCED, outputs, inputs,
                      Flatten(outputs),
                      [&](auto& out, auto& in) { return host_->allgather_coalesced(out, in, opts); });
  }
  WorkPtr allgather_into_tensor_coalesced(Tensors& outputs, Tensors& inputs,
                                          const c10d::AllgatherOptions& opts) override {
    if (InGraph(outputs) && InGraph(inputs) && outputs.size() == inputs.size()) {
      for (size_t i = 0; i < inputs.size(); ++i) GraphAllGather(outputs[i], inputs[i], *graph_);
      return Completed(OpType::COALESCED, outputs);
    }
    return OutOfPlace("allgather_into_tensor_coalesced", OpType::COALESCED, outputs, inputs, outputs,
                      [&](auto& out, auto& in) {
                        return host_->allgather_into_tensor_coalesced(out, in, opts);
                      });
  }
  WorkPtr gather(TensorLists& outputs, Tensors& inputs, const c10d::GatherOptions& opts) override {
    return OutOfPlace("gather", OpType::GATHER, outputs, inputs, Flatten(outputs),
                      [&](auto& out, auto& in) { return host_->gather(out, in, opts); });
  }
  WorkPtr scatter(Tensors& outputs, TensorLists& inputs, const c10d::ScatterOptions& opts) override {
    return OutOfPlace("scatter", OpType::SCATTER, outputs, inputs, outputs,
                      [&](auto& out, auto& in) { return host_->scatter(out, in, opts); });
  }
  WorkPtr reduce_scatter(Tensors& outputs, TensorLists& inputs,
                         const c10d::ReduceScatterOptions& opts) override {
    if (outputs.size() == 1 && inputs.size() == 1 && InGraph(outputs) && InGraph(inputs[0]) &&
        GraphReducible(opts.reduceOp)) {
      std::vector<at::Tensor> flat;
      for (const auto& t : inputs[0]) flat.push_back(t.reshape({t.numel()}));
      GraphReduceScatter(outputs[0], at::cat(flat), opts.reduceOp, *graph_);
      return Completed(OpType::REDUCE_SCATTER, outputs);
    }
    return ReduceScatter("reduce_scatter", OpType::REDUCE_SCATTER, outputs, inputs, opts,
                         [&](Tensors& out, TensorLists& in, const auto& o) {
                           return host_->reduce_scatter(out, in, o);
                         });
  }
  WorkPtr _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                               const c10d::ReduceScatterOptions& opts) override {
    if (InGraph({output, input}) && GraphReducible(opts.reduceOp)) {
      GraphReduceScatter(output, input, opts.reduceOp, *graph_);
      return Completed(OpType::_REDUCE_SCATTER_BASE, {output});
    }
    Tensors outputs{output};
    TensorLists inputs{{input}};
    return ReduceScatter("reduce_scatter_tensor", OpType::_REDUCE_SCATTER_BASE, outputs, inputs, opts,
                         [&](Tensors& out, TensorLists& in, const auto& o) {
                           return host_->_reduce_scatter_base(out[0], in[0][0], o);
                         });
  }
  WorkPtr reduce_scatter_tensor_coalesced(Tensors& outputs, Tensors& inputs,
                                          const c10d::ReduceScatterOptions& opts) override {
    if (InGraph(outputs) && InGraph(inputs) && outputs.size() == inputs.size() && GraphReducible(opts.reduceOp)) {
      for (size_t i = 0; i < inputs.size(); ++i) GraphReduceScatter(outputs[i], inputs[i], opts.reduceOp, *graph_);
      return Completed(OpType::COALESCED, outputs);
    }
    TensorLists input_list{inputs};
    return ReduceScatter("reduce_scatter_tensor_coalesced", OpType::COALESCED, outputs, input_list,
                         opts, [&](Tensors& out, TensorLists& in, const auto& o) {
                           return host_->reduce_scatter_tensor_coalesced(out, in[0], o);
                         });
  }
  WorkPtr alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_splits,
                        std::vector<int64_t>& input_splits,
                        const c10d::AllToAllOptions& opts) override {
    return OutOfPlace("all_to_all_single", OpType::ALLTOALL_BASE, output, input, {output},
                      [&](auto& out, auto& in) {
                        return host_->alltoall_base(out, in, output_splits, input_splits, opts);
                      });
  }
  WorkPtr alltoall(Tensors& outputs, Tensors& inputs, const c10d::AllToAllOptions& opts) override {
    return OutOfPlace("all_to_all", OpType::ALLTOALL, outputs, inputs, outputs,
                      [&](auto& out, auto& in) { return host_->alltoall(out, in, opts); });
  }
  WorkPtr send(Tensors& tensors, int dst, int tag) override {
    HostStaging s("send");
    auto host = s.Stage(tensors, Access::kRead);
    return s.Defer(*this, host_->send(host, dst, tag), OpType::SEND, {});
  }
  WorkPtr recv(Tensors& tensors, int src, int tag) override {
    HostStaging s("recv");
    auto host = s.Stage(tensors, Access::kWrite);
    return s.Defer(*this, host_->recv(host, src, tag), OpType::RECV, tensors);
  }
  WorkPtr recvAnysource(Tensors& tensors, int tag) override {
    HostStaging s("recv");
    auto host = s.Stage(tensors, Access::kWrite);
    return s.Defer(*this, host_->recvAnysource(host, tag), OpType::RECVANYSOURCE, tensors);
  }
  WorkPtr barrier(const c10d::BarrierOptions& opts) override { return host_->barrier(opts); }
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override {
    host_->monitoredBarrier(opts, wait_all_ranks);
  }

 private:
  // True when this collective enters the graph: a graph group and only pjrt tensors.
  bool InGraph(const Tensors& tensors) const { return graph_.has_value() && AllPjrt(tensors); }
  WorkPtr Completed(OpType type, Tensors result) const {
    return c10::make_intrusive<CompletedWork>(getRank(), type, std::move(result));
  }

  // Collectives that write `outputs` from `inputs` (tensors or lists of them); `result` is what
  // the Work reports.
  template <typename Out, typename In, typename Run>
  WorkPtr OutOfPlace(const char* name, OpType type, Out& outputs, In& inputs,
                     std::vector<at::Tensor> result, Run run) {
    HostStaging s(name);
    auto host_out = s.Stage(outputs, Access::kWrite);
    auto host_in = s.Stage(inputs, Access::kRead);
    return s.Finish(*this, run(host_out, host_in), type, std::move(result));
  }

  // The reduce-scatter family, as lists: `run` gets the host outputs and inputs and gloo's options.
  template <typename Run>
  WorkPtr ReduceScatter(const char* name, OpType type, Tensors& outputs, TensorLists& inputs,
                        const c10d::ReduceScatterOptions& opts, Run run) {
    HostStaging s(name);
    Reduction reduction(opts.reduceOp, getSize());
    auto host_out = s.Stage(outputs, Access::kWrite);
    auto host_in = s.Stage(inputs, Access::kRead);
    for (auto& list : host_in) reduction.ScaleInputs(list, /*in_place=*/false);
    auto work = run(host_out, host_in, OnHost(opts, reduction));
    return s.Finish(*this, work, type, outputs, [&] { reduction.FinishOutputs(host_out); });
  }

  // allreduce, its coalesced form and reduce: in place, with the host-side half of AVG and
  // PREMUL_SUM around `run` (the host backend's collective).
  template <typename Options, typename Run>
  WorkPtr ReduceInPlace(const char* name, OpType type, Tensors& tensors, const Options& opts, Run run) {
    HostStaging s(name);
    Reduction reduction(opts.reduceOp, getSize());
    auto host = s.Stage(tensors, Access::kReadWrite);
    reduction.ScaleInputs(host, /*in_place=*/true);
    auto work = run(host, OnHost(opts, reduction));
    return s.Finish(*this, work, type, tensors, [&] { reduction.FinishOutputs(host); });
  }

  c10::intrusive_ptr<c10d::Backend> host_;
  std::optional<GraphGroup> graph_;
};

}  // namespace

c10::intrusive_ptr<c10d::Backend> MakeHostCopyBackend(c10::intrusive_ptr<c10d::Backend> host) {
  TORCH_CHECK(host, "MakeHostCopyBackend needs a host backend");
  return c10::make_intrusive<HostCopyBackend>(std::move(host), std::nullopt);
}

c10::intrusive_ptr<c10d::Backend> MakeGraphCollectiveBackend(c10::intrusive_ptr<c10d::Backend> host,
                                                              GraphGroup group) {
  TORCH_CHECK(host, "MakeGraphCollectiveBackend needs a host backend");
  TORCH_CHECK(group.size() == host->getSize() && group.rank == host->getRank(),
              "pjrt: the graph group's devices (", group.size(), ") and rank (", group.rank,
              ") disagree with the process group's size ", host->getSize(), " and rank ", host->getRank());
  return c10::make_intrusive<HostCopyBackend>(std::move(host), std::move(group));
}

}  // namespace torch_pjrt::distributed
