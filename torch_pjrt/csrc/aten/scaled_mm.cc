// torch._scaled_mm / _scaled_mm_v2 (float8 matmuls with scales) as lowered ops, the way torch's
// CPU kernel emulates them: both operands widened to float, multiplied, scaled by the tensor-wise
// or row-wise scales, the bias added, rounded to the output dtype (the first operand's unless
// given). Overflow follows the CPU kernel too: it saturates to +-448 in float8_e4m3fn (the
// generic conversion), except for tensor-wise scales with both operands and the output
// float8_e4m3fn, which the CPU kernel hands to oneDNN, whose conversion gives NaN on some
// machines and saturates on others (CpuOverflowsToNaN asks the CPU kernel which). The checks
// are the CPU kernel's; torch's Meta kernel is CUDA's (it wants a column-major second operand),
// so it is not used here.
#include <ATen/core/Tensor.h>
#include <ATen/ops/_scaled_mm.h>
#include <ATen/ops/full.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/where.h>
#include <torch/library.h>

#include <cmath>
#include <limits>

#include "aten/kernel_util.h"
#include "aten/torch_errors.h"

namespace torch_pjrt::aten {

namespace {

void CheckOperands(const at::Tensor& a, const at::Tensor& b, const std::optional<at::Tensor>& bias) {
  TORCH_CHECK(a.dim() == 2, "mat1 must be a matrix");
  TORCH_CHECK(b.dim() == 2, "mat2 must be a matrix");
  TORCH_CHECK(a.size(1) == b.size(0), "mat1 and mat2 shapes cannot be multiplied (", a.size(0), "x", a.size(1),
              " and ", b.size(0), "x", b.size(1), ")");
  TORCH_CHECK(!bias.has_value() || !bias->defined() || bias->numel() == b.size(1), "Bias must be size ", b.size(1),
              " but got ", bias.has_value() && bias->defined() ? bias->numel() : 0);
  TORCH_CHECK(at::isFloat8Type(a.scalar_type()), "Expected mat1 to be Float8 matrix got ", a.scalar_type());
  TORCH_CHECK(at::isFloat8Type(b.scalar_type()), "Expected mat2 to be Float8 matrix got ", b.scalar_type());
}

// Whether this machine's CPU kernel turns an overflowing tensor-wise all-float8_e4m3fn product
// into NaN (oneDNN's conversion on some instruction sets) rather than +-448: asked once, with
// 448 * 448.
bool CpuOverflowsToNaN() {
  static const bool nan = [] {
    try {
      at::Tensor x = at::full({1, 1}, 448.0, at::TensorOptions().dtype(c10::kFloat)).to(c10::kFloat8_e4m3fn);
      at::Tensor one = at::ones({}, at::TensorOptions().dtype(c10::kFloat));
      at::Tensor r = at::_scaled_mm(x, x, one, one, std::nullopt, std::nullopt, c10::kFloat8_e4m3fn);
      return std::isnan(r.to(c10::kFloat).item<float>());
    } catch (const std::exception&) {
      return true;  // what the CPU kernels seen so far did
    }
  }();
  return nan;
}

// (a b) * scale_a * scale_b (+ bias), in float, rounded to `out_dtype` (a's dtype if not given).
at::Tensor ScaledProduct(const at::Tensor& a, const at::Tensor& b, const at::Tensor& scale_a, const at::Tensor& scale_b,
                         const std::optional<at::Tensor>& bias, std::optional<c10::ScalarType> out_dtype) {
  CheckOperands(a, b, bias);
  at::Tensor out = at::mm(a.to(c10::kFloat), b.to(c10::kFloat)).mul(scale_a.to(c10::kFloat)).mul(scale_b.to(c10::kFloat));
  if (bias.has_value() && bias->defined()) out = out.add(bias->to(c10::kFloat));
  c10::ScalarType type = out_dtype.value_or(a.scalar_type());
  constexpr auto e4m3 = c10::kFloat8_e4m3fn;
  bool tensor_wise = scale_a.numel() == 1 && scale_b.numel() == 1;
  if (tensor_wise && a.scalar_type() == e4m3 && b.scalar_type() == e4m3 && type == e4m3 && CpuOverflowsToNaN()) {
    // Beyond the midpoint to the next power's first step, oneDNN's rounding overflows to NaN.
    out = at::where(out.abs().gt(464), std::numeric_limits<float>::quiet_NaN(), out);
  }
  return out.to(type);
}

at::Tensor ScaledMm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& scale_a, const at::Tensor& scale_b,
                    const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& scale_result,
                    std::optional<c10::ScalarType> out_dtype, bool use_fast_accum) {
  return WithTorchErrors([&] { return ScaledProduct(a, b, scale_a, scale_b, bias, out_dtype); });
}

at::Tensor ScaledMmV2(const at::Tensor& a, const at::Tensor& b, at::TensorList scale_a, at::IntArrayRef recipe_a,
                      at::IntArrayRef swizzle_a, at::TensorList scale_b, at::IntArrayRef recipe_b,
                      at::IntArrayRef swizzle_b, const std::optional<at::Tensor>& bias,
                      std::optional<c10::ScalarType> out_dtype, at::IntArrayRef contraction_dim, bool use_fast_accum) {
  return WithTorchErrors([&] {
    TORCH_CHECK(scale_a.size() == 1 && scale_b.size() == 1,
                "_scaled_mm_v2: tensor-wise and row-wise scaling take one scale per operand, got ", scale_a.size(),
                " and ", scale_b.size());
    return ScaledProduct(a, b, scale_a[0], scale_b[0], bias, out_dtype);
  });
}

at::Tensor& ScaledMmOut(const at::Tensor& a, const at::Tensor& b, const at::Tensor& scale_a, const at::Tensor& scale_b,
                        const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& scale_result,
                        std::optional<c10::ScalarType> out_dtype, bool use_fast_accum, at::Tensor& out) {
  WriteOut(out, ScaledMm(a, b, scale_a, scale_b, bias, scale_result, out_dtype.value_or(out.scalar_type()),
                         use_fast_accum));
  return out;
}

at::Tensor& ScaledMmV2Out(const at::Tensor& a, const at::Tensor& b, at::TensorList scale_a, at::IntArrayRef recipe_a,
                          at::IntArrayRef swizzle_a, at::TensorList scale_b, at::IntArrayRef recipe_b,
                          at::IntArrayRef swizzle_b, const std::optional<at::Tensor>& bias,
                          std::optional<c10::ScalarType> out_dtype, at::IntArrayRef contraction_dim,
                          bool use_fast_accum, at::Tensor& out) {
  WriteOut(out, ScaledMmV2(a, b, scale_a, recipe_a, swizzle_a, scale_b, recipe_b, swizzle_b, bias,
                           out_dtype.value_or(out.scalar_type()), contraction_dim, use_fast_accum));
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_scaled_mm", &ScaledMm);
  m.impl("_scaled_mm.out", &ScaledMmOut);
  m.impl("_scaled_mm_v2", &ScaledMmV2);
  m.impl("_scaled_mm_v2.out", &ScaledMmV2Out);
}

}  // namespace torch_pjrt::aten
