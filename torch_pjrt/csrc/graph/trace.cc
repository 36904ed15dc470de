#include "graph/trace.h"

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <stdexcept>

#include "graph/device_graph.h"
#include "graph/metrics.h"
#include "lowering/lowering.h"
#include "runtime/runtime.h"

namespace torch_pjrt::graph {

namespace {

std::vector<std::unique_ptr<DeviceTrace>>& Traces() {
  static auto* traces = new std::vector<std::unique_ptr<DeviceTrace>>();
  return *traces;
}

int64_t g_max_pending_nodes = [] {
  const char* env = std::getenv("TORCH_PJRT_MAX_PENDING_NODES");
  return env ? std::max<int64_t>(1, std::atoll(env)) : int64_t{20000};
}();
int64_t g_pipelined_launch_nodes = kPipelinedLaunchNodes;  // under the graph lock
bool g_backward_launch = true;  // under the graph lock (BackwardLaunchDue)

// Dims sorted by decreasing stride, when the view is dense and non-overlapping (a permutation of
// a contiguous layout). Empty when it is not.
bool DensePermutation(const Dims& sizes, const Dims& strides, Dims* perm) {
  std::vector<int64_t> order(sizes.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return strides[a] > strides[b]; });
  int64_t expected = 1;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    if (sizes[*it] == 1) continue;
    if (strides[*it] != expected) return false;
    expected *= sizes[*it];
  }
  perm->assign(order.begin(), order.end());
  return true;
}

ArgPool ViewPool(const TensorView& view, Arg* sizes, Arg* strides) {
  ArgPool pool;
  *sizes = Arg{ArgKind::kIntList, 0, static_cast<uint32_t>(view.sizes.size()), 0};
  for (int64_t d : view.sizes) pool.push_back(d);
  *strides = Arg{ArgKind::kIntList, static_cast<uint32_t>(pool.size()),
                 static_cast<uint32_t>(view.strides.size()), 0};
  for (int64_t d : view.strides) pool.push_back(d);
  return pool;
}

}  // namespace

std::recursive_mutex& GraphMutex() {
  static auto* m = new std::recursive_mutex();
  return *m;
}

namespace {
thread_local int t_lock_depth = 0;
thread_local std::vector<std::function<void()>>* t_deferred = nullptr;

void RunDeferred() {
  while (t_deferred != nullptr && !t_deferred->empty()) {
    std::vector<std::function<void()>> work = std::move(*t_deferred);
    t_deferred->clear();
    for (auto& fn : work) {
      try {
        fn();
      } catch (...) {
      }
    }
  }
}
}  // namespace

static BlockingHook g_blocking_hook = nullptr;

GraphLock::GraphLock() : lock_(GraphMutex(), std::try_to_lock) {
  if (!lock_.owns_lock()) {
    if (g_blocking_hook != nullptr) {
      g_blocking_hook([this] { lock_.lock(); });
    } else {
      lock_.lock();
    }
  }
  ++t_lock_depth;
}

void SetBlockingHook(BlockingHook hook) { g_blocking_hook = hook; }

GraphLock::~GraphLock() {
  lock_.unlock();
  if (--t_lock_depth == 0) RunDeferred();
}

bool GraphLockHeld() { return t_lock_depth > 0; }

void RunOutsideGraphLock(std::function<void()> fn) {
  if (t_lock_depth == 0) {
    try {
      fn();
    } catch (...) {
    }
    return;
  }
  if (t_deferred == nullptr) t_deferred = new std::vector<std::function<void()>>();
  t_deferred->push_back(std::move(fn));
}

DeviceTrace& Trace(int device) {
  auto& traces = Traces();
  if (device < 0) throw std::out_of_range("pjrt: negative device index");
  while (static_cast<int>(traces.size()) <= device) traces.push_back(std::make_unique<DeviceTrace>());
  return *traces[device];
}

int NumTracedDevices() { return static_cast<int>(Traces().size()); }

TensorType StorageArrayType(const TensorType& t) {
  if (t.dims.size() <= 1) return t;
  return TensorType{t.dtype, {NumElements(t.dims)}};
}

int InternalOp(const char* name) {
  int op = lowering::FindLowering(name);
  if (op < 0) throw std::logic_error(std::string("internal op missing from the lowering table: ") + name);
  return op;
}

namespace {

thread_local bool in_optimizer_step = false;

// A device buffer of zeros of type `t` (one host-to-device copy).
std::shared_ptr<runtime::Buffer> ZeroBuffer(int device, const TensorType& t) {
  size_t bytes = static_cast<size_t>(NumElements(t.dims)) * ItemSize(t.dtype);
  std::unique_ptr<char[]> zeros(new char[bytes]());
  std::vector<int64_t> dims(t.dims.begin(), t.dims.end());
  return runtime::Buffer::FromHost(runtime::GetClient(), device, t.dtype, dims, zeros.get());
}

// Whether `v` is all zeros by construction: zero_'s result or a never-written storage's zeros.
bool IsZerosValue(const Value& v) {
  static const int zero = lowering::FindLowering("zero");
  static const int zeros = InternalOp("pjrt::zeros");
  return v.node->kind == NodeKind::kOp && (v.node->op == zero || v.node->op == zeros);
}

// Under SetZeroReadsAsBuffers: the zeros `s` holds since zero_ (zeros_like's second half) become a
// device buffer of the type its value has, so the read is a graph parameter as in later steps.
// (zero_'s own read of the never-written storage stays a zeros node: its result ignores it.)
void MaterializeZeros(LazyStorage* s) {
  if (!s->has_pending() || !IsZerosValue(s->pending())) return;
  s->SetBuffer(ZeroBuffer(s->device(), StorageArrayType(s->pending().type())));
  ForgetDirty(s);  // no longer written in this trace: its next write orders its output as in step 2
}

// A never-written storage's zeros: as many elements of `dtype` as fit.
TensorType NeverWrittenType(const LazyStorage* s, ElementType dtype) {
  size_t item = ItemSize(dtype);
  TensorType t;
  if (item != 0 && s->nbytes() % item == 0) {
    t.dtype = dtype;
    t.dims = {static_cast<int64_t>(s->nbytes() / item)};
  } else {
    t.dtype = ElementType::kU8;
    t.dims = {static_cast<int64_t>(s->nbytes())};
  }
  return t;
}

}  // namespace

void GiveEmptyBuffer(LazyStorage* s, ElementType dtype) {
  if (s->nbytes() == 0 && !s->has_buffer() && !s->has_pending()) s->SetBuffer(ZeroBuffer(s->device(), NeverWrittenType(s, dtype)));
}

Value StorageValue(LazyStorage* s, ElementType dtype) {
  if (s->error()) throw DeviceError(*s->error());
  if (s->has_pending()) return s->pending();
  EndIdleEpoch(s->device());  // before reusing a parameter a dropped op read
  DeviceTrace& trace = Trace(s->device());
  if (s->has_buffer()) {
    if (s->buffer()->poison()) throw DeviceError(*s->buffer()->poison());
    if (s->param_epoch == trace.epoch && s->param_node != nullptr &&
        s->param_node->buffer == s->buffer()) {
      return Value{NodeRef(s->param_node), 0};
    }
    NodeRef param = MakeParamNode(s->device(), s->buffer(), static_cast<int>(trace.params.size()));
    trace.params.push_back(param);
    s->param_node = param.get();
    s->param_epoch = trace.epoch;
    return Value{std::move(param), 0};
  }
  // Never written: zeros.
  TensorType t = NeverWrittenType(s, dtype);
  if (MadeBeforeCapture(s)) {  // a device graph's replay must read what it holds by then
    s->SetBuffer(ZeroBuffer(s->device(), t));
    return StorageValue(s, dtype);
  }
  static const int zeros = InternalOp("pjrt::zeros");
  return MakeOp(zeros, s->device(), {}, {}, {}, {t})[0];
}

bool PendingFillScalar(const LazyStorage* s, ElementType* type, std::string* bytes) {
  static const int fill = lowering::FindLowering("fill.Scalar");
  if (!s->has_pending()) return false;
  const Node* n = s->pending().node.get();
  if (n->kind != NodeKind::kOp || n->op != fill || n->inputs.size() != 2) return false;
  const Node* slot = n->inputs[1].node;
  if (slot->kind != NodeKind::kSlot) return false;
  *type = slot->out0.dtype;
  size_t item = ItemSize(*type);
  *bytes = Trace(s->device()).slot_bytes[static_cast<size_t>(*type)].substr(item * slot->index, item);
  return bytes->size() == item;
}

void SetInOptimizerStep(bool on) { in_optimizer_step = on; }

Value ViewOfValue(Value src, const TensorView& view) {
  const TensorType& t = src.type();
  if (t.dtype == view.dtype && t.dims == view.sizes && view.offset == 0 &&
      IsContiguous(view.sizes, view.strides)) {
    return src;
  }
  static const int view_read = InternalOp("pjrt::view_read");
  ArgList args;
  Arg sizes, strides;
  ArgPool pool = ViewPool(view, &sizes, &strides);
  args.push_back(Arg::Tensor(0));
  args.push_back(sizes);
  args.push_back(strides);
  args.push_back(Arg::Int(view.offset));
  args.push_back(Arg::Type(view.dtype));
  int device = src.node->device;
  return MakeOp(view_read, device, {src}, std::move(args), std::move(pool),
                {TensorType{view.dtype, view.sizes}})[0];
}

Value ReadTensor(LazyStorage* s, const TensorView& view) {
  if (in_optimizer_step) MaterializeZeros(s);
  return ViewOfValue(StorageValue(s, view.dtype), view);
}

void WriteTensor(LazyStorage* s, const TensorView& view, Value v) {
  size_t bytes = static_cast<size_t>(NumElements(view.sizes)) * ItemSize(view.dtype);
  bool full = view.offset == 0 && bytes == s->nbytes();
  Dims perm;
  if (full && IsContiguous(view.sizes, view.strides)) {
    s->SetPending(std::move(v));
    return;
  }
  if (full && DensePermutation(view.sizes, view.strides, &perm)) {
    // Lay the logical value out in memory order so that the storage value stays row-major.
    static const int permute = InternalOp("pjrt::permute");
    TensorType t{view.dtype, {}};
    for (int64_t p : perm) t.dims.push_back(view.sizes[p]);
    ArgPool pool(perm.begin(), perm.end());
    ArgList args{Arg::Tensor(0), Arg{ArgKind::kIntList, 0, static_cast<uint32_t>(perm.size()), 0}};
    s->SetPending(MakeOp(permute, s->device(), {v}, std::move(args), std::move(pool), {t})[0]);
    return;
  }
  static const int view_write = InternalOp("pjrt::view_write");
  Value base = StorageValue(s, view.dtype);
  ArgList args;
  Arg sizes, strides;
  ArgPool pool = ViewPool(view, &sizes, &strides);
  args.push_back(Arg::Tensor(0));
  args.push_back(Arg::Tensor(1));
  args.push_back(sizes);
  args.push_back(strides);
  args.push_back(Arg::Int(view.offset));
  TensorType t = base.type();
  s->SetPending(MakeOp(view_write, s->device(), {base, v}, std::move(args), std::move(pool), {t})[0]);
}

Value BufferValue(std::shared_ptr<runtime::Buffer> buffer) {
  int device = buffer->device();
  EndIdleEpoch(device);
  DeviceTrace& trace = Trace(device);
  NodeRef param = MakeParamNode(device, std::move(buffer), static_cast<int>(trace.params.size()));
  trace.params.push_back(param);
  return Value{std::move(param), 0};
}

Value MakeSlot(int device, ElementType dtype, const void* bytes) {
  EndIdleEpoch(device);
  DeviceTrace& trace = Trace(device);
  size_t k = static_cast<size_t>(dtype);
  int index = trace.slot_count[k]++;
  trace.slot_bytes[k].append(static_cast<const char*>(bytes), ItemSize(dtype));
  return Value{MakeSlotNode(device, dtype, index), 0};
}

std::vector<Value> MakeOp(int op, int device, const std::vector<Value>& inputs, ArgList args,
                          ArgPool pool, std::vector<TensorType> outputs) {
  EndIdleEpoch(device);
  NodeRef node = MakeOpNode(op, device, inputs, std::move(args), std::move(pool), std::move(outputs));
  DeviceTrace& trace = Trace(device);
  ++trace.op_nodes;
  if (lowering::Table()[op].host_kernel) ++trace.host_kernel_nodes;
  Metrics::Increment(Counter::kNodesTraced);
  std::vector<Value> out;
  size_t n = node->num_outputs();
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) out.push_back(Value{node, static_cast<uint32_t>(i)});
  return out;
}

void ResetTrace(DeviceTrace& trace) {
  for (LazyStorage* s : trace.dirty) {
    if (s) s->dirty_epoch = 0;
  }
  trace.dirty.clear();
  trace.checks.clear();
  trace.draws.clear();
  trace.replica_devices.clear();
  trace.params.clear();
  for (auto& b : trace.slot_bytes) b.clear();
  trace.slot_count.fill(0);
  trace.op_nodes = 0;  // pipelined_nodes spans epochs: launches set it (SyncDevice)
  trace.records_autograd = false;
  trace.records_forward = false;
  trace.forward_elements = 0;
  trace.host_kernel_nodes = 0;
  trace.uncut_reads = 0;
  trace.first_uncut_read.clear();
  ++trace.epoch;
}

// Ops traced and then dropped (their tensors died) before any sync still hold slot and parameter
// positions, and a node's hash is its position: the next graph of the epoch would be the same
// computation as in a clean epoch under another key, and compile again. So an epoch whose nodes
// are all dead ends here, before its next node: when the only live nodes of the device are the
// trace's parameters, held by nothing but its list, no pending value, index check, collective or
// op being traced can refer to its positions. Not while a capture or a device graph holds the
// epoch (both compare it at their end).
void EndIdleEpoch(int device) {
  DeviceTrace& trace = Trace(device);
  if (LiveNodeCountOn(device) != static_cast<int64_t>(trace.params.size())) return;  // the usual exit
  bool clean = trace.params.empty() && trace.op_nodes == 0 &&
               std::all_of(trace.slot_count.begin(), trace.slot_count.end(), [](int32_t n) { return n == 0; });
  if (clean) return;
  if (trace.capture_epoch == trace.epoch || CapturingDeviceGraph(device)) return;
  for (const NodeRef& p : trace.params) {
    if (p->refs != 1) return;
  }
  ResetTrace(trace);
}

void NoteRandomDraw(int device, const Value& seed, const Value& offset) {
  Trace(device).draws.push_back(RandomDraw{seed.node->index, offset.node->index});
}

void MarkDirty(LazyStorage* s) {
  DeviceTrace& trace = Trace(s->device());
  if (s->dirty_epoch == trace.epoch) return;
  s->dirty_epoch = trace.epoch;
  s->dirty_index = trace.dirty.size();
  trace.dirty.push_back(s);
}

void ForgetDirty(LazyStorage* s) {
  if (s->device() >= NumTracedDevices()) return;
  DeviceTrace& trace = Trace(s->device());
  if (s->dirty_epoch == trace.epoch && s->dirty_index < trace.dirty.size() &&
      trace.dirty[s->dirty_index] == s) {
    trace.dirty[s->dirty_index] = nullptr;
    s->dirty_epoch = 0;  // a later write in this epoch adds it again
  }
}

int64_t MaxPendingNodes() { return g_max_pending_nodes; }
void SetMaxPendingNodes(int64_t n) { g_max_pending_nodes = std::max<int64_t>(1, n); }
bool TraceTooLarge(int device) {
  // A device graph's capture holds its whole region (graph/device_graph.h).
  return Trace(device).op_nodes > g_max_pending_nodes && !CapturingDeviceGraph(device);
}

int64_t PipelinedLaunchNodes() { return g_pipelined_launch_nodes; }
void SetPipelinedLaunchNodes(int64_t n) { g_pipelined_launch_nodes = std::max<int64_t>(0, n); }

void NoteAutogradOp(int device, int op, bool in_backward, int64_t elements) {
  static const int fill = lowering::FindLowering("fill.Scalar");
  DeviceTrace& trace = Trace(device);
  trace.records_autograd = true;
  if (in_backward) return;
  if (op != fill) trace.records_forward = true;
  trace.forward_elements += elements;
}

bool PipelinedLaunchDue(int device) {
  const DeviceTrace& trace = Trace(device);
  int64_t piece = std::max(g_pipelined_launch_nodes, trace.pipelined_nodes);  // as long as those before
  return g_pipelined_launch_nodes > 0 && trace.op_nodes >= piece &&
         trace.pipelined_nodes + trace.op_nodes <= kPipelinedTraceNodes && !trace.records_autograd &&
         !in_optimizer_step &&
         // A torch.compile capture and a device-graph capture each hold their whole region.
         trace.capture_epoch != trace.epoch && !CapturingDeviceGraph(device);
}

bool BackwardLaunchDue(int device) {
  const DeviceTrace& trace = Trace(device);
  return trace.records_forward && trace.forward_elements <= kBackwardLaunchMaxElements && g_backward_launch &&
         !in_optimizer_step && trace.capture_epoch != trace.epoch && !CapturingDeviceGraph(device);
}

bool BackwardLaunch() { return g_backward_launch; }
void SetBackwardLaunch(bool on) { g_backward_launch = on; }

}  // namespace torch_pjrt::graph
