// Factory ops that produce values without tensor inputs (zeros/ones/full arrive as empty+fill_).
#include "lowering/helpers.h"

namespace torch_pjrt::lowering {

void RegisterFactoryOps(Registry& r) {}

}  // namespace torch_pjrt::lowering
