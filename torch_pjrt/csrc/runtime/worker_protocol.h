// The pipe protocol between the process that traces (runtime/compile_worker.h) and its compile
// worker (compile_worker/main.cc). A message is a list of frames; a frame is its byte length as
// a little-endian uint64, then the bytes. Both sides include this file: one definition of the
// format.
//   start (parent -> worker): plugin name, library path, client options (EncodeOptions), the
//                              FFI custom-call targets the programs may name, and the environment
//                              of the small programs' client (EncodeEnvironment; empty: none).
//   started (worker -> parent): "ok" or "error", then the error's message (empty for "ok").
//   compile (parent -> worker): the StableHLO text of a portable program, then the client it
//                               will run on: "main" or "small".
//   compiled (worker -> parent): "ok" and the serialized executable, or "error", the compiler's
//                                message and its PJRT error code (decimal).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "runtime/client.h"

namespace torch_pjrt::runtime::worker {

// Writes one message; false when the pipe is closed (the other side is gone).
bool WriteMessage(int fd, const std::vector<std::string>& frames);
// Reads one message of `count` frames; false on end of file or a short read.
bool ReadMessage(int fd, size_t count, std::vector<std::string>* frames);

// A list of strings as one frame (frames nested in it) and back.
std::string JoinFrames(const std::vector<std::string>& frames);
std::vector<std::string> SplitFrames(const std::string& joined);

// Environment variables as one frame (name, value for each) and back.
std::string EncodeEnvironment(const std::map<std::string, std::string>& environment);
std::map<std::string, std::string> DecodeEnvironment(const std::string& frame);

// Client options as one frame (name, kind, value for each option) and back.
std::string EncodeOptions(const std::vector<NamedOption>& options);
std::vector<NamedOption> DecodeOptions(const std::string& frame);

}  // namespace torch_pjrt::runtime::worker
