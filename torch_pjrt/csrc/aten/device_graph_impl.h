// torch.accelerator.Graph for pjrt: at::GraphImplInterface over graph/device_graph.h.
#pragma once

namespace torch_pjrt::aten {

// Registers the implementation under the device's current name (call after the rename).
void RegisterGraphImpl();

}  // namespace torch_pjrt::aten
