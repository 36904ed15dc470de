// The compile worker's entry point (runtime/compile_worker.h says why it exists). It is built
// into its own small library, torch_pjrt/_compile_worker*.so, with the runtime's plugin, client
// and executable code but without torch, and run by a bare Python interpreter:
//   python -I -S -c "import ctypes, sys; ..." <that library>
// which calls torch_pjrt_compile_worker_main(3, 4). It loads the plugin named by the start
// message, then compiles programs until its requests end (the parent exited or let it go).
#include <malloc.h>
#include <signal.h>

#include <exception>
#include <map>
#include <string>
#include <vector>

#include "runtime/client.h"
#include "runtime/executable.h"
#include "runtime/ffi.h"
#include "runtime/worker_protocol.h"

namespace torch_pjrt::runtime {
namespace {

// Stands in for the parent's host kernels: compiling a program that calls them needs a handler
// registered under each target, and a worker never runs a program.
XLA_FFI_Error* CompileOnlyHandler(XLA_FFI_CallFrame* frame) {
  if (IsMetadataQuery(frame) || !IsExecution(frame)) return nullptr;
  return FfiError(frame, "the compile worker's programs are never run");
}

// The clients programs are compiled on: one like the parent's main client, and one like its
// small programs' client, started when first asked for (XLA:CPU makes an executable for the
// pool of the client that compiles it; runtime/compile_worker.h).
struct Clients {
  std::shared_ptr<Client> main;
  std::shared_ptr<Client> small;
  std::map<std::string, std::string> small_environment;
  std::vector<NamedOption> options;

  const std::shared_ptr<Client>& For(const std::string& kind) {
    if (kind != "small" || small_environment.empty()) return main;
    if (small) return small;
    try {
      small = StartClientUnder(small_environment, main->plugin_ptr(), options);
      return small;
    } catch (const std::exception&) {
      small_environment.clear();  // compile on the main client: slower programs, not wrong ones
      return main;
    }
  }
};

Clients StartClients(const std::vector<std::string>& start) {
  auto plugin = Plugin::Load(start[0], start[1]);
  Clients clients;
  clients.options = worker::DecodeOptions(start[2]);
  clients.main = std::make_shared<Client>(plugin, clients.options);
  for (const std::string& target : worker::SplitFrames(start[3])) {
    RegisterFfiHandler(*plugin, clients.main->platform_name(), target, &CompileOnlyHandler);
  }
  clients.small_environment = worker::DecodeEnvironment(start[4]);
  return clients;
}

std::vector<std::string> CompileOne(Clients& clients, const std::string& text, const std::string& kind) {
  try {
    const std::shared_ptr<Client>& client = clients.For(kind);
    std::string bytes = Executable::Compile(client, text)->Serialize();
    malloc_trim(0);  // the compiler's garbage: keep the idle worker small
    return {"ok", std::move(bytes), "0"};
  } catch (const PjrtError& e) {
    return {"error", e.what(), std::to_string(e.code())};
  } catch (const std::exception& e) {
    return {"error", e.what(), "-1"};
  }
}

}  // namespace
}  // namespace torch_pjrt::runtime

extern "C" int torch_pjrt_compile_worker_main(int requests, int replies) {
  using namespace torch_pjrt::runtime;
  signal(SIGINT, SIG_IGN);  // Ctrl-C is for the parent, which may catch it and go on
  std::vector<std::string> start;
  if (!worker::ReadMessage(requests, 5, &start)) return 1;
  Clients clients;
  try {
    clients = StartClients(start);
  } catch (const std::exception& e) {
    worker::WriteMessage(replies, {"error", e.what()});
    return 1;
  }
  if (!worker::WriteMessage(replies, {"ok", ""})) return 1;
  std::vector<std::string> request;
  while (worker::ReadMessage(requests, 2, &request)) {
    if (!worker::WriteMessage(replies, CompileOne(clients, request[0], request[1]))) return 1;
  }
  return 0;
}
