// Collectives as ops of the lazy graph, for plugins that run XLA collectives across processes
// (they declare `cross_process_collectives`; design: "Distributed"). A collective on pjrt tensors
// adds a node to the pending trace and returns at once: DDP's gradient all-reduce becomes part of
// the step's one program. The graph then compiles as one replica per process of the group.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <string>
#include <vector>

namespace torch_pjrt::distributed {

// A process group whose collectives enter the graph.
struct GraphGroup {
  std::vector<int64_t> devices;  // the job-wide device id of each group rank's pjrt device
  int rank = 0;                  // this process's rank in the group
  int size() const { return static_cast<int>(devices.size()); }
};

// Whether `op` can run in the graph: every c10d::ReduceOp but the bitwise ones, which compilers'
// collectives lack (they take the host path).
bool GraphReducible(const c10d::ReduceOp& op);
// In place: every tensor becomes the reduction over the group (GraphReducible ops).
void GraphAllReduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOp& op, const GraphGroup& g);
// `output` (group-size times `input`'s elements) receives every rank's `input`, in rank order.
void GraphAllGather(const at::Tensor& output, const at::Tensor& input, const GraphGroup& g);
// `output` receives block `rank` of the reduction of every rank's `input` (group-size blocks).
void GraphReduceScatter(const at::Tensor& output, const at::Tensor& input, const c10d::ReduceOp& op,
                        const GraphGroup& g);
// In place: every tensor becomes group rank `root`'s, bit for bit.
void GraphBroadcast(std::vector<at::Tensor>& tensors, int root, const GraphGroup& g);

}  // namespace torch_pjrt::distributed
