// IR nodes of the lazy graph. A node is an op application (an index into the lowering table plus
// its arguments), a parameter (a device buffer read by the graph) or a scalar slot (a value scalar
// passed at run time). Each node's hash is computed when it is made and covers everything that
// shapes the compiled program, never tensor data, so a cache hit needs no lowering at all.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/small_vec.h"
#include "lowering/emitter.h"
#include "lowering/op_args.h"
#include "runtime/buffer.h"

namespace torch_pjrt::graph {

using lowering::Arg;
using lowering::ArgKind;
using lowering::ArgList;
using lowering::ArgPool;
using lowering::TensorType;

enum class NodeKind : uint8_t { kOp, kParam, kSlot };

struct Node;

// Manual reference counting: every access happens under the graph lock, and destruction must be
// iterative (a long chain of nodes would overflow the stack if destroyed recursively).
void Retain(Node* n);
void Release(Node* n);

class NodeRef {
 public:
  NodeRef() = default;
  explicit NodeRef(Node* n) : n_(n) {
    if (n_) Retain(n_);
  }
  NodeRef(const NodeRef& o) : n_(o.n_) {
    if (n_) Retain(n_);
  }
  NodeRef(NodeRef&& o) noexcept : n_(o.n_) { o.n_ = nullptr; }
  NodeRef& operator=(const NodeRef& o) {
    if (o.n_) Retain(o.n_);
    if (n_) Release(n_);
    n_ = o.n_;
    return *this;
  }
  NodeRef& operator=(NodeRef&& o) noexcept {
    if (this != &o) {
      if (n_) Release(n_);
      n_ = o.n_;
      o.n_ = nullptr;
    }
    return *this;
  }
  ~NodeRef() {
    if (n_) Release(n_);
  }
  Node* get() const { return n_; }
  Node* operator->() const { return n_; }
  explicit operator bool() const { return n_ != nullptr; }
  void reset() {
    if (n_) Release(n_);
    n_ = nullptr;
  }

 private:
  Node* n_ = nullptr;
};

// One output of a node.
struct Value {
  NodeRef node;
  uint32_t index = 0;
  bool valid() const { return static_cast<bool>(node); }
  const TensorType& type() const;
};

struct Input {
  Node* node;  // retained by the owning node
  uint32_t index;
};

struct Node {
  uint32_t refs = 0;
  NodeKind kind = NodeKind::kOp;
  int32_t op = -1;  // lowering table index, for kOp
  int32_t device = 0;
  uint64_t hash = 0;
  SmallVec<Input, 4> inputs;
  ArgList args;
  ArgPool pool;
  TensorType out0;
  std::vector<TensorType> more_outputs;  // outputs 1.. of multi-output ops
  // kParam: the buffer read and its position among the trace's parameters.
  std::shared_ptr<runtime::Buffer> buffer;
  // kParam: index into the trace's parameter list; kSlot: index within its dtype's slot group.
  int32_t index = -1;

  size_t num_outputs() const { return 1 + more_outputs.size(); }
  const TensorType& output(size_t i) const { return i == 0 ? out0 : more_outputs[i - 1]; }
};

inline const TensorType& Value::type() const { return node->output(index); }

// Hash building blocks.
inline uint64_t HashMix(uint64_t h, uint64_t v) {
  // 64-bit mix (a variant of boost::hash_combine with a strong finalizer).
  v *= 0x9E3779B97F4A7C15ull;
  v ^= v >> 32;
  h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  return h;
}
uint64_t HashType(uint64_t h, const TensorType& t);
// An op node's arguments and argument pool mixed into `h`.
uint64_t HashArgs(uint64_t h, const ArgList& args, const ArgPool& pool);
// The hash of op node `n`: its op, its inputs (`input_hash(node)` and output index), arguments and
// output types. MakeOpNode hashes inputs by their own hashes; the read memo hashes leaves by
// identity instead (graph/read_memo.cc). Output types: op, args and input types determine them
// in theory, but they come from torch's Meta kernels, which also read global state (the default
// dtype for Python-number promotion), and the lowering converts its result to them. Two nodes are
// the same only if they agree.
template <class InputHash>
uint64_t HashOpNode(const Node& n, InputHash&& input_hash) {
  uint64_t h = HashMix(0x6f70ull, static_cast<uint64_t>(n.op));
  for (const Input& in : n.inputs) h = HashMix(HashMix(h, input_hash(in.node)), in.index);
  h = HashArgs(h, n.args, n.pool);
  for (size_t i = 0; i < n.num_outputs(); ++i) h = HashType(h, n.output(i));
  return h;
}

// Calls `visit(n)` for every node that `root` reads, itself included, whose `done(n)` is false,
// each after its inputs (iteratively: graphs can be deep). `visit(n)` must make `done(n)` true.
template <class Done, class Visit>
void VisitInputsFirst(const Node* root, Done&& done, Visit&& visit) {
  std::vector<std::pair<const Node*, bool>> stack{{root, false}};
  while (!stack.empty()) {
    auto [n, inputs_done] = stack.back();
    stack.pop_back();
    if (done(n)) continue;
    if (inputs_done) {
      visit(n);
      continue;
    }
    stack.push_back({n, true});
    for (const Input& in : n->inputs) {
      if (!done(in.node)) stack.push_back({in.node, false});
    }
  }
}

// Creates an op node. `inputs` are retained; the hash covers op, args and inputs.
NodeRef MakeOpNode(int op, int device, const std::vector<Value>& inputs, ArgList args, ArgPool pool,
                   std::vector<TensorType> outputs);
NodeRef MakeParamNode(int device, std::shared_ptr<runtime::Buffer> buffer, int index);
NodeRef MakeSlotNode(int device, ElementType dtype, int index);

// Number of nodes currently alive (for memory-bound tests and metrics).
int64_t LiveNodeCount();
// Of those, the nodes of `device`.
int64_t LiveNodeCountOn(int device);

}  // namespace torch_pjrt::graph
