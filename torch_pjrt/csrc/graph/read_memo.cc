#include "graph/read_memo.h"

#include <algorithm>
#include <deque>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "graph/device_graph.h"
#include "graph/index_checks.h"
#include "graph/metrics.h"
#include "graph/trace.h"

namespace torch_pjrt::graph {

namespace {

// Only small reads of small computations are remembered: the walk is host work on every such
// read, and what is remembered stays allocated on the device.
constexpr size_t kMaxReadBytes = 1024;
constexpr size_t kMaxConeNodes = 256;
constexpr size_t kMaxEntries = 64;
// A first read computed ahead (WorthComputingAhead) has at most this many ops making at most this
// many elements in all: it may run twice (ahead, and again in the step's graph), and each new
// computation is a program to compile, so only a few ops over buffers (a mask's all()) are.
// LBFGS reads `flat_grad.abs().max()` with the whole forward and backward below it: computed
// ahead, its test took 400 s instead of seconds.
constexpr int64_t kMaxAheadOps = 8;
constexpr int64_t kMaxAheadElements = 1 << 16;

// What a pending value computes from: its program (the root's structural hash), the value
// scalars it reads and, by identity, the buffers it reads, in walk order.
struct ReadKey {
  uint64_t hash = 0;
  std::string scalars;
  std::vector<const runtime::Buffer*> buffers;
};

// What the walk of a read's computation found besides its key.
struct Cone {
  std::unordered_map<const Node*, uint64_t> hashes;  // every node's cone hash
  int64_t ops = 0;                                   // its op nodes
  int64_t elements = 0;                              // made by its ops
  std::vector<std::weak_ptr<runtime::Buffer>> inputs;  // the buffers it reads
};

struct Entry {
  ReadKey key;
  std::vector<std::weak_ptr<runtime::Buffer>> inputs;  // a dead input can never match again
  std::shared_ptr<runtime::Buffer> result;
};

std::deque<Entry>& Entries() {
  static auto* entries = new std::deque<Entry>();
  return *entries;
}

bool SameKey(const ReadKey& a, const ReadKey& b) {
  return a.hash == b.hash && a.scalars == b.scalars && a.buffers == b.buffers;
}

// The hash of one node of a cone given its inputs' cone hashes. Op nodes hash as MakeOpNode
// does; leaves by their order of discovery (their identity and values are in the key), not by
// their position in the trace, which differs between a step that was cut at the read and one
// that was not.
uint64_t ConeHash(const Node* n, const std::unordered_map<const Node*, uint64_t>& done, uint64_t leaf) {
  if (n->kind == NodeKind::kParam) return HashType(HashMix(0x7061ull, leaf), n->out0);
  if (n->kind == NodeKind::kSlot) return HashMix(HashMix(0x736cull, static_cast<uint64_t>(n->out0.dtype)), leaf);
  return HashOpNode(*n, [&](const Node* in) { return done.at(in); });
}

// The key of `s`'s pending value, or nothing when it is not worth remembering or not a pure
// function of its inputs: a trace holding collectives (their results depend on other processes)
// is never remembered. Random ops read their seed and offset as value scalars, which differ on
// every call, so they never match.
std::optional<ReadKey> KeyOf(const LazyStorage* s, Cone* cone) {
  const DeviceTrace& trace = Trace(s->device());
  if (s->nbytes() > kMaxReadBytes || !trace.replica_devices.empty()) return std::nullopt;
  ReadKey key;
  std::unordered_map<const Node*, uint64_t>& done = cone->hashes;
  uint64_t leaves = 0;
  bool too_large = false;  // then every node counts as done and the walk ends
  // Inputs first, in order: the leaves' order of discovery is the same for the same computation.
  VisitInputsFirst(s->pending().node.get(), [&](const Node* n) { return too_large || done.count(n) > 0; },
                   [&](const Node* n) {
    if (n->kind == NodeKind::kParam) {
      key.buffers.push_back(n->buffer.get());
      cone->inputs.push_back(n->buffer);
    } else if (n->kind == NodeKind::kSlot) {
      size_t item = ItemSize(n->out0.dtype);
      key.scalars += trace.slot_bytes[static_cast<size_t>(n->out0.dtype)].substr(item * n->index, item);
    }
    if (n->kind == NodeKind::kOp) {
      ++cone->ops;
      for (size_t i = 0; i < n->num_outputs(); ++i) cone->elements += NumElements(n->output(i).dims);
    }
    done[n] = ConeHash(n, done, n->kind == NodeKind::kOp ? 0 : leaves++);
    too_large = done.size() > kMaxConeNodes;
  });
  if (too_large) return std::nullopt;
  key.hash = HashMix(done.at(s->pending().node.get()), s->pending().index);
  return key;
}

const Entry* Find(const ReadKey& key) {
  for (const Entry& e : Entries()) {
    if (!SameKey(e.key, key)) continue;
    bool alive = true;
    for (size_t i = 0; i < e.inputs.size() && alive; ++i) alive = e.inputs[i].lock().get() == key.buffers[i];
    if (alive) return &e;
  }
  return nullptr;
}

void Remember(ReadKey key, std::vector<std::weak_ptr<runtime::Buffer>> inputs, std::shared_ptr<runtime::Buffer> result) {
  std::deque<Entry>& entries = Entries();
  if (entries.size() >= kMaxEntries) entries.pop_front();
  entries.push_back({std::move(key), std::move(inputs), std::move(result)});
}

bool CheapToComputeAhead(const Cone& cone) {
  return cone.ops <= kMaxAheadOps && cone.elements <= kMaxAheadElements;
}

// Whether a first read is computed ahead, alone, leaving the trace uncut (SyncValue), rather than
// syncing everything: for a scalar read (`.item()`, `bool()`: a value for the host's control flow,
// like the mask's all()) of a cheap computation, in the middle of a step: other values are
// pending outside its computation, and none of the buffers it reads has been overwritten in this
// trace yet. A loss read after the optimizer's updates, or a copy of results (`.cpu()`), syncs
// everything in one execution, as before.
bool WorthComputingAhead(const LazyStorage* s, SyncCause cause, const ReadKey& key, const Cone& cone) {
  if (cause != SyncCause::kItem || !CheapToComputeAhead(cone)) return false;
  const DeviceTrace& trace = Trace(s->device());
  bool others_pending = false;
  for (const LazyStorage* d : trace.dirty) {
    if (d == nullptr || !d->has_pending() || cone.hashes.count(d->pending().node.get()) > 0) continue;
    others_pending = true;
    bool overwrote_a_read = d->param_epoch == trace.epoch && d->param_node != nullptr &&
                            std::find(key.buffers.begin(), key.buffers.end(), d->param_node->buffer.get()) !=
                                key.buffers.end();
    if (overwrote_a_read) return false;
  }
  return others_pending;
}

// Whether a read answered without a cut is guarded rather than refused: a scalar read (the host's
// control flow: BERT's `mask.all()`) during a device-graph capture. A replay computes the value
// again and checks it against the captured one (AddReadGuard), as torch.compile guards what it
// traced on. Other reads (`.cpu()` of results, a logged loss) would differ on every replay: the
// capture refuses them, naming their line.
bool GuardedInCapture(const LazyStorage* s, SyncCause cause) {
  return cause == SyncCause::kItem && CapturingDeviceGraph(s->device());
}

std::string GuardMessage(const std::string& where) {
  return "pjrt: a value the captured graph read to the host" + (where.empty() ? std::string() : " (at " + where + ")") +
         " is different in this replay, which repeated what was traced after the captured value: the tensors "
         "it wrote hold wrong values, and reading them raises this error. Capture the graph again for the new "
         "value, or read the value outside the captured region.";
}

// After `s`'s pending value `computed` was answered without cutting the trace (remembered or
// computed ahead): guards it, or counts it for the capture's refusal.
void AnsweredWithoutCut(LazyStorage* s, const Value& computed, bool guarded, std::string where) {
  if (guarded) {
    AddReadGuard(s->device(), computed, BufferValue(s->buffer()), GuardMessage(where));
    return;
  }
  DeviceTrace& trace = Trace(s->device());
  if (trace.uncut_reads++ == 0) trace.first_uncut_read = std::move(where);
}

// Whether a check of this trace (an index or value check) guards a node of the read's computation.
// Such a read syncs: the check runs now and a failure raises its own error at this read. Answered
// from memory, the read raised the remembered error of an earlier, identical failure and left this
// check pending, to raise at a later, unrelated sync.
bool ReadsCheckedValue(const DeviceTrace& trace, const Cone& cone) {
  for (const IndexCheck& c : trace.checks) {
    if (cone.hashes.count(c.consumer.node.get()) > 0) return true;
  }
  return false;
}

}  // namespace

void ForgetRememberedReads() {
  GraphLock lock;
  Entries().clear();
}

void SyncForRead(LazyStorage* s, SyncCause cause, std::string where) {
  GraphLock lock;
  Cone cone;
  std::optional<ReadKey> key = KeyOf(s, &cone);
  if (key && ReadsCheckedValue(Trace(s->device()), cone)) key.reset();
  const bool guarded = key && GuardedInCapture(s, cause);
  const Value computed = s->pending();
  if (key) {
    if (const Entry* hit = Find(*key)) {
      s->SetBuffer(hit->result);  // the trace no longer writes it (CollectTargets skips it)
      Metrics::Increment(Counter::kRememberedReads);
      AnsweredWithoutCut(s, computed, guarded, std::move(where));
      return;
    }
  }
  if (key && (guarded ? CheapToComputeAhead(cone) : WorthComputingAhead(s, cause, *key, cone))) {
    if (SyncValue(s, cause)) AnsweredWithoutCut(s, computed, guarded, std::move(where));
  } else {
    SyncDevice(s->device(), cause);
  }
  // A buffer that holds an error (a failed index check) is not remembered: the next read runs
  // again and raises again.
  if (key && s->has_buffer() && !s->buffer()->poison()) Remember(std::move(*key), std::move(cone.inputs), s->buffer());
}

}  // namespace torch_pjrt::graph
