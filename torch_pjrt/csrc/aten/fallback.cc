// Every op without a lowering still works: its pjrt tensors are synced and copied to the CPU, the
// CPU kernel runs, and results (and mutated arguments) are copied back. Each use is counted per op
// (aten::<op> in torch.pjrt metrics) and the first one warns, so fallbacks are never invisible.
#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include <cstdlib>
#include <mutex>
#include <optional>
#include <set>

#include "aten/fallback.h"
#include "aten/device_rules.h"
#include "aten/lazy_tensor.h"
#include "graph/executor.h"
#include "graph/metrics.h"

namespace torch_pjrt::aten {

namespace {

bool g_warnings = [] {
  const char* env = std::getenv("TORCH_PJRT_FALLBACK_WARNINGS");
  return !(env && (std::string(env) == "0" || std::string(env) == "false"));
}();

}  // namespace

void RunCpuFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack, const char* why) {
  // Counted by op name, whichever overload ran (structured ops arrive as their .out variant).
  const std::string& full = op.schema().operator_name().name;
  // The arguments' devices follow the lowered kernels' rule: copied to the CPU, a CPU input of a
  // pjrt convolution would otherwise run, where CUDA refuses it.
  size_t num_args = op.schema().arguments().size();
  int index = CommonPjrtDevice(torch::jit::last(*stack, num_args), TakesCpuIndices(op));
  // One sync for all pending work, so the copies below find everything materialized.
  graph::SyncAllDevices(graph::SyncCause::kFallback);
  // torch's cpu_fallback puts new results on the device of the first tensor argument, which may
  // be a CPU scalar (0 // x passes torch.tensor(0) first): results belong on the pjrt device.
  std::optional<c10::Device> device;
  if (index >= 0) device = c10::Device(c10::DeviceType::PrivateUse1, index);
  at::native::cpu_fallback(op, stack, /*error_on_views=*/false);
  if (device) {
    size_t num_returns = op.schema().returns().size();
    for (size_t k = stack->size() - std::min(num_returns, stack->size()); k < stack->size(); ++k) {
      c10::IValue& iv = (*stack)[k];
      if (iv.isTensor() && iv.toTensor().defined() && iv.toTensor().device().is_cpu()) {
        iv = iv.toTensor().to(*device);
      } else if (iv.isTensorList()) {
        c10::List<at::Tensor> list = iv.toTensorList();
        for (size_t i = 0; i < list.size(); ++i) {
          at::Tensor t = list.get(i);
          if (t.defined() && t.device().is_cpu()) list.set(i, t.to(*device));
        }
      }
    }
  }
  // Counted and reported only once it ran: arguments the CPU kernel rejects are the user's error.
  graph::Metrics::Increment(graph::Counter::kFallbackOps);
  graph::Metrics::IncrementNamed(full);
  static std::mutex mutex;
  static std::set<std::string> warned;
  std::lock_guard<std::mutex> lock(mutex);
  if (g_warnings && warned.insert(full).second) {
    TORCH_WARN("torch_pjrt: ", full, " ", why, ", so it runs on the CPU (each call syncs the device "
               "and copies its tensors). Silence with torch.pjrt.set_fallback_warnings(False) or "
               "TORCH_PJRT_FALLBACK_WARNINGS=0.");
  }
}

namespace {
void FallbackForUnloweredOp(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  RunCpuFallback(op, stack, "has no pjrt lowering");
}
}  // namespace

bool FallbackWarningsEnabled() { return g_warnings; }
void SetFallbackWarningsEnabled(bool enabled) { g_warnings = enabled; }

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&FallbackForUnloweredOp>());
}

}  // namespace torch_pjrt::aten
