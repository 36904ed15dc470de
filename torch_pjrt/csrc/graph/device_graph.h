// Device graphs: torch.accelerator.Graph on pjrt (docs/design.md "Device graphs"). A region of a
// program (typically a whole training step: forward, backward, optimizer) is traced once, compiled
// into one executable and then replayed on the same storages, with no tracing and no Python:
// a replay reads the current buffers of the storages the region read and gives the storages it
// wrote their new buffers. Like a CUDA graph capture, the capture itself leaves every storage as
// it found it; only replays apply the region's effects.
#pragma once

#include <memory>
#include <vector>

#include "graph/capture.h"

namespace torch_pjrt::graph {

// A storage a device graph reads or writes. When the tensors over it die, the graph keeps its
// contents in a storage of its own (`orphan`), shared by every graph that used it, so graphs
// chained through it (one's output another's input) still meet.
struct GraphStorage {
  LazyStorage* storage = nullptr;
  std::shared_ptr<LazyStorage> orphan;
};

// One program of a device graph and the storages it reads and writes (its inputs, in order).
struct GraphSegment {
  std::shared_ptr<CapturedGraph> captured;
  std::vector<std::shared_ptr<GraphStorage>> storages;
};

struct DeviceGraph {
  DeviceGraph() = default;
  DeviceGraph(const DeviceGraph&) = delete;
  DeviceGraph& operator=(const DeviceGraph&) = delete;
  ~DeviceGraph();

  // Launched in order; usually one. A training step whose backward is mostly host kernels is two:
  // the forward and backward, then the optimizer (SplitDeviceGraphCapture).
  std::vector<GraphSegment> segments;
  uint64_t rng_increment = 0;  // how far a replay advances the generator
};

// Whether `device` (-1: any device) is capturing a device graph. While it is, syncs raise (a replay could not
// repeat a read to the host), and the optimizer-step launch and the pending-size bound do not cut
// the trace.
bool CapturingDeviceGraph(int device);

// Whether a device graph is being captured on `s`'s device and `s` was made before it began: then
// reading it, never written, gives it a zero buffer (an input a replay reads afresh, where a traced
// zeros constant would be baked into the program). Storages made in the region read as zeros.
bool MadeBeforeCapture(const LazyStorage* s);

// Starts capturing on `device`: launches what is pending first, so the capture holds the region
// alone.
// The default generator's (seed, offset) at the start are where the region's draws count from.
void BeginDeviceGraphCapture(int device, uint64_t rng_seed, uint64_t rng_begin);

// Ends the capture: compiles the region's trace (running it once, then putting back every storage
// it wrote, as they were before the capture) and returns the graph. The generator's offset
// advanced to `rng_end` during the region. Throws std::runtime_error, with the capture ended,
// when the region cannot be replayed.
std::shared_ptr<DeviceGraph> EndDeviceGraphCapture(int device, uint64_t rng_end);

// Ends the capture's current program and starts the next on what it wrote: called where a lazy
// step would launch its backward apart (LaunchBeforeOptimizerStep), since the same work ran
// 15-30% slower as one program (ResNet-18 training, docs/design.md "Device graphs"). A region
// that cannot be split there stays one program.
void SplitDeviceGraphCapture(int device);

// Launches `g` with the generator at (seed, offset): one execution per segment (plus one that first
// gives its inputs buffers of the captured types, when one was written lazily since or reshaped).
void ReplayDeviceGraph(const DeviceGraph& g, uint64_t rng_seed, uint64_t rng_offset);

// Called by a dying storage: device graphs that use it move its contents to their orphan.
void OrphanGraphStorage(LazyStorage* dying);

}  // namespace torch_pjrt::graph
