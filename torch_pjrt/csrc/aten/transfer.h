// Moving data between the host and pjrt devices, and between pjrt devices: the only places where
// tensor data leaves the lazy graph.
#pragma once

#include <ATen/core/Tensor.h>

#include "graph/executor.h"

namespace torch_pjrt::aten {

// _copy_from: copies `src` into `dst` where at least one of them is a pjrt tensor, converting
// dtype and broadcasting like Tensor.copy_.
void CopyBetweenDevices(const at::Tensor& src, const at::Tensor& dst, bool non_blocking = false);
// Reads pjrt tensor `src` into CPU tensor `dst` (same sizes), syncing its device first.
void CopyToHost(const at::Tensor& src, const at::Tensor& dst, graph::SyncCause cause);
// Writes CPU tensor `src` into pjrt tensor `dst`. With `non_blocking`, from pinned memory (or
// from a staging copy made here), it returns before the data is read, as CUDA's does: the caller
// must not write `src` until the device has used it (torch.pjrt.synchronize()).
void CopyFromHost(const at::Tensor& src, const at::Tensor& dst, bool non_blocking = false);
// True when `t` is exactly its whole storage, laid out contiguously.
bool CoversStorage(const at::Tensor& t);
// Gives the storage `nbytes` bytes: the old contents stay at the front (truncated when smaller).
void ResizeStorage(const c10::Storage& storage, size_t nbytes);

}  // namespace torch_pjrt::aten
