#include "aten/zero_divisor.h"

#include <ATen/ops/eq.h>
#include <ATen/ops/result_type.h>
#include <c10/util/Exception.h>

namespace torch_pjrt::aten {

namespace {

// torch's promotion of the dividend and the divisor (either may be a number).
at::ScalarType PromotedType(const c10::IValue& a, const c10::IValue& b) {
  if (a.isTensor() && b.isTensor()) return at::result_type(a.toTensor(), b.toTensor());
  if (a.isTensor()) return at::result_type(a.toTensor(), b.toScalar());
  return at::result_type(a.toScalar(), b.toTensor());
}

bool IsIntegerDivision(const OpSignature& sig, c10::ArrayRef<c10::IValue> args) {
  int mode = sig.zero_divisor_check.rounding_mode_arg;
  if (mode >= 0 && args[mode].isNone()) return false;  // div's true division: a float result
  return c10::isIntegralType(PromotedType(args[kDividendArg], args[kDivisorArg]), /*includeBool=*/true);
}

// A number, or a CPU tensor (a scalar: Python numbers reach binary ops as wrapped 0-d tensors).
bool IsZero(const c10::IValue& divisor) {
  if (divisor.isScalar()) return divisor.toScalar().toDouble() == 0;
  const at::Tensor& t = divisor.toTensor();
  return t.numel() == 1 ? t.item().toDouble() == 0 : at::eq(t, 0).any().item<bool>();
}

}  // namespace

bool CheckDivisorOnHost(const OpSignature& sig, c10::ArrayRef<c10::IValue> args, int64_t result_numel) {
  if (result_numel == 0 || !IsIntegerDivision(sig, args)) return false;
  const c10::IValue& divisor = args[kDivisorArg];
  bool on_host = divisor.isScalar() || divisor.toTensor().is_cpu();
  TORCH_CHECK(!on_host || !IsZero(divisor), "ZeroDivisionError");
  return !on_host;
}

std::string ZeroDivisorMessage(const OpSignature& sig, const std::string& where) {
  return "ZeroDivisionError: an integer division by zero in " + sig.name +
         (where.empty() ? "" : ", traced at " + where);
}

}  // namespace torch_pjrt::aten
