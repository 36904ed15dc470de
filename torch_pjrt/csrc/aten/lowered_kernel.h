#pragma once

#include <string>
#include <vector>

namespace torch_pjrt::aten {

// Registers the generic kernel for every op in the lowering table, with its in-place and out=
// variants. Returns the table entries that name no op in this torch build.
std::vector<std::string> RegisterLoweredKernels();

}  // namespace torch_pjrt::aten
