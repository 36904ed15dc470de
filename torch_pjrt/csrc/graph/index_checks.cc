#include "graph/index_checks.h"

#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <unordered_set>

namespace torch_pjrt::graph {

namespace {

struct LaunchedChecks {
  int device;
  std::shared_ptr<runtime::Buffer> results;  // s64[N, 2]
  std::vector<CheckError> errors;
  // Per check, the buffers its failure spoils. Weak: a pending check must not keep a step's
  // buffers alive, or the next step could not donate them (the optimizer's parameters and state,
  // guarded by the backward's checks, were copied instead of updated in place while a check
  // stayed pending: compiled GPT-2 steps 1.25x as long).
  std::vector<std::vector<std::weak_ptr<runtime::Buffer>>> dependents;
};

std::vector<LaunchedChecks>& Launched() {
  static auto* launched = new std::vector<LaunchedChecks>();
  return *launched;
}

// Which checks (a bitset over check positions) each node depends on, memoized over the DAG.
class CheckReach {
 public:
  explicit CheckReach(const std::vector<IndexCheck>& checks) : words_((checks.size() + 63) / 64) {
    for (size_t k = 0; k < checks.size(); ++k) {
      Bits& b = Of(checks[k].consumer.node.get());
      b[k / 64] |= uint64_t{1} << (k % 64);
    }
  }

  // Bits of `root`, computing those of its inputs first (iteratively: graphs can be deep).
  const std::vector<uint64_t>& Reach(const Node* root) {
    VisitInputsFirst(root, [&](const Node* n) { return done_.count(n) > 0; }, [&](const Node* n) {
      Bits& mine = Of(n);
      for (const Input& in : n->inputs) {
        const Bits& theirs = bits_.at(in.node);
        for (size_t w = 0; w < words_; ++w) mine[w] |= theirs[w];
      }
      done_.emplace(n, true);
    });
    return bits_.at(root);
  }

 private:
  using Bits = std::vector<uint64_t>;
  Bits& Of(const Node* n) {
    auto it = bits_.find(n);
    if (it == bits_.end()) it = bits_.emplace(n, Bits(words_, 0)).first;
    return it->second;
  }
  size_t words_;
  std::unordered_map<const Node*, Bits> bits_;
  std::unordered_map<const Node*, bool> done_;
};

}  // namespace

void AddIndexCheck(int device, Value indices, Value consumer, int64_t lo, int64_t hi, std::string what,
                   std::optional<int64_t> exempt, ErrorKind kind) {
  Trace(device).checks.push_back(IndexCheck{std::move(indices), std::move(consumer), lo, hi, CheckRule::kRange,
                                            CheckError{kind, std::move(what), true}, exempt});
}

void AddValueCheck(int device, Value values, Value consumer, CheckRule rule, std::string message, int64_t hi) {
  Trace(device).checks.push_back(IndexCheck{std::move(values), std::move(consumer), 0, hi, rule,
                                            CheckError{ErrorKind::kRuntime, std::move(message), false}});
}

void AddValueRangeCheck(int device, Value values, Value consumer, int64_t lo, int64_t hi, std::string message) {
  Trace(device).checks.push_back(IndexCheck{std::move(values), std::move(consumer), lo, hi, CheckRule::kRange,
                                            CheckError{ErrorKind::kRuntime, std::move(message), false}});
}

void AddReadGuard(int device, Value computed, Value captured, std::string message) {
  static const int same_bits = InternalOp("pjrt::same_bits");
  ArgList args;
  args.push_back(Arg::Tensor(0));
  args.push_back(Arg::Tensor(1));
  Value same = MakeOp(same_bits, device, {computed, captured}, std::move(args), {}, {TensorType{ElementType::kS64, {}}})[0];
  AddValueRangeCheck(device, same, same, 1, 2, std::move(message));  // same_bits is 1
  Trace(device).checks.back().spoils_all = true;
}

Value PackIndexChecks(int device, const std::vector<IndexCheck>& checks) {
  static const int pack = InternalOp("pjrt::index_checks");
  std::vector<Value> inputs;
  ArgList args;
  ArgPool bounds;
  for (const IndexCheck& c : checks) {
    args.push_back(Arg::Tensor(static_cast<int>(inputs.size())));
    inputs.push_back(c.indices);
    args.push_back(Arg::Tensor(static_cast<int>(inputs.size())));
    inputs.push_back(c.consumer);
    bounds.push_back(c.lo);
    bounds.push_back(c.hi);
    bounds.push_back(static_cast<int64_t>(c.rule));
    bounds.push_back(c.exempt.has_value() ? 1 : 0);
    bounds.push_back(c.exempt.value_or(0));
  }
  args.push_back(Arg{ArgKind::kIntList, 0, static_cast<uint32_t>(bounds.size()), 0});
  TensorType t{ElementType::kS64, {static_cast<int64_t>(checks.size()), 2}};
  return MakeOp(pack, device, inputs, std::move(args), std::move(bounds), {t})[0];
}

std::vector<std::vector<int>> CheckDependents(const std::vector<IndexCheck>& checks,
                                              const std::vector<Value>& outputs) {
  std::vector<std::vector<int>> dependents(checks.size());
  CheckReach reach(checks);
  for (size_t o = 0; o < outputs.size(); ++o) {
    const std::vector<uint64_t>& bits = reach.Reach(outputs[o].node.get());
    for (size_t k = 0; k < checks.size(); ++k) {
      if (checks[k].spoils_all || (bits[k / 64] >> (k % 64) & 1)) dependents[k].push_back(static_cast<int>(o));
    }
  }
  return dependents;
}

void ExpectIndexChecks(int device, const std::vector<std::shared_ptr<runtime::Buffer>>& results,
                       std::vector<CheckError> errors, const std::vector<std::vector<int>>& dependent_results) {
  std::vector<std::vector<std::weak_ptr<runtime::Buffer>>> dependents;
  for (const std::vector<int>& positions : dependent_results) {
    dependents.emplace_back();
    for (int o : positions) dependents.back().push_back(results[o]);
  }
  Launched().push_back(LaunchedChecks{device, results.back(), std::move(errors), std::move(dependents)});
}

void PropagateIndexChecks(int device, const std::vector<std::shared_ptr<runtime::Buffer>>& read,
                          const std::vector<std::shared_ptr<runtime::Buffer>>& written) {
  std::unordered_set<const runtime::Buffer*> inputs;
  for (const auto& b : read) inputs.insert(b.get());
  for (LaunchedChecks& launched : Launched()) {
    if (launched.device != device) continue;
    for (auto& guarded : launched.dependents) {
      // Buffers freed since need no poison: dropped, so that lists extended by every replay of a
      // loop do not grow with dead entries while the check stays pending.
      guarded.erase(std::remove_if(guarded.begin(), guarded.end(), [](const auto& b) { return b.expired(); }),
                    guarded.end());
      bool reads_guarded =
          std::any_of(guarded.begin(), guarded.end(), [&](const auto& b) { return inputs.count(b.lock().get()) > 0; });
      if (reads_guarded) guarded.insert(guarded.end(), written.begin(), written.end());
    }
  }
}

size_t PendingIndexCheckLaunches(int device) {
  size_t n = 0;
  for (const LaunchedChecks& launched : Launched()) n += launched.device == device;
  return n;
}

namespace {

// `launched`'s packed results, (in range?, an offending index) per check; waits for the graph.
// False when the execution failed: reading its outputs reports that error.
bool ReadRows(const LaunchedChecks& launched, std::vector<int64_t>* rows) {
  rows->assign(launched.errors.size() * 2, 0);
  try {
    launched.results->ToHost(rows->data(), rows->size() * sizeof(int64_t));
  } catch (const std::exception&) {
    return false;
  }
  return true;
}

// Waits for `done`'s results, poisons what its failed checks spoiled and returns its first failure.
DeferredErrorPtr Resolve(const LaunchedChecks& done) {
  DeferredErrorPtr first;
  std::vector<int64_t> rows;
  if (!ReadRows(done, &rows)) return nullptr;
  for (size_t k = 0; k < done.errors.size(); ++k) {
    if (rows[2 * k] != 0) continue;
    const CheckError& e = done.errors[k];
    auto error = e.names_index ? MakeDeferredError(e.kind, "index " + std::to_string(rows[2 * k + 1]) +
                                                               " is out of bounds for " + e.text)
                               : MakeDeferredError(e.kind, e.text);
    for (const auto& weak : done.dependents[k]) {
      auto buffer = weak.lock();  // a dead buffer has no reader left to tell
      if (buffer && !buffer->poison()) buffer->Poison(error);
    }
    if (!first) first = error;
  }
  return first;
}

bool Guards(const LaunchedChecks& launched, const runtime::Buffer* buffer) {
  for (const auto& guarded : launched.dependents) {
    for (const auto& b : guarded) {
      if (b.lock().get() == buffer) return true;
    }
  }
  return false;
}

// Resolves the first `count` launches with checks on `device` (-1: every device), in launch order.
DeferredErrorPtr ResolveFirst(int device, size_t count) {
  DeferredErrorPtr first;
  std::vector<LaunchedChecks>& launched = Launched();
  size_t seen = 0;
  for (auto it = launched.begin(); it != launched.end() && seen < count;) {
    if (device >= 0 && it->device != device) {
      ++it;
      continue;
    }
    ++seen;
    LaunchedChecks done = std::move(*it);
    it = launched.erase(it);
    DeferredErrorPtr error = Resolve(done);
    if (!first) first = error;
  }
  return first;
}

}  // namespace

DeferredErrorPtr ResolveIndexChecks(int device) { return ResolveFirst(device, SIZE_MAX); }

void SettleFinishedIndexChecks(int device) {
  std::vector<LaunchedChecks>& launched = Launched();
  for (auto it = launched.begin(); it != launched.end();) {
    if (it->device != device) {
      ++it;
      continue;
    }
    std::vector<int64_t> rows;
    // A failed execution is left to ResolveIndexChecks, like a failed check.
    if (!it->results->Ready() || !ReadRows(*it, &rows)) return;
    for (size_t k = 0; k < it->errors.size(); ++k) {
      if (rows[2 * k] == 0) return;
    }
    it = launched.erase(it);
  }
}

DeferredErrorPtr ResolveIndexChecksGuarding(int device, const runtime::Buffer* read) {
  size_t through = 0, position = 0;
  for (const LaunchedChecks& launched : Launched()) {
    if (launched.device != device) continue;
    ++position;
    if (Guards(launched, read)) through = position;
  }
  return through == 0 ? nullptr : ResolveFirst(device, through);
}

}  // namespace torch_pjrt::graph
