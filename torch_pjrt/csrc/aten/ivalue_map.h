// Rewriting the tensors inside an op's boxed arguments (for Meta inference and CPU probes).
#pragma once

#include <ATen/core/ivalue.h>

#include <functional>

namespace torch_pjrt::aten {

using TensorMap = std::function<at::Tensor(const at::Tensor&)>;

// `iv` with every tensor in it (a Tensor, a Tensor[], the entries of a Tensor?[]) replaced by
// `fn(tensor)` and a Device replaced by `device`; any other value as it is.
inline c10::IValue MapTensors(const c10::IValue& iv, const TensorMap& fn, c10::Device device) {
  if (iv.isTensor()) return fn(iv.toTensor());
  if (iv.isTensorList()) {
    c10::List<at::Tensor> list;
    for (const at::Tensor& t : iv.toTensorList()) list.push_back(fn(t));
    return list;
  }
  if (iv.isList() && iv.toListRef().size() > 0 && iv.toListRef()[0].isTensor() + iv.toListRef()[0].isNone()) {
    c10::List<std::optional<at::Tensor>> list;
    for (const c10::IValue& e : iv.toListRef()) {
      list.push_back(e.isNone() ? std::optional<at::Tensor>() : std::optional<at::Tensor>(fn(e.toTensor())));
    }
    return list;
  }
  if (iv.isDevice()) return device;
  return iv;
}

}  // namespace torch_pjrt::aten
