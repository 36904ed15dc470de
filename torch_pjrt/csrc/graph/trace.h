// The trace being recorded on each device since its last sync: the parameters it reads, the value
// scalars it takes, the storages it will write. Also the primitives the ATen layer builds IR with:
// reading a tensor view of a storage, writing one, making op nodes.
#pragma once

#include <array>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "graph/lazy_storage.h"

namespace torch_pjrt::graph {

// All graph state (nodes, storages, traces, caches) is guarded by one recursive lock. Recursive
// because storage destructors can run while we already hold it.
//
// Lock order (docs/design.md, "Concurrency"): the graph lock and the GIL can be wanted in either
// order: Python frees tensors (whose storages take the graph lock) holding the GIL, and torch
// takes the GIL when code under the graph lock copies or drops a Tensor that has a Python object.
// So a thread that finds the graph lock taken waits through the blocking hook, which releases
// the GIL while it waits (set by the Python module). Work that calls Python on purpose is queued
// with RunOutsideGraphLock and runs when this thread's outermost GraphLock is released.
std::recursive_mutex& GraphMutex();
class GraphLock {
 public:
  GraphLock();
  ~GraphLock();
  GraphLock(const GraphLock&) = delete;
  GraphLock& operator=(const GraphLock&) = delete;

 private:
  std::unique_lock<std::recursive_mutex> lock_;
};
// How a thread waits for a contended lock: `wait` blocks; the hook may release the GIL around it.
using BlockingHook = void (*)(const std::function<void()>& wait);
void SetBlockingHook(BlockingHook hook);
// Whether this thread holds the graph lock.
bool GraphLockHeld();
// Runs `fn` now if this thread holds no graph lock, else as soon as it releases the last one.
// Exceptions from `fn` are swallowed (it is for diagnostics).
void RunOutsideGraphLock(std::function<void()> fn);

constexpr size_t kNumElementTypes = static_cast<size_t>(ElementType::kNumTypes);

// What a failed check raises: an index check IndexError("index <i> is out of bounds for
// <text>"), a value check RuntimeError(<text>) as torch's CPU kernel words it.
struct CheckError {
  ErrorKind kind = ErrorKind::kIndex;
  // An index bound, "dimension 0 with size 5 in aten::index_select, traced at f.py:3 in g": the
  // error reads "index 7 is out of bounds for " and this. Otherwise the whole message.
  std::string text;
  bool names_index = true;
};

using lowering::CheckRule;

// A tensor read by an op of this trace whose values are checked when the graph runs (design:
// "Index bounds").
struct IndexCheck {
  Value indices;   // the checked values
  Value consumer;  // an output of the op that used them: what a failed check spoils
  int64_t lo = 0, hi = 0;
  CheckRule rule = CheckRule::kRange;
  CheckError error;
  std::optional<int64_t> exempt;  // counts as in range (nll_loss's ignore_index)
  // A failure spoils every result of the graph, not only the consumer's dependents: a read guard
  // (AddReadGuard), whose value steered the host's tracing of everything after it.
  bool spoils_all = false;
};

// A random op's (seed, offset) value scalars: positions in the trace's u64 slot group. A capture
// (graph/capture.h) rewrites them on every replay so each call draws fresh numbers.
struct RandomDraw {
  int seed_slot = 0;
  int offset_slot = 0;
};

struct DeviceTrace {
  uint64_t epoch = 1;
  uint64_t capture_epoch = 0;  // the epoch a capture (graph/capture.h) began in
  std::vector<IndexCheck> checks;
  std::vector<NodeRef> params;                        // program parameters, in first-read order
  std::array<std::string, kNumElementTypes> slot_bytes;  // packed value scalars, per dtype
  std::array<int32_t, kNumElementTypes> slot_count{};
  std::vector<RandomDraw> draws;
  // The job-wide devices of the process group whose collectives this trace holds (empty: none).
  // A graph is one program of one group's replicas, so a collective of another group first
  // launches the pending graph.
  Dims replica_devices;
  std::vector<LazyStorage*> dirty;  // storages written in this epoch (null once they die)
  int64_t op_nodes = 0;             // op nodes made in this epoch
  // Op nodes of the pipelined launches (PipelinedLaunchDue) since the last other launch: set by
  // each launch, kept across an epoch that ends without one (EndIdleEpoch).
  int64_t pipelined_nodes = 0;
  bool records_autograd = false;    // an op of this epoch was traced for autograd (NoteAutogradOp)
  // ... with grad mode on, outside a backward pass: a forward (fills aside: the gradient seed,
  // ones_like(loss), is traced before the backward pass starts, also after a forward launched).
  bool records_forward = false;
  int64_t forward_elements = 0;     // the elements of those ops' results, together
  int64_t host_kernel_nodes = 0;    // of those, ops that may run as host kernels (OpLowering::host_kernel)
  // Reads answered in this epoch without cutting the trace (remembered or computed ahead) and not
  // guarded (AddReadGuard): a capture refuses such a trace, whose replays would not read afresh.
  int64_t uncut_reads = 0;
  std::string first_uncut_read;  // where the first was read (file:line, inside a device-graph capture)
};

DeviceTrace& Trace(int device);
int NumTracedDevices();

// A strided view of a storage, in elements of `dtype`.
struct TensorView {
  ElementType dtype = ElementType::kInvalid;
  Dims sizes;
  Dims strides;
  int64_t offset = 0;
};

// The type of the array a storage holds for a value of type `t`: the same elements, 1-D
// (docs/design.md, "Flat storages").
TensorType StorageArrayType(const TensorType& t);

// The whole value of `s` (a parameter for a buffer, zeros if never written). `dtype` is used
// only for a never-written storage.
Value StorageValue(LazyStorage* s, ElementType dtype);
// Gives a never-written storage with no bytes (an empty tensor's) its empty device buffer: a
// captured call's input then needs no sync, where a pending zeros value would cost one per replay.
void GiveEmptyBuffer(LazyStorage* s, ElementType dtype);
// Set (per thread) while optimizer.step() runs. Reading a storage whose pending value is zeros
// (zero_'s result, as in zeros_like) then first makes it a device buffer of zeros, so that
// optimizer state created in the first step is a graph input there as in every later step, and
// the steps share one compiled graph; and the step's trace is not pipelined (PipelinedLaunchDue):
// its updates launch as one program when it ends.
void SetInOptimizerStep(bool on);
// When `s` holds the pending result of fill.Scalar with a value scalar (ones_like, full_like,
// torch.ones), that scalar's slot type and bytes: a caller that needs a buffer can upload the fill
// instead of executing the trace.
bool PendingFillScalar(const LazyStorage* s, ElementType* type, std::string* bytes);
// A strided view of `src`, an array whose row-major order is some storage's memory order.
Value ViewOfValue(Value src, const TensorView& view);
// The value of a tensor view of `s`.
Value ReadTensor(LazyStorage* s, const TensorView& view);
// Makes `v` (of the view's dtype and sizes) the new contents of the view's elements of `s`.
void WriteTensor(LazyStorage* s, const TensorView& view, Value v);

// A device buffer that belongs to no storage (a fresh host transfer), as a graph parameter.
Value BufferValue(std::shared_ptr<runtime::Buffer> buffer);
// A value scalar: a 0-d graph input whose value is packed into the trace, not the program.
Value MakeSlot(int device, ElementType dtype, const void* bytes);
// An op node; returns one Value per output.
std::vector<Value> MakeOp(int op, int device, const std::vector<Value>& inputs, ArgList args,
                          ArgPool pool, std::vector<TensorType> outputs);
// Lowering-table index of one of our internal "pjrt::" ops (looked up once).
int InternalOp(const char* name);

// Records that the u64 slots `seed` and `offset` (made by MakeSlot) seed a random op.
void NoteRandomDraw(int device, const Value& seed, const Value& offset);

void MarkDirty(LazyStorage* s);
void ForgetDirty(LazyStorage* s);

// Starts a new epoch of `trace`: clears its parameters, slots, checks, draws and dirty list (a
// sync does, after its launch).
void ResetTrace(DeviceTrace& trace);
// Starts a new epoch on `device` when nothing but the trace holds a node of the current one
// (docs/design.md, "Cache keys"). Called before each node the trace makes.
void EndIdleEpoch(int device);

// Largest number of op nodes a trace may hold before it is cut (synced) automatically.
int64_t MaxPendingNodes();
void SetMaxPendingNodes(int64_t n);
bool TraceTooLarge(int device);

// Pipelined launches (docs/design.md, "Pipelined inference"). A trace that records nothing for
// autograd (inference under no_grad or inference_mode) is launched in pieces without waiting, so
// that the device executes its start while the host traces the rest: on the 2-core CPU plugin,
// models whose execution leaves a core idle (small convolutions run serially) overlap it with the
// host's tracing. The first piece is kPipelinedLaunchNodes op nodes, each later one as long as
// those before it together (the first pieces start the device early; a long trace is not cut
// into many, each cut costing XLA a fusion boundary). The pieces are counted from the last launch
// that was not pipelined (a read, an optimizer step), so every step of an inference loop that
// reads its result is cut at the same places and reuses the same programs; past
// kPipelinedTraceNodes from there (a loop that does not read each step) nothing more is cut, which
// bounds how many differently placed pieces such a loop compiles.
constexpr int64_t kPipelinedLaunchNodes = 100;  // the default; 0 turns pipelining off
constexpr int64_t kPipelinedTraceNodes = 1000;
int64_t PipelinedLaunchNodes();
void SetPipelinedLaunchNodes(int64_t n);
// Marks the op just traced on `device` (table op `op`, results of `elements` elements in all) as
// recorded by autograd (grad mode on, or a backward pass: `in_backward`): such an epoch is a
// training step's and is not pipelined.
void NoteAutogradOp(int device, int op, bool in_backward, int64_t elements);
// Whether the trace of `device` is due for a pipelined launch (SyncCause::kPipelined).
bool PipelinedLaunchDue(int device);

// The forward launched as its backward begins (docs/design.md, "The forward as a program of its
// own"): an op about to be traced in a backward pass, on a trace that holds a forward (ops traced
// with grad mode on outside a backward) whose results hold at most kBackwardLaunchMaxElements
// elements in all, first launches that trace without waiting. The device runs the forward while
// the host traces the backward, and the loss, a result of the forward, is ready for the step's
// read without waiting for the backward's and the optimizer's programs. A forward with larger
// activations executes for longer than its tracing takes, so there is nothing to overlap, and the
// cut costs XLA's fusion across forward and backward: with every forward launched, examples/gpt.py's
// model (9.4M elements) trained 9% slower, ViT-tiny and ResNet-18 (1.4M each) 2-3%, MobileNetV3
// (0.9M) 1-4% faster, where GPT-2, BERT, Llama and T5 (~0.1M each) gained 7-24% (bench/launch.py).
// The LSTM (0.08M) is the exception the bound does not catch: 3-5% slower.
// Not while an optimizer step runs, nor in a torch.compile or device-graph capture (both hold
// their whole region). SetBackwardLaunch(false) turns it off (a setting, for comparisons).
constexpr int64_t kBackwardLaunchMaxElements = 512 * 1024;
bool BackwardLaunchDue(int device);
bool BackwardLaunch();
void SetBackwardLaunch(bool on);

}  // namespace torch_pjrt::graph
