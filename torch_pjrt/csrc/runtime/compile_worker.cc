#include "runtime/compile_worker.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "runtime/ffi.h"
#include "runtime/worker_protocol.h"

extern char** environ;

namespace torch_pjrt::runtime {

namespace {

// A pipe whose ends are closed in every child this process spawns, except where dup2'ed.
void MakePipe(int fds[2]) {
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    throw CompileWorkerLost(std::string("compile worker: pipe failed: ") + std::strerror(errno));
  }
}

pid_t Spawn(const std::vector<std::string>& argv, int child_requests, int child_replies) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, child_requests, 3);
  posix_spawn_file_actions_adddup2(&actions, child_replies, 4);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    throw CompileWorkerLost("compile worker: cannot run " + argv[0] + ": " + std::strerror(rc));
  }
  return pid;
}

// Whether `fd` has something to read (data or its end) before `deadline`.
bool ReadableBefore(int fd, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    int rc = ::poll(&p, 1, static_cast<int>(std::clamp<int64_t>(left.count(), 0, 1 << 30)));
    if (rc > 0) return true;
    if (rc == 0 && left.count() <= 0) return false;
    if (rc < 0 && errno != EINTR) return true;  // let the read report the broken pipe
  }
}

}  // namespace

CompileWorker::CompileWorker(const std::vector<std::string>& argv, const std::string& plugin_name,
                             const std::string& library_path, const std::vector<NamedOption>& options,
                             const std::map<std::string, std::string>& small_program_environment,
                             std::chrono::milliseconds start_timeout)
    : start_deadline_(std::chrono::steady_clock::now() + start_timeout),
      start_timeout_(start_timeout),
      plugin_name_(plugin_name) {
  if (argv.empty()) throw CompileWorkerLost("compile worker: empty command");
  int to_worker[2], from_worker[2];
  MakePipe(to_worker);
  MakePipe(from_worker);
  try {
    pid_ = Spawn(argv, to_worker[0], from_worker[1]);
  } catch (...) {
    for (int fd : {to_worker[0], to_worker[1], from_worker[0], from_worker[1]}) ::close(fd);
    throw;
  }
  ::close(to_worker[0]);
  ::close(from_worker[1]);
  requests_ = to_worker[1];
  replies_ = from_worker[0];
  // The start message fits the pipe's buffer: this never waits for the worker.
  worker::WriteMessage(requests_, {plugin_name, library_path, worker::EncodeOptions(options),
                                   worker::JoinFrames(FfiHandlerNames()),
                                   worker::EncodeEnvironment(small_program_environment)});
}

CompileWorker::~CompileWorker() {
  // Nothing it does is needed any more (even a compile in flight): end it and reap it, so that
  // no zombie stays behind and exit never waits for a compile.
  if (requests_ >= 0) ::close(requests_);
  if (replies_ >= 0) ::close(replies_);
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

bool CompileWorker::Started() {
  if (started_) return true;
  pollfd p{replies_, POLLIN, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  AwaitStart();  // the reply (or the end of the pipe) is there: this does not block long
  return started_;
}

void CompileWorker::AwaitStart() {
  if (started_) return;
  if (!ReadableBefore(replies_, start_deadline_)) {
    char seconds[32];
    std::snprintf(seconds, sizeof(seconds), "%g", start_timeout_.count() / 1000.0);
    throw CompileWorkerLost(std::string("the compile worker did not start within ") + seconds +
                            " s (TORCH_PJRT_COMPILE_WORKER_START_TIMEOUT)");
  }
  std::vector<std::string> reply;
  if (!worker::ReadMessage(replies_, 2, &reply)) {
    throw CompileWorkerLost("the compile worker exited before it started (its stderr says why)");
  }
  if (reply[0] != "ok") {
    throw CompileWorkerLost("the compile worker could not start plugin '" + plugin_name_ + "': " + reply[1]);
  }
  started_ = true;
}

std::string CompileWorker::Compile(const std::string& mlir_text, bool for_small_client) {
  AwaitStart();
  std::vector<std::string> reply;
  if (!worker::WriteMessage(requests_, {mlir_text, for_small_client ? "small" : "main"}) ||
      !worker::ReadMessage(replies_, 3, &reply)) {
    throw CompileWorkerLost("the compile worker died while compiling a graph (its stderr says why)");
  }
  if (reply[0] != "ok") throw PjrtError(reply[1], std::stoi(reply[2]));
  return std::move(reply[1]);
}

}  // namespace torch_pjrt::runtime
