// Max pooling ahead of the increasing ops that made its input (lowering::OpLowering::increasing
// and pool_through; docs/design.md, "Max pooling before batch norm and ReLU").
#pragma once

#include <unordered_map>
#include <vector>

#include "graph/node.h"
#include "lowering/lowering.h"

namespace torch_pjrt::graph {

// The values lowered so far, per node (LowerTrace's memo).
using LoweredValues = std::unordered_map<const Node*, std::vector<lowering::Val>>;

// How often each node output is read within a program: by the nodes that compute its results,
// and once more per result it is.
class ValueUses {
 public:
  explicit ValueUses(const std::vector<Value>& results);
  int of(const Node* n, uint32_t index) const;

 private:
  std::unordered_map<const Node*, std::vector<int>> uses_;
};

// Pooling node `pool`'s values lowered through the chain of increasing ops that produced its
// argument 0 (`ctx` is the pooling's own context), where nothing else reads the chain's values:
// they are then never computed at full size. Empty where the pooling has no pool_through
// lowering or no such chain precedes it.
std::vector<lowering::Val> LowerPoolThroughChain(const Node* pool, lowering::LowerCtx& ctx,
                                                 const LoweredValues& memo, const ValueUses& uses);

}  // namespace torch_pjrt::graph
