#include "graph/capture.h"

#include <cstring>
#include <unordered_map>

#include "graph/compile_cache.h"
#include "graph/index_checks.h"
#include "graph/metrics.h"
#include "runtime/runtime.h"

namespace torch_pjrt::graph {

namespace {

// Readies inputs to be read as parameters: never-written storages get explicit zeros (the trace
// would otherwise fold them into a zeros constant); failed ones raise. Returns whether any input
// is still a pending value, which needs a sync to become a buffer.
bool PrepareInputs(const std::vector<LazyStorage*>& inputs, const std::vector<ElementType>& dtypes) {
  bool pending = false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    LazyStorage* s = inputs[i];
    if (s == nullptr) continue;  // a scalar input
    if (s->error()) throw DeviceError(*s->error());
    if (s->has_buffer() && s->buffer()->poison()) throw DeviceError(*s->buffer()->poison());
    GiveEmptyBuffer(s, dtypes[i]);
    if (!s->has_buffer() && !s->has_pending()) s->SetPending(StorageValue(s, dtypes[i]));
    pending = pending || s->has_pending();
  }
  return pending;
}

int IndexOf(const std::vector<LazyStorage*>& list, const LazyStorage* s) {
  for (size_t i = 0; i < list.size(); ++i) {
    if (list[i] == s) return static_cast<int>(i);
  }
  return -1;
}

// Per input: the index of the first input with the same storage (replays must alias alike).
std::vector<int> InputGroups(const std::vector<LazyStorage*>& inputs) {
  std::vector<int> groups;
  for (size_t i = 0; i < inputs.size(); ++i) {
    groups.push_back(inputs[i] != nullptr ? IndexOf(inputs, inputs[i]) : static_cast<int>(i));
  }
  return groups;
}

// A storage written by the trace that the replay could not hand to anyone.
const char* FindStrayWrite(const DeviceTrace& trace, const std::vector<LazyStorage*>& inputs,
                           const std::vector<LazyStorage*>& outputs) {
  for (LazyStorage* s : trace.dirty) {
    if (s != nullptr && s->has_pending() && IndexOf(inputs, s) < 0 && IndexOf(outputs, s) < 0) {
      return "it writes a tensor that is neither an input nor an output (a global or a captured "
             "tensor updated in place)";
    }
  }
  return nullptr;
}

// Program parameter -> input, from the parameter nodes the trace made for the inputs' storages.
std::unordered_map<int, int> ParamInputs(const DeviceTrace& trace, const std::vector<LazyStorage*>& inputs) {
  std::unordered_map<int, int> found;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const LazyStorage* s = inputs[i];
    if (s != nullptr && s->param_epoch == trace.epoch && s->param_node != nullptr) {
      found.emplace(s->param_node->index, static_cast<int>(i));
    }
  }
  return found;
}

uint64_t SlotU64(const LaunchRecord& r, int slot) {
  uint64_t v;
  std::memcpy(&v, r.slot_bytes[static_cast<size_t>(ElementType::kU64)].data() + 8 * slot, 8);
  return v;
}

// The random draws' offsets relative to the generator's offset before the call; false when a
// draw used another generator (its seed differs or its offset lies outside the call's range).
bool RelativeDraws(const LaunchRecord& r, uint64_t seed, uint64_t begin, uint64_t end, CapturedGraph* g) {
  g->draws = r.draws;
  for (const RandomDraw& d : r.draws) {
    uint64_t offset = SlotU64(r, d.offset_slot);
    if (SlotU64(r, d.seed_slot) != seed || offset < begin || offset >= end) return false;
    g->draw_offsets.push_back(offset - begin);
  }
  g->rng_increment = end - begin;
  return true;
}

// Where each output lives on a replay: an input's storage (checked first, so an output that
// aliases an overwritten input stays that input), else a program result.
bool MapOutputs(const std::vector<LazyStorage*>& inputs, const std::vector<LazyStorage*>& outputs,
                const LaunchRecord& r, CapturedGraph* g) {
  for (LazyStorage* s : outputs) {
    OutputSource o;
    o.nbytes = s->nbytes();
    o.input = IndexOf(inputs, s);
    if (o.input < 0) o.result = IndexOf(r.targets, s);
    // An empty storage holds nothing to compute (mkldnn_rnn_layer's workspace): a replay makes one.
    if (o.input < 0 && o.result < 0 && o.nbytes != 0) return false;
    g->outputs.push_back(o);
  }
  return true;
}

// Takes the scalar inputs out of the trace's writes, so the capture's program does not return
// them: each still holds its value scalar (else the function wrote it, or returns it, and a replay
// would have no storage to give it) and now also gets a buffer of its value, for whoever keeps the
// tensor after the call. Returns why not, or null.
const char* ReleaseScalarInputs(const std::vector<LazyStorage*>& inputs,
                                const std::vector<LazyStorage*>& outputs,
                                const std::vector<ScalarInput>& scalars, const DeviceTrace& trace) {
  for (const ScalarInput& in : scalars) {
    LazyStorage* s = inputs[in.input];
    if (!s->has_pending() || s->pending().node.get() != in.value.node.get()) return "it writes a 0-d CPU input";
    if (IndexOf(outputs, s) >= 0) return "it returns a 0-d CPU input";
  }
  for (const ScalarInput& in : scalars) {
    LazyStorage* s = inputs[in.input];
    ForgetDirty(s);
    const std::string& bytes = trace.slot_bytes[static_cast<size_t>(in.dtype)];
    s->SetBuffer(runtime::Buffer::FromHost(runtime::GetClient(), s->device(), in.dtype, {},
                                           bytes.data() + ItemSize(in.dtype) * in.slot));
  }
  return nullptr;
}

}  // namespace

ScalarInput BindScalarInput(int input, LazyStorage* s, ElementType dtype, const void* bytes) {
  GraphLock lock;
  ScalarInput in;
  in.input = input;
  in.dtype = dtype;
  in.value = MakeSlot(s->device(), dtype, bytes);
  in.slot = in.value.node->index;
  s->SetPending(in.value);
  return in;
}

uint64_t BeginCapture(int device, const std::vector<LazyStorage*>& inputs,
                      const std::vector<ElementType>& dtypes) {
  GraphLock lock;
  PrepareInputs(inputs, dtypes);
  SyncDevice(device, SyncCause::kCompiledCall);  // the capture's trace holds the function alone
  DeviceTrace& trace = Trace(device);
  trace.capture_epoch = trace.epoch;  // EndIdleEpoch leaves it to FinishCapture
  return trace.epoch;
}

std::shared_ptr<CapturedGraph> FinishCapture(int device, uint64_t epoch,
                                             const std::vector<LazyStorage*>& inputs,
                                             const std::vector<LazyStorage*>& outputs,
                                             std::vector<ScalarInput> scalars, uint64_t rng_seed, uint64_t rng_begin, uint64_t rng_end,
                                             CaptureRefusal* refusal) {
  GraphLock lock;
  DeviceTrace& trace = Trace(device);
  if (trace.epoch != epoch) {
    refusal->reason = "its trace was cut by a sync point inside it (a CPU fallback, a read to the "
                      "host or the pending-size bound)";
    return nullptr;
  }
  if (trace.uncut_reads != 0) {
    const std::string& where = trace.first_uncut_read;
    refusal->reason = "it reads a value to the host" + (where.empty() ? std::string() : " (" + where + ")") +
                      " (a replay would not read it afresh)";
    return nullptr;
  }
  if (const char* stray = FindStrayWrite(trace, inputs, outputs)) {
    refusal->reason = stray;
    return nullptr;
  }
  if (const char* why = ReleaseScalarInputs(inputs, outputs, scalars, trace)) {
    refusal->reason = why;
    return nullptr;
  }
  auto g = std::make_shared<CapturedGraph>();
  g->device = device;
  g->traced_ops = trace.op_nodes;
  std::unordered_map<int, int> param_inputs = ParamInputs(trace, inputs);
  LaunchRecord r;
  for (LazyStorage* s : inputs) {
    if (s != nullptr) r.aliasable.push_back(s);
  }
  SyncDevice(device, SyncCause::kCompiledCall, &r);
  g->compiled = r.compiled;
  g->aliases = r.aliases;
  for (size_t k = 0; k < r.params.size(); ++k) {
    auto it = param_inputs.find(static_cast<int>(k));
    g->params.push_back(it != param_inputs.end() ? ParamSource{it->second, nullptr} : ParamSource{-1, r.params[k]});
  }
  g->slot_bytes = r.slot_bytes;
  g->slot_count = r.slot_count;
  g->scalar_inputs = std::move(scalars);
  for (ScalarInput& in : g->scalar_inputs) in.value = Value();  // only the capture compares it
  for (LazyStorage* t : r.targets) g->result_inputs.push_back(IndexOf(inputs, t));
  g->input_groups = InputGroups(inputs);
  g->check_errors = r.check_errors;
  if (!RelativeDraws(r, rng_seed, rng_begin, rng_end, g.get())) {
    refusal->reason = "a random op in it draws from a generator other than the device's default";
    return nullptr;
  }
  if (!MapOutputs(inputs, outputs, r, g.get())) {
    refusal->reason = "it returns a tensor that is neither an input nor computed by it";
    return nullptr;
  }
  Metrics::Increment(Counter::kGraphsCaptured);
  return g;
}

bool InputsMatch(const CapturedGraph& g, const std::vector<LazyStorage*>& inputs,
                 const std::vector<ElementType>& dtypes) {
  if (inputs.size() != g.input_groups.size() || InputGroups(inputs) != g.input_groups) return false;
  for (const ScalarInput& in : g.scalar_inputs) {
    if (inputs[in.input] != nullptr) return false;
  }
  GraphLock lock;
  if (PrepareInputs(inputs, dtypes)) SyncDevice(g.device, SyncCause::kCompiledCall);
  if (!g.compiled) return true;
  for (size_t k = 0; k < g.params.size(); ++k) {
    if (g.params[k].input < 0) continue;
    const LazyStorage* s = inputs[g.params[k].input];
    const runtime::Buffer& b = *s->buffer();
    const TensorType& want = g.compiled->arg_types[k];
    if (s->device() != g.device || !HasType(b, want)) return false;
  }
  return true;
}

namespace {

// The value-scalar arrays of one replay: the captured ones with the random draws re-seeded and
// the scalar inputs' values written in.
std::vector<std::shared_ptr<runtime::Buffer>> SlotBuffers(const CapturedGraph& g,
                                                          const std::vector<const void*>& scalar_bytes,
                                                          uint64_t seed, uint64_t offset) {
  if (g.draws.empty() && g.scalar_inputs.empty()) {
    if (g.fixed_slots.empty()) g.fixed_slots = UploadValueScalars(g.compiled->client, g.device, g.slot_bytes, g.slot_count);
    return g.fixed_slots;
  }
  std::array<std::string, kNumElementTypes> bytes = g.slot_bytes;
  for (const ScalarInput& in : g.scalar_inputs) {
    size_t size = ItemSize(in.dtype);
    std::memcpy(&bytes[static_cast<size_t>(in.dtype)][size * in.slot], scalar_bytes[in.input], size);
  }
  std::string& u64 = bytes[static_cast<size_t>(ElementType::kU64)];
  for (size_t d = 0; d < g.draws.size(); ++d) {
    uint64_t draw_offset = offset + g.draw_offsets[d];
    std::memcpy(&u64[8 * g.draws[d].seed_slot], &seed, 8);
    std::memcpy(&u64[8 * g.draws[d].offset_slot], &draw_offset, 8);
  }
  return UploadValueScalars(g.compiled->client, g.device, bytes, g.slot_count);
}

}  // namespace

std::vector<std::shared_ptr<runtime::Buffer>> Replay(const CapturedGraph& g,
                                                     const std::vector<LazyStorage*>& inputs,
                                                     const std::vector<const void*>& scalar_bytes,
                                                     uint64_t rng_seed, uint64_t rng_offset) {
  GraphLock lock;
  Metrics::Increment(Counter::kGraphReplays);
  if (!g.compiled) return {};
  // Overwritten inputs give their buffers to their new values unless something else holds them
  // besides their storage (a pending trace, a captured constant): asked before `arguments` below
  // holds them too.
  LaunchDonations d;
  for (const auto& [param, result] : g.aliases) d.Add(param, inputs[g.params[param].input]->buffer());
  // Parameters, then the value-scalar arrays (the order LowerTrace declared them in).
  std::vector<std::shared_ptr<runtime::Buffer>> arguments;
  for (const ParamSource& p : g.params) arguments.push_back(p.input >= 0 ? inputs[p.input]->buffer() : p.constant);
  for (auto& b : SlotBuffers(g, scalar_bytes, rng_seed, rng_offset)) arguments.push_back(std::move(b));
  std::vector<std::shared_ptr<runtime::Buffer>> read = arguments;
  std::vector<std::shared_ptr<runtime::Buffer>> results = Launch(*g.compiled, std::move(arguments), g.device, std::move(d));
  // Earlier graphs' index checks are not waited for (that would stall the host until they ran):
  // results computed from what they guard are guarded too.
  PropagateIndexChecks(g.device, read, results);
  // Its own index checks are settled at the next sync point, as for a traced graph.
  if (!g.check_errors.empty()) ExpectIndexChecks(g.device, results, g.check_errors, g.compiled->check_dependents);
  for (size_t r = 0; r < g.result_inputs.size(); ++r) {
    if (g.result_inputs[r] >= 0) inputs[g.result_inputs[r]]->SetBuffer(results[r]);
  }
  return results;
}

}  // namespace torch_pjrt::graph
