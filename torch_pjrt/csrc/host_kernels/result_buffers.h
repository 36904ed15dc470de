// Host kernels that compute straight into the program's result buffers. Torch's kernels allocate
// their own outputs, and a handler then copied each into the buffer XLA gave it: for bench/run.py's
// small CNN, 0.36 ms per batch of 64 on the kernel thread, beside 2.7 ms of convolutions
// (docs/design.md, "Host kernels' results in place").
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <vector>

namespace torch_pjrt::host_kernels {

// Where one result of a host kernel goes.
struct ResultBuffer {
  at::Tensor ret;        // the program's buffer, as torch indexes it (undefined: not computed)
  bool offered = false;  // whether the kernel may allocate its result there
};

// Runs `compute`, which returns one tensor per entry of `rets` (undefined where it computed
// none), and stores each into its entry's buffer. While `compute` runs, the first CPU allocation
// of this thread with exactly an offered buffer's byte size is given that buffer's memory, so a
// kernel that writes its output where it allocated it (oneDNN's channels-last convolutions) leaves
// nothing to copy. A result that is not where it belongs (another layout, or a temporary took the
// buffer) is copied as before. Offer only buffers the kernel's output is allocated for through
// at::empty: oneDNN allocates its blocked temporaries through raw_allocate (result_buffers.cc).
void ComputeInto(const std::vector<ResultBuffer>& rets, const std::function<std::vector<at::Tensor>()>& compute);

}  // namespace torch_pjrt::host_kernels
