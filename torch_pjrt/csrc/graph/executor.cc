#include "graph/executor.h"

#include <dlfcn.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <future>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <unordered_map>

#include "graph/compile_cache.h"
#include "graph/device_graph.h"
#include "graph/index_checks.h"
#include "graph/metrics.h"
#include "graph/pool_through.h"
#include "lowering/lowering.h"
#include "runtime/launch_queue.h"
#include "runtime/openmp.h"
#include "runtime/runtime.h"

#ifndef TORCH_PJRT_VERSION
#define TORCH_PJRT_VERSION "dev"
#endif

namespace torch_pjrt::graph {

namespace {

using lowering::Emitter;
using lowering::Val;

std::function<std::string()>& SourceLocationProvider() {
  static auto* p = new std::function<std::string()>();
  return *p;
}

std::string Hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string OpName(const Node* n) {
  switch (n->kind) {
    case NodeKind::kParam: return "param";
    case NodeKind::kSlot: return "scalar";
    default: return lowering::Table()[n->op].schema;
  }
}

struct LoweredGraph {
  std::string text;
  std::vector<TensorType> arg_types;
  std::string summary;
  Dims replica_devices;  // a program with collectives: the job-wide device of each replica
  int64_t work = 0;      // lowering::Emitter::work
  int64_t ops = 0;       // ops lowered (a line each in `summary`, when it is made)
};

// Compilers (LLVM under XLA) allocate and free hundreds of MB per compile, and the lowering and
// the loading of an executable tens; glibc keeps the freed pages, so a training loop's peak RSS
// would include every new program's high-water mark on top of the steady state. Returning them
// once per new program costs well under a millisecond.
void ReleaseFreedHeap() {
#ifdef __GLIBC__
  malloc_trim(0);
#endif
}

// The lowering's view of the active plugin's capabilities (fixed once the client started).
lowering::TargetOptions TargetOptionsFromCapabilities() {
  lowering::TargetOptions target;
  const auto& caps = runtime::ActiveCapabilities();
  // Boolean capabilities arrive as "1"/"0"; an absent one keeps TargetOptions' default.
  for (auto [name, flag] : {std::pair<const char*, bool*>{"dense_gather", &target.dense_gather},
                            {"fast_transposed_matmul", &target.fast_transposed_matmul},
                            {"nan_propagating_min_max", &target.nan_propagating_min_max},
                            {"fast_reductions", &target.fast_reductions},
                            {"fast_transcendentals", &target.fast_transcendentals},
                            {"host_kernels", &target.host_kernels}}) {
    auto found = caps.find(name);
    if (found != caps.end()) *flag = found->second != "0";
  }
  auto it = caps.find("matmul_precision");
  if (it != caps.end()) {
    // torch.set_float32_matmul_precision's names mapped to StableHLO's precision enum.
    if (it->second == "highest") target.matmul_precision = "HIGHEST";
    else if (it->second == "high") target.matmul_precision = "HIGH";
    else if (it->second == "default" || it->second == "medium") target.matmul_precision = "DEFAULT";
  }
  return target;
}

const lowering::TargetOptions& Target() {
  static const lowering::TargetOptions target = TargetOptionsFromCapabilities();
  return target;
}

}  // namespace

std::optional<std::string> LoweringRefusal(int op, const std::vector<Value>& inputs, const ArgList& args,
                                           const ArgPool& pool, const std::vector<TensorType>& outputs) {
  Emitter e(Target());
  std::vector<Val> params;
  params.reserve(inputs.size());
  for (const Value& v : inputs) params.push_back(e.Parameter(v.type()));
  const lowering::OpLowering& entry = lowering::Table()[op];
  lowering::LowerCtx ctx(e, args.data(), args.size(), pool.data(), params.data(), outputs.data(), outputs.size(),
                         &entry);
  try {
    entry.fn(ctx);
  } catch (const std::invalid_argument& ex) {  // a lowering's user-facing check
    return std::string(ex.what());
  } catch (const std::exception&) {  // anything else shows when the graph is lowered, as before
  }
  return std::nullopt;
}

namespace {

// Emits the StableHLO module computing `outputs` from the trace's parameters and value scalars.
LoweredGraph LowerTrace(const DeviceTrace& trace, const std::vector<Value>& outputs,
                        const std::vector<std::pair<int, int>>& donations, bool want_summary) {
  LoweredGraph g;
  Emitter e(Target());
  std::vector<Val> params;
  for (const NodeRef& p : trace.params) {
    params.push_back(e.Parameter(p->out0));
    g.arg_types.push_back(p->out0);
  }
  // The storages the program overwrites (parameters and optimizer state) are updated in 1-D loops.
  for (const auto& [param, output] : donations) e.MarkFlatSource(params.at(param));
  std::array<Val, kNumElementTypes> slot_groups;
  for (size_t k = 0; k < kNumElementTypes; ++k) {
    if (trace.slot_count[k] == 0) continue;
    TensorType t{static_cast<ElementType>(k), {trace.slot_count[k]}};
    slot_groups[k] = e.Parameter(t);
    g.arg_types.push_back(t);
  }
  LoweredValues memo;
  const ValueUses uses(outputs);
  std::unordered_map<uint64_t, const Node*> by_hash;  // common subexpressions share one lowering
  std::vector<std::pair<const Node*, bool>> stack;
  for (const Value& v : outputs) stack.push_back({v.node.get(), false});
  while (!stack.empty()) {
    auto [n, inputs_done] = stack.back();
    stack.pop_back();
    if (memo.count(n)) continue;
    if (!inputs_done) {
      auto same = by_hash.find(n->hash);
      if (same != by_hash.end() && same->second->kind == n->kind && same->second->op == n->op &&
          memo.count(same->second)) {
        memo[n] = memo[same->second];
        continue;
      }
      stack.push_back({n, true});
      for (auto it = n->inputs.end(); it != n->inputs.begin();) {
        --it;
        if (!memo.count(it->node)) stack.push_back({it->node, false});
      }
      continue;
    }
    std::vector<Val> vals;
    if (n->kind == NodeKind::kParam) {
      vals.push_back(params.at(n->index));
    } else if (n->kind == NodeKind::kSlot) {
      const Val& group = slot_groups[static_cast<size_t>(n->out0.dtype)];
      vals.push_back(e.Reshape(e.SliceDim(group, 0, n->index, n->index + 1), {}));
    } else {
      const lowering::OpLowering& entry = lowering::Table()[n->op];
      std::vector<Val> inputs;
      inputs.reserve(n->inputs.size());
      for (const Input& in : n->inputs) inputs.push_back(memo.at(in.node).at(in.index));
      std::vector<TensorType> outs;
      for (size_t i = 0; i < n->num_outputs(); ++i) outs.push_back(n->output(i));
      lowering::LowerCtx ctx(e, n->args.data(), n->args.size(), n->pool.data(), inputs.data(),
                             outs.data(), outs.size(), &entry);
      try {
        vals = LowerPoolThroughChain(n, ctx, memo, uses);
        if (vals.empty()) vals = entry.fn(ctx);
      } catch (const std::exception& ex) {
        std::string types;
        for (const Val& v : inputs) types += (types.empty() ? "" : ", ") + lowering::TypeString(v.type);
        throw std::runtime_error("pjrt: lowering " + entry.schema + "(" + types + ") failed: " + ex.what());
      }
      if (vals.size() != outs.size()) {
        throw std::logic_error("pjrt: the lowering of " + entry.schema + " returned " +
                               std::to_string(vals.size()) + " values for " +
                               std::to_string(outs.size()) + " outputs");
      }
      for (size_t i = 0; i < vals.size(); ++i) {
        if (outs[i].dtype == ElementType::kInvalid) continue;  // an undefined result
        if (vals[i].dims() != outs[i].dims) {
          throw std::logic_error("pjrt: the lowering of " + entry.schema + " produced " +
                                 lowering::TypeString(vals[i].type) + " where its meta kernel says " +
                                 lowering::TypeString(outs[i]));
        }
        vals[i] = e.Convert(vals[i], outs[i].dtype);
      }
      ++g.ops;
      if (want_summary) {
        g.summary += entry.schema;
        for (const TensorType& t : outs) g.summary += " " + lowering::TypeString(t);
        g.summary += "\n";
      }
    }
    by_hash.emplace(n->hash, n);
    memo[n] = std::move(vals);
  }
  std::vector<Val> results;
  // Every result becomes a storage's array (docs/design.md, "Flat storages").
  for (const Value& v : outputs) {
    const Val& r = memo.at(v.node.get()).at(v.index);
    results.push_back(e.Reshape(r, StorageArrayType(r.type).dims));
  }
  for (const auto& [param, output] : donations) {
    e.SetParameterAttr(param, "tf.aliasing_output = " + std::to_string(output) + " : i32");
  }
  g.text = e.Finish(results);
  g.work = e.work();
  g.replica_devices = e.replica_devices();
  return g;
}

void WriteDump(uint64_t key, const std::string& text) {
  const std::string& dir = Debug().dump_dir;
  if (dir.empty()) return;
  std::string path = dir + "/graph_" + Hex(key) + ".mlir";
  EnsureDirectory(dir);
  std::ofstream f(path);
  if (!f) {
    Warn("cannot write StableHLO dump " + path);
    return;
  }
  f << text;
}

void ExplainCompile(uint64_t key, int device, SyncCause cause, const LoweredGraph& g,
                    size_t num_outputs, double compile_ms, bool from_disk) {
  CompileCache& cache = CompileCache::Get();
  std::string reason;
  uint64_t near_key = 0;
  auto nearest = cache.Nearest(g.summary, &near_key);
  if (!nearest) {
    reason = "first graph compiled in this process";
  } else {
    // First line where this graph departs from the most similar cached one.
    size_t line = 0, pos = 0;
    while (pos < g.summary.size() && pos < nearest->summary.size() &&
           g.summary[pos] == nearest->summary[pos]) {
      if (g.summary[pos] == '\n') ++line;
      ++pos;
    }
    auto line_at = [](const std::string& s, size_t p) {
      size_t start = s.rfind('\n', p == 0 ? 0 : p - 1);
      start = start == std::string::npos ? 0 : start + 1;
      size_t end = s.find('\n', start);
      return s.substr(start, end == std::string::npos ? std::string::npos : end - start);
    };
    std::string mine = pos < g.summary.size() ? line_at(g.summary, pos) : "(end of graph)";
    std::string theirs = pos < nearest->summary.size() ? line_at(nearest->summary, pos) : "(end of graph)";
    reason = "differs from cached graph " + Hex(near_key) + " at op #" + std::to_string(line) +
             ": `" + mine + "` where it had `" + theirs + "`";
    if (mine == theirs) reason = "same ops as cached graph " + Hex(near_key) + " but different inputs or outputs";
  }
  std::ostringstream message;
  message << "[torch_pjrt] " << (from_disk ? "loaded" : "compiled") << " graph " << Hex(key)
          << " for pjrt:" << device << " (" << g.ops
          << " ops, " << g.arg_types.size() << " inputs, " << num_outputs << " outputs, work " << g.work << ") in "
          << compile_ms << " ms; sync cause: " << SyncCauseName(cause);
  // Printed once the graph lock is released: finding the user's line runs Python.
  RunOutsideGraphLock([text = message.str(), reason]() {
    std::string where = SourceLocation();
    std::cerr << text << (where.empty() ? "" : "; forced at " + where) << "\n  reason: " << reason
              << std::endl;
  });
}

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}


}  // namespace

const char* SyncCauseName(SyncCause c) {
  switch (c) {
    case SyncCause::kToCpu: return "to_cpu";
    case SyncCause::kItem: return "item";
    case SyncCause::kSynchronize: return "synchronize";
    case SyncCause::kAccelerator: return "accelerator_synchronize";
    case SyncCause::kFallback: return "cpu_fallback";
    case SyncCause::kGraphTooLarge: return "graph_too_large";
    case SyncCause::kDeviceCopy: return "device_copy";
    case SyncCause::kEvent: return "event";
    case SyncCause::kDataDependentShape: return "data_dependent_shape";
    case SyncCause::kOptimizerStep: return "optimizer_step";
    case SyncCause::kBeforeOptimizerStep: return "before_optimizer_step";
    case SyncCause::kCompiledCall: return "compiled_call";
    case SyncCause::kPipelined: return "pipelined";
    case SyncCause::kBackward: return "backward";
    default: return "other";
  }
}

DebugOptions& Debug() {
  static DebugOptions* d = [] {
    auto* o = new DebugOptions();
    const char* log = std::getenv("TORCH_PJRT_LOG_COMPILES");
    o->log_compiles = log && std::string(log) != "0" && std::string(log) != "";
    if (const char* dump = std::getenv("TORCH_PJRT_DUMP_DIR")) o->dump_dir = dump;
    return o;
  }();
  return *d;
}

void SetSourceLocationProvider(std::function<std::string()> provider) {
  SourceLocationProvider() = std::move(provider);
}

std::string SourceLocation() {
  // The provider takes the GIL: never with the graph lock held (see GraphLock).
  if (GraphLockHeld() || !SourceLocationProvider()) return "";
  try {
    return SourceLocationProvider()();
  } catch (const std::exception&) {
    return "";
  }
}

namespace {

// Identifies this build of the extension (path, size, mtime of the loaded library): graph keys
// hash lowering-table positions and lowering code can change between builds, so executables
// cached by another build must never be reused.
// path:size:mtime of a file: two builds of a library with the same version strings differ here.
std::string FileIdentity(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return path;
  return path + ":" + std::to_string(st.st_size) + ":" + std::to_string(st.st_mtim.tv_sec) + "." +
         std::to_string(st.st_mtim.tv_nsec);
}

std::string BuildIdentity() {
  static const std::string identity = [] {
    Dl_info info;
    if (dladdr(reinterpret_cast<void*>(&BuildIdentity), &info) == 0 || info.dli_fname == nullptr) {
      return std::string("unknown");
    }
    return FileIdentity(info.dli_fname);
  }();
  return identity;
}

// The host CPU's model and feature flags: CPU plugins compile for the machine they run on (AVX-512
// or not), and a cache directory can outlive the machine (a shared home, a container image). An
// executable compiled elsewhere must never be loaded here.
std::string HostCpuIdentity() {
  static const std::string identity = [] {
    std::ifstream cpuinfo("/proc/cpuinfo");
    std::string line, model, flags;
    while (std::getline(cpuinfo, line) && (model.empty() || flags.empty())) {
      auto value = [&] { return line.substr(line.find(':') == std::string::npos ? line.size() : line.find(':') + 1); };
      if (model.empty() && line.rfind("model name", 0) == 0) model = value();
      if (flags.empty() && (line.rfind("flags", 0) == 0 || line.rfind("Features", 0) == 0)) flags = value();
    }
    return model + "|" + Hex(std::hash<std::string>()(flags));
  }();
  return identity;
}

}  // namespace

std::string PluginFingerprint() {
  auto client = runtime::GetClient();
  std::string fp = "torch_pjrt=" TORCH_PJRT_VERSION ";build=" + BuildIdentity() + ";plugin=" + client->plugin().name() + ";library=" + FileIdentity(client->plugin().path()) +
                   ";platform=" + client->platform_name() + " " + client->platform_version() +
                   ";api=" + std::to_string(client->plugin().api_major()) + "." +
                   std::to_string(client->plugin().api_minor()) + ";kind=" + client->device_kind();
  for (const auto& [k, v] : client->plugin().attributes()) fp += ";" + k + "=" + v;
  // The sub-plugin's capabilities change the lowering (precision attributes, one-hot gathers).
  for (const auto& [k, v] : runtime::ActiveCapabilities()) fp += ";cap." + k + "=" + v;
  fp += ";host=" + HostCpuIdentity();
  // XLA flags change the generated code of XLA-based plugins.
  if (const char* flags = std::getenv("XLA_FLAGS")) fp += std::string(";XLA_FLAGS=") + flags;
  return fp;
}

namespace {

std::atomic<bool> g_background_compiles{[] {
  const char* env = std::getenv("TORCH_PJRT_BACKGROUND_COMPILES");
  return env == nullptr || std::string(env) != "0";
}()};

// Whether the launch waits for its program's compile on the launch thread: the program is still
// compiling and the launch donates no argument of another client (that becomes a view here, once
// nothing reads it).
bool QueueBehindCompile(const CompiledGraph& compiled, const LaunchDonations& d) {
  if (compiled.ReadyExecutable()) return false;
  return std::none_of(d.donated.begin(), d.donated.end(),
                      [&](const runtime::Buffer* b) { return b->client() != compiled.client; });
}

// Launches on this thread. An argument of another client is passed as a view of its memory,
// made here (waiting for its contents); one that `d` donates and nothing still reads becomes a
// view that is donated instead.
std::vector<std::shared_ptr<runtime::Buffer>> LaunchHere(const CompiledGraph& compiled,
                                                         std::vector<std::shared_ptr<runtime::Buffer>> arguments,
                                                         int device, LaunchDonations& d) {
  const std::shared_ptr<runtime::Client>& client = compiled.client;
  std::vector<PJRT_Buffer*> args;
  args.reserve(arguments.size());
  for (size_t i = 0; i < arguments.size(); ++i) {
    std::shared_ptr<runtime::Buffer>& b = arguments[i];
    if (b->client() == client) {
      args.push_back(b->raw());
      continue;
    }
    auto donated = std::find(d.donated.begin(), d.donated.end(), b.get());
    if (donated == d.donated.end()) {
      args.push_back(b->RawFor(client));
    } else if (b->inflight_reads() == 0 && b->nbytes() > 0) {
      // Donated across clients through a view that holds the buffer until PJRT releases its
      // memory; the buffer itself is what the launch marks donated.
      b = runtime::Buffer::DonatableView(b, client);
      args.push_back(b->raw());
    } else {  // a running execution still reads it, which the other client would not wait for
      args.push_back(b->RawFor(client));
      d.donated.erase(donated);
      d.kept.push_back(static_cast<int64_t>(i));
    }
  }
  return compiled.Executable()->Execute(args, device, d.donated, std::move(arguments), d.kept);
}

}  // namespace

bool BackgroundCompiles() { return g_background_compiles.load(std::memory_order_relaxed); }
void SetBackgroundCompiles(bool on) { g_background_compiles.store(on, std::memory_order_relaxed); }

std::vector<std::shared_ptr<runtime::Buffer>> Launch(const CompiledGraph& compiled,
                                                     std::vector<std::shared_ptr<runtime::Buffer>> arguments,
                                                     int device, LaunchDonations d) {
  std::vector<std::shared_ptr<runtime::Buffer>> results;
  {
    ScopedTimer timer(Timer::kExecute);
    // This thread's team would otherwise compete with the host-kernel thread's (runtime/openmp.h);
    // freed here also where the launch is made on the launch thread.
    if (compiled.calls_host_kernels) runtime::ReleaseCallerOpenMPTeam();
    if (QueueBehindCompile(compiled, d)) {
      results = runtime::Executable::ExecuteQueued(compiled.compiling, compiled.client, compiled.output_types,
                                                   std::move(arguments), device, d.donated, d.kept);
    } else {
      results = LaunchHere(compiled, std::move(arguments), device, d);
    }
  }
  Metrics::Increment(Counter::kExecutions);
  if (compiled.small_program) Metrics::Increment(Counter::kSmallProgramExecutions);
  Metrics::Increment(Counter::kDonatedBuffers, static_cast<int64_t>(d.donated.size()));
  return results;
}

std::vector<std::shared_ptr<runtime::Buffer>> UploadValueScalars(
    const std::shared_ptr<runtime::Client>& client, int device, const std::array<std::string, kNumElementTypes>& bytes,
    const std::array<int32_t, kNumElementTypes>& count) {
  std::vector<std::shared_ptr<runtime::Buffer>> buffers;
  for (size_t k = 0; k < kNumElementTypes; ++k) {
    if (count[k] == 0) continue;
    std::vector<int64_t> dims{count[k]};
    buffers.push_back(runtime::Buffer::FromHost(client, device, static_cast<ElementType>(k), dims, bytes[k].data()));
  }
  return buffers;
}

bool HasType(const runtime::Buffer& b, const TensorType& t) {
  return b.type() == t.dtype && std::equal(b.dims().begin(), b.dims().end(), t.dims.begin(), t.dims.end());
}

bool SoleHolder(const std::shared_ptr<runtime::Buffer>& buffer) {
  return runtime::Buffer::SoleHolderApartFromReads(buffer);
}

namespace {

// What one sync computes: the storages written since the last sync and their new values, plus
// (last, when the trace has index checks) the packed check results.
struct PendingGraph {
  std::vector<LazyStorage*> targets;
  std::vector<Value> outputs;
  bool has_checks = false;
  // (parameter, output) pairs compiled as aliases; the launch donates those whose buffer nothing
  // else holds.
  std::vector<std::pair<int, int>> donations;
};

PendingGraph CollectTargets(const DeviceTrace& trace) {
  PendingGraph g;
  for (LazyStorage* s : trace.dirty) {
    if (s != nullptr && s->has_pending()) {
      g.targets.push_back(s);
      g.outputs.push_back(s->pending());
    }
  }
  return g;
}

// Targets whose new value is a parameter's whole buffer (a clone of a materialized tensor, as
// autograd's AccumulateGrad makes where one gradient tensor reaches two parameters) take that
// buffer instead of a program that copies it: PJRT buffers are immutable, and a buffer two
// storages hold is never donated (the launch donates only buffers nothing else holds).
bool SharesParamBuffer(const Value& v) {
  return v.node->kind == NodeKind::kParam && v.node->buffer != nullptr && HasType(*v.node->buffer, v.type());
}

void ShareParamBuffers(PendingGraph* g) {
  size_t kept = 0;
  for (size_t i = 0; i < g->targets.size(); ++i) {
    const Value& v = g->outputs[i];
    if (SharesParamBuffer(v)) {
      g->targets[i]->SetBuffer(v.node->buffer);
      continue;
    }
    g->targets[kept] = g->targets[i];
    g->outputs[kept] = std::move(g->outputs[i]);
    ++kept;
  }
  g->targets.resize(kept);
  g->outputs.resize(kept);
}

// The first poisoned buffer `v` reads (through any chain of ops), or null.
DeferredErrorPtr PoisonReadBy(const Value& v, std::unordered_map<const Node*, DeferredErrorPtr>* memo) {
  VisitInputsFirst(v.node.get(), [&](const Node* n) { return memo->count(n) > 0; }, [&](const Node* n) {
    DeferredErrorPtr found = n->kind == NodeKind::kParam && n->buffer ? n->buffer->poison() : nullptr;
    for (const Input& in : n->inputs) {
      if (!found) found = memo->at(in.node);
    }
    memo->emplace(n, found);
  });
  return memo->at(v.node.get());
}

// Targets whose new value was traced from a buffer poisoned after the trace read it (an index
// check of an earlier graph failed meanwhile) get that error instead of a value.
void DropTargetsReadingPoison(PendingGraph* g) {
  std::unordered_map<const Node*, DeferredErrorPtr> memo;
  PendingGraph kept;
  for (size_t o = 0; o < g->targets.size(); ++o) {
    if (DeferredErrorPtr poison = PoisonReadBy(g->outputs[o], &memo)) {
      g->targets[o]->SetError(poison);
    } else {
      kept.targets.push_back(g->targets[o]);
      kept.outputs.push_back(g->outputs[o]);
    }
  }
  *g = std::move(kept);
}

// The parameter holding target `o`'s old buffer when the program can write the new value over it
// (the trace read that buffer, of the same type), else null.
const Node* OverwrittenParam(const DeviceTrace& trace, const PendingGraph& g, size_t o) {
  const LazyStorage* s = g.targets[o];
  const Node* param = s->param_node;
  if (s->param_epoch != trace.epoch || param == nullptr) return nullptr;
  return param->out0 == StorageArrayType(g.outputs[o].type()) ? param : nullptr;
}

// Donation: when a storage read its old buffer in this trace and now gets a new value, the old
// buffer (if nothing else holds it) becomes the new value's memory, so parameters and optimizer
// state are updated in place (docs/design.md, "Donation").
std::vector<std::pair<int, int>> Donations(const DeviceTrace& trace, const PendingGraph& g) {
  std::vector<std::pair<int, int>> donations;
  for (size_t o = 0; o < g.targets.size(); ++o) {
    const Node* param = OverwrittenParam(trace, g, o);
    // Donatable when the parameter node is all that holds the buffer (the storage now holds
    // its pending value).
    if (param != nullptr && SoleHolder(param->buffer)) donations.push_back({param->index, static_cast<int>(o)});
  }
  return donations;
}

// A capture's aliases: the record's aliasable storages among the targets, whoever holds their
// buffers now (launches decide that per call, see LaunchRecord).
std::vector<std::pair<int, int>> CaptureAliases(const DeviceTrace& trace, const PendingGraph& g,
                                                const LaunchRecord& record) {
  std::vector<std::pair<int, int>> aliases;
  for (size_t o = 0; o < g.targets.size(); ++o) {
    const Node* param = OverwrittenParam(trace, g, o);
    bool aliasable = std::find(record.aliasable.begin(), record.aliasable.end(), g.targets[o]) != record.aliasable.end();
    if (param != nullptr && aliasable) aliases.push_back({param->index, static_cast<int>(o)});
  }
  return aliases;
}

// The graph's identity: output node hashes (which cover every op, attribute and input type
// below them), parameter types, value-scalar counts per dtype and the donation pairs. Everything
// else that shapes the program is fixed for the process (the plugin's capabilities) or part of
// the disk-cache fingerprint (docs/design.md, "Cache keys").
uint64_t GraphKey(const DeviceTrace& trace, const PendingGraph& g) {
  uint64_t key = 0x67726170ull;
  for (const Value& v : g.outputs) key = HashMix(HashMix(key, v.node->hash), v.index);
  key = HashMix(key, 0x706172ull);
  for (const NodeRef& p : trace.params) key = HashType(key, p->out0);
  for (size_t k = 0; k < kNumElementTypes; ++k) key = HashMix(key, static_cast<uint64_t>(trace.slot_count[k]));
  for (const auto& [p, o] : g.donations) {
    key = HashMix(HashMix(key, static_cast<uint64_t>(p)), static_cast<uint64_t>(o));
  }
  return key;
}

// The launches a lazy training step makes without waiting (the forward's, the backward's, the
// updates'): the host goes on tracing the step while their programs execute.
bool LaunchedByTrainingStep(SyncCause cause) {
  return cause == SyncCause::kBackward || cause == SyncCause::kBeforeOptimizerStep ||
         cause == SyncCause::kOptimizerStep;
}

// A memory-cache miss, lowered: its program and what its launches need to know.
struct PreparedGraph {
  std::shared_ptr<CompiledGraph> compiled;
  LoweredGraph lowered;
  std::string fingerprint;  // of the disk cache entry
  std::string cache_directory;  // CompileCache::directory() when it was lowered
  bool replicated = false;  // bound to this job's devices: never shared through the disk cache
};

PreparedGraph PrepareGraph(uint64_t key, SyncCause cause, const DeviceTrace& trace, const PendingGraph& pending) {
  PreparedGraph p;
  {
    ScopedTimer timer(Timer::kLowering);
    p.lowered = LowerTrace(trace, pending.outputs, pending.donations, Debug().log_compiles);
    Metrics::Increment(Counter::kGraphsLowered);
  }
  const LoweredGraph& g = p.lowered;
  WriteDump(key, g.text);
  p.replicated = !g.replica_devices.empty();
  auto compiled = std::make_shared<CompiledGraph>();
  compiled->client = runtime::ClientForProgram({g.work, g.ops, LaunchedByTrainingStep(cause), p.replicated});
  compiled->arg_types = g.arg_types;
  for (const Value& v : pending.outputs) {  // every result is a storage's array (LowerTrace)
    const TensorType t = StorageArrayType(v.type());
    compiled->output_types.push_back({t.dtype, std::vector<int64_t>(t.dims.begin(), t.dims.end())});
  }
  compiled->summary = g.summary;
  compiled->calls_host_kernels = trace.host_kernel_nodes > 0 && Target().host_kernels;
  compiled->small_program = compiled->client != runtime::GetClient();
  // An executable is made for the pool of the client that compiled it (runtime/compile_worker.h).
  p.fingerprint = PluginFingerprint() + (compiled->small_program ? ";client=small" : "");
  p.cache_directory = CompileCache::Get().directory();
  if (pending.has_checks) {
    std::vector<Value> targets(pending.outputs.begin(), pending.outputs.end() - 1);
    compiled->check_dependents = CheckDependents(trace.checks, targets);
  }
  p.compiled = std::move(compiled);
  return p;
}

// Loads `p`'s executable from the disk cache or compiles it (in the compile worker where there is
// one). Runs on the tracing thread or on a compile's own thread (StartBackgroundCompile).
std::shared_ptr<runtime::Executable> LoadOrCompile(uint64_t key, const PreparedGraph& p, bool* from_disk) {
  const std::shared_ptr<runtime::Client>& client = p.compiled->client;
  std::shared_ptr<runtime::Executable> executable;
  if (!p.replicated) executable = CompileCache::LoadFromDisk(p.cache_directory, key, p.fingerprint, client);
  *from_disk = static_cast<bool>(executable);
  if (*from_disk) {
    Metrics::Increment(Counter::kCacheHitsDisk);
  } else {
    ScopedTimer timer(Timer::kCompile);
    std::string serialized;  // the worker's bytes, when it compiled
    const Dims& replicas = p.lowered.replica_devices;
    executable = runtime::CompileProgram(client, p.lowered.text, std::vector<int64_t>(replicas.begin(), replicas.end()),
                                         &serialized);
    Metrics::Increment(Counter::kGraphsCompiled);
    if (!serialized.empty()) Metrics::Increment(Counter::kCompilesInWorker);
    if (!p.replicated) CompileCache::StoreToDisk(p.cache_directory, key, p.fingerprint, *executable, std::move(serialized));
  }
  // The lowering's MLIR, the loaded executable's scratch and (when it ran here) the compiler's
  // garbage are free now, before the first execution allocates its results.
  ReleaseFreedHeap();
  if (executable->num_outputs() != p.compiled->output_types.size()) {
    throw std::logic_error("pjrt: compiled graph has " + std::to_string(executable->num_outputs()) +
                           " outputs, expected " + std::to_string(p.compiled->output_types.size()));
  }
  return executable;
}

// Whether a miss compiles on a thread of its own while the host goes on tracing: a lazy training
// step's launches (the next one's program compiles meanwhile, in a second compile worker), unless
// compiles are being explained (the explanation reads the cache as the compile ends) or the
// program is replicated.
bool CompilesInBackground(SyncCause cause, const PreparedGraph& p) {
  return BackgroundCompiles() && LaunchedByTrainingStep(cause) &&
         !Debug().log_compiles && !p.replicated;
}

// Compiles `p` on a thread of its own: its launches wait for it on the launch thread
// (runtime::Executable::ExecuteQueued), or on this one once it is done (CompiledGraph::Executable).
void StartBackgroundCompile(uint64_t key, PreparedGraph p) {
  auto promise = std::make_shared<std::promise<std::shared_ptr<runtime::Executable>>>();
  p.compiled->compiling = promise->get_future().share();
  std::thread([key, p = std::move(p), promise] {
    try {
      bool from_disk = false;
      promise->set_value(LoadOrCompile(key, p, &from_disk));
    } catch (...) {
      promise->set_exception(std::current_exception());
    }
  }).detach();
}

// Lowers and compiles (or loads from disk) the graph of a memory-cache miss; a training step's
// launches leave the compile running (CompilesInBackground).
std::shared_ptr<CompiledGraph> CompileGraph(uint64_t key, int device, SyncCause cause, const DeviceTrace& trace,
                                            const PendingGraph& pending, bool capturing) {
  auto t0 = std::chrono::steady_clock::now();
  PreparedGraph p = PrepareGraph(key, cause, trace, pending);
  std::shared_ptr<CompiledGraph> compiled = p.compiled;
  if (!capturing && CompilesInBackground(cause, p)) {
    StartBackgroundCompile(key, std::move(p));
    return compiled;
  }
  bool from_disk = false;
  compiled->executable = LoadOrCompile(key, p, &from_disk);
  if (Debug().log_compiles) ExplainCompile(key, device, cause, p.lowered, pending.outputs.size(), MsSince(t0), from_disk);
  return compiled;
}

// The execution's arguments: parameter buffers, then one array of value scalars per dtype, each
// checked against what the program was compiled for (PJRT's Execute does not check).
std::vector<std::shared_ptr<runtime::Buffer>> Arguments(int device, const DeviceTrace& trace,
                                                        const CompiledGraph& compiled) {
  std::vector<std::shared_ptr<runtime::Buffer>> args;
  args.reserve(compiled.arg_types.size());
  for (const NodeRef& p : trace.params) args.push_back(p->buffer);
  for (auto& b : UploadValueScalars(compiled.client, device, trace.slot_bytes, trace.slot_count)) {
    args.push_back(std::move(b));
  }
  if (args.size() != compiled.arg_types.size()) {
    throw std::logic_error("pjrt: graph takes " + std::to_string(compiled.arg_types.size()) +
                           " arguments, trace supplies " + std::to_string(args.size()));
  }
  for (size_t i = 0; i < trace.params.size(); ++i) {
    const runtime::Buffer& b = *trace.params[i]->buffer;
    const TensorType& want = compiled.arg_types[i];
    if (b.donated() || !HasType(b, want)) {
      throw std::logic_error("pjrt: argument " + std::to_string(i) + " is " + TypeName(b.type()) +
                             " but the program expects " + lowering::TypeString(want) +
                             (b.donated() ? " (buffer was donated)" : ""));
    }
    if (b.device() != device) {
      throw std::runtime_error("pjrt: graph for pjrt:" + std::to_string(device) + " reads a buffer on pjrt:" +
                               std::to_string(b.device()));
    }
  }
  return args;
}

// After launch (nothing here throws): donations are counted, targets get their buffers, and
// the index checks are left to be read at the next sync point.
void Publish(int device, const DeviceTrace& trace, const PendingGraph& g, const CompiledGraph& compiled,
             std::vector<std::shared_ptr<runtime::Buffer>> results) {
  if (g.has_checks) {
    std::vector<CheckError> errors;
    for (const IndexCheck& c : trace.checks) errors.push_back(c.error);
    ExpectIndexChecks(device, results, std::move(errors), compiled.check_dependents);
  }
  for (size_t i = 0; i < g.targets.size(); ++i) g.targets[i]->SetBuffer(std::move(results[i]));
}

// What a capture needs to launch the same program again (before Publish moves the results).
void Describe(const DeviceTrace& trace, const PendingGraph& g, std::shared_ptr<CompiledGraph> compiled,
              LaunchRecord* record) {
  record->compiled = std::move(compiled);
  for (const NodeRef& p : trace.params) record->params.push_back(p->buffer);
  record->slot_bytes = trace.slot_bytes;
  record->slot_count = trace.slot_count;
  record->draws = trace.draws;
  record->targets = g.targets;
  record->aliases = g.donations;
  for (const IndexCheck& c : trace.checks) record->check_errors.push_back(c.error);
}

// What a graph of the whole trace computes besides its targets: the trace's index checks, packed
// as its last output, and the overwritten buffers it donates (or, for a capture, aliases).
void CompleteWholeTraceGraph(int device, const DeviceTrace& trace, PendingGraph* g, const LaunchRecord* record) {
  if (!trace.checks.empty()) {
    g->outputs.push_back(PackIndexChecks(device, trace.checks));
    g->has_checks = true;
  }
  g->donations = record == nullptr ? Donations(trace, *g) : CaptureAliases(trace, *g, *record);
}

// The cached graph computing `g`, or a new one compiled for it (and cached).
std::shared_ptr<CompiledGraph> FindOrCompile(int device, SyncCause cause, const DeviceTrace& trace,
                                             const PendingGraph& g, bool capturing, bool count_hit = true) {
  uint64_t key = GraphKey(trace, g);
  CompileCache& cache = CompileCache::Get();
  std::shared_ptr<CompiledGraph> compiled = cache.Find(key);
  if (compiled) {
    // A graph CompileAhead started counts as the miss it replaced, so the counters do not depend
    // on whether it ran.
    if (count_hit && !compiled->compiled_ahead) Metrics::Increment(Counter::kCacheHitsMemory);
    if (count_hit) compiled->compiled_ahead = false;
    return compiled;
  }
  compiled = CompileGraph(key, device, cause, trace, g, capturing);
  compiled->compiled_ahead = !count_hit;
  cache.Insert(key, compiled);
  return compiled;
}

// Starts compiling the graph a training step's launch is about to run before that launch waits
// for earlier launches' index checks (SyncDevice), where an earlier launch still waits for its
// program: in a step's first run the updates' launch waits there for the forward's program, which
// is still compiling, and its own compile would otherwise start only after that. The graph is the
// one RunGraph will find: the targets ShareParamBuffers keeps, the packed checks, the donations.
// Where waiting for the checks changes it (a failed check drops the targets it poisoned), RunGraph
// compiles its own.
void CompileAhead(int device, SyncCause cause) {
  if (!BackgroundCompiles() || !runtime::LaunchesPending()) return;
  const DeviceTrace& trace = Trace(device);
  PendingGraph g = CollectTargets(trace);
  PendingGraph kept;
  for (size_t i = 0; i < g.targets.size(); ++i) {
    if (SharesParamBuffer(g.outputs[i])) continue;  // as ShareParamBuffers, without giving them the buffers
    kept.targets.push_back(g.targets[i]);
    kept.outputs.push_back(g.outputs[i]);
  }
  if (kept.outputs.empty()) return;
  CompleteWholeTraceGraph(device, trace, &kept, nullptr);
  FindOrCompile(device, cause, trace, kept, /*capturing=*/false, /*count_hit=*/false);
}

// Compiles (or finds) and launches the graph computing `g`. A graph of the whole trace also
// packs the trace's index checks and donates overwritten buffers; one computing a single value
// ahead of the trace (SyncValue) does neither: the trace still reads those buffers.
void RunGraph(int device, SyncCause cause, const DeviceTrace& trace, PendingGraph& g,
              LaunchRecord* record, bool whole_trace = true) {
  if (whole_trace) CompleteWholeTraceGraph(device, trace, &g, record);
  std::shared_ptr<CompiledGraph> compiled = FindOrCompile(device, cause, trace, g, record != nullptr);
  // The parameter node holds each buffer (its storage holds the pending new value); a capture's
  // input may also be held elsewhere. Asked before the arguments below hold them too.
  LaunchDonations d;
  for (const auto& [p, o] : g.donations) d.Add(p, trace.params[p]->buffer);
  std::vector<std::shared_ptr<runtime::Buffer>> results =
      Launch(*compiled, Arguments(device, trace, *compiled), device, std::move(d));
  if (record != nullptr) Describe(trace, g, compiled, record);
  Publish(device, trace, g, *compiled, std::move(results));
}

// After a launch that did not wait for earlier index checks: its results are guarded by every
// pending check guarding a buffer it read.
void InheritIndexChecks(int device, const DeviceTrace& trace, const PendingGraph& g) {
  std::vector<std::shared_ptr<runtime::Buffer>> read, written;
  for (const NodeRef& p : trace.params) read.push_back(p->buffer);
  for (LazyStorage* s : g.targets) written.push_back(s->buffer());
  PropagateIndexChecks(device, read, written);
}

// `v`'s computation copied into `sub`, a trace of its own whose parameters and value scalars are
// only those `v` reads, numbered in the order they are found: the program is then the same
// wherever in a step the read happens. Returns an invalid value when `v` depends on an index check
// of `trace` (an out-of-range index makes it garbage until the check is read) or reads a
// poisoned buffer.
Value CopyComputation(const DeviceTrace& trace, const Value& v, DeviceTrace* sub) {
  std::unordered_map<const Node*, NodeRef> copies;
  bool poisoned = false;
  VisitInputsFirst(v.node.get(), [&](const Node* n) { return copies.count(n) > 0; }, [&](const Node* n) {
    NodeRef copy;
    if (n->kind == NodeKind::kParam) {
      poisoned = poisoned || (n->buffer && n->buffer->poison());
      copy = MakeParamNode(n->device, n->buffer, static_cast<int>(sub->params.size()));
      sub->params.push_back(copy);
    } else if (n->kind == NodeKind::kSlot) {
      size_t k = static_cast<size_t>(n->out0.dtype), item = ItemSize(n->out0.dtype);
      copy = MakeSlotNode(n->device, n->out0.dtype, sub->slot_count[k]++);
      sub->slot_bytes[k] += trace.slot_bytes[k].substr(item * n->index, item);
    } else {
      std::vector<Value> inputs;
      for (const Input& in : n->inputs) inputs.push_back(Value{copies.at(in.node), in.index});
      std::vector<TensorType> outputs;
      for (size_t i = 0; i < n->num_outputs(); ++i) outputs.push_back(n->output(i));
      copy = MakeOpNode(n->op, n->device, inputs, n->args, n->pool, std::move(outputs));
    }
    copies.emplace(n, std::move(copy));
  });
  for (const IndexCheck& c : trace.checks) poisoned = poisoned || copies.count(c.consumer.node.get()) > 0;
  return poisoned ? Value() : Value{copies.at(v.node.get()), v.index};
}

// What the values a failed graph was to compute report when read: the error's own kind where it
// is one of ours, a RuntimeError otherwise.
DeferredErrorPtr DeferredErrorOf(const std::exception& e) {
  auto* device_error = dynamic_cast<const DeviceError*>(&e);
  return MakeDeferredError(device_error ? device_error->kind() : ErrorKind::kRuntime, e.what());
}

// SyncDevice once earlier graphs' index checks are settled (`failure`: what they raised).
void SyncSettledDevice(int device, SyncCause cause, LaunchRecord* record, DeferredErrorPtr failure,
                       bool waited_for_checks) {
  DeviceTrace& trace = Trace(device);
  // A pipelined piece counts towards the next one's bound (PipelinedLaunchDue); others reset it.
  int64_t pipelined_nodes = cause == SyncCause::kPipelined ? trace.pipelined_nodes + trace.op_nodes : 0;
  PendingGraph g = CollectTargets(trace);
  if (failure) DropTargetsReadingPoison(&g);
  if (record == nullptr) ShareParamBuffers(&g);  // a capture maps its outputs to program results
  if (!g.outputs.empty()) {
    ScopedTimer sync_timer(Timer::kSync);
    Metrics::IncrementNamed(std::string("Sync::") + SyncCauseName(cause));
    try {
      RunGraph(device, cause, trace, g, record);
      if (!waited_for_checks) InheritIndexChecks(device, trace, g);
    } catch (const std::exception& e) {
      // Storages that were to be computed by this graph now report the error when read.
      DeferredErrorPtr error = DeferredErrorOf(e);
      for (LazyStorage* s : g.targets) s->SetError(error);
      ResetTrace(trace);
      trace.pipelined_nodes = 0;
      throw;
    }
  }
  ResetTrace(trace);
  trace.pipelined_nodes = pipelined_nodes;
  if (failure) throw DeviceError(*failure);
}

// Whether a sync may run while `device` may be capturing a device graph: the capture's own launch
// (with a record) may; the optimizer step's launches are dropped (the region holds the whole
// step; LaunchBeforeOptimizerStep splits a capture itself, SplitDeviceGraphCapture); anything else
// would read or cut the region's trace, which a replay cannot repeat: raises.
bool SyncAllowedDuringCapture(int device, SyncCause cause, const LaunchRecord* record) {
  if (record != nullptr || !CapturingDeviceGraph(device)) return true;
  if (cause == SyncCause::kOptimizerStep || cause == SyncCause::kBeforeOptimizerStep) return false;
  throw std::runtime_error(std::string("pjrt: operation not permitted while a graph is being captured on pjrt:") +
                           std::to_string(device) + ": it syncs the device (" + SyncCauseName(cause) +
                           "), and a replay could not repeat that. Move host reads (.item(), .cpu(), "
                           "print), CPU fallbacks and data-dependent shapes out of the captured region.");
}

}  // namespace

void SyncDevice(int device, SyncCause cause, LaunchRecord* record) {
  GraphLock lock;
  if (device >= NumTracedDevices()) return;
  if (!SyncAllowedDuringCapture(device, cause, record)) return;
  // Earlier graphs' index checks are settled before this graph runs, so nothing computed from an
  // out-of-range index is used silently; the failure is raised at this sync point. Syncs for a
  // compiled call (before a replay) do not wait: their results inherit the checks instead. Nor do
  // a training step's launches (the forward as the backward begins, the backward as the optimizer
  // step begins, the updates as it ends) and a pipelined piece while one launch's checks are
  // pending (the step's previous launch, the previous piece), which they would otherwise wait for:
  // checks of launches that finished and passed are dropped first, without waiting, and a launch
  // waits only when more than one launch's checks would still be pending.
  bool inherits = LaunchedByTrainingStep(cause) || cause == SyncCause::kPipelined;
  if (inherits) SettleFinishedIndexChecks(device);
  bool wait_for_checks = cause != SyncCause::kCompiledCall && (!inherits || PendingIndexCheckLaunches(device) > 1);
  if (inherits && wait_for_checks && record == nullptr && !CapturingDeviceGraph(device)) {
    CompileAhead(device, cause);
  }
  SyncSettledDevice(device, cause, record, wait_for_checks ? ResolveIndexChecks(device) : nullptr, wait_for_checks);
}

bool SyncValue(LazyStorage* s, SyncCause cause) {
  GraphLock lock;
  int device = s->device();
  DeviceTrace& trace = Trace(device);
  DeferredErrorPtr failure = ResolveIndexChecks(device);
  DeviceTrace alone;
  PendingGraph g;
  g.targets.push_back(s);
  g.outputs.push_back(failure ? Value() : CopyComputation(trace, s->pending(), &alone));
  if (!g.outputs[0].valid()) {
    if (SyncAllowedDuringCapture(device, cause, nullptr)) {
      SyncSettledDevice(device, cause, nullptr, failure, /*waited_for_checks=*/true);
    }
    return false;
  }
  // The trace is not cut, so this may run during a device-graph capture (its read is guarded).
  ScopedTimer sync_timer(Timer::kSync);
  Metrics::IncrementNamed(std::string("Sync::") + SyncCauseName(cause));
  Metrics::Increment(Counter::kValuesComputedAhead);
  try {
    RunGraph(device, cause, alone, g, nullptr, /*whole_trace=*/false);
  } catch (const std::exception& e) {
    s->SetError(DeferredErrorOf(e));
    throw;
  }
  return true;
}

std::string PendingGraphText(int device) {
  GraphLock lock;
  if (device >= NumTracedDevices()) return "";
  const DeviceTrace& trace = Trace(device);
  PendingGraph g = CollectTargets(trace);
  if (g.outputs.empty()) return "";
  return LowerTrace(trace, g.outputs, Donations(trace, g), /*want_summary=*/false).text;
}

namespace {
// Op nodes per host-kernel op at most, for a captured backward to become a program of its own.
// Of the forward and backward nodes, ResNet-18's are 25% such ops (~20% faster apart),
// MobileNetV3's 25% (within noise apart), ViT's 0.15%: its patch embedding (1-3% slower apart).
constexpr int64_t kNodesPerHostKernelToLaunchApart = 20;

bool HostKernelBound(const DeviceTrace& trace) {
  return trace.host_kernel_nodes > 0 && trace.host_kernel_nodes * kNodesPerHostKernelToLaunchApart >= trace.op_nodes &&
         Target().host_kernels;
}
}  // namespace

void LaunchBeforeOptimizerStep(int device) {
  GraphLock lock;
  if (device >= NumTracedDevices()) return;
  if (!CapturingDeviceGraph(device)) {
    SyncDevice(device, SyncCause::kBeforeOptimizerStep);
  } else if (HostKernelBound(Trace(device))) {
    SplitDeviceGraphCapture(device);  // the graph's backward becomes a program of its own
  }
}

void SyncAllDevices(SyncCause cause) {
  GraphLock lock;
  for (int d = 0; d < NumTracedDevices(); ++d) SyncDevice(d, cause);
}

void WaitDevice(int device) {
  for (const auto& client : runtime::PeekClients()) runtime::WaitForExecutions(*client, device);
  GraphLock lock;
  if (DeferredErrorPtr failure = ResolveIndexChecks(device)) throw DeviceError(*failure);
}

bool DeviceIdle(int device) {
  for (const auto& client : runtime::PeekClients()) {
    if (!runtime::ExecutionsDone(*client, device)) return false;
  }
  return true;
}

}  // namespace torch_pjrt::graph
