// torch_pjrt._C's test hook of host_kernels/result_buffers.h (it takes a Tensor: torch's pybind
// casters, a heavy include, stay out of module.cc).
#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/utils/pybind.h>

#include "host_kernels/result_buffers.h"

namespace py = pybind11;

namespace torch_pjrt {

void BindHostKernels(py::module& m) {
  // ComputeInto with a stand-in kernel: it returns `ret`'s shape filled with `value`, allocated
  // (through at::empty) after, when `raw_first`, an Allocator::raw_allocate of the same size (as
  // oneDNN's temporaries are).
  m.def("_compute_into_for_test", [](at::Tensor ret, double value, bool raw_first) {
    host_kernels::ComputeInto({{ret, true}}, [&]() -> std::vector<at::Tensor> {
      if (raw_first) {
        c10::Allocator* cpu = c10::GetCPUAllocator();
        cpu->raw_deallocate(cpu->raw_allocate(ret.nbytes()));
      }
      return {at::full(ret.sizes(), value, ret.options())};
    });
  });
}

}  // namespace torch_pjrt
