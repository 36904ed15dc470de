#include "runtime/executable.h"

#include "runtime/launch_queue.h"
#include "runtime/serial_thread.h"

#include <algorithm>
#include <deque>
#include <map>
#include <mutex>

namespace torch_pjrt::runtime {

// The argument buffers a running execution reads, each counted in Buffer::inflight_reads until
// the execution is retired. Move-only: a copy would count its buffers twice.
class ReadArguments {
 public:
  explicit ReadArguments(std::vector<std::shared_ptr<Buffer>> buffers) : buffers_(std::move(buffers)) {
    for (const auto& b : buffers_) {
      if (b) b->AddInflightRead();
    }
  }
  ReadArguments(ReadArguments&& other) noexcept : buffers_(std::move(other.buffers_)) { other.buffers_.clear(); }
  ReadArguments& operator=(ReadArguments&& other) noexcept {
    Release();
    buffers_ = std::move(other.buffers_);
    other.buffers_.clear();
    return *this;
  }
  ReadArguments(const ReadArguments&) = delete;
  ReadArguments& operator=(const ReadArguments&) = delete;
  ~ReadArguments() { Release(); }
  const std::vector<std::shared_ptr<Buffer>>& buffers() const { return buffers_; }

 private:
  void Release() {
    for (auto& b : buffers_) {
      if (b) Buffer::EndRead(std::move(b));
    }
    buffers_.clear();
  }
  std::vector<std::shared_ptr<Buffer>> buffers_;
};

namespace {

// Minimal protobuf writer: CompileOptionsProto is encoded by hand so that we need no protobuf
// library and no XLA headers.
struct ProtoWriter {
  std::string bytes;
  void Varint(uint64_t v) {
    while (v >= 0x80) {
      bytes.push_back(static_cast<char>(v | 0x80));
      v >>= 7;
    }
    bytes.push_back(static_cast<char>(v));
  }
  ProtoWriter& Int(int field, int64_t v) {
    Varint(static_cast<uint64_t>(field) << 3);
    Varint(static_cast<uint64_t>(v));
    return *this;
  }
  ProtoWriter& Message(int field, const std::string& m) {
    Varint(static_cast<uint64_t>(field) << 3 | 2);
    Varint(m.size());
    bytes += m;
    return *this;
  }
};

// Compiler errors end with a generic note about StableHLO versions that points users in the wrong
// direction (the real error is the line:col diagnostic before it).
std::string StripVersionTrailer(std::string message) {
  size_t pos = message.find("Failed to parse using StableHLO");
  if (pos != std::string::npos) {
    size_t line_start = message.rfind('\n', pos);
    message.erase(line_start == std::string::npos ? 0 : line_start);
  }
  while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) message.pop_back();
  return message;
}

struct InFlight {
  const Client* client;
  int device;
  PJRT_Event* event;
  // The execution's argument buffers, released once it finished: destroying a PJRT buffer that a
  // running execution reads blocks until that execution is done, so a host that drops its last
  // reference right after the launch (a trace's value scalars, an old parameter) would wait for
  // the device instead of tracing the next step.
  ReadArguments arguments;
};
std::mutex g_inflight_mutex;
std::deque<InFlight> g_inflight;
// The first failure of an execution that finished while nobody was waiting for it, per
// (client, device): reported by the next wait on that device.
std::map<std::pair<const Client*, int>, std::string> g_unreported;

// Awaits and destroys `f`'s event; a failure is kept for the next wait on its device, never
// thrown here (the caller may have just launched another execution whose outputs it must keep).
void Retire(const Plugin& plugin, const InFlight& f) {
  try {
    plugin.AwaitAndDestroy(f.event, "device execution");
  } catch (const std::exception& e) {
    g_unreported.emplace(std::make_pair(f.client, f.device), e.what());
  }
}

// Drops finished executions' argument buffers on a thread of its own. Where a launch retired the
// previous step's executions itself, freeing their last references (the old parameters, the
// value scalars) was 46% of `Executable::Execute`'s samples on the tracing thread (glibc's free
// of device memory, waiting on the heap's lock while XLA's threads allocate); apart, T5's lazy
// training step ran 13% faster, BERT's 4-5% (docs/design.md, "Freeing finished programs'
// arguments").
SerialThread& Reaper() {
  static auto* reaper = new SerialThread("pjrt_reaper");  // never destroyed: buffers may be dropped until exit
  return *reaper;
}

// Frees `arguments` on the reaper's thread.
void DropOnReaper(std::vector<ReadArguments> arguments) {
  auto batch = std::make_shared<std::vector<ReadArguments>>(std::move(arguments));
  Reaper().Push([batch] { batch->clear(); });
}

}  // namespace

void FreeRetiredArguments() {
  DrainLaunches();  // a launch retires executions too
  Reaper().Drain();
}

namespace {

// Retires finished events at the front of the queue so it stays short, moving their argument
// buffers to `finished` (freed by the caller, outside the mutex). Caller holds the mutex. Never
// throws.
void PruneFinished(const Plugin& plugin, std::vector<ReadArguments>& finished) {
  while (!g_inflight.empty()) {
    bool ready = false;
    try {
      ready = plugin.EventReady(g_inflight.front().event);
    } catch (const std::exception&) {
      ready = true;  // a broken event: Retire records its error
    }
    if (!ready) return;
    InFlight done = std::move(g_inflight.front());
    g_inflight.pop_front();
    Retire(plugin, done);
    finished.push_back(std::move(done.arguments));
  }
}

}  // namespace

std::string PortableCompileOptions() {
  ProtoWriter build_options;
  build_options.Int(4, 1).Int(5, 1);  // num_replicas = 1, num_partitions = 1
  ProtoWriter options;
  options.Message(3, build_options.bytes).Int(4, 1);  // compile_portable_executable = true
  return options.bytes;
}

std::string ReplicatedCompileOptions(const std::vector<int64_t>& replica_devices) {
  if (replica_devices.empty()) return PortableCompileOptions();
  const int64_t n = static_cast<int64_t>(replica_devices.size());
  ProtoWriter computation;  // DeviceAssignmentProto.ComputationDevice: replica_device_ids = 1
  for (int64_t id : replica_devices) computation.Int(1, id);
  ProtoWriter assignment;  // replica_count = 1, computation_count = 2, computation_devices = 3
  assignment.Int(1, n).Int(2, 1).Message(3, computation.bytes);
  ProtoWriter build_options;  // num_replicas = 4, num_partitions = 5, device_assignment = 9
  build_options.Int(4, n).Int(5, 1).Message(9, assignment.bytes);
  ProtoWriter options;
  options.Message(3, build_options.bytes);
  return options.bytes;
}

Executable::Executable(std::shared_ptr<Client> client, PJRT_LoadedExecutable* loaded)
    : client_(std::move(client)), loaded_(loaded) {
  const Plugin& plugin = client_->plugin();
  auto get = PJRT_ARGS(PJRT_LoadedExecutable_GetExecutable);
  get.loaded_executable = loaded_;
  PJRT_CALL(plugin, PJRT_LoadedExecutable_GetExecutable, &get);
  auto outputs = PJRT_ARGS(PJRT_Executable_NumOutputs);
  outputs.executable = get.executable;
  PJRT_CALL(plugin, PJRT_Executable_NumOutputs, &outputs);
  num_outputs_ = outputs.num_outputs;
  auto destroy = PJRT_ARGS(PJRT_Executable_Destroy);
  destroy.executable = get.executable;
  PJRT_CALL(plugin, PJRT_Executable_Destroy, &destroy);
}

Executable::~Executable() {
  auto destroy = PJRT_ARGS(PJRT_LoadedExecutable_Destroy);
  destroy.executable = loaded_;
  PJRT_Error* error = client_->plugin().api()->PJRT_LoadedExecutable_Destroy(&destroy);
  if (error) client_->plugin().TakeMessage(error);
}

std::shared_ptr<Executable> Executable::Compile(const std::shared_ptr<Client>& client,
                                                const std::string& mlir_text,
                                                const std::vector<int64_t>& replica_devices) {
  const Plugin& plugin = client->plugin();
  PJRT_Program program;
  std::memset(&program, 0, sizeof(program));
  program.struct_size = PJRT_Program_STRUCT_SIZE;
  program.code = const_cast<char*>(mlir_text.data());
  program.code_size = mlir_text.size();
  static const char kFormat[] = "mlir";
  program.format = kFormat;
  program.format_size = sizeof(kFormat) - 1;
  const std::string options = ReplicatedCompileOptions(replica_devices);
  auto args = PJRT_ARGS(PJRT_Client_Compile);
  args.client = client->raw();
  args.program = &program;
  args.compile_options = options.data();
  args.compile_options_size = options.size();
  PJRT_Error* error = plugin.api()->PJRT_Client_Compile(&args);
  if (error != nullptr) {
    int code = -1;
    std::string text = plugin.TakeMessage(error, &code);
    throw PjrtError("PJRT plugin '" + plugin.name() + "' failed to compile a graph: " +
                        StripVersionTrailer(text),
                    code);
  }
  auto executable = std::shared_ptr<Executable>(new Executable(client, args.executable));
  executable->portable_ = replica_devices.empty();
  return executable;
}

std::shared_ptr<Executable> Executable::Deserialize(const std::shared_ptr<Client>& client,
                                                    const std::string& bytes, bool portable) {
  auto args = PJRT_ARGS(PJRT_Executable_DeserializeAndLoad);
  args.client = client->raw();
  args.serialized_executable = bytes.data();
  args.serialized_executable_size = bytes.size();
  PJRT_CALL(client->plugin(), PJRT_Executable_DeserializeAndLoad, &args);
  auto executable = std::shared_ptr<Executable>(new Executable(client, args.loaded_executable));
  executable->portable_ = portable;
  return executable;
}

std::string Executable::Serialize() const {
  const Plugin& plugin = client_->plugin();
  auto get = PJRT_ARGS(PJRT_LoadedExecutable_GetExecutable);
  get.loaded_executable = loaded_;
  PJRT_CALL(plugin, PJRT_LoadedExecutable_GetExecutable, &get);
  auto args = PJRT_ARGS(PJRT_Executable_Serialize);
  args.executable = get.executable;
  std::string bytes;
  PJRT_Error* error = plugin.api()->PJRT_Executable_Serialize(&args);
  if (error == nullptr) {
    bytes.assign(args.serialized_bytes, args.serialized_bytes_size);
    args.serialized_executable_deleter(args.serialized_executable);
  }
  auto destroy = PJRT_ARGS(PJRT_Executable_Destroy);
  destroy.executable = get.executable;
  plugin.api()->PJRT_Executable_Destroy(&destroy);
  plugin.Check(error, "PJRT_Executable_Serialize");
  return bytes;
}

PJRT_LoadedExecutable_Execute_Args Executable::ExecuteArgs(PJRT_ExecuteOptions* options) const {
  std::memset(options, 0, sizeof(*options));
  options->struct_size = PJRT_ExecuteOptions_STRUCT_SIZE;
  auto exec = PJRT_ARGS(PJRT_LoadedExecutable_Execute);
  exec.executable = loaded_;
  exec.options = options;
  return exec;
}

std::vector<PJRT_Buffer*> Executable::Launch(const std::vector<PJRT_Buffer*>& args, int device,
                                             ReadArguments keep_alive,
                                             const std::vector<int64_t>& non_donatable) const {
  const Plugin& plugin = client_->plugin();
  std::vector<PJRT_Buffer*> outputs(num_outputs_, nullptr);
  PJRT_Buffer* const* arg_list = args.data();
  PJRT_Buffer** output_list = outputs.data();
  PJRT_Event* complete = nullptr;
  PJRT_ExecuteOptions options;
  auto exec = ExecuteArgs(&options);
  options.non_donatable_input_indices = non_donatable.data();
  options.num_non_donatable_input_indices = non_donatable.size();
  exec.argument_lists = &arg_list;
  exec.num_devices = 1;
  exec.num_args = args.size();
  exec.output_lists = &output_list;
  exec.device_complete_events = &complete;
  // A replicated program runs on the device its assignment names for this process's replica.
  exec.execute_device = portable_ ? client_->device(device) : nullptr;
  PJRT_CALL(plugin, PJRT_LoadedExecutable_Execute, &exec);
  // Launched: from here on nothing may throw, or the outputs and the event would leak.
  std::vector<ReadArguments> finished;
  {
    std::lock_guard<std::mutex> lock(g_inflight_mutex);
    if (complete != nullptr) g_inflight.push_back({client_.get(), device, complete, std::move(keep_alive)});
    PruneFinished(plugin, finished);
  }
  if (!finished.empty()) {
    DropOnReaper(std::move(finished));
  }
  return outputs;
}

std::vector<std::shared_ptr<Buffer>> Executable::Execute(const std::vector<PJRT_Buffer*>& args, int device,
                                                         const std::vector<Buffer*>& donated,
                                                         std::vector<std::shared_ptr<Buffer>> keep_alive,
                                                         const std::vector<int64_t>& non_donatable) const {
  // After the queued launches where this one donates: one of them may read a buffer it donates,
  // and PJRT orders a donating execution only after the readers it has been given. (A queued
  // launch's outputs that this one reads wait for it through Buffer::raw.)
  if (!donated.empty()) DrainLaunches();
  std::vector<PJRT_Buffer*> outputs = Launch(args, device, ReadArguments(std::move(keep_alive)), non_donatable);
  for (Buffer* b : donated) b->MarkDonated();
  std::vector<std::shared_ptr<Buffer>> result;
  result.reserve(outputs.size());
  for (PJRT_Buffer* b : outputs) result.push_back(std::make_shared<Buffer>(client_, b, device));
  return result;
}

namespace {

// Whether the launch made what was promised: a launch's outputs are wrapped before it is made,
// with the types its graph lowered them to.
void CheckOutputTypes(const Plugin& plugin, const std::vector<PJRT_Buffer*>& handles,
                      const std::vector<Executable::OutputType>& outputs) {
  for (size_t i = 0; i < handles.size(); ++i) {
    Executable::OutputType made;
    ReadHandleType(plugin, handles[i], &made.type, &made.dims);
    if (made.type != outputs[i].type || made.dims != outputs[i].dims) {
      throw std::logic_error("pjrt: output " + std::to_string(i) + " of a queued launch differs from its graph's type");
    }
  }
}

}  // namespace

std::vector<std::shared_ptr<Buffer>> Executable::ExecuteQueued(
    std::shared_future<std::shared_ptr<Executable>> executable, const std::shared_ptr<Client>& client,
    const std::vector<OutputType>& outputs, std::vector<std::shared_ptr<Buffer>> args, int device,
    const std::vector<Buffer*>& donated, std::vector<int64_t> non_donatable) {
  // Marked now, before the outputs are counted (memory statistics never count a donated input and
  // its output at once), and so that no later launch is given them.
  for (Buffer* b : donated) b->MarkDonated();
  auto pending = std::make_shared<PendingOutputs>(client->plugin(), outputs.size());
  std::vector<std::shared_ptr<Buffer>> result;
  result.reserve(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    result.push_back(std::make_shared<Buffer>(client, pending, i, outputs[i].type, outputs[i].dims, device));
  }
  // Counted as read from now on, and the one holder of the arguments until the launch: whether a
  // later launch may donate them must not depend on when this one is made (graph::SoleHolder).
  auto keep_alive = std::make_shared<ReadArguments>(std::move(args));
  QueueLaunch([executable = std::move(executable), client, outputs, keep_alive, device,
               non_donatable = std::move(non_donatable), pending] {
    try {
      const std::shared_ptr<Executable>& self = executable.get();  // rethrows a failed compile
      if (self->num_outputs_ != outputs.size()) throw std::logic_error("pjrt: a queued launch's program has other outputs");
      std::vector<PJRT_Buffer*> handles;
      handles.reserve(keep_alive->buffers().size());
      // An earlier queued launch's failure fails this one too.
      for (const auto& b : keep_alive->buffers()) handles.push_back(b->RawFor(client));
      handles = self->Launch(handles, device, std::move(*keep_alive), non_donatable);
      try {
        CheckOutputTypes(client->plugin(), handles, outputs);
      } catch (...) {
        for (PJRT_Buffer* h : handles) DestroyHandle(client->plugin(), h);
        throw;
      }
      pending->Fill(handles);
    } catch (const std::exception& e) {
      pending->Fail(e.what());
      // Also for the next wait on the device, as a failed execution's: outputs nobody reads (a
      // step's updated parameters) would keep it to themselves until read.
      std::lock_guard<std::mutex> lock(g_inflight_mutex);
      g_unreported.emplace(std::make_pair(client.get(), device), e.what());
    }
  });
  return result;
}

std::vector<std::vector<std::shared_ptr<Buffer>>> Executable::ExecuteAllReplicas(
    const std::vector<std::vector<PJRT_Buffer*>>& args, const std::vector<int>& devices) const {
  DrainLaunches();  // as Execute
  const Plugin& plugin = client_->plugin();
  const size_t n = args.size();
  std::vector<PJRT_Buffer* const*> arg_lists(n);
  std::vector<std::vector<PJRT_Buffer*>> outputs(n, std::vector<PJRT_Buffer*>(num_outputs_, nullptr));
  std::vector<PJRT_Buffer**> output_lists(n);
  std::vector<PJRT_Event*> complete(n, nullptr);
  for (size_t r = 0; r < n; ++r) {
    arg_lists[r] = args[r].data();
    output_lists[r] = outputs[r].data();
  }
  PJRT_ExecuteOptions options;
  auto exec = ExecuteArgs(&options);
  exec.argument_lists = arg_lists.data();
  exec.num_devices = n;
  exec.num_args = n ? args[0].size() : 0;
  exec.output_lists = output_lists.data();
  exec.device_complete_events = complete.data();
  PJRT_CALL(plugin, PJRT_LoadedExecutable_Execute, &exec);
  std::vector<std::vector<std::shared_ptr<Buffer>>> result(n);
  for (size_t r = 0; r < n; ++r) {
    for (PJRT_Buffer* b : outputs[r]) result[r].push_back(std::make_shared<Buffer>(client_, b, devices[r]));
  }
  for (PJRT_Event* event : complete) {
    if (event != nullptr) plugin.AwaitAndDestroy(event, "replicated execution");
  }
  return result;
}

void WaitForExecutions(const Client& client, int device) {
  DrainLaunches();
  std::deque<InFlight> mine;
  {
    std::lock_guard<std::mutex> lock(g_inflight_mutex);
    for (auto it = g_inflight.begin(); it != g_inflight.end();) {
      if (it->client == &client && (device < 0 || it->device == device)) {
        mine.push_back(std::move(*it));
        it = g_inflight.erase(it);
      } else {
        ++it;
      }
    }
  }
  FreeRetiredArguments();
  std::string first_error;
  for (const InFlight& f : mine) {
    try {
      client.plugin().AwaitAndDestroy(f.event, "device execution");
    } catch (const PjrtError& e) {
      if (first_error.empty()) first_error = e.what();
    }
  }
  {
    std::lock_guard<std::mutex> lock(g_inflight_mutex);
    for (auto it = g_unreported.begin(); it != g_unreported.end();) {
      if (it->first.first == &client && (device < 0 || it->first.second == device)) {
        if (first_error.empty()) first_error = it->second;
        it = g_unreported.erase(it);
      } else {
        ++it;
      }
    }
  }
  if (!first_error.empty()) throw PjrtError(first_error);
}

bool ExecutionsDone(const Client& client, int device) {
  if (LaunchesPending()) return false;
  std::lock_guard<std::mutex> lock(g_inflight_mutex);
  for (const InFlight& f : g_inflight) {
    if (f.client == &client && (device < 0 || f.device == device) &&
        !client.plugin().EventReady(f.event)) {
      return false;
    }
  }
  return true;
}

}  // namespace torch_pjrt::runtime
