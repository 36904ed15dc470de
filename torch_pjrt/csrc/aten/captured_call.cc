#include "aten/captured_call.h"

#include <ATen/core/Generator.h>
#include <ATen/Context.h>
#include <ATen/ops/full.h>
#include <c10/core/TensorImpl.h>

#include <cstring>
#include <optional>

#include "aten/lazy_tensor.h"
#include "aten/transfer.h"

namespace torch_pjrt::aten {

namespace {

int CommonDevice(const std::vector<at::Tensor>& tensors) {
  int device = -1;
  for (const at::Tensor& t : tensors) {
    if (!IsPjrt(t)) continue;
    if (device < 0) device = t.device().index();
    TORCH_CHECK(t.device().index() == device, "Expected all tensors to be on the same device, but found at "
                "least two devices, pjrt:", device, " and pjrt:", int(t.device().index()), "!");
  }
  return device < 0 ? CurrentDevice() : device;
}

// The tensors' storages; null for CPU tensors (a replay's scalar inputs).
std::vector<graph::LazyStorage*> Storages(const std::vector<at::Tensor>& tensors) {
  std::vector<graph::LazyStorage*> out;
  out.reserve(tensors.size());
  for (const at::Tensor& t : tensors) out.push_back(IsPjrt(t) ? StorageOf(t) : nullptr);
  return out;
}

void CheckScalarInput(const at::Tensor& t) {
  TORCH_CHECK(t.device().is_cpu() && t.dim() == 0, "pjrt: a captured graph takes pjrt tensors and 0-d "
              "CPU tensors, got a ", t.dim(), "-d tensor on ", t.device());
}

std::vector<ElementType> ElementTypes(const std::vector<at::Tensor>& tensors) {
  std::vector<ElementType> out;
  out.reserve(tensors.size());
  for (const at::Tensor& t : tensors) out.push_back(ToElementType(t.scalar_type()));
  return out;
}

at::Tensor ViewOver(const c10::Storage& storage, const CapturedCall::OutputView& v) {
  return TensorOver(storage, v.sizes, v.strides, v.storage_offset, v.dtype);
}

// A 0-d CPU input (an optimizer's step count) as a pjrt tensor holding a value scalar of its
// value: the program reads it from the value-scalar array, which a replay rewrites.
at::Tensor ScalarInputTensor(const at::Tensor& cpu, int input, int device, std::vector<graph::ScalarInput>* scalars) {
  at::Tensor scalar = EmptyContiguous({}, cpu.scalar_type(), static_cast<c10::DeviceIndex>(device));
  scalars->push_back(graph::BindScalarInput(input, StorageOf(scalar), ToElementType(cpu.scalar_type()),
                                            cpu.const_data_ptr()));
  return scalar;
}

// The value scalar of a pending fill (graph::PendingFillScalar), for the slot types Python numbers
// and 0-d tensors use.
std::optional<c10::Scalar> PendingFill(const graph::LazyStorage* s) {
  ElementType type;
  std::string bytes;
  if (!graph::PendingFillScalar(s, &type, &bytes)) return std::nullopt;
  auto read = [&](auto v) { std::memcpy(&v, bytes.data(), sizeof(v)); return v; };
  switch (type) {
    case ElementType::kF64: return c10::Scalar(read(double{}));
    case ElementType::kF32: return c10::Scalar(read(float{}));
    case ElementType::kS64: return c10::Scalar(read(int64_t{}));
    case ElementType::kS32: return c10::Scalar(read(int32_t{}));
    case ElementType::kBool: return c10::Scalar(read(bool{}));
    default: return std::nullopt;
  }
}

// Replay inputs that are pending fills (the backward's seed, ones_like(loss), made by autograd
// outside the graph) are uploaded from the host: executing the trace to make them would cost
// one more execution per call, and wait for the one still running.
void UploadPendingFills(const std::vector<at::Tensor>& inputs) {
  for (const at::Tensor& t : inputs) {
    if (!IsPjrt(t) || !CoversStorage(t)) continue;
    std::optional<c10::Scalar> value;
    {
      graph::GraphLock lock;
      value = PendingFill(StorageOf(t));
    }
    if (value) CopyFromHost(at::full(t.sizes(), *value, t.options().device(c10::kCPU)), t);
  }
}

// Per input: the host bytes of a 0-d CPU tensor's value, null for pjrt tensors.
std::vector<const void*> ScalarBytes(const std::vector<at::Tensor>& inputs) {
  std::vector<const void*> out;
  out.reserve(inputs.size());
  for (const at::Tensor& t : inputs) out.push_back(IsPjrt(t) ? nullptr : t.const_data_ptr());
  return out;
}

bool LookAlike(const std::vector<at::Tensor>& inputs, const std::vector<CapturedCall::InputView>& seen) {
  if (inputs.size() != seen.size()) return false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const at::Tensor& t = inputs[i];
    const CapturedCall::InputView& v = seen[i];
    if (t.device() != v.device || t.scalar_type() != v.dtype || t.storage_offset() != v.storage_offset ||
        t.sizes() != c10::IntArrayRef(v.sizes) || t.strides() != c10::IntArrayRef(v.strides)) {
      return false;
    }
  }
  return true;
}

}  // namespace

std::pair<uint64_t, uint64_t> TakeRandomOffsets(int device, uint64_t increment) {
  return ReserveRandomOffsets(DefaultGenerator(device), increment);
}

CaptureStart BeginCapture(std::vector<at::Tensor>* inputs) {
  CaptureStart start;
  start.device = CommonDevice(*inputs);
  for (const at::Tensor& t : *inputs) {
    if (!IsPjrt(t)) CheckScalarInput(t);
    start.inputs.push_back({t.device(), t.scalar_type(), t.sizes().vec(), t.strides().vec(), t.storage_offset()});
  }
  start.epoch = graph::BeginCapture(start.device, Storages(*inputs), ElementTypes(*inputs));
  for (size_t i = 0; i < inputs->size(); ++i) {
    at::Tensor& t = (*inputs)[i];
    if (!IsPjrt(t)) t = ScalarInputTensor(t, static_cast<int>(i), start.device, &start.scalars);
  }
  std::tie(start.rng_seed, start.rng_offset) = TakeRandomOffsets(start.device, 0);
  return start;
}

std::shared_ptr<CapturedCall> FinishCapture(const CaptureStart& start, const std::vector<at::Tensor>& inputs,
                                            const std::vector<at::Tensor>& outputs, std::string* reason) {
  for (const at::Tensor& t : outputs) {
    if (!IsPjrt(t) || t.device().index() != start.device) {
      *reason = "it returns a tensor on " + t.device().str() + ", not on pjrt:" + std::to_string(start.device);
      return nullptr;
    }
  }
  uint64_t rng_end = TakeRandomOffsets(start.device, 0).second;
  graph::CaptureRefusal refusal;
  auto graph = graph::FinishCapture(start.device, start.epoch, Storages(inputs), Storages(outputs),
                                    start.scalars, start.rng_seed, start.rng_offset, rng_end, &refusal);
  if (!graph) {
    *reason = refusal.reason;
    return nullptr;
  }
  auto call = std::make_shared<CapturedCall>();
  call->graph = std::move(graph);
  for (size_t i = 0; i < outputs.size(); ++i) {
    const at::Tensor& t = outputs[i];
    call->outputs.push_back({t.sizes().vec(), t.strides().vec(), t.storage_offset(), t.scalar_type()});
    for (size_t j = 0; j < i && call->outputs[i].same_as < 0; ++j) {
      if (outputs[j].is_same(t)) call->outputs[i].same_as = static_cast<int>(j);
    }
  }
  call->inputs = start.inputs;
  return call;
}

std::optional<std::vector<at::Tensor>> Replay(const CapturedCall& call, const std::vector<at::Tensor>& inputs) {
  const graph::CapturedGraph& g = *call.graph;
  if (!LookAlike(inputs, call.inputs)) return std::nullopt;
  UploadPendingFills(inputs);
  std::vector<graph::LazyStorage*> storages = Storages(inputs);
  if (!graph::InputsMatch(g, storages, ElementTypes(inputs))) return std::nullopt;
  auto [seed, offset] = TakeRandomOffsets(g.device, g.rng_increment);
  std::vector<std::shared_ptr<runtime::Buffer>> results =
      graph::Replay(g, storages, ScalarBytes(inputs), seed, offset);
  std::vector<c10::Storage> result_storages(results.size());
  std::vector<at::Tensor> outputs;
  outputs.reserve(call.outputs.size());
  for (size_t i = 0; i < call.outputs.size(); ++i) {
    const graph::OutputSource& src = g.outputs[i];
    if (call.outputs[i].same_as >= 0) {
      outputs.push_back(outputs[call.outputs[i].same_as]);
      continue;
    }
    if (src.input >= 0) {
      outputs.push_back(ViewOver(inputs[src.input].storage(), call.outputs[i]));
      continue;
    }
    if (src.result < 0) {
      outputs.push_back(ViewOver(NewStorage(0, static_cast<c10::DeviceIndex>(g.device)), call.outputs[i]));
      continue;
    }
    c10::Storage& storage = result_storages[src.result];
    if (!storage) {
      storage = NewStorage(src.nbytes, static_cast<c10::DeviceIndex>(g.device));
      graph::GraphLock lock;
      StorageOf(storage)->SetBuffer(results[src.result]);
    }
    outputs.push_back(ViewOver(storage, call.outputs[i]));
  }
  return outputs;
}

}  // namespace torch_pjrt::aten
