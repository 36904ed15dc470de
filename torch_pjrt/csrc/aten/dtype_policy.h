// Which dtypes the active sub-plugin computes natively, and what happens to the others (its
// `supported_dtypes` / `unsupported_dtype_policy` capabilities).
#pragma once

#include <c10/core/ScalarType.h>

namespace torch_pjrt::aten {

// Called for every new pjrt tensor. Raises a TypeError naming the plugin and the fix when the
// plugin's policy is "error"; warns once per dtype when it is "warn"; otherwise does nothing.
void CheckDtypeSupported(c10::ScalarType dtype);

}  // namespace torch_pjrt::aten
