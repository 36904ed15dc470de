// The `pjrt` process-group backend. For plugins that cannot run collectives across processes (the
// OpenXLA CPU plugin ignores PJRT's key-value callbacks): every collective copies its pjrt
// tensors to the host, runs there on a gloo backend and copies the results back.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include "distributed/graph_collectives.h"

namespace torch_pjrt::distributed {

// `host` is a gloo backend over the same store, rank and size (torch_pjrt/distributed.py makes
// it). CPU tensors pass through untouched, so one backend serves "pjrt" and "cpu:gloo,pjrt:pjrt".
// Collectives are synchronous: the Work they return is already complete.
c10::intrusive_ptr<c10d::Backend> MakeHostCopyBackend(c10::intrusive_ptr<c10d::Backend> host);
// The same backend for a plugin that runs collectives across processes: all-reduce, broadcast,
// all-gather and reduce-scatter of pjrt tensors become ops of the lazy graph over `group`.
c10::intrusive_ptr<c10d::Backend> MakeGraphCollectiveBackend(c10::intrusive_ptr<c10d::Backend> host,
                                                              GraphGroup group);

}  // namespace torch_pjrt::distributed
