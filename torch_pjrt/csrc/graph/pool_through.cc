#include "graph/pool_through.h"

#include <unordered_set>

#include "graph/metrics.h"

namespace torch_pjrt::graph {

namespace {

using lowering::Emitter;
using lowering::Increasing;
using lowering::LowerCtx;
using lowering::OpLowering;
using lowering::Val;

// Longest chain looked through (a batch norm and an activation are two).
constexpr size_t kMaxChain = 4;

struct Link {
  const Node* node;
  Val when;  // its runtime condition, invalid where none
};

std::vector<Val> InputsOf(const Node* n, const LoweredValues& memo) {
  std::vector<Val> inputs;
  for (const Input& in : n->inputs) inputs.push_back(memo.at(in.node).at(in.index));
  return inputs;
}

std::vector<TensorType> OutputsOf(const Node* n) {
  std::vector<TensorType> outs;
  for (size_t i = 0; i < n->num_outputs(); ++i) outs.push_back(n->output(i));
  return outs;
}

// The node input behind n's argument 0 when that is a tensor no other argument reads (so that
// lowering n again on another value replaces exactly it); nullptr otherwise.
const Input* SoleArgument0(const Node* n) {
  if (n->args.empty() || n->args[0].kind != ArgKind::kTensor) return nullptr;
  for (size_t i = 1; i < n->args.size(); ++i) {
    const Arg& a = n->args[i];
    if (a.kind == ArgKind::kTensorList || (a.kind == ArgKind::kTensor && a.payload == n->args[0].payload)) {
      return nullptr;
    }
  }
  return &n->inputs[n->args[0].payload];
}

// Whether node `m`, read at output `index`, is increasing in its argument 0 for its arguments;
// its condition goes to `when`.
bool IsIncreasing(Emitter& e, const Node* m, uint32_t index, const LoweredValues& memo, Val* when) {
  if (m->kind != NodeKind::kOp || index != 0) return false;
  const OpLowering& entry = lowering::Table()[m->op];
  const Input* arg0 = SoleArgument0(m);
  if (!entry.increasing || !arg0 || !(arg0->node->output(arg0->index).dims == m->out0.dims)) return false;
  std::vector<Val> inputs = InputsOf(m, memo);
  std::vector<TensorType> outs = OutputsOf(m);
  LowerCtx ctx(e, m->args.data(), m->args.size(), m->pool.data(), inputs.data(), outs.data(), outs.size(), &entry);
  Increasing inc = entry.increasing(ctx);
  *when = inc.when;
  return inc.applies;
}

// Lowers node `m` again with `v` (of another shape) as its argument 0; its result 0.
Val LowerOn(Emitter& e, const Node* m, const Val& v, const LoweredValues& memo) {
  const OpLowering& entry = lowering::Table()[m->op];
  std::vector<Val> inputs = InputsOf(m, memo);
  inputs[m->args[0].payload] = v;
  std::vector<TensorType> outs = OutputsOf(m);
  outs[0].dims = v.dims();
  LowerCtx ctx(e, m->args.data(), m->args.size(), m->pool.data(), inputs.data(), outs.data(), outs.size(), &entry);
  return e.Convert(entry.fn(ctx).at(0), outs[0].dtype);
}

}  // namespace

ValueUses::ValueUses(const std::vector<Value>& results) {
  std::unordered_set<const Node*> visited;
  auto count = [this](const Node* n, uint32_t index) {
    std::vector<int>& u = uses_[n];
    if (u.empty()) u.resize(n->num_outputs());
    ++u.at(index);
  };
  for (const Value& v : results) {
    count(v.node.get(), v.index);
    VisitInputsFirst(
        v.node.get(), [&](const Node* n) { return visited.count(n) > 0; },
        [&](const Node* n) {
          visited.insert(n);
          for (const Input& in : n->inputs) count(in.node, in.index);
        });
  }
}

int ValueUses::of(const Node* n, uint32_t index) const {
  auto it = uses_.find(n);
  return it == uses_.end() ? 0 : it->second.at(index);
}

std::vector<Val> LowerPoolThroughChain(const Node* pool, LowerCtx& ctx, const LoweredValues& memo,
                                       const ValueUses& uses) {
  const OpLowering& entry = lowering::Table()[pool->op];
  const Input* in = SoleArgument0(pool);
  if (!entry.pool_through || !in) return {};
  std::vector<Link> chain;  // outermost first
  Val when;
  while (in && chain.size() < kMaxChain && uses.of(in->node, in->index) == 1 &&
         IsIncreasing(ctx.e, in->node, in->index, memo, &when)) {
    chain.push_back({in->node, when});
    in = SoleArgument0(in->node);
  }
  if (chain.empty()) return {};
  lowering::IncreasingChain through;
  for (const Link& link : chain) {
    if (!link.when.valid()) continue;
    through.when = through.when.valid() ? ctx.e.Binary("and", through.when, link.when) : link.when;
  }
  through.apply = [&chain, &memo](Emitter& e, const Val& v) {
    Val x = v;
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) x = LowerOn(e, it->node, x, memo);
    return x;
  };
  std::vector<Val> values = entry.pool_through(ctx, memo.at(in->node).at(in->index), through);
  if (!values.empty()) Metrics::Increment(Counter::kMaxPoolsMovedFirst);
  return values;
}

}  // namespace torch_pjrt::graph
