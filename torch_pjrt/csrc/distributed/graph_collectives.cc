#include "distributed/graph_collectives.h"

#include <ATen/ATen.h>

#include "aten/lazy_tensor.h"
#include "distributed/reduction.h"
#include "graph/executor.h"
#include "graph/metrics.h"
#include "graph/trace.h"

namespace torch_pjrt::distributed {
namespace {

std::string ReductionName(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return "sum";
    case c10d::ReduceOp::PRODUCT: return "product";
    case c10d::ReduceOp::MIN: return "min";
    case c10d::ReduceOp::MAX: return "max";
    default: TORCH_CHECK(false, "pjrt: reduction ", static_cast<int>(op.op_), " cannot run in a graph");
  }
}

// A graph holds the collectives of one group only (its replicas are that group's processes):
// a collective of another group first launches what is pending.
void UseGroupDevices(int device, const GraphGroup& g) {
  Dims devices(g.devices.begin(), g.devices.end());
  graph::DeviceTrace& trace = graph::Trace(device);
  if (!trace.replica_devices.empty() && trace.replica_devices != devices) {
    graph::SyncDevice(device, graph::SyncCause::kOther);  // clears replica_devices
  }
  trace.replica_devices = devices;
}

// Traces internal collective `op` on `input`'s elements as a 1-d array and returns a new
// contiguous 1-d pjrt tensor of `out_numel` elements holding the result.
at::Tensor TraceCollective(const char* op, const at::Tensor& input, int64_t out_numel,
                           const std::string* reduction, const int* root, const GraphGroup& g,
                           const char* counted_as) {
  TORCH_CHECK(input.device().is_privateuseone(), "pjrt graph collective got a ", input.device(), " tensor");
  const int device = input.device().index();
  at::Tensor flat_input = input.reshape({input.numel()});
  at::Tensor out = aten::EmptyContiguous({out_numel}, input.scalar_type(), static_cast<c10::DeviceIndex>(device));
  graph::GraphLock lock;
  UseGroupDevices(device, g);
  graph::Value flat = aten::ReadValue(flat_input);
  graph::ArgList args{graph::Arg::Tensor(0)};
  if (reduction) args.push_back(graph::Arg{graph::ArgKind::kString, 0, 0, lowering::InternString(*reduction)});
  if (root) args.push_back(graph::Arg::Int(*root));
  graph::ArgPool pool(g.devices.begin(), g.devices.end());
  args.push_back(graph::Arg{graph::ArgKind::kIntList, 0, static_cast<uint32_t>(pool.size()), 0});
  graph::TensorType out_type{flat.type().dtype, {out_numel}};
  graph::Value result = graph::MakeOp(graph::InternalOp(op), device, {flat}, std::move(args), std::move(pool),
                                      {out_type})[0];
  aten::WriteValue(out, result);
  graph::Metrics::IncrementNamed(std::string("Collectives::graph:") + counted_as);
  return out;
}

// A reducing collective `op` on one tensor: the reduction's scaling around the traced op (AVG's
// division, PREMUL_SUM's factor). Returns a new 1-d tensor of `out_numel` elements.
at::Tensor TraceReduction(const char* op, const at::Tensor& input, int64_t out_numel, const c10d::ReduceOp& reduce_op,
                          const GraphGroup& g, const char* counted_as) {
  Reduction reduction(reduce_op, g.size());
  std::vector<at::Tensor> inputs{input};
  reduction.ScaleInputs(inputs, /*in_place=*/false);
  const std::string name = ReductionName(reduction.op());
  std::vector<at::Tensor> results{TraceCollective(op, inputs[0], out_numel, &name, nullptr, g, counted_as)};
  reduction.FinishOutputs(results);
  return results[0];
}

}  // namespace

bool GraphReducible(const c10d::ReduceOp& op) {
  return op != c10d::ReduceOp::BAND && op != c10d::ReduceOp::BOR && op != c10d::ReduceOp::BXOR;
}

void GraphAllReduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOp& op, const GraphGroup& g) {
  for (at::Tensor& t : tensors) {
    t.copy_(TraceReduction("pjrt::all_reduce", t, t.numel(), op, g, "allreduce").view(t.sizes()));
  }
}

void GraphAllGather(const at::Tensor& output, const at::Tensor& input, const GraphGroup& g) {
  TORCH_CHECK(output.numel() == input.numel() * g.size(), "all_gather: the output has ", output.numel(),
              " elements, expected group size ", g.size(), " times the input's ", input.numel());
  at::Tensor gathered = TraceCollective("pjrt::all_gather", input, output.numel(), nullptr, nullptr, g, "allgather");
  output.copy_(gathered.view(output.sizes()));
}

void GraphReduceScatter(const at::Tensor& output, const at::Tensor& input, const c10d::ReduceOp& op,
                        const GraphGroup& g) {
  TORCH_CHECK(input.numel() == output.numel() * g.size(), "reduce_scatter: the input has ", input.numel(),
              " elements, expected group size ", g.size(), " times the output's ", output.numel());
  at::Tensor reduced = TraceReduction("pjrt::reduce_scatter", input, output.numel(), op, g, "reduce_scatter");
  output.copy_(reduced.view(output.sizes()));
}

void GraphBroadcast(std::vector<at::Tensor>& tensors, int root, const GraphGroup& g) {
  TORCH_CHECK(root >= 0 && root < g.size(), "broadcast: root rank ", root, " is not in a group of ", g.size());
  for (at::Tensor& t : tensors) {
    at::Tensor result = TraceCollective("pjrt::broadcast", t, t.numel(), nullptr, &root, g, "broadcast");
    t.copy_(result.view(t.sizes()));
  }
}

}  // namespace torch_pjrt::distributed
