// Sync: turn a device's pending trace into one executable (cached), run it asynchronously, and
// give every written storage its new buffer (design decisions 3-6).
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "graph/trace.h"

namespace torch_pjrt::graph {

enum class SyncCause : int {
  kToCpu,           // a read back to the host: .cpu(), .numpy(), print
  kItem,            // .item() / _local_scalar_dense
  kSynchronize,     // torch.pjrt.synchronize()
  kAccelerator,     // torch.accelerator.synchronize() / device guard synchronizeDevice
  kFallback,        // an op without a lowering ran on the CPU
  kGraphTooLarge,   // the trace passed the pending-node bound
  kDeviceCopy,      // a copy to another pjrt device
  kEvent,           // a stream event was recorded
  kDataDependentShape,  // a result's size depends on data (nonzero, masked_select, unique)
  kOptimizerStep,   // an optimizer step ended: its updates are launched, not waited for
  kBeforeOptimizerStep,  // an optimizer step begins: the pending forward and backward launched, not waited for
  kCompiledCall,    // a torch.compile'd graph finished its first (traced) call: graph/capture.h
  kPipelined,       // an inference trace launched in pieces, not waited for (PipelinedLaunchDue)
  kBackward,        // a backward pass begins: the pending forward launched, not waited for (BackwardLaunchDue)
  kOther,
  kNumCauses
};
const char* SyncCauseName(SyncCause c);

struct CompiledGraph;

// The error that the lowering of table op `op` raises for these arguments, if any. Lowerings make
// some of torch's checks that only a CPU kernel makes (relu of bool, var of integers, integer
// negative powers); made while the graph is lowered, they raised at a later, unrelated sync.
// Lowering the op alone, on parameters of its inputs' types, finds them when it is traced.
std::optional<std::string> LoweringRefusal(int op, const std::vector<Value>& inputs, const ArgList& args,
                                           const ArgPool& pool, const std::vector<TensorType>& outputs);

// What one sync launched, for a capture (graph/capture.h) to launch it again without tracing.
struct LaunchRecord {
  std::shared_ptr<CompiledGraph> compiled;
  std::vector<std::shared_ptr<runtime::Buffer>> params;  // the buffers read, in parameter order
  std::array<std::string, kNumElementTypes> slot_bytes;  // value scalars, per dtype
  std::array<int32_t, kNumElementTypes> slot_count{};
  std::vector<RandomDraw> draws;
  std::vector<LazyStorage*> targets;  // written storages, in result order (valid until unlocked)
  std::vector<CheckError> check_errors;  // what the index checks raise (last result packs them)
  // Set by the caller: storages (a capture's inputs) whose old buffer the program may take for
  // their new value. Each such (parameter, result) pair is compiled as an alias whether or not
  // this launch can give the buffer up (others may hold it), so the replays, which often can,
  // share the program; `aliases` lists the pairs.
  std::vector<const LazyStorage*> aliasable;
  std::vector<std::pair<int, int>> aliases;
};

// Whether `buffer` is the only reference to its buffer (a storage's or a parameter node's), not
// counting running executions that read it: then an execution may take its memory (PJRT orders
// it after those readers).
bool SoleHolder(const std::shared_ptr<runtime::Buffer>& buffer);

// Whether `b` has `t`'s element type and dimensions (what a program parameter of type `t` takes).
bool HasType(const runtime::Buffer& b, const TensorType& t);

// What one launch does with the parameters its program aliases to results: it donates the
// buffers that only their one holder holds (SoleHolder), and names the others as non-donatable
// (PJRT copies them).
struct LaunchDonations {
  std::vector<runtime::Buffer*> donated;
  std::vector<int64_t> kept;  // parameter indices
  void Add(int param, const std::shared_ptr<runtime::Buffer>& buffer) {
    if (SoleHolder(buffer)) {
      donated.push_back(buffer.get());
    } else {
      kept.push_back(param);
    }
  }
};

// Whether a lazy training step's launches that miss the cache leave their programs compiling on
// threads of their own while the step goes on tracing (TORCH_PJRT_BACKGROUND_COMPILES=0: no; the
// setter is for side-by-side measurements).
bool BackgroundCompiles();
void SetBackgroundCompiles(bool on);

// Launches `compiled` on `device` with `arguments` (held until it finished), the one launch of
// the lazy path and of a capture's replay: frees the caller's OpenMP team first where the program
// may call host kernels (runtime/openmp.h), times the launch and counts it and its donated
// buffers. An argument of the other client (runtime::ClientForProgram) is passed as a view
// (Buffer::RawFor); one to be donated as a view that takes its memory over (Buffer::DonatableView)
// unless an execution still reads it (then PJRT copies it). Where the program is still compiling
// (BackgroundCompiles), the launch is queued for the launch thread (runtime/launch_queue.h) and
// the results are buffers whose handles come with it.
std::vector<std::shared_ptr<runtime::Buffer>> Launch(const CompiledGraph& compiled,
                                                     std::vector<std::shared_ptr<runtime::Buffer>> arguments,
                                                     int device, LaunchDonations d);

// The packed value scalars as device arrays of `client`, one per dtype that has any: a program's
// last arguments, after its parameters.
std::vector<std::shared_ptr<runtime::Buffer>> UploadValueScalars(
    const std::shared_ptr<runtime::Client>& client, int device, const std::array<std::string, kNumElementTypes>& bytes,
    const std::array<int32_t, kNumElementTypes>& count);

// Materializes every storage written on `device` since its last sync, in one execution.
// Does not wait for the execution to finish. With `record`, only `record->aliasable` storages'
// buffers are donated (when nothing else holds them) and the launch is described there.
void SyncDevice(int device, SyncCause cause, LaunchRecord* record = nullptr);
// Computes `s`'s pending value alone, in a program of its own, and leaves the rest of the trace
// pending: a small read (graph/read_memo.h) no longer cuts the step's graph in two. Earlier
// graphs' index checks are settled first, as for any sync; where one failed, where a check of
// this trace guards the value or where it reads a poisoned buffer, the whole device syncs instead
// (which a device-graph capture refuses, as SyncDevice does). Returns whether the value was computed
// ahead; the caller then accounts for the uncut read (DeviceTrace::uncut_reads, or a guard during a
// device-graph capture).
bool SyncValue(LazyStorage* s, SyncCause cause);
void SyncAllDevices(SyncCause cause);
// Called as an optimizer step begins: launches `device`'s pending trace (the forward and backward)
// asynchronously, so that it runs while the step's updates are traced, and the updates' program
// runs while the next step's forward is traced: 12-22% faster lazy steps for the transformers,
// whose host tracing is as long as their execution (docs/design.md, "The optimizer step as a
// program of its own"). During a device-graph capture (replays trace nothing to overlap) the
// region splits there only where ops that may run as host kernels are at least one in 20 of its
// op nodes: in one program XLA starts each update as soon as its gradient exists, and those fusions
// compete for the cores with the host kernels' OpenMP team, whose barriers wait whenever one of
// its threads is descheduled (docs/design.md, "The optimizer step after a convolutional backward").
void LaunchBeforeOptimizerStep(int device);
// The StableHLO the next sync of `device` would compile, without compiling or running it ("" when
// nothing is pending): torch.pjrt's graph inspection and the collectives' program tests.
std::string PendingGraphText(int device);
// Blocks until every execution started on `device` (-1: all) has finished.
void WaitDevice(int device);
bool DeviceIdle(int device);

// Debugging aids (also settable from the environment, see docs/design.md).
struct DebugOptions {
  bool log_compiles = false;  // TORCH_PJRT_LOG_COMPILES=1: explain every compile on stderr
  std::string dump_dir;       // TORCH_PJRT_DUMP_DIR=<dir>: write each compiled graph's StableHLO
};
DebugOptions& Debug();
// Returns "file:line in function" of the innermost user (non-torch) Python frame (set by Python).
void SetSourceLocationProvider(std::function<std::string()> provider);
// That location for the calling thread; empty when it has no Python frames or holds the graph
// lock (finding it runs Python).
std::string SourceLocation();

// A string identifying the plugin, its platform version and this package's version: part of
// every disk-cache key.
std::string PluginFingerprint();

}  // namespace torch_pjrt::graph
