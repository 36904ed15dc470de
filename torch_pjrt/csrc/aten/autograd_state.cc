#include "aten/autograd_state.h"

#include <torch/csrc/autograd/graph_task.h>

namespace torch_pjrt::aten {

bool InBackwardPass() { return torch::autograd::get_current_graph_task_id() != -1; }

}  // namespace torch_pjrt::aten
