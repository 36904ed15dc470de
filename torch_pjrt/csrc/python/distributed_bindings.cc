// torch_pjrt._C's torch.distributed pieces (used by torch_pjrt/distributed.py and the registry).
// Separate from module.cc: c10d's headers and torch's pybind casters are heavy includes.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/utils/pybind.h>

#include "aten/lazy_tensor.h"
#include "distributed/host_collectives.h"
#include "graph/executor.h"
#include "runtime/executable.h"
#include "runtime/runtime.h"

namespace py = pybind11;

namespace torch_pjrt {

namespace {

// PJRT's key-value store over a torch.distributed Store: what a plugin that runs collectives
// across processes uses to exchange its peers' addresses at client creation.
std::shared_ptr<runtime::KeyValueStore> StoreAsKeyValue(c10::intrusive_ptr<c10d::Store> store) {
  auto kv = std::make_shared<runtime::KeyValueStore>();
  kv->put = [store](const std::string& key, const std::string& value) {
    store->set(key, std::vector<uint8_t>(value.begin(), value.end()));
  };
  kv->get = [store](const std::string& key, int timeout_ms) {
    store->wait({key}, std::chrono::milliseconds(timeout_ms));
    std::vector<uint8_t> value = store->get(key);
    return std::string(value.begin(), value.end());
  };
  return kv;
}

// What the plugin's callback_error does in the round-trip test: keeps the message.
std::string g_callback_message;
PJRT_Error* RecordCallbackError(PJRT_Error_Code /*code*/, const char* message, size_t size) {
  g_callback_message.assign(message, size);
  return reinterpret_cast<PJRT_Error*>(&g_callback_message);  // any non-null marks a failure
}

// Puts then gets `key` through the very C callbacks a plugin is given; returns the value read or
// the error message (a get that times out). For tests: no plugin here uses the store.
std::string KeyValueRoundTrip(c10::intrusive_ptr<c10d::Store> store, const std::string& put_key,
                              const std::string& value, const std::string& get_key, int timeout_ms) {
  auto kv = StoreAsKeyValue(std::move(store));
  PJRT_CallbackError callback_error = RecordCallbackError;
  PJRT_KeyValuePutCallback_Args put{};
  put.key = put_key.data();
  put.key_size = put_key.size();
  put.value = value.data();
  put.value_size = value.size();
  put.callback_error = &callback_error;
  put.user_arg = kv.get();
  if (runtime::KvPut(&put) != nullptr) return "error: " + g_callback_message;
  PJRT_KeyValueGetCallback_Args get{};
  get.key = get_key.data();
  get.key_size = get_key.size();
  get.timeout_in_ms = timeout_ms;
  get.callback_error = &callback_error;
  get.user_arg = kv.get();
  if (runtime::KvGet(&get) != nullptr) return "error: " + g_callback_message;
  std::string result(get.value, get.value_size);
  get.value_deleter_callback(get.value);
  return result;
}

// Compiles `text` for replicas on `devices` (job-wide ids, here also device indices) and runs it
// on all of them with replica r's CPU tensors `inputs[r]`; returns each replica's results.
std::vector<std::vector<at::Tensor>> RunAllReplicas(const std::string& text, const std::vector<int64_t>& devices,
                                                    const std::vector<std::vector<at::Tensor>>& inputs) {
  auto client = runtime::GetClient();
  auto executable = runtime::Executable::Compile(client, text, devices);
  std::vector<std::vector<std::shared_ptr<runtime::Buffer>>> uploaded(inputs.size());
  std::vector<std::vector<PJRT_Buffer*>> args(inputs.size());
  std::vector<int> device_indices;
  for (size_t r = 0; r < inputs.size(); ++r) {
    device_indices.push_back(static_cast<int>(devices.at(r)));
    for (const at::Tensor& t : inputs[r]) {
      at::Tensor c = t.contiguous();
      auto b = runtime::Buffer::FromHost(client, device_indices[r], aten::ToElementType(c.scalar_type()),
                                         c.sizes().vec(), c.data_ptr());
      args[r].push_back(b->raw());
      uploaded[r].push_back(std::move(b));
    }
  }
  std::vector<std::vector<at::Tensor>> results(inputs.size());
  auto outputs = executable->ExecuteAllReplicas(args, device_indices);
  for (size_t r = 0; r < outputs.size(); ++r) {
    for (const auto& b : outputs[r]) {
      at::Tensor host = at::empty(b->dims(), at::TensorOptions().dtype(aten::ToScalarType(b->type())));
      b->ToHost(host.data_ptr(), host.nbytes());
      results[r].push_back(host);
    }
  }
  return results;
}

}  // namespace

// For module.cc's plugin configuration: the client's key-value store from a Python Store.
std::shared_ptr<runtime::KeyValueStore> KeyValueStoreFromPython(py::handle store) {
  return StoreAsKeyValue(store.cast<c10::intrusive_ptr<c10d::Store>>());
}

void BindDistributed(py::module& m) {
  // The `pjrt` backend over `host`, a torch.distributed.ProcessGroupGloo; returns a
  // torch._C._distributed_c10d.Backend.
  m.def("_host_copy_backend", [](c10::intrusive_ptr<c10d::Backend> host) {
    return distributed::MakeHostCopyBackend(std::move(host));
  });
  // The same, with collectives in the graph over `devices` (job-wide device id per group rank).
  m.def("_graph_collective_backend",
        [](c10::intrusive_ptr<c10d::Backend> host, std::vector<int64_t> devices, int rank) {
          return distributed::MakeGraphCollectiveBackend(std::move(host), {std::move(devices), rank});
        });
  m.def("_global_device_id", [](int index) { return runtime::GetClient()->global_device_id(index); },
        "The job-wide id of pjrt device `index` (starts the client).");
  m.def("_pending_graph_text", [](int device) {
    py::gil_scoped_release release;
    return graph::PendingGraphText(device);
  }, "The StableHLO the next sync of `device` would compile ('' when nothing is pending).");
  // The pending trace's value scalars as the program takes them after its parameters: one 1-d
  // CPU tensor per dtype that has any.
  m.def("_pending_graph_scalars", [](int device) {
    graph::GraphLock lock;
    std::vector<at::Tensor> arrays;
    if (device >= graph::NumTracedDevices()) return arrays;
    const graph::DeviceTrace& trace = graph::Trace(device);
    for (size_t k = 0; k < graph::kNumElementTypes; ++k) {
      if (trace.slot_count[k] == 0) continue;
      auto dtype = aten::ToScalarType(static_cast<ElementType>(k));
      at::Tensor a = at::empty({trace.slot_count[k]}, at::TensorOptions().dtype(dtype));
      std::memcpy(a.data_ptr(), trace.slot_bytes[k].data(), a.nbytes());
      arrays.push_back(a);
    }
    return arrays;
  });
  m.def("_replicated_compile_options", [](const std::vector<int64_t>& devices) {
    return py::bytes(runtime::ReplicatedCompileOptions(devices));
  });
  m.def("_key_value_round_trip", [](c10::intrusive_ptr<c10d::Store> store, const std::string& put_key,
                                    const std::string& value, const std::string& get_key, int timeout_ms) {
    return py::bytes(KeyValueRoundTrip(std::move(store), put_key, value, get_key, timeout_ms));
  });
  m.def("_run_all_replicas", &RunAllReplicas, py::call_guard<py::gil_scoped_release>());
  // Traces one collective over a group of `devices` as group rank `rank`, without a process
  // group: what the program tests lower and run with _run_all_replicas.
  m.def("_trace_collective", [](const std::string& kind, at::Tensor output, at::Tensor input,
                                std::vector<int64_t> devices, int rank, const std::string& op, int root) {
    distributed::GraphGroup g{std::move(devices), rank};
    c10d::ReduceOp reduce_op = op == "avg" ? c10d::ReduceOp::AVG : op == "product" ? c10d::ReduceOp::PRODUCT
                             : op == "min" ? c10d::ReduceOp::MIN : op == "max" ? c10d::ReduceOp::MAX
                                                                             : c10d::ReduceOp::SUM;
    std::vector<at::Tensor> io{input};
    if (kind == "all_reduce") distributed::GraphAllReduce(io, reduce_op, g);
    else if (kind == "broadcast") distributed::GraphBroadcast(io, root, g);
    else if (kind == "all_gather") distributed::GraphAllGather(output, input, g);
    else if (kind == "reduce_scatter") distributed::GraphReduceScatter(output, input, reduce_op, g);
    else throw py::value_error("unknown collective " + kind);
  });
}

}  // namespace torch_pjrt
