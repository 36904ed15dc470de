// torch_pjrt._C: the Python-facing surface of the C++ layers. Importing it registers the kernels,
// hooks and allocators; nothing here starts a PJRT client (that waits for first device use).
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <c10/util/Exception.h>

#include "aten/fallback.h"
#include "aten/lazy_tensor.h"
#include "aten/lowered_kernel.h"
#include "aten/native_meta.h"
#include "graph/compile_cache.h"
#include "graph/executor.h"
#include "graph/metrics.h"
#include "graph/read_memo.h"
#include "hooks/generator.h"
#include "lowering/lowering.h"
#include "runtime/executable.h"
#include "runtime/host_heap.h"
#include "runtime/launch_queue.h"
#include "runtime/runtime.h"

namespace py = pybind11;

namespace torch_pjrt {
namespace hooks {
void RegisterHooks();
}
void BindCapture(py::module& m);  // capture_bindings.cc
void BindHostKernels(py::module& m);  // host_kernel_bindings.cc
void BindDistributed(py::module& m);  // distributed_bindings.cc
void BindUserFrame(py::module& m);  // user_frame.cc
std::shared_ptr<runtime::KeyValueStore> KeyValueStoreFromPython(py::handle store);  // same file

namespace {

std::vector<std::string>& MissingLowerings() {
  static auto* m = new std::vector<std::string>();
  return *m;
}

runtime::NamedOption ToOption(const std::string& name, const py::handle& value) {
  runtime::NamedOption o;
  o.name = name;
  // bool before int: Python bools are ints.
  if (py::isinstance<py::bool_>(value)) {
    o.kind = runtime::NamedOption::Kind::kBool;
    o.bool_value = value.cast<bool>();
  } else if (py::isinstance<py::int_>(value)) {
    o.kind = runtime::NamedOption::Kind::kInt64;
    o.int_value = value.cast<int64_t>();
  } else if (py::isinstance<py::float_>(value)) {
    o.kind = runtime::NamedOption::Kind::kFloat;
    o.float_value = value.cast<float>();
  } else if (py::isinstance<py::str>(value)) {
    o.kind = runtime::NamedOption::Kind::kString;
    o.string_value = value.cast<std::string>();
  } else if (py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value)) {
    o.kind = runtime::NamedOption::Kind::kInt64List;
    o.int_list = value.cast<std::vector<int64_t>>();
  } else {
    throw py::type_error("PJRT client option '" + name + "' must be bool, int, float, str or a list "
                         "of ints, got " + std::string(py::str(value.get_type())));
  }
  return o;
}

runtime::PluginConfig ToPluginConfig(const py::dict& candidate) {
  runtime::PluginConfig c;
  c.name = candidate["name"].cast<std::string>();
  c.library_path = candidate["library_path"].cast<std::string>();
  for (auto option : candidate["options"].cast<py::dict>()) {
    c.options.push_back(ToOption(option.first.cast<std::string>(), option.second));
  }
  if (candidate.contains("kv_store")) c.kv_store = KeyValueStoreFromPython(candidate["kv_store"]);
  if (candidate.contains("compile_worker")) {
    c.compile_worker = candidate["compile_worker"].cast<std::vector<std::string>>();
  }
  if (candidate.contains("small_program_client")) {
    py::dict small = candidate["small_program_client"].cast<py::dict>();
    c.small_program_env = small["env"].cast<std::map<std::string, std::string>>();
    c.small_program_max_work = small["max_work"].cast<int64_t>();
    if (small.contains("max_work_per_op")) c.small_program_max_work_per_op = small["max_work_per_op"].cast<int64_t>();
  }
  if (candidate.contains("capabilities")) {
    for (auto cap : candidate["capabilities"].cast<py::dict>()) {
      c.capabilities[cap.first.cast<std::string>()] = py::str(cap.second).cast<std::string>();
    }
  }
  return c;
}

// Asks Python (torch_pjrt.backends.registry.candidate_config) for the plugins to try, one at a
// time; called on first device use, never with a runtime or graph lock held.
void SetCandidateProvider(py::object provider) {
  auto shared = std::make_shared<py::object>(std::move(provider));
  runtime::SetCandidateProvider([shared](int index) -> std::optional<runtime::Candidate> {
    py::gil_scoped_acquire gil;
    py::object result = (*shared)(index);
    if (result.is_none()) return std::nullopt;
    py::dict candidate = result.cast<py::dict>();
    runtime::Candidate c;
    c.strict = candidate["strict"].cast<bool>();
    if (candidate.contains("skip")) {
      c.config.name = candidate["name"].cast<std::string>();
      c.skip = candidate["skip"].cast<std::string>();
    } else {
      c.config = ToPluginConfig(candidate);
    }
    return c;
  });
}

c10::DeviceIndex CheckedDevice(int64_t device) {
  if (device < 0) return aten::CurrentDevice();
  aten::CheckDeviceIndex(static_cast<c10::DeviceIndex>(device));
  return static_cast<c10::DeviceIndex>(device);
}

graph::SyncCause CauseFromName(const std::string& name) {
  for (int i = 0; i < static_cast<int>(graph::SyncCause::kNumCauses); ++i) {
    auto c = static_cast<graph::SyncCause>(i);
    if (name == graph::SyncCauseName(c)) return c;
  }
  return graph::SyncCause::kOther;
}

hooks::PjrtGenerator* GeneratorOf(int64_t device) {
  // Seeding never starts the client: generators exist per index before any device is used.
  if (device < 0) device = aten::CurrentDevice();
  if (device > 255) throw py::index_error("pjrt device index out of range: " + std::to_string(device));
  const at::Generator& g = hooks::DefaultGenerator(static_cast<c10::DeviceIndex>(device));
  return static_cast<hooks::PjrtGenerator*>(g.unsafeGetGeneratorImpl());
}

void Shutdown() {
  try {
    graph::WaitDevice(-1);
  } catch (...) {
    // an execution failed; its error was reported to whoever read its results
  }
  graph::GraphLock lock;
  graph::LazyStorage::ForEach([](graph::LazyStorage* s) { s->Clear(); });
  for (int d = 0; d < graph::NumTracedDevices(); ++d) {
    graph::DeviceTrace& t = graph::Trace(d);
    t.params.clear();
    t.dirty.clear();
    ++t.epoch;
  }
  graph::CompileCache::Get().Clear();
  graph::ForgetRememberedReads();
  runtime::ShutdownClient();
}

}  // namespace
}  // namespace torch_pjrt

PYBIND11_MODULE(_C, m) {
  using namespace torch_pjrt;
  m.doc() = "torch_pjrt native extension";
  hooks::RegisterHooks();
  MissingLowerings() = aten::RegisterLoweredKernels();
  // A thread holding the GIL that must wait for the graph lock lets go of the GIL meanwhile: the
  // lock's holder may need it (torch takes the GIL to copy or drop Tensors with Python objects).
  graph::SetBlockingHook([](const std::function<void()>& wait) {
    if (PyGILState_Check()) {
      py::gil_scoped_release no_gil;
      wait();
    } else {
      wait();
    }
  });
  // Errors discovered after tracing (out-of-range indices, failed graphs) keep torch's types.
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const DeviceError& e) {
      PyErr_SetString(e.kind() == ErrorKind::kIndex ? PyExc_IndexError : PyExc_RuntimeError, e.what());
    }
  });
  graph::SetWarningHandler([](const std::string& message) { TORCH_WARN(message); });
  runtime::SetWarningHandler([](const std::string& message) { TORCH_WARN("torch_pjrt: ", message); });

  m.def("_set_candidate_provider", &SetCandidateProvider);
  m.def("_client_started", [] { return runtime::PeekClient() != nullptr; });
  // Whether the small programs' client started beside the main one (runtime::ClientForProgram).
  m.def("_small_program_client_started", [] { return runtime::PeekClients().size() > 1; });
  // Starting the client may call back into Python for the plugin config (taking the GIL from a
  // thread that holds the runtime lock), so these release the GIL before asking for it.
  m.def("_device_count", [] {
    py::gil_scoped_release no_gil;
    return runtime::GetClient()->device_count();
  });
  m.def("_platform_info", [] {
    std::shared_ptr<runtime::Client> c;
    {
      py::gil_scoped_release no_gil;
      c = runtime::GetClient();
    }
    py::dict d;
    d["plugin"] = c->plugin().name();
    d["library_path"] = c->plugin().path();
    d["platform_name"] = c->platform_name();
    d["platform_version"] = c->platform_version();
    d["device_kind"] = c->device_kind();
    d["device_count"] = c->device_count();
    d["pjrt_api_version"] = std::to_string(c->plugin().api_major()) + "." + std::to_string(c->plugin().api_minor());
    py::dict attrs;
    for (const auto& [k, v] : c->plugin().attributes()) attrs[py::str(k)] = v;
    d["attributes"] = attrs;
    return d;
  });
  m.def("_current_device", [] { return static_cast<int>(aten::CurrentDevice()); });
  m.def("_set_device", [](int64_t d) {
    py::gil_scoped_release no_gil;
    aten::SetCurrentDevice(CheckedDevice(d));
  });
  m.def("_exchange_device", [](int64_t d) {
    py::gil_scoped_release no_gil;
    int old = aten::CurrentDevice();
    if (d >= 0) aten::SetCurrentDevice(CheckedDevice(d));
    return old;
  });
  m.def("_synchronize", [](int64_t device, const std::string& cause, bool wait) {
    py::gil_scoped_release no_gil;
    if (device < 0) {
      graph::SyncAllDevices(CauseFromName(cause));
    } else {
      graph::SyncDevice(static_cast<int>(device), CauseFromName(cause));
    }
    if (wait) graph::WaitDevice(static_cast<int>(device));
  });
  m.def("_launch_before_optimizer_step", [](int64_t device) {
    py::gil_scoped_release no_gil;
    graph::LaunchBeforeOptimizerStep(CheckedDevice(device));
  });
  // Metrics count what happened: compiles still running on their own threads first finish.
  auto await_compiles = [] {
    py::gil_scoped_release no_gil;
    runtime::DrainLaunches();
  };
  m.def("_counters", [=] {
    await_compiles();
    return graph::Metrics::Counters();
  });
  m.def("_timers", [=] {
    await_compiles();
    py::dict d;
    for (const auto& [name, t] : graph::Metrics::Timers()) {
      d[py::str(name)] = py::make_tuple(t.count, t.total_ns, t.max_ns);
    }
    return d;
  });
  m.def("_reset_metrics", [=] {
    await_compiles();
    graph::Metrics::Reset();
  });
  // A named counter kept by the Python layer (torch_pjrt/dynamo.py's "Dynamo::" counters).
  m.def("_increment_counter", [](const std::string& name, int64_t by) { graph::Metrics::IncrementNamed(name, by); });
  m.def("_manual_seed", [](int64_t device, uint64_t seed) { GeneratorOf(device)->set_current_seed(seed); });
  m.def("_manual_seed_all", [](uint64_t seed) { hooks::SeedAllGenerators(seed); });
  m.def("_memory_stats", [](int64_t device) {
    graph::StorageStats s = graph::LazyStorage::Stats(static_cast<int>(device));
    py::dict d;
    d["allocated_bytes.current"] = s.live_bytes;
    d["allocated_bytes.peak"] = s.peak_bytes;
    d["allocated_bytes.allocated"] = s.allocated_bytes;
    d["allocated_bytes.freed"] = s.freed_bytes;
    d["allocation.current"] = s.live_count;
    d["allocation.allocated"] = s.allocations;
    d["reserved_bytes.current"] = runtime::Buffer::LiveBytes(static_cast<int>(device));
    d["reserved_bytes.peak"] = runtime::Buffer::PeakBytes(static_cast<int>(device));
    return d;
  });
  m.def("_reset_peak_memory", [](int64_t device) {
    graph::LazyStorage::ResetPeakBytes(static_cast<int>(device));
    runtime::Buffer::ResetPeakBytes(static_cast<int>(device));
  });
  m.def("_seed", [](int64_t device) { return GeneratorOf(device)->seed(); });
  m.def("_initial_seed", [](int64_t device) { return GeneratorOf(device)->current_seed(); });
  m.def("_get_rng_state", [](int64_t device) {
    auto* g = GeneratorOf(device);
    uint64_t state[2] = {g->current_seed(), g->get_offset()};
    return py::bytes(reinterpret_cast<const char*>(state), sizeof(state));
  });
  m.def("_set_rng_state", [](int64_t device, const std::string& bytes) {
    if (bytes.size() != 16) throw py::value_error("pjrt rng state must be 16 bytes (seed, offset)");
    uint64_t state[2];
    std::memcpy(state, bytes.data(), 16);
    auto* g = GeneratorOf(device);
    g->set_current_seed(state[0]);
    g->set_offset(state[1]);
  });
  m.def("_set_fallback_warnings", &aten::SetFallbackWarningsEnabled);
  m.def("_set_in_optimizer_step", &graph::SetInOptimizerStep);
  m.def("_fallback_warnings", &aten::FallbackWarningsEnabled);
  m.def("_cache_dir", [] {
    graph::GraphLock lock;
    return graph::CompileCache::Get().directory();
  });
  // Settings the graph layer reads while syncing change under the graph lock.
  m.def("_set_cache_dir", [](const std::string& dir) {
    graph::GraphLock lock;
    graph::CompileCache::Get().set_directory(dir);
  });
  m.def("_cache_size", [] { return graph::CompileCache::Get().capacity(); });
  m.def("_set_cache_size", [](size_t n) {
    graph::GraphLock lock;
    graph::CompileCache::Get().set_capacity(n);
  });
  m.def("_cached_graphs", [] {
    graph::GraphLock lock;
    return graph::CompileCache::Get().size();
  });
  m.def("_clear_compile_cache", [] {
    graph::GraphLock lock;
    graph::CompileCache::Get().Clear();
  });
  m.def("_log_compiles", [] {
    graph::GraphLock lock;
    return graph::Debug().log_compiles;
  });
  m.def("_set_log_compiles", [](bool on) {
    graph::GraphLock lock;
    graph::Debug().log_compiles = on;
  });
  m.def("_dump_dir", [] {
    graph::GraphLock lock;
    return graph::Debug().dump_dir;
  });
  m.def("_set_dump_dir", [](const std::string& dir) {
    graph::GraphLock lock;
    graph::Debug().dump_dir = dir;
  });
  m.def("_max_pending_nodes", [] {
    graph::GraphLock lock;
    return graph::MaxPendingNodes();
  });
  m.def("_set_max_pending_nodes", [](int64_t n) {
    graph::GraphLock lock;
    graph::SetMaxPendingNodes(n);
  });
  m.def("_pipelined_launch_nodes", [] {
    graph::GraphLock lock;
    return graph::PipelinedLaunchNodes();
  });
  m.def("_set_pipelined_launch_nodes", [](int64_t n) {
    graph::GraphLock lock;
    graph::SetPipelinedLaunchNodes(n);
  });
  m.def("_backward_launch", [] {
    graph::GraphLock lock;
    return graph::BackwardLaunch();
  });
  m.def("_set_backward_launch", [](bool on) {
    graph::GraphLock lock;
    graph::SetBackwardLaunch(on);
  });
  m.def("_background_compiles", &graph::BackgroundCompiles);
  m.def("_set_background_compiles", &graph::SetBackgroundCompiles);
  m.def("_live_nodes", &graph::LiveNodeCount);
  m.def("_live_storages", &graph::LazyStorage::LiveCount);
  m.def("_missing_lowerings", [] { return MissingLowerings(); });
  // What identifies compiled executables on disk besides the graph (starts the client).
  m.def("_fingerprint", [] {
    {
      py::gil_scoped_release no_gil;
      runtime::GetClient();
    }
    return graph::PluginFingerprint();
  });
  // Schema names ("add.Tensor") of every ATen op with a lowering (its in-place and out= variants
  // are registered too).
  m.def("_lowered_ops", [] {
    std::vector<std::string> names;
    for (const auto& entry : lowering::Table()) {
      if (entry.schema.rfind("pjrt::", 0) != 0) names.push_back(entry.schema);
    }
    return names;
  });
  // Ops whose Meta kernel runs as ATen's C++ function instead of torch's Python one (tests).
  m.def("_native_meta_ops", &aten::NativeMetaOps);
  // For plugins whose buffers are host heap allocations; called from their configure hooks.
  m.def("_keep_freed_blocks_in_heap", &torch_pjrt::runtime::KeepFreedBlocksInHeap);
  // Compiles StableHLO text with the active plugin, where graphs compile (the compile worker when
  // there is one), and returns its number of outputs: a debugging aid for lowering authors and
  // plugin vendors (errors come back as RuntimeError).
  m.def("_compile_stablehlo", [](const std::string& text) {
    py::gil_scoped_release no_gil;
    std::string serialized;
    return runtime::CompileProgram(runtime::GetClient(), text, {}, &serialized)->num_outputs();
  });
  // The compile worker's pid (-1: none) and whether it started (tests, debugging).
  m.def("_compile_worker_status", [] {
    runtime::CompileWorkerStatus status;
    {
      py::gil_scoped_release no_gil;
      status = runtime::GetCompileWorkerStatus();
    }
    py::dict d;
    d["pid"] = status.pid;
    d["started"] = status.started;
    d["workers"] = status.workers;
    return d;
  });
  BindCapture(m);
  BindHostKernels(m);
  BindDistributed(m);
  BindUserFrame(m);
  m.def("_shutdown", [] {
    py::gil_scoped_release no_gil;
    Shutdown();
  });
}
