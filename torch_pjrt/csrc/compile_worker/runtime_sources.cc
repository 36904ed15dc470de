// The runtime's torch-free sources, built once more into the compile worker's library. Included
// rather than listed in setup.py: listing them would compile them to the same object files as
// torch_pjrt._C's, with the worker's flags, and each build would redo both.
#include "common/dtype.cc"
#include "runtime/buffer.cc"
#include "runtime/client.cc"
#include "runtime/executable.cc"
#include "runtime/launch_queue.cc"
#include "runtime/serial_thread.cc"
#include "runtime/ffi.cc"
#include "runtime/plugin.cc"
#include "runtime/worker_protocol.cc"
