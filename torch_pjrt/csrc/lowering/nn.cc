// Neural-network ops: convolution, pooling, batch/layer norm, nll_loss, and their backward.
#include "lowering/helpers.h"

namespace torch_pjrt::lowering {

void RegisterNNOps(Registry& r) {}

}  // namespace torch_pjrt::lowering
