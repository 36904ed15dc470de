// Captured graphs: a function traced once and launched again without tracing (the torch.compile
// backend, docs/design.md "torch.compile"). The first call traces as usual and ends with a sync
// that records which program parameter is which input, which result is which output, and where
// the random ops' seeds sit among the value scalars. A replay checks that its inputs look the same
// (types, shapes, aliasing), rewrites the seeds and launches the cached executable.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "graph/executor.h"

namespace torch_pjrt::graph {

struct CompiledGraph;

// Where a replay gets each program parameter.
struct ParamSource {
  int input = -1;                            // an input's storage buffer, or
  std::shared_ptr<runtime::Buffer> constant;  // a buffer the function captured (input == -1)
};

// Where a captured function's output tensor lives after a replay.
struct OutputSource {
  int result = -1;  // a program result (a fresh storage of `nbytes`), or
  int input = -1;   // the storage of an input (an alias that the function did not write), or
  size_t nbytes = 0;  // neither (both -1): a new empty storage
};

// A 0-d CPU input of a captured function (an optimizer's step count or bias correction), read in
// the program as a value scalar: a replay writes it into the value-scalar array it uploads anyway,
// where a parameter would cost one host-to-device upload per scalar per call.
struct ScalarInput {
  int input = -1;
  ElementType dtype = ElementType::kInvalid;
  int slot = 0;  // its position in the dtype's value-scalar array
  Value value;   // what the capture stored in its storage (a write by the function replaces it)
};

struct CapturedGraph {
  int device = 0;
  std::shared_ptr<CompiledGraph> compiled;  // null when the function computes nothing
  std::vector<ParamSource> params;
  std::array<std::string, kNumElementTypes> slot_bytes;
  std::array<int32_t, kNumElementTypes> slot_count{};
  std::vector<ScalarInput> scalar_inputs;
  // The uploaded value-scalar arrays, when no replay changes them (no draws, no scalar inputs):
  // made by the first replay, never aliased to a result.
  mutable std::vector<std::shared_ptr<runtime::Buffer>> fixed_slots;
  std::vector<RandomDraw> draws;
  std::vector<uint64_t> draw_offsets;  // each draw's offset minus the generator's at capture
  uint64_t rng_increment = 0;          // how far one call advances the generator
  std::vector<int> result_inputs;      // per result: the input it overwrites, or -1
  // (parameter, result) pairs the program may write in place: an overwritten input's buffer,
  // donated by a replay when its storage is all that holds it, else copied by PJRT.
  std::vector<std::pair<int, int>> aliases;
  std::vector<OutputSource> outputs;
  std::vector<int> input_groups;  // per input: the first input sharing its storage
  std::vector<CheckError> check_errors;
  int64_t traced_ops = 0;  // op nodes the first call traced (what each replay saves)
};

// Why a function could not be captured; its calls then trace every time (still correct).
struct CaptureRefusal {
  std::string reason;
};

// Makes `s`, a new 0-d storage standing for input `input` (a 0-d CPU tensor holding `bytes`), hold
// a fresh value scalar for the rest of this capture. Call after BeginCapture.
ScalarInput BindScalarInput(int input, LazyStorage* s, ElementType dtype, const void* bytes);

// Starts recording on `device`: syncs what is pending (so the capture's trace holds the function
// alone), gives every input a buffer (`dtypes`: their element types, for never-written ones) and
// returns the epoch that must still be current at FinishCapture. Inputs may be null (scalar inputs,
// bound after this).
uint64_t BeginCapture(int device, const std::vector<LazyStorage*>& inputs,
                      const std::vector<ElementType>& dtypes);

// Ends the first call: launches its trace (sync cause compiled_call) and describes it. `inputs`
// and `outputs` are the storages of the function's tensor arguments and results (in order);
// `rng_begin`/`rng_end` the default generator's offset before and after, `rng_seed` its seed.
// Returns null and sets `refusal` when the trace cannot be replayed (it was cut by a fallback or
// the size bound, it wrote a storage that is neither an input nor an output, a random op used
// another generator, it wrote or returned a scalar input); the first call's results are correct
// either way. `scalars` are the inputs BindScalarInput bound.
std::shared_ptr<CapturedGraph> FinishCapture(int device, uint64_t epoch,
                                             const std::vector<LazyStorage*>& inputs,
                                             const std::vector<LazyStorage*>& outputs,
                                             std::vector<ScalarInput> scalars,
                                             uint64_t rng_seed, uint64_t rng_begin, uint64_t rng_end,
                                             CaptureRefusal* refusal);

// Whether `inputs` can replay `g`: same aliasing, and each parameter input's buffer of the type
// the program was compiled for. Materializes pending or never-written inputs (a sync). Scalar
// inputs' storages are null.
bool InputsMatch(const CapturedGraph& g, const std::vector<LazyStorage*>& inputs,
                 const std::vector<ElementType>& dtypes);

// Launches `g` on `inputs` (which InputsMatch accepted) with the generator at (seed, offset);
// `scalar_bytes[i]` is scalar input i's value (the host bytes of the 0-d CPU tensor). Overwritten
// inputs get their new buffers; returns one buffer per result.
std::vector<std::shared_ptr<runtime::Buffer>> Replay(const CapturedGraph& g,
                                                     const std::vector<LazyStorage*>& inputs,
                                                     const std::vector<const void*>& scalar_bytes,
                                                     uint64_t rng_seed, uint64_t rng_offset);

}  // namespace torch_pjrt::graph
