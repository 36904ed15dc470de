// Integer division by zero (the lowering table's zero_divisor_check: floor_divide, remainder, fmod,
// div with a rounding mode). CPU's kernels raise RuntimeError("ZeroDivisionError"); XLA's integer
// division gives -1 or the dividend, so without a check the answer was silently wrong.
#pragma once

#include <ATen/core/ivalue.h>

#include "aten/op_signature.h"

namespace torch_pjrt::aten {

// Every op with a zero_divisor_check takes (dividend, divisor, ...).
constexpr int kDividendArg = 0, kDivisorArg = 1;

// For a call of an op with a zero_divisor_check whose result has `result_numel` elements: raises
// CPU's RuntimeError("ZeroDivisionError") where the division is an integer one and its divisor,
// known on the host (a Python number or a CPU scalar), is zero. Returns whether the divisor is a
// device tensor of an integer division, whose values the graph checks when it runs
// (graph::AddNonzeroCheck). Nothing is checked for an empty result: CPU's loop never runs then.
bool CheckDivisorOnHost(const OpSignature& sig, c10::ArrayRef<c10::IValue> args, int64_t result_numel);

// The error a zero device divisor raises at the next sync point: CPU's text, then the op and the
// Python line that traced it.
std::string ZeroDivisorMessage(const OpSignature& sig, const std::string& where);

}  // namespace torch_pjrt::aten
