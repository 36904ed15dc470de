// Reads answered without executing (design: "Repeated reads"). A model that reads a small value
// computed only from device buffers every step (transformers checks `attention_mask.all()` to
// skip the mask) would cut every step's graph in two and wait for the first part. Such a value is
// a pure function of its buffers, which never change once made: the first read executes as
// always and its result buffer is remembered under the computation and those buffers' identity;
// a later read of the same computation over the same live buffers takes the remembered buffer,
// and the trace goes on uncut.
#pragma once

#include "graph/executor.h"
#include "graph/lazy_storage.h"

namespace torch_pjrt::graph {

// Gives `s` (which has a pending value) a buffer for a read: the remembered one if an earlier
// read computed the same value from the same buffers, else by syncing its device for `cause`.
// During a device-graph capture a scalar read (`cause` kItem) answered so is guarded: replays
// compute it again and raise if it differs (AddReadGuard); another kind of read makes the capture
// refuse the region. `where` (the Python line, see SourceLocation) names the read in either.
void SyncForRead(LazyStorage* s, SyncCause cause, std::string where = {});
// Drops every remembered result (their buffers must go before the client, at shutdown).
void ForgetRememberedReads();

}  // namespace torch_pjrt::graph
