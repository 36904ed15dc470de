// Bounds checks of index tensors (and [0, 1] checks of values) without a sync per op (design:
// "Index bounds"). An indexing op
// records its indices and bounds in the trace; the sync computes every check of the graph as one
// extra output; the next sync point reads it (by then the graph has run) and, if an index was out
// of range, poisons the buffers computed from that op and raises an IndexError naming the op and
// the Python line that traced it, like CUDA's device-side assert but recoverable.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/errors.h"
#include "graph/trace.h"

namespace torch_pjrt::graph {

// Records that `indices`, read by the op that produced `consumer`, must lie in [lo, hi) or equal
// `exempt` where given. `what` describes the bound for the error message, an IndexError or (`kind`)
// the RuntimeError CPU's kernel raises. Caller holds the graph lock.
void AddIndexCheck(int device, Value indices, Value consumer, int64_t lo, int64_t hi, std::string what,
                   std::optional<int64_t> exempt = std::nullopt, ErrorKind kind = ErrorKind::kIndex);
// Records that `values`, read by the op that produced `consumer`, must pass `rule` (one of the
// value rules: not kRange; `hi` is kCountAtMost's bound); else the next sync point raises
// RuntimeError(message). Caller holds the graph lock.
void AddValueCheck(int device, Value values, Value consumer, CheckRule rule, std::string message, int64_t hi = 0);
// Records that integer `values`, read by the op that produced `consumer`, must lie in [lo, hi);
// else the next sync point raises RuntimeError(message). Caller holds the graph lock.
void AddValueRangeCheck(int device, Value values, Value consumer, int64_t lo, int64_t hi, std::string message);

// Records that `computed` (a pending value the host read during a device-graph capture) must equal
// `captured` (the buffer that answered the read), bit for bit, whenever the graph runs; else the
// next sync point raises RuntimeError(message) and every result of that run is poisoned: a replay
// repeats what the host traced after reading the captured value. Caller holds the graph lock.
void AddReadGuard(int device, Value computed, Value captured, std::string message);

// The node computing every check of `trace`: s64[N, 2] rows (in range, an offending index).
Value PackIndexChecks(int device, const std::vector<IndexCheck>& checks);

// For each check, the positions in `outputs` whose value depends on the check's consumer.
std::vector<std::vector<int>> CheckDependents(const std::vector<IndexCheck>& checks,
                                              const std::vector<Value>& outputs);

// After a graph with checks was launched: its results (the last one packs the checks) and, per
// check, the message and the positions of the results to poison if it fails (CheckDependents).
void ExpectIndexChecks(int device, const std::vector<std::shared_ptr<runtime::Buffer>>& results,
                       std::vector<CheckError> errors, const std::vector<std::vector<int>>& dependent_results);

// Without waiting for earlier checks: a launch that read any buffer a pending check guards
// (`read`) makes its results (`written`) guarded by that check too, so a failure found later
// poisons them as well. Used where waiting would stall the host for nothing (torch.compile's
// replays, an optimizer step's updates); a read to the host resolves the checks that guard what it
// reads (ResolveIndexChecksGuarding).
// Caller holds the graph lock.
void PropagateIndexChecks(int device, const std::vector<std::shared_ptr<runtime::Buffer>>& read,
                          const std::vector<std::shared_ptr<runtime::Buffer>>& written);

// How many launches on `device` have checks not yet resolved. Caller holds the graph lock.
size_t PendingIndexCheckLaunches(int device);

// Waits for the checks of graphs launched on `device` (-1: every device), poisons what failed
// checks spoiled, and returns the first failure (null when all indices were in range). Caller
// holds the graph lock.
DeferredErrorPtr ResolveIndexChecks(int device);
// Drops, in launch order, the checks of launches on `device` that have finished with every check
// passed, without waiting for the others; stops at the first launch still running or with a
// failed check, which stays for ResolveIndexChecks or a read it guards to raise (so where a
// failure raises does not depend on timing). Caller holds the graph lock.
void SettleFinishedIndexChecks(int device);

// What a read of `read` (a buffer of `device`) settles: the checks of every launch up to the last
// one whose checks guard it (a value computed from an op they check), in launch order. Checks that
// cannot have spoiled the value read wait for the next launch (which settles every check first)
// or a read they guard: a training step's loss, computed by the forward's program, is read
// without waiting for the backward's program, whose checks guard only the gradients. Caller holds
// the graph lock.
DeferredErrorPtr ResolveIndexChecksGuarding(int device, const runtime::Buffer* read);

}  // namespace torch_pjrt::graph
