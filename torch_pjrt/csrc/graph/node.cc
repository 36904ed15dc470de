#include "graph/node.h"

#include <array>
#include <atomic>
#include <new>

#include "graph/trace.h"

namespace torch_pjrt::graph {

namespace {
std::atomic<int64_t> g_live_nodes{0};
// Per device (EndIdleEpoch asks whether anything but the trace still holds a node).
constexpr int kMaxCountedDevices = 256;
std::array<std::atomic<int64_t>, kMaxCountedDevices> g_live_nodes_on{};

void CountNode(int device, int64_t delta) {
  if (device >= 0 && device < kMaxCountedDevices) g_live_nodes_on[device] += delta;
}

// Recycled node memory. A trace makes a node or two per op (~550 bytes each) and a sync frees
// them all at once: more than glibc's per-thread cache holds, so each free went through the
// heap's consolidating path and each later allocation carved a block again (perf on the
// tracing benchmark: _int_free, malloc_consolidate and _int_malloc ~9% of the traced op).
// The list is only touched by a thread holding the graph lock, the same rule that keeps the
// plain reference counts safe; a node made or freed without it uses the heap directly.
// Bounded, so a huge trace's nodes go back to the heap.
constexpr size_t kMaxFreeNodes = 16384;

std::vector<void*>& FreeNodes() {
  static auto* free_nodes = new std::vector<void*>();
  return *free_nodes;
}

Node* NewNode(int device) {
  void* memory = nullptr;
  if (GraphLockHeld() && !FreeNodes().empty()) {
    memory = FreeNodes().back();
    FreeNodes().pop_back();
  } else {
    memory = ::operator new(sizeof(Node));
  }
  ++g_live_nodes;
  CountNode(device, 1);
  Node* n = new (memory) Node();
  n->device = device;
  return n;
}

void DeleteNode(Node* n) {
  CountNode(n->device, -1);
  n->~Node();
  --g_live_nodes;
  if (GraphLockHeld() && FreeNodes().size() < kMaxFreeNodes) {
    FreeNodes().push_back(n);
  } else {
    ::operator delete(n);
  }
}
}  // namespace

void Retain(Node* n) { ++n->refs; }

void Release(Node* n) {
  if (--n->refs != 0) return;
  // Iterative teardown: inputs whose count drops to zero join the worklist (inline for the
  // usual short chains, so releasing a node allocates nothing).
  SmallVec<Node*, 16> doomed{n};
  while (!doomed.empty()) {
    Node* d = doomed.back();
    doomed.pop_back();
    for (const Input& in : d->inputs) {
      if (--in.node->refs == 0) doomed.push_back(in.node);
    }
    DeleteNode(d);
  }
}

uint64_t HashType(uint64_t h, const TensorType& t) {
  h = HashMix(h, static_cast<uint64_t>(t.dtype));
  h = HashMix(h, t.dims.size());
  for (int64_t d : t.dims) h = HashMix(h, static_cast<uint64_t>(d));
  return h;
}

uint64_t HashArgs(uint64_t h, const ArgList& args, const ArgPool& pool) {
  for (const Arg& a : args) {
    h = HashMix(h, static_cast<uint64_t>(a.kind) | (static_cast<uint64_t>(a.start) << 8));
    h = HashMix(HashMix(h, a.len), static_cast<uint64_t>(a.payload));
  }
  for (int64_t p : pool) h = HashMix(h, static_cast<uint64_t>(p));
  return h;
}

NodeRef MakeOpNode(int op, int device, const std::vector<Value>& inputs, ArgList args, ArgPool pool,
                   std::vector<TensorType> outputs) {
  Node* n = NewNode(device);
  n->kind = NodeKind::kOp;
  n->op = op;
  for (const Value& v : inputs) {
    Retain(v.node.get());
    n->inputs.push_back(Input{v.node.get(), v.index});
  }
  n->args = std::move(args);
  n->pool = std::move(pool);
  n->out0 = std::move(outputs[0]);
  for (size_t i = 1; i < outputs.size(); ++i) n->more_outputs.push_back(std::move(outputs[i]));
  n->hash = HashOpNode(*n, [](const Node* in) { return in->hash; });
  return NodeRef(n);
}

NodeRef MakeParamNode(int device, std::shared_ptr<runtime::Buffer> buffer, int index) {
  Node* n = NewNode(device);
  n->kind = NodeKind::kParam;
  n->index = index;
  n->out0.dtype = buffer->type();
  n->out0.dims.assign(buffer->dims().begin(), buffer->dims().end());
  n->hash = HashType(HashMix(0x7061ull, static_cast<uint64_t>(index)), n->out0);
  n->buffer = std::move(buffer);
  return NodeRef(n);
}

NodeRef MakeSlotNode(int device, ElementType dtype, int index) {
  Node* n = NewNode(device);
  n->kind = NodeKind::kSlot;
  n->index = index;
  n->out0.dtype = dtype;
  n->hash = HashMix(HashMix(0x736cull, static_cast<uint64_t>(dtype)), static_cast<uint64_t>(index));
  return NodeRef(n);
}

int64_t LiveNodeCount() { return g_live_nodes.load(); }

int64_t LiveNodeCountOn(int device) {
  return device >= 0 && device < kMaxCountedDevices ? g_live_nodes_on[device].load() : 0;
}

}  // namespace torch_pjrt::graph
