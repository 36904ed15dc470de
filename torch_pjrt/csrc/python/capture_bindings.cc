// torch_pjrt._C's capture/replay functions (used by torch_pjrt/dynamo.py, the torch.compile
// backend). Separate from module.cc because only these take Tensors (torch's pybind casters are a
// heavy include).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include "aten/captured_call.h"
#include "aten/device_graph_impl.h"
#include "graph/device_graph.h"

namespace py = pybind11;

namespace torch_pjrt {

void BindCapture(py::module& m) {
  // torch.accelerator.Graph on pjrt (graph/device_graph.h), registered once the device is named.
  m.def("_register_graph_impl", &aten::RegisterGraphImpl);
  m.def("_capturing_graph", [](int64_t device) { return graph::CapturingDeviceGraph(static_cast<int>(device)); });
  py::class_<aten::CapturedCall, std::shared_ptr<aten::CapturedCall>>(m, "_CapturedCall")
      .def_property_readonly("traced_ops", [](const aten::CapturedCall& c) { return c.graph->traced_ops; })
      .def_property_readonly("num_outputs", [](const aten::CapturedCall& c) { return c.outputs.size(); });
  py::class_<aten::CaptureStart>(m, "_CaptureStart");
  // Before a compiled graph's first call: syncs pending work, gives every input a buffer.
  // Returns (start, the inputs to call the graph with: 0-d CPU tensors uploaded).
  m.def("_capture_begin", [](std::vector<at::Tensor> inputs) {
    aten::CaptureStart start;
    {
      py::gil_scoped_release no_gil;
      start = aten::BeginCapture(&inputs);
    }
    return py::make_tuple(start, inputs);
  });
  // After it: launches the call's trace; returns (captured call or None, why not).
  m.def("_capture_finish", [](const aten::CaptureStart& start, const std::vector<at::Tensor>& inputs,
                              const std::vector<at::Tensor>& outputs) {
    std::string reason;
    std::shared_ptr<aten::CapturedCall> call;
    {
      py::gil_scoped_release no_gil;
      call = aten::FinishCapture(start, inputs, outputs, &reason);
    }
    return py::make_tuple(call, reason);
  });
  // A later call: the output tensors, or None when the inputs do not match the capture.
  m.def("_replay", [](const aten::CapturedCall& call, const std::vector<at::Tensor>& inputs) {
    std::optional<std::vector<at::Tensor>> out;
    {
      py::gil_scoped_release no_gil;
      out = aten::Replay(call, inputs);
    }
    if (!out) return py::object(py::none());
    return py::object(py::cast(std::move(*out)));
  });
}

}  // namespace torch_pjrt
