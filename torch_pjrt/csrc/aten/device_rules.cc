#include "aten/device_rules.h"

#include <ATen/ATen.h>

#include <optional>
#include <string>

#include "aten/lazy_tensor.h"

namespace torch_pjrt::aten {

void DeviceMismatch(const c10::Device& a, const c10::Device& b) {
  TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two devices, ",
              a, " and ", b, "!");
}

int CommonPjrtDevice(c10::ArrayRef<c10::IValue> args, bool cpu_index_lists, int device_if_none) {
  int device = -1;
  const at::Tensor* foreign = nullptr;
  auto visit = [&](const at::Tensor& t, bool in_list) {
    if (!t.defined()) return;
    if (!IsPjrt(t)) {
      bool allowed = t.device().is_cpu() && (t.dim() == 0 || (in_list && cpu_index_lists));
      if (!allowed && foreign == nullptr) foreign = &t;
      return;
    }
    if (device < 0) device = t.device().index();
    else if (t.device().index() != device) DeviceMismatch(c10::Device(c10::DeviceType::PrivateUse1, device), t.device());
  };
  for (const c10::IValue& iv : args) {
    if (iv.isTensor()) {
      visit(iv.toTensor(), false);
    } else if (iv.isTensorList()) {
      for (const at::Tensor& t : iv.toTensorList()) visit(t, true);
    } else if (iv.isList()) {
      for (const c10::IValue& e : iv.toListRef()) {
        if (e.isTensor()) visit(e.toTensor(), true);
      }
    }
  }
  if (device < 0) device = device_if_none;
  if (device >= 0 && foreign != nullptr) DeviceMismatch(c10::Device(c10::DeviceType::PrivateUse1, device), foreign->device());
  return device;
}

bool TakesCpuIndices(const c10::OperatorHandle& op) {
  const std::string& name = op.schema().name();
  return name == "aten::index" || name == "aten::index_put" || name == "aten::index_put_" ||
         name == "aten::_index_put_impl" || name == "aten::_index_put_impl_" || name == "aten::_unsafe_index" ||
         name == "aten::_unsafe_index_put";
}

void MoveCpuIndicesToDevice(torch::jit::Stack* stack, size_t num_args) {
  size_t first = stack->size() - num_args;
  const c10::IValue& self = (*stack)[first];
  if (!self.isTensor() || !IsPjrt(self.toTensor())) return;
  c10::Device device = self.toTensor().device();
  for (size_t a = first + 1; a < stack->size(); ++a) {
    c10::IValue& iv = (*stack)[a];
    if (!iv.isList()) continue;
    bool any_cpu = false;
    for (const c10::IValue& e : iv.toListRef()) any_cpu |= e.isTensor() && e.toTensor().defined() && e.toTensor().is_cpu();
    if (!any_cpu) continue;
    c10::List<std::optional<at::Tensor>> moved;
    for (const c10::IValue& e : iv.toListRef()) {
      if (!e.isTensor()) {
        moved.push_back(std::nullopt);
      } else {
        const at::Tensor& t = e.toTensor();
        moved.push_back(t.defined() && t.is_cpu() ? t.to(device) : t);
      }
    }
    iv = c10::IValue(moved);
  }
}

}  // namespace torch_pjrt::aten
