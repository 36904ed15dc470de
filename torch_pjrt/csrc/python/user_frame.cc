// The user's line for check errors and compile logs (graph::SourceLocation): the innermost Python
// frame outside torch and torch_pjrt. Walked through CPython's frame API (0.4 us a call) rather
// than by a Python function (12.6 us): every op with an index or divisor check asks for it while
// it is traced (1.7% of a Llama training step's tracing thread).
#include <Python.h>
#include <frameobject.h>

#include <string>
#include <vector>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "graph/executor.h"

namespace py = pybind11;

namespace torch_pjrt {
namespace {

bool StartsWithAny(PyObject* filename, const std::vector<py::object>& prefixes) {
  for (const py::object& p : prefixes) {
    if (PyUnicode_Tailmatch(filename, p.ptr(), 0, PY_SSIZE_T_MAX, -1) == 1) return true;
  }
  return false;
}

std::string Describe(PyFrameObject* frame, PyCodeObject* code) {
  std::string where = py::str(code->co_filename).cast<std::string>();
  where += ":" + std::to_string(PyFrame_GetLineNumber(frame)) + " in ";
  return where + py::str(code->co_name).cast<std::string>();
}

std::string WalkFrames(const std::vector<py::object>& skip) {
  // Owned references, released on every path (Describe may throw).
  auto frame = py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(PyEval_GetFrame()));
  while (frame) {
    auto* f = reinterpret_cast<PyFrameObject*>(frame.ptr());
    auto code = py::reinterpret_steal<py::object>(reinterpret_cast<PyObject*>(PyFrame_GetCode(f)));
    auto* c = reinterpret_cast<PyCodeObject*>(code.ptr());
    if (!StartsWithAny(c->co_filename, skip)) return Describe(f, c);
    frame = py::reinterpret_steal<py::object>(reinterpret_cast<PyObject*>(PyFrame_GetBack(f)));
  }
  return "<no user frame: a C++ thread such as the autograd engine's>";
}

// Never raises: it only feeds messages. Runs on any thread, including the autograd engine's,
// which has no Python frames at all.
std::string UserFrame(const std::vector<py::object>& skip) {
  py::gil_scoped_acquire gil;
  try {
    return WalkFrames(skip);
  } catch (const py::error_already_set&) {
    return "";
  }
}

}  // namespace

void BindUserFrame(py::module& m) {
  m.def("_set_source_location_skip", [](std::vector<std::string> prefixes) {
    std::vector<py::object> skip;
    for (const std::string& p : prefixes) skip.push_back(py::str(p));
    auto shared = std::make_shared<std::vector<py::object>>(std::move(skip));
    graph::SetSourceLocationProvider([shared] { return UserFrame(*shared); });
  });
}

}  // namespace torch_pjrt
