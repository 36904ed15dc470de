// Errors found after the op that caused them was traced: a graph that failed to lower, compile or
// run, or an out-of-range index seen when the graph ran. They are kept with the values they
// spoiled and raised when those values are read, with the Python exception type torch would raise
// (the layers above translate the kind).
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

namespace torch_pjrt {

enum class ErrorKind : uint8_t {
  kRuntime,  // RuntimeError
  kIndex,    // IndexError
};

struct DeferredError {
  ErrorKind kind = ErrorKind::kRuntime;
  std::string message;
};
using DeferredErrorPtr = std::shared_ptr<const DeferredError>;

inline DeferredErrorPtr MakeDeferredError(ErrorKind kind, std::string message) {
  return std::make_shared<const DeferredError>(DeferredError{kind, std::move(message)});
}

// Thrown when a spoiled value is read (or at the sync point that discovers the error).
class DeviceError : public std::runtime_error {
 public:
  explicit DeviceError(const DeferredError& e) : std::runtime_error(e.message), kind_(e.kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

}  // namespace torch_pjrt
