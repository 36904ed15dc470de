// torch_pjrt._C's process-group backend constructor (used by torch_pjrt/distributed.py).
// Separate from module.cc: c10d's headers and torch's pybind casters are heavy includes.
#include <pybind11/pybind11.h>
#include <torch/csrc/utils/pybind.h>

#include "distributed/host_collectives.h"

namespace py = pybind11;

namespace torch_pjrt {

void BindDistributed(py::module& m) {
  // The `pjrt` backend over `host`, a torch.distributed.ProcessGroupGloo; returns a
  // torch._C._distributed_c10d.Backend.
  m.def("_host_copy_backend", [](c10::intrusive_ptr<c10d::Backend> host) {
    return distributed::MakeHostCopyBackend(std::move(host));
  });
}

}  // namespace torch_pjrt
