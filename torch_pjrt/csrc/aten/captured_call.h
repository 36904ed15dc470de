// torch.compile's replay path at the tensor level (graph/capture.h does the graph work): turns
// a compiled function's tensor arguments into storages, reads the pjrt generator, and rebuilds
// the function's output tensors over the replay's result buffers.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "graph/capture.h"

namespace torch_pjrt::aten {

// A captured function: the graph and the views its outputs had on the first call.
struct CapturedCall {
  std::shared_ptr<graph::CapturedGraph> graph;
  struct OutputView {
    std::vector<int64_t> sizes, strides;
    int64_t storage_offset = 0;
    c10::ScalarType dtype;
    // An earlier output that was this very tensor: a replay returns that one again, not a second
    // tensor over the same storage (autograd would hand both to parameters as their .grad,
    // unshared; AOTAutograd returns one tensor twice where a Meta kernel does, as
    // mkldnn_rnn_layer_backward's does for the two bias gradients).
    int same_as = -1;
  };
  std::vector<OutputView> outputs;
  // Each argument as the first call saw it: a replay takes only arguments that look the same
  // (device, dtype, sizes, strides, offset), so callers need no signature of their own.
  struct InputView {
    c10::Device device = c10::Device(c10::kCPU);
    c10::ScalarType dtype;
    std::vector<int64_t> sizes, strides;
    int64_t storage_offset = 0;
  };
  std::vector<InputView> inputs;
};

// The first call's bracket: state taken before the function runs.
struct CaptureStart {
  int device = 0;
  uint64_t epoch = 0;
  uint64_t rng_seed = 0, rng_offset = 0;
  std::vector<graph::ScalarInput> scalars;  // the 0-d CPU inputs, as value scalars
  std::vector<CapturedCall::InputView> inputs;  // the arguments as given
};

// The default generator of `device`: its (seed, offset), the offset then advanced by `increment`
// (what one replay draws).
std::pair<uint64_t, uint64_t> TakeRandomOffsets(int device, uint64_t increment);

// Syncs pending work and gives every input a buffer. Inputs are pjrt tensors on one device and 0-d
// CPU tensors, which are replaced by pjrt tensors holding a value scalar (the function must be
// called with those; replays write the CPU value into that scalar).
CaptureStart BeginCapture(std::vector<at::Tensor>* inputs);
// After the function ran on `inputs` and returned `outputs` (pjrt tensors): launches its trace and
// returns the captured call, or null with `reason` saying why it cannot be replayed.
std::shared_ptr<CapturedCall> FinishCapture(const CaptureStart& start, const std::vector<at::Tensor>& inputs,
                                            const std::vector<at::Tensor>& outputs, std::string* reason);
// Runs the captured call on new inputs (0-d CPU tensors' values go in its value-scalar arrays);
// nullopt when they do not match the capture (other devices, dtypes, shapes, strides, offsets,
// buffer layouts or aliasing: the caller captures again).
std::optional<std::vector<at::Tensor>> Replay(const CapturedCall& call, const std::vector<at::Tensor>& inputs);

}  // namespace torch_pjrt::aten
