// Errors from the layers below surface as the Python exception torch raises for the same mistake:
// a DeviceError of kind kIndex becomes IndexError, everything else RuntimeError.
#pragma once

#include <c10/util/Exception.h>

#include <utility>

#include "common/errors.h"

namespace torch_pjrt::aten {

[[noreturn]] inline void RaiseTorchError(const DeferredError& e) {
  if (e.kind == ErrorKind::kIndex) TORCH_CHECK_INDEX(false, e.message);
  TORCH_CHECK(false, e.message);
}

// Runs `fn`, translating a DeviceError into the torch error of its kind.
template <class F>
decltype(auto) WithTorchErrors(F&& fn) {
  try {
    return std::forward<F>(fn)();
  } catch (const DeviceError& e) {
    RaiseTorchError(DeferredError{e.kind(), e.what()});
  }
}

}  // namespace torch_pjrt::aten
