#include "graph/device_graph.h"

#include <algorithm>
#include <stdexcept>
#include <unordered_map>

#include "graph/compile_cache.h"

namespace torch_pjrt::graph {

namespace {

// A device's capture in progress: each storage's buffer at its start (with the storage's id, since
// a storage that dies in the region may leave its address to a new one), to put back after the
// capture's run.
struct CaptureState {
  uint64_t first_new_id = 0;  // storages with this id or later were made in the region
  std::unordered_map<const LazyStorage*, std::pair<uint64_t, std::shared_ptr<runtime::Buffer>>> before;
  uint64_t epoch = 0;                      // the trace epoch of the segment being captured
  uint64_t rng_seed = 0, rng_begin = 0;    // the default generator's at the capture's start
  std::vector<GraphSegment> done;          // segments ended by SplitDeviceGraphCapture
  std::vector<LazyStorage*> written;       // by those segments' runs: put back at the end
  CaptureRefusal refusal;                  // why a split found the region could not be replayed
};

std::unordered_map<int, CaptureState>& Captures() {
  static auto* captures = new std::unordered_map<int, CaptureState>;
  return *captures;
}

// The graphs' storages (orphans included) and the GraphStorage entries naming them.
std::unordered_map<const LazyStorage*, std::vector<GraphStorage*>>& Users() {
  static auto* users = new std::unordered_map<const LazyStorage*, std::vector<GraphStorage*>>;
  return *users;
}

CaptureState SnapshotBuffers(int device) {
  CaptureState state;
  LazyStorage::ForEach([&](LazyStorage* s) {
    state.first_new_id = std::max(state.first_new_id, s->id() + 1);
    if (s->device() == device && s->has_buffer()) state.before[s] = {s->id(), s->buffer()};
  });
  return state;
}

// The storages the region read (program parameters) or wrote, and those it wrote.
void RegionStorages(int device, uint64_t epoch, std::vector<LazyStorage*>* touched,
                    std::vector<LazyStorage*>* written) {
  LazyStorage::ForEach([&](LazyStorage* s) {
    if (s->device() != device) return;
    bool read = s->param_epoch == epoch && s->param_node != nullptr;
    bool wrote = s->dirty_epoch == epoch && s->has_pending();
    if (read || wrote) touched->push_back(s);
    if (wrote) written->push_back(s);
  });
}

// After the capture's run: what the region wrote goes back to its buffer from before the capture,
// or to never written (a storage made in the region, as a CUDA graph's outputs before the first
// replay).
void RestoreWritten(const std::vector<LazyStorage*>& written, const CaptureState& state) {
  for (LazyStorage* s : written) {
    auto it = state.before.find(s);
    if (it != state.before.end() && it->second.first == s->id()) {
      s->SetBuffer(it->second.second);
    } else {
      s->Clear();
    }
  }
}

std::shared_ptr<GraphStorage> Track(LazyStorage* s) {
  auto gs = std::make_shared<GraphStorage>();
  gs->storage = s;
  Users()[s].push_back(gs.get());
  return gs;
}

TensorView ContiguousView(const TensorType& t) {
  TensorView v;
  v.dtype = t.dtype;
  v.sizes = t.dims;
  v.strides = t.dims;
  int64_t stride = 1;
  for (size_t d = t.dims.size(); d-- > 0;) {
    v.strides[d] = stride;
    stride *= t.dims[d];
  }
  return v;
}

// Gives every storage the program reads a buffer of the type it was compiled for. A pending value
// (written lazily since), a never-written storage (made in the region: zeros) or a buffer of
// another shape (a host copy takes its source's) become one, all in one sync. A failed storage or
// a poisoned buffer raises its error, as any read of it does (ReadTensor).
void ReadyParams(const CapturedGraph& g, const std::vector<LazyStorage*>& inputs) {
  bool sync = false;
  for (size_t k = 0; k < g.params.size(); ++k) {
    if (g.params[k].input < 0) continue;
    LazyStorage* s = inputs[g.params[k].input];
    const TensorType& want = g.compiled->arg_types[k];
    if (s->has_buffer() && !s->buffer()->poison() && HasType(*s->buffer(), want)) continue;
    s->SetPending(ReadTensor(s, ContiguousView(want)));
    sync = true;
  }
  if (sync) SyncDevice(g.device, SyncCause::kCompiledCall);
}

// Captures the trace since `state.epoch` as a segment: runs it once (its writes are put back when
// the whole capture ends). Draws count from the capture's start in every segment; `rng_end` bounds
// them (the generator's offset at the capture's end, or unbounded before it).
bool FinishSegment(int device, CaptureState& state, uint64_t rng_end, GraphSegment* segment, CaptureRefusal* refusal) {
  std::vector<LazyStorage*> touched, written;
  RegionStorages(device, state.epoch, &touched, &written);
  segment->captured = FinishCapture(device, state.epoch, touched, /*outputs=*/{}, /*scalars=*/{}, state.rng_seed,
                                    state.rng_begin, rng_end, refusal);
  state.written.insert(state.written.end(), written.begin(), written.end());
  if (!segment->captured) return false;
  for (LazyStorage* s : touched) segment->storages.push_back(Track(s));
  return true;
}

}  // namespace

DeviceGraph::~DeviceGraph() {
  GraphLock lock;
  for (const GraphSegment& segment : segments) {
    for (const auto& gs : segment.storages) {
      auto it = Users().find(gs->storage);
      if (it == Users().end()) continue;
      auto& list = it->second;
      list.erase(std::remove(list.begin(), list.end(), gs.get()), list.end());
      if (list.empty()) Users().erase(it);
    }
  }
}

bool CapturingDeviceGraph(int device) {
  GraphLock lock;
  if (Captures().empty()) return false;
  return device < 0 || Captures().count(device) > 0;
}

bool MadeBeforeCapture(const LazyStorage* s) {
  GraphLock lock;
  if (Captures().empty()) return false;
  auto it = Captures().find(s->device());
  return it != Captures().end() && s->id() < it->second.first_new_id;
}

void BeginDeviceGraphCapture(int device, uint64_t rng_seed, uint64_t rng_begin) {
  GraphLock lock;
  if (Captures().count(device) > 0) {
    throw std::runtime_error("pjrt: a graph is already being captured on pjrt:" + std::to_string(device) +
                             "; end that capture (capture_end) before starting another");
  }
  SyncDevice(device, SyncCause::kCompiledCall);  // the capture's trace holds the region alone
  CaptureState state = SnapshotBuffers(device);
  state.epoch = Trace(device).epoch;
  state.rng_seed = rng_seed;
  state.rng_begin = rng_begin;
  Captures()[device] = std::move(state);
}

void SplitDeviceGraphCapture(int device) {
  GraphLock lock;
  auto found = Captures().find(device);
  if (found == Captures().end()) return;
  CaptureState& state = found->second;
  // A refusal before the launch leaves the trace whole, and capture_end refuses it again; after
  // the launch (a draw from another generator), capture_end reports it.
  GraphSegment segment;
  if (!FinishSegment(device, state, UINT64_MAX, &segment, &state.refusal)) return;
  state.done.push_back(std::move(segment));
  state.epoch = Trace(device).epoch;
}

std::shared_ptr<DeviceGraph> EndDeviceGraphCapture(int device, uint64_t rng_end) {
  GraphLock lock;
  auto found = Captures().find(device);
  if (found == Captures().end()) {
    throw std::runtime_error("pjrt: capture_end() without a capture_begin() on pjrt:" + std::to_string(device));
  }
  CaptureState state = std::move(found->second);
  Captures().erase(found);
  auto g = std::make_shared<DeviceGraph>();
  g->segments = std::move(state.done);
  g->rng_increment = rng_end - state.rng_begin;
  GraphSegment last;
  CaptureRefusal refusal = state.refusal;
  bool captured = refusal.reason.empty() && FinishSegment(device, state, rng_end, &last, &refusal);
  if (Trace(device).epoch == state.epoch) SyncDevice(device, SyncCause::kCompiledCall);  // refused before its launch
  RestoreWritten(state.written, state);
  if (!captured) {
    throw std::runtime_error("pjrt: the captured region cannot be replayed: " + refusal.reason +
                             ". Keep host reads, CPU fallbacks and data-dependent shapes out of the region.");
  }
  g->segments.push_back(std::move(last));
  return g;
}

void ReplayDeviceGraph(const DeviceGraph& g, uint64_t rng_seed, uint64_t rng_offset) {
  GraphLock lock;
  for (const GraphSegment& segment : g.segments) {
    const CapturedGraph& captured = *segment.captured;
    if (CapturingDeviceGraph(captured.device)) {
      throw std::runtime_error("pjrt: a graph cannot be replayed while another is being captured on pjrt:" +
                               std::to_string(captured.device));
    }
    std::vector<LazyStorage*> inputs;
    inputs.reserve(segment.storages.size());
    for (const auto& gs : segment.storages) inputs.push_back(gs->storage);
    if (captured.compiled) ReadyParams(captured, inputs);
    Replay(captured, inputs, std::vector<const void*>(inputs.size(), nullptr), rng_seed, rng_offset);
  }
}

void OrphanGraphStorage(LazyStorage* dying) {
  auto& users = Users();
  if (users.empty()) return;  // every storage's destructor asks: keep the common case cheap
  auto it = users.find(dying);
  if (it == users.end()) return;
  auto orphan = std::make_shared<LazyStorage>(dying->device(), dying->nbytes());
  if (dying->error()) {
    orphan->SetError(dying->error());
  } else if (dying->has_pending()) {
    orphan->SetPending(dying->pending());
  } else if (dying->has_buffer()) {
    orphan->SetBuffer(dying->buffer());
  }
  std::vector<GraphStorage*> list = std::move(it->second);
  users.erase(it);
  for (GraphStorage* gs : list) {
    gs->storage = orphan.get();
    gs->orphan = orphan;
  }
  users[orphan.get()] = std::move(list);
}

}  // namespace torch_pjrt::graph
