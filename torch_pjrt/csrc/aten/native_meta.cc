#include "aten/native_meta.h"

#include <ATen/ExpandUtils.h>
#include <ATen/TensorIterator.h>
#include <ATen/core/boxing/impl/make_boxed_from_unboxed_functor.h>
#include <ATen/native/TypeProperties.h>
#include <ATen/ops/_addmm_activation_meta_dispatch.h>
#include <ATen/ops/_addmm_activation_ops.h>
#include <ATen/ops/_log_softmax_backward_data_meta_dispatch.h>
#include <ATen/ops/_log_softmax_backward_data_ops.h>
#include <ATen/ops/_log_softmax_meta_dispatch.h>
#include <ATen/ops/_log_softmax_ops.h>
#include <ATen/ops/_softmax_backward_data_meta_dispatch.h>
#include <ATen/ops/_softmax_backward_data_ops.h>
#include <ATen/ops/_softmax_meta_dispatch.h>
#include <ATen/ops/_softmax_ops.h>
#include <ATen/ops/acos_meta_dispatch.h>
#include <ATen/ops/acos_ops.h>
#include <ATen/ops/acosh_meta_dispatch.h>
#include <ATen/ops/acosh_ops.h>
#include <ATen/ops/add_meta_dispatch.h>
#include <ATen/ops/add_ops.h>
#include <ATen/ops/addcdiv_meta_dispatch.h>
#include <ATen/ops/addcdiv_ops.h>
#include <ATen/ops/addcmul_meta_dispatch.h>
#include <ATen/ops/addcmul_ops.h>
#include <ATen/ops/addmm_meta_dispatch.h>
#include <ATen/ops/addmm_ops.h>
#include <ATen/ops/addmv_meta_dispatch.h>
#include <ATen/ops/addmv_ops.h>
#include <ATen/ops/all_meta_dispatch.h>
#include <ATen/ops/all_ops.h>
#include <ATen/ops/amax_meta_dispatch.h>
#include <ATen/ops/amax_ops.h>
#include <ATen/ops/amin_meta_dispatch.h>
#include <ATen/ops/amin_ops.h>
#include <ATen/ops/aminmax_meta_dispatch.h>
#include <ATen/ops/aminmax_ops.h>
#include <ATen/ops/any_meta_dispatch.h>
#include <ATen/ops/any_ops.h>
#include <ATen/ops/argmax_meta_dispatch.h>
#include <ATen/ops/argmax_ops.h>
#include <ATen/ops/argmin_meta_dispatch.h>
#include <ATen/ops/argmin_ops.h>
#include <ATen/ops/asin_meta_dispatch.h>
#include <ATen/ops/asin_ops.h>
#include <ATen/ops/asinh_meta_dispatch.h>
#include <ATen/ops/asinh_ops.h>
#include <ATen/ops/atan2_meta_dispatch.h>
#include <ATen/ops/atan2_ops.h>
#include <ATen/ops/atan_meta_dispatch.h>
#include <ATen/ops/atan_ops.h>
#include <ATen/ops/atanh_meta_dispatch.h>
#include <ATen/ops/atanh_ops.h>
#include <ATen/ops/avg_pool2d_backward_meta_dispatch.h>
#include <ATen/ops/avg_pool2d_backward_ops.h>
#include <ATen/ops/avg_pool2d_meta_dispatch.h>
#include <ATen/ops/avg_pool2d_ops.h>
#include <ATen/ops/baddbmm_meta_dispatch.h>
#include <ATen/ops/baddbmm_ops.h>
#include <ATen/ops/bitwise_and_meta_dispatch.h>
#include <ATen/ops/bitwise_and_ops.h>
#include <ATen/ops/bitwise_not_meta_dispatch.h>
#include <ATen/ops/bitwise_not_ops.h>
#include <ATen/ops/bitwise_or_meta_dispatch.h>
#include <ATen/ops/bitwise_or_ops.h>
#include <ATen/ops/bitwise_xor_meta_dispatch.h>
#include <ATen/ops/bitwise_xor_ops.h>
#include <ATen/ops/bmm_meta_dispatch.h>
#include <ATen/ops/bmm_ops.h>
#include <ATen/ops/cat_meta_dispatch.h>
#include <ATen/ops/cat_ops.h>
#include <ATen/ops/ceil_meta_dispatch.h>
#include <ATen/ops/ceil_ops.h>
#include <ATen/ops/clamp_max_meta_dispatch.h>
#include <ATen/ops/clamp_max_ops.h>
#include <ATen/ops/clamp_meta_dispatch.h>
#include <ATen/ops/clamp_min_meta_dispatch.h>
#include <ATen/ops/clamp_min_ops.h>
#include <ATen/ops/clamp_ops.h>
#include <ATen/ops/copysign_meta_dispatch.h>
#include <ATen/ops/copysign_ops.h>
#include <ATen/ops/cos_meta_dispatch.h>
#include <ATen/ops/cos_ops.h>
#include <ATen/ops/cosh_meta_dispatch.h>
#include <ATen/ops/cosh_ops.h>
#include <ATen/ops/cumprod_meta_dispatch.h>
#include <ATen/ops/cumprod_ops.h>
#include <ATen/ops/cumsum_meta_dispatch.h>
#include <ATen/ops/cumsum_ops.h>
#include <ATen/ops/digamma_meta_dispatch.h>
#include <ATen/ops/digamma_ops.h>
#include <ATen/ops/div_meta_dispatch.h>
#include <ATen/ops/div_ops.h>
#include <ATen/ops/elu_backward_meta_dispatch.h>
#include <ATen/ops/elu_backward_ops.h>
#include <ATen/ops/elu_meta_dispatch.h>
#include <ATen/ops/elu_ops.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/eq_meta_dispatch.h>
#include <ATen/ops/eq_ops.h>
#include <ATen/ops/erf_meta_dispatch.h>
#include <ATen/ops/erf_ops.h>
#include <ATen/ops/erfc_meta_dispatch.h>
#include <ATen/ops/erfc_ops.h>
#include <ATen/ops/erfinv_meta_dispatch.h>
#include <ATen/ops/erfinv_ops.h>
#include <ATen/ops/exp2_meta_dispatch.h>
#include <ATen/ops/exp2_ops.h>
#include <ATen/ops/exp_meta_dispatch.h>
#include <ATen/ops/exp_ops.h>
#include <ATen/ops/expm1_meta_dispatch.h>
#include <ATen/ops/expm1_ops.h>
#include <ATen/ops/fill_meta_dispatch.h>
#include <ATen/ops/fill_ops.h>
#include <ATen/ops/floor_meta_dispatch.h>
#include <ATen/ops/floor_ops.h>
#include <ATen/ops/fmax_meta_dispatch.h>
#include <ATen/ops/fmax_ops.h>
#include <ATen/ops/fmin_meta_dispatch.h>
#include <ATen/ops/fmin_ops.h>
#include <ATen/ops/fmod_meta_dispatch.h>
#include <ATen/ops/fmod_ops.h>
#include <ATen/ops/frac_meta_dispatch.h>
#include <ATen/ops/frac_ops.h>
#include <ATen/ops/gather_meta_dispatch.h>
#include <ATen/ops/gather_ops.h>
#include <ATen/ops/gcd_meta_dispatch.h>
#include <ATen/ops/gcd_ops.h>
#include <ATen/ops/ge_meta_dispatch.h>
#include <ATen/ops/ge_ops.h>
#include <ATen/ops/gelu_backward_meta_dispatch.h>
#include <ATen/ops/gelu_backward_ops.h>
#include <ATen/ops/gelu_meta_dispatch.h>
#include <ATen/ops/gelu_ops.h>
#include <ATen/ops/glu_meta_dispatch.h>
#include <ATen/ops/glu_ops.h>
#include <ATen/ops/gt_meta_dispatch.h>
#include <ATen/ops/gt_ops.h>
#include <ATen/ops/hardshrink_meta_dispatch.h>
#include <ATen/ops/hardshrink_ops.h>
#include <ATen/ops/hardsigmoid_backward_meta_dispatch.h>
#include <ATen/ops/hardsigmoid_backward_ops.h>
#include <ATen/ops/hardsigmoid_meta_dispatch.h>
#include <ATen/ops/hardsigmoid_ops.h>
#include <ATen/ops/heaviside_meta_dispatch.h>
#include <ATen/ops/heaviside_ops.h>
#include <ATen/ops/hypot_meta_dispatch.h>
#include <ATen/ops/hypot_ops.h>
#include <ATen/ops/i0_meta_dispatch.h>
#include <ATen/ops/i0_ops.h>
#include <ATen/ops/igamma_meta_dispatch.h>
#include <ATen/ops/igamma_ops.h>
#include <ATen/ops/igammac_meta_dispatch.h>
#include <ATen/ops/igammac_ops.h>
#include <ATen/ops/index_add_meta_dispatch.h>
#include <ATen/ops/index_add_ops.h>
#include <ATen/ops/index_copy_meta_dispatch.h>
#include <ATen/ops/index_copy_ops.h>
#include <ATen/ops/isneginf_meta_dispatch.h>
#include <ATen/ops/isneginf_ops.h>
#include <ATen/ops/isposinf_meta_dispatch.h>
#include <ATen/ops/isposinf_ops.h>
#include <ATen/ops/lcm_meta_dispatch.h>
#include <ATen/ops/lcm_ops.h>
#include <ATen/ops/le_meta_dispatch.h>
#include <ATen/ops/le_ops.h>
#include <ATen/ops/leaky_relu_backward_meta_dispatch.h>
#include <ATen/ops/leaky_relu_backward_ops.h>
#include <ATen/ops/leaky_relu_meta_dispatch.h>
#include <ATen/ops/leaky_relu_ops.h>
#include <ATen/ops/lerp_meta_dispatch.h>
#include <ATen/ops/lerp_ops.h>
#include <ATen/ops/lgamma_meta_dispatch.h>
#include <ATen/ops/lgamma_ops.h>
#include <ATen/ops/linalg_vector_norm_meta_dispatch.h>
#include <ATen/ops/linalg_vector_norm_ops.h>
#include <ATen/ops/log10_meta_dispatch.h>
#include <ATen/ops/log10_ops.h>
#include <ATen/ops/log1p_meta_dispatch.h>
#include <ATen/ops/log1p_ops.h>
#include <ATen/ops/log2_meta_dispatch.h>
#include <ATen/ops/log2_ops.h>
#include <ATen/ops/log_meta_dispatch.h>
#include <ATen/ops/log_ops.h>
#include <ATen/ops/logaddexp2_meta_dispatch.h>
#include <ATen/ops/logaddexp2_ops.h>
#include <ATen/ops/logaddexp_meta_dispatch.h>
#include <ATen/ops/logaddexp_ops.h>
#include <ATen/ops/logit_backward_meta_dispatch.h>
#include <ATen/ops/logit_backward_ops.h>
#include <ATen/ops/lt_meta_dispatch.h>
#include <ATen/ops/lt_ops.h>
#include <ATen/ops/max_meta_dispatch.h>
#include <ATen/ops/max_ops.h>
#include <ATen/ops/max_pool2d_with_indices_backward_meta_dispatch.h>
#include <ATen/ops/max_pool2d_with_indices_backward_ops.h>
#include <ATen/ops/max_pool2d_with_indices_meta_dispatch.h>
#include <ATen/ops/max_pool2d_with_indices_ops.h>
#include <ATen/ops/maximum_meta_dispatch.h>
#include <ATen/ops/maximum_ops.h>
#include <ATen/ops/mean_meta_dispatch.h>
#include <ATen/ops/mean_ops.h>
#include <ATen/ops/min_meta_dispatch.h>
#include <ATen/ops/min_ops.h>
#include <ATen/ops/minimum_meta_dispatch.h>
#include <ATen/ops/minimum_ops.h>
#include <ATen/ops/mish_meta_dispatch.h>
#include <ATen/ops/mish_ops.h>
#include <ATen/ops/mm_meta_dispatch.h>
#include <ATen/ops/mm_ops.h>
#include <ATen/ops/mse_loss_meta_dispatch.h>
#include <ATen/ops/mse_loss_ops.h>
#include <ATen/ops/mul_meta_dispatch.h>
#include <ATen/ops/mul_ops.h>
#include <ATen/ops/ne_meta_dispatch.h>
#include <ATen/ops/ne_ops.h>
#include <ATen/ops/neg_meta_dispatch.h>
#include <ATen/ops/neg_ops.h>
#include <ATen/ops/nextafter_meta_dispatch.h>
#include <ATen/ops/nextafter_ops.h>
#include <ATen/ops/nll_loss_backward_meta_dispatch.h>
#include <ATen/ops/nll_loss_backward_ops.h>
#include <ATen/ops/nll_loss_forward_meta_dispatch.h>
#include <ATen/ops/nll_loss_forward_ops.h>
#include <ATen/ops/norm_meta_dispatch.h>
#include <ATen/ops/norm_ops.h>
#include <ATen/ops/polygamma_meta_dispatch.h>
#include <ATen/ops/polygamma_ops.h>
#include <ATen/ops/pow_meta_dispatch.h>
#include <ATen/ops/pow_ops.h>
#include <ATen/ops/prod_meta_dispatch.h>
#include <ATen/ops/prod_ops.h>
#include <ATen/ops/reciprocal_meta_dispatch.h>
#include <ATen/ops/reciprocal_ops.h>
#include <ATen/ops/remainder_meta_dispatch.h>
#include <ATen/ops/remainder_ops.h>
#include <ATen/ops/round_meta_dispatch.h>
#include <ATen/ops/round_ops.h>
#include <ATen/ops/rsqrt_meta_dispatch.h>
#include <ATen/ops/rsqrt_ops.h>
#include <ATen/ops/scatter_add_meta_dispatch.h>
#include <ATen/ops/scatter_add_ops.h>
#include <ATen/ops/scatter_meta_dispatch.h>
#include <ATen/ops/scatter_ops.h>
#include <ATen/ops/sgn_meta_dispatch.h>
#include <ATen/ops/sgn_ops.h>
#include <ATen/ops/sigmoid_backward_meta_dispatch.h>
#include <ATen/ops/sigmoid_backward_ops.h>
#include <ATen/ops/sigmoid_meta_dispatch.h>
#include <ATen/ops/sigmoid_ops.h>
#include <ATen/ops/sign_meta_dispatch.h>
#include <ATen/ops/sign_ops.h>
#include <ATen/ops/signbit_meta_dispatch.h>
#include <ATen/ops/signbit_ops.h>
#include <ATen/ops/silu_backward_meta_dispatch.h>
#include <ATen/ops/silu_backward_ops.h>
#include <ATen/ops/silu_meta_dispatch.h>
#include <ATen/ops/silu_ops.h>
#include <ATen/ops/sin_meta_dispatch.h>
#include <ATen/ops/sin_ops.h>
#include <ATen/ops/sinc_meta_dispatch.h>
#include <ATen/ops/sinc_ops.h>
#include <ATen/ops/sinh_meta_dispatch.h>
#include <ATen/ops/sinh_ops.h>
#include <ATen/ops/smooth_l1_loss_meta_dispatch.h>
#include <ATen/ops/smooth_l1_loss_ops.h>
#include <ATen/ops/softplus_backward_meta_dispatch.h>
#include <ATen/ops/softplus_backward_ops.h>
#include <ATen/ops/softplus_meta_dispatch.h>
#include <ATen/ops/softplus_ops.h>
#include <ATen/ops/softshrink_meta_dispatch.h>
#include <ATen/ops/softshrink_ops.h>
#include <ATen/ops/sort_meta_dispatch.h>
#include <ATen/ops/sort_ops.h>
#include <ATen/ops/sqrt_meta_dispatch.h>
#include <ATen/ops/sqrt_ops.h>
#include <ATen/ops/sub_meta_dispatch.h>
#include <ATen/ops/sub_ops.h>
#include <ATen/ops/sum_meta_dispatch.h>
#include <ATen/ops/sum_ops.h>
#include <ATen/ops/tan_meta_dispatch.h>
#include <ATen/ops/tan_ops.h>
#include <ATen/ops/tanh_backward_meta_dispatch.h>
#include <ATen/ops/tanh_backward_ops.h>
#include <ATen/ops/tanh_meta_dispatch.h>
#include <ATen/ops/tanh_ops.h>
#include <ATen/ops/threshold_backward_meta_dispatch.h>
#include <ATen/ops/threshold_backward_ops.h>
#include <ATen/ops/threshold_meta_dispatch.h>
#include <ATen/ops/threshold_ops.h>
#include <ATen/ops/topk_meta_dispatch.h>
#include <ATen/ops/topk_ops.h>
#include <ATen/ops/tril_meta_dispatch.h>
#include <ATen/ops/tril_ops.h>
#include <ATen/ops/triu_meta_dispatch.h>
#include <ATen/ops/triu_ops.h>
#include <ATen/ops/trunc_meta_dispatch.h>
#include <ATen/ops/trunc_ops.h>
#include <ATen/ops/upsample_nearest2d_backward_meta_dispatch.h>
#include <ATen/ops/upsample_nearest2d_backward_ops.h>
#include <ATen/ops/upsample_nearest2d_meta_dispatch.h>
#include <ATen/ops/upsample_nearest2d_ops.h>
#include <ATen/ops/xlogy_meta_dispatch.h>
#include <ATen/ops/xlogy_ops.h>
#include <ATen/ops/zero_meta_dispatch.h>
#include <ATen/ops/zero_ops.h>

#include <algorithm>
#include <array>
#include <optional>
#include <unordered_map>
#include <utility>

namespace torch_pjrt::aten {

namespace {

// Unboxes `meta_args` into the typed arguments of `fn` (as the dispatcher's boxed wrappers do),
// calls it and pushes its results.
template <class Fn, size_t... I>
void CallTyped(Fn* fn, c10::ArrayRef<c10::IValue> meta_args, torch::jit::Stack* results, std::index_sequence<I...>) {
  using Traits = c10::guts::infer_function_traits_t<Fn>;
  using Params = typename Traits::parameter_types;
  std::array<c10::IValue, sizeof...(I)> args{meta_args[I]...};  // ivalue_to_arg moves out of them
  (void)args;  // unused for ops without arguments
  using Result = std::decay_t<typename Traits::return_type>;  // in-place forms return Tensor&
  Result out = (*fn)(c10::impl::ivalue_to_arg<
                   typename c10::impl::decay_if_not_tensor<c10::guts::typelist::element_t<I, Params>>::type,
                   false>::call(args[I])...);
  c10::impl::push_outputs<Result, false>::call(std::move(out), results);
}

template <class Schema, Schema* kFn>
void NativeMeta(c10::ArrayRef<c10::IValue> meta_args, torch::jit::Stack* results) {
  constexpr size_t kArgs = c10::guts::infer_function_traits_t<Schema>::number_of_parameters;
  TORCH_INTERNAL_ASSERT(meta_args.size() == kArgs);
  CallTyped(kFn, meta_args, results, std::make_index_sequence<kArgs>());
}

// A meta tensor like `self` (in `dtype`) with the strides CPU's empty_like(self) gives it
// (preserve_format: kept when non-overlapping and dense, else dense in the same dimension order).
// at::empty_like itself would run torch's Python Meta kernel.
at::Tensor EmptyLikeMeta(const at::Tensor& self, c10::ScalarType dtype) {
  auto options = self.options().device(c10::kMeta).dtype(dtype);
  if (self.is_non_overlapping_and_dense()) return at::empty_strided(self.sizes(), self.strides(), options);
  return at::empty_strided(self.sizes(), at::infer_dense_strides(self.sizes(), self.strides()), options);
}
at::Tensor EmptyLikeMeta(const at::Tensor& self) { return EmptyLikeMeta(self, self.scalar_type()); }

// One table entry: the op's full name and its at::meta function, typed by the op's schema (so a
// signature that does not match the schema fails to compile).
template <class Op, typename Op::schema* kFn>
std::pair<std::string, MetaOverride> Native() {
  std::string name = Op::name;
  if (*Op::overload_name != '\0') name += std::string(".") + Op::overload_name;
  return {std::move(name), &NativeMeta<typename Op::schema, kFn>};
}

// The dtype a CPU TensorIterator computes in: the promotion of its tensors and Python numbers,
// raised to the result's floating type by ops that compute integers in float (exp, true div).
c10::ScalarType ComputeDtype(c10::ArrayRef<c10::IValue> args, c10::ScalarType result) {
  at::native::ResultTypeState state;
  for (const c10::IValue& a : args) {
    if (a.isTensor()) state = at::native::update_result_type_state(a.toTensor(), state);
    if (a.isScalar()) state = at::native::update_result_type_state(a.toScalar(), state);
  }
  c10::ScalarType common = at::native::result_type(state);
  bool raised = (c10::isFloatingType(result) || c10::isComplexType(result)) &&
                !(c10::isFloatingType(common) || c10::isComplexType(common));
  return raised ? result : common;
}

// CPU's TensorIterator first casts an input of another dtype than it computes in to a temporary
// (`to(dtype)`, which lays a non-dense input out densely, an expanded dimension as if contiguous),
// and the result's strides follow that temporary; a meta TensorIterator skips the cast and lays
// the result out after the input itself. So `sub(f32 expanded from a row, f64 transposed)` is
// row-major on the CPU but was transposed here (fuzz seed 1905176). Returns the arguments with
// such inputs replaced by the temporary's meta twin, or nothing when no input is replaced.
std::optional<std::vector<c10::IValue>> CastInputsLikeCpu(c10::ArrayRef<c10::IValue> args, c10::ScalarType result) {
  auto cast_needed = [](const c10::IValue& a) { return a.isTensor() && !a.toTensor().is_non_overlapping_and_dense(); };
  if (std::none_of(args.begin(), args.end(), cast_needed)) return std::nullopt;
  c10::ScalarType dtype = ComputeDtype(args, result);
  std::vector<c10::IValue> cast(args.begin(), args.end());
  bool any = false;
  for (c10::IValue& a : cast) {
    if (!cast_needed(a) || a.toTensor().scalar_type() == dtype) continue;
    a = EmptyLikeMeta(a.toTensor(), dtype);
    any = true;
  }
  if (!any) return std::nullopt;
  return cast;
}

bool SameDtypes(const torch::jit::Stack& a, const torch::jit::Stack& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].isTensor() != b[i].isTensor()) return false;
    if (a[i].isTensor() && a[i].toTensor().scalar_type() != b[i].toTensor().scalar_type()) return false;
  }
  return true;
}

// A functional TensorIterator op: its Meta kernel runs again on CPU's cast temporaries where the
// CPU makes any. A Python number counted in ComputeDtype that the op does not promote with
// (threshold's) would change the result dtype; that second answer is not taken.
template <class Schema, Schema* kFn>
void ElementwiseMeta(c10::ArrayRef<c10::IValue> meta_args, torch::jit::Stack* results) {
  NativeMeta<Schema, kFn>(meta_args, results);
  if (results->empty() || !(*results)[0].isTensor()) return;
  auto cast = CastInputsLikeCpu(meta_args, (*results)[0].toTensor().scalar_type());
  if (!cast) return;
  torch::jit::Stack again;
  NativeMeta<Schema, kFn>(*cast, &again);
  if (SameDtypes(*results, again)) *results = std::move(again);
}

template <class Op, typename Op::schema* kFn>
std::pair<std::string, MetaOverride> Elementwise() {
  auto entry = Native<Op, kFn>();
  entry.second = &ElementwiseMeta<typename Op::schema, kFn>;
  return entry;
}

// fill.Scalar / fill.Tensor(self, value) and zero(self): every torch.ones/zeros/full, fill_ and
// zero_ traces one; no C++ Meta kernel exists (torch's are Python). The Tensor form takes a 0-d
// value, as on the CPU.
void FillMeta(c10::ArrayRef<c10::IValue> a, torch::jit::Stack* results) {
  if (a.size() > 1 && a[1].isTensor()) {
    int64_t dims = a[1].toTensor().dim();
    TORCH_CHECK(dims == 0, "fill_ only supports 0-dimension value tensor but got tensor with ", dims, " dimensions.");
  }
  results->push_back(EmptyLikeMeta(a[0].toTensor()));
}

// logical_xor/and/or: the CPU runs them as TensorIterator comparisons (a bool result), and their
// Meta kernels are Python references that lay the result out row-major where a broadcast first
// operand leaves the order to the second (`logical_xor(tensor([2.]), x.t())`: (2, 1) there, the
// CPU's (1, 3)). No at::meta function exists; the comparison's TensorIterator runs on meta tensors.
at::Tensor LogicalResult(const at::Tensor& a, const at::Tensor& b) {
  at::Tensor out = at::empty({0}, a.options().device(c10::kMeta).dtype(at::kBool));
  at::TensorIterator::comparison_op(out, a, b);
  return out;
}

void LogicalMeta(c10::ArrayRef<c10::IValue> a, torch::jit::Stack* results) {
  auto cast = CastInputsLikeCpu(a, at::kBool);
  c10::ArrayRef<c10::IValue> args = cast ? c10::ArrayRef<c10::IValue>(*cast) : a;
  results->push_back(LogicalResult(args[0].toTensor(), args[1].toTensor()));
}

// floor_divide(self, other): the CPU runs it as a TensorIterator binary op (div_floor_stub), and its
// Meta kernel is a Python reference that lays the result out row-major (`floor_divide(x.t(), 0-d
// float)` was (3, 1), the CPU's (1, 3): fuzz seeds 88, 1615, 6003). No at::meta function exists;
// the binary op's TensorIterator runs on meta tensors, on CPU's cast temporaries where it makes any.
at::Tensor BinaryOpResult(const at::Tensor& a, const at::Tensor& b) {
  at::Tensor out;
  return at::TensorIterator::binary_op(out, a, b).output();
}

void FloorDivideMeta(c10::ArrayRef<c10::IValue> a, torch::jit::Stack* results) {
  at::Tensor result = BinaryOpResult(a[0].toTensor(), a[1].toTensor());
  if (auto cast = CastInputsLikeCpu(a, result.scalar_type())) {
    result = BinaryOpResult((*cast)[0].toTensor(), (*cast)[1].toTensor());
  }
  results->push_back(result);
}

// The hot ops of real models whose Meta kernel torch replaced with a Python reference (found by
// walking torch._decomp.global_decomposition_table for overloads with an at::meta function).
const std::unordered_map<std::string, MetaOverride>& Table() {
  static const auto* table = new std::unordered_map<std::string, MetaOverride>{
      {"aten::fill.Scalar", &FillMeta},
      {"aten::fill.Tensor", &FillMeta},
      {"aten::zero", &FillMeta},
      {"aten::floor_divide", &FloorDivideMeta},
      {"aten::logical_xor", &LogicalMeta},
      {"aten::logical_and", &LogicalMeta},
      {"aten::logical_or", &LogicalMeta},
      // Functional TensorIterator ops: strides as after CPU's cast temporaries (ElementwiseMeta).
      Elementwise<at::_ops::add_Tensor, &at::meta::add>(),
      Elementwise<at::_ops::sub_Tensor, &at::meta::sub>(),
      Elementwise<at::_ops::mul_Tensor, &at::meta::mul>(),
      Elementwise<at::_ops::div_Tensor, &at::meta::div>(),
      Elementwise<at::_ops::div_Tensor_mode, &at::meta::div>(),
      Elementwise<at::_ops::eq_Tensor, &at::meta::eq>(),
      Elementwise<at::_ops::eq_Scalar, &at::meta::eq>(),
      Elementwise<at::_ops::ne_Tensor, &at::meta::ne>(),
      Elementwise<at::_ops::ne_Scalar, &at::meta::ne>(),
      Elementwise<at::_ops::lt_Tensor, &at::meta::lt>(),
      Elementwise<at::_ops::lt_Scalar, &at::meta::lt>(),
      Elementwise<at::_ops::le_Tensor, &at::meta::le>(),
      Elementwise<at::_ops::le_Scalar, &at::meta::le>(),
      Elementwise<at::_ops::gt_Tensor, &at::meta::gt>(),
      Elementwise<at::_ops::gt_Scalar, &at::meta::gt>(),
      Elementwise<at::_ops::ge_Tensor, &at::meta::ge>(),
      Elementwise<at::_ops::ge_Scalar, &at::meta::ge>(),
      Elementwise<at::_ops::maximum, &at::meta::maximum>(),
      Elementwise<at::_ops::minimum, &at::meta::minimum>(),
      Elementwise<at::_ops::fmax, &at::meta::fmax>(),
      Elementwise<at::_ops::fmin, &at::meta::fmin>(),
      Elementwise<at::_ops::atan2, &at::meta::atan2>(),
      Elementwise<at::_ops::hypot, &at::meta::hypot>(),
      Elementwise<at::_ops::logaddexp, &at::meta::logaddexp>(),
      Elementwise<at::_ops::logaddexp2, &at::meta::logaddexp2>(),
      Elementwise<at::_ops::pow_Tensor_Tensor, &at::meta::pow>(),
      Elementwise<at::_ops::pow_Tensor_Scalar, &at::meta::pow>(),
      Elementwise<at::_ops::pow_Scalar, &at::meta::pow>(),
      Elementwise<at::_ops::remainder_Tensor, &at::meta::remainder>(),
      Elementwise<at::_ops::fmod_Tensor, &at::meta::fmod>(),
      Elementwise<at::_ops::bitwise_and_Tensor, &at::meta::bitwise_and>(),
      Elementwise<at::_ops::bitwise_or_Tensor, &at::meta::bitwise_or>(),
      Elementwise<at::_ops::bitwise_xor_Tensor, &at::meta::bitwise_xor>(),
      Elementwise<at::_ops::copysign_Tensor, &at::meta::copysign>(),
      Elementwise<at::_ops::xlogy_Tensor, &at::meta::xlogy>(),
      Elementwise<at::_ops::nextafter, &at::meta::nextafter>(),
      Elementwise<at::_ops::heaviside, &at::meta::heaviside>(),
      Elementwise<at::_ops::gcd, &at::meta::gcd>(),
      Elementwise<at::_ops::lcm, &at::meta::lcm>(),
      Elementwise<at::_ops::igamma, &at::meta::igamma>(),
      Elementwise<at::_ops::igammac, &at::meta::igammac>(),
      Elementwise<at::_ops::addcmul, &at::meta::addcmul>(),
      Elementwise<at::_ops::addcdiv, &at::meta::addcdiv>(),
      Elementwise<at::_ops::lerp_Scalar, &at::meta::lerp>(),
      Elementwise<at::_ops::lerp_Tensor, &at::meta::lerp>(),
      Elementwise<at::_ops::clamp, &at::meta::clamp>(),
      Elementwise<at::_ops::clamp_Tensor, &at::meta::clamp>(),
      Elementwise<at::_ops::clamp_min, &at::meta::clamp_min>(),
      Elementwise<at::_ops::clamp_max, &at::meta::clamp_max>(),
      Elementwise<at::_ops::neg, &at::meta::neg>(),
      Elementwise<at::_ops::exp, &at::meta::exp>(),
      Elementwise<at::_ops::exp2, &at::meta::exp2>(),
      Elementwise<at::_ops::expm1, &at::meta::expm1>(),
      Elementwise<at::_ops::log, &at::meta::log>(),
      Elementwise<at::_ops::log2, &at::meta::log2>(),
      Elementwise<at::_ops::log10, &at::meta::log10>(),
      Elementwise<at::_ops::log1p, &at::meta::log1p>(),
      Elementwise<at::_ops::sqrt, &at::meta::sqrt>(),
      Elementwise<at::_ops::rsqrt, &at::meta::rsqrt>(),
      Elementwise<at::_ops::reciprocal, &at::meta::reciprocal>(),
      Elementwise<at::_ops::sin, &at::meta::sin>(),
      Elementwise<at::_ops::cos, &at::meta::cos>(),
      Elementwise<at::_ops::tan, &at::meta::tan>(),
      Elementwise<at::_ops::sinh, &at::meta::sinh>(),
      Elementwise<at::_ops::cosh, &at::meta::cosh>(),
      Elementwise<at::_ops::tanh, &at::meta::tanh>(),
      Elementwise<at::_ops::asin, &at::meta::asin>(),
      Elementwise<at::_ops::acos, &at::meta::acos>(),
      Elementwise<at::_ops::atan, &at::meta::atan>(),
      Elementwise<at::_ops::asinh, &at::meta::asinh>(),
      Elementwise<at::_ops::acosh, &at::meta::acosh>(),
      Elementwise<at::_ops::atanh, &at::meta::atanh>(),
      Elementwise<at::_ops::sigmoid, &at::meta::sigmoid>(),
      Elementwise<at::_ops::erf, &at::meta::erf>(),
      Elementwise<at::_ops::erfc, &at::meta::erfc>(),
      Elementwise<at::_ops::erfinv, &at::meta::erfinv>(),
      Elementwise<at::_ops::floor, &at::meta::floor>(),
      Elementwise<at::_ops::ceil, &at::meta::ceil>(),
      Elementwise<at::_ops::trunc, &at::meta::trunc>(),
      Elementwise<at::_ops::round, &at::meta::round>(),
      Elementwise<at::_ops::round_decimals, &at::meta::round>(),
      Elementwise<at::_ops::frac, &at::meta::frac>(),
      Elementwise<at::_ops::sign, &at::meta::sign>(),
      Elementwise<at::_ops::sgn, &at::meta::sgn>(),
      Elementwise<at::_ops::signbit, &at::meta::signbit>(),
      Elementwise<at::_ops::bitwise_not, &at::meta::bitwise_not>(),
      Elementwise<at::_ops::lgamma, &at::meta::lgamma>(),
      Elementwise<at::_ops::digamma, &at::meta::digamma>(),
      Elementwise<at::_ops::polygamma, &at::meta::polygamma>(),
      Elementwise<at::_ops::i0, &at::meta::i0>(),
      Elementwise<at::_ops::sinc, &at::meta::sinc>(),
      Elementwise<at::_ops::isposinf, &at::meta::isposinf>(),
      Elementwise<at::_ops::isneginf, &at::meta::isneginf>(),
      Elementwise<at::_ops::gelu, &at::meta::gelu>(),
      Elementwise<at::_ops::gelu_backward, &at::meta::gelu_backward>(),
      Elementwise<at::_ops::silu, &at::meta::silu>(),
      Elementwise<at::_ops::silu_backward, &at::meta::silu_backward>(),
      Elementwise<at::_ops::sigmoid_backward, &at::meta::sigmoid_backward>(),
      Elementwise<at::_ops::tanh_backward, &at::meta::tanh_backward>(),
      Elementwise<at::_ops::threshold, &at::meta::threshold>(),
      Elementwise<at::_ops::threshold_backward, &at::meta::threshold_backward>(),
      Elementwise<at::_ops::leaky_relu, &at::meta::leaky_relu>(),
      Elementwise<at::_ops::leaky_relu_backward, &at::meta::leaky_relu_backward>(),
      Elementwise<at::_ops::elu, &at::meta::elu>(),
      Elementwise<at::_ops::elu_backward, &at::meta::elu_backward>(),
      Elementwise<at::_ops::softplus, &at::meta::softplus>(),
      Elementwise<at::_ops::softplus_backward, &at::meta::softplus_backward>(),
      Elementwise<at::_ops::logit_backward, &at::meta::logit_backward>(),
      Elementwise<at::_ops::mish, &at::meta::mish>(),
      Elementwise<at::_ops::hardsigmoid, &at::meta::hardsigmoid>(),
      Elementwise<at::_ops::hardsigmoid_backward, &at::meta::hardsigmoid_backward>(),
      Native<at::_ops::glu, &at::meta::glu>(),
      Elementwise<at::_ops::hardshrink, &at::meta::hardshrink>(),
      Elementwise<at::_ops::softshrink, &at::meta::softshrink>(),
      Native<at::_ops::sum_dim_IntList, &at::meta::sum>(),
      Native<at::_ops::mean_dim, &at::meta::mean>(),
      Native<at::_ops::amax, &at::meta::amax>(),
      Native<at::_ops::amin, &at::meta::amin>(),
      Native<at::_ops::argmax, &at::meta::argmax>(),
      Native<at::_ops::argmin, &at::meta::argmin>(),
      Native<at::_ops::any_dim, &at::meta::any>(),
      Native<at::_ops::all_dim, &at::meta::all>(),
      Native<at::_ops::any_dims, &at::meta::any>(),
      Native<at::_ops::all_dims, &at::meta::all>(),
      Native<at::_ops::prod_dim_int, &at::meta::prod>(),
      Native<at::_ops::cumsum, &at::meta::cumsum>(),
      Native<at::_ops::cumprod, &at::meta::cumprod>(),
      Native<at::_ops::aminmax, &at::meta::aminmax>(),
      Native<at::_ops::max_dim, &at::meta::max>(),
      Native<at::_ops::min_dim, &at::meta::min>(),
      Native<at::_ops::linalg_vector_norm, &at::meta::linalg_vector_norm>(),
      Native<at::_ops::norm_ScalarOpt_dim, &at::meta::norm>(),
      Native<at::_ops::_softmax, &at::meta::_softmax>(),
      Native<at::_ops::_log_softmax, &at::meta::_log_softmax>(),
      Native<at::_ops::_softmax_backward_data, &at::meta::_softmax_backward_data>(),
      Native<at::_ops::_log_softmax_backward_data, &at::meta::_log_softmax_backward_data>(),
      Native<at::_ops::mm, &at::meta::mm>(),
      Native<at::_ops::bmm, &at::meta::bmm>(),
      Native<at::_ops::addmm, &at::meta::addmm>(),
      Native<at::_ops::baddbmm, &at::meta::baddbmm>(),
      Native<at::_ops::addmv, &at::meta::addmv>(),
      Native<at::_ops::_addmm_activation, &at::meta::_addmm_activation>(),
      Native<at::_ops::cat, &at::meta::cat>(),
      Native<at::_ops::gather, &at::meta::gather>(),
      Native<at::_ops::scatter_add, &at::meta::scatter_add>(),
      Native<at::_ops::scatter_src, &at::meta::scatter>(),
      Native<at::_ops::scatter_value, &at::meta::scatter>(),
      Native<at::_ops::index_add, &at::meta::index_add>(),
      Native<at::_ops::index_copy, &at::meta::index_copy>(),
      Native<at::_ops::tril, &at::meta::tril_symint>(),
      Native<at::_ops::triu, &at::meta::triu_symint>(),
      Native<at::_ops::nll_loss_forward, &at::meta::nll_loss_forward_symint>(),
      Native<at::_ops::nll_loss_backward, &at::meta::nll_loss_backward_symint>(),
      Native<at::_ops::mse_loss, &at::meta::mse_loss>(),
      Native<at::_ops::smooth_l1_loss, &at::meta::smooth_l1_loss>(),
      Native<at::_ops::topk, &at::meta::topk_symint>(),
      Native<at::_ops::sort_stable, &at::meta::sort>(),
      Native<at::_ops::max_pool2d_with_indices, &at::meta::max_pool2d_with_indices>(),
      Native<at::_ops::max_pool2d_with_indices_backward, &at::meta::max_pool2d_with_indices_backward>(),
      Native<at::_ops::avg_pool2d, &at::meta::avg_pool2d>(),
      Native<at::_ops::avg_pool2d_backward, &at::meta::avg_pool2d_backward>(),
      Native<at::_ops::upsample_nearest2d, &at::meta::upsample_nearest2d_symint>(),
      Native<at::_ops::upsample_nearest2d_backward, &at::meta::upsample_nearest2d_backward_symint>(),
      // In-place forms: their Meta kernels make the variant checks (self keeps its shape and dtype).
      Native<at::_ops::add__Tensor, &at::meta::add_>(),
      Native<at::_ops::sub__Tensor, &at::meta::sub_>(),
      Native<at::_ops::mul__Tensor, &at::meta::mul_>(),
      Native<at::_ops::div__Tensor, &at::meta::div_>(),
      Native<at::_ops::div__Tensor_mode, &at::meta::div_>(),
      Native<at::_ops::clamp_, &at::meta::clamp_>(),
      Native<at::_ops::pow__Scalar, &at::meta::pow_>(),
      Native<at::_ops::pow__Tensor, &at::meta::pow_>(),
      Native<at::_ops::fill__Scalar, &at::meta::fill_>(),
      Native<at::_ops::fill__Tensor, &at::meta::fill_>(),
      Native<at::_ops::zero_, &at::meta::zero_>(),
      Native<at::_ops::exp_, &at::meta::exp_>(),
      Native<at::_ops::tanh_, &at::meta::tanh_>(),
      Native<at::_ops::sigmoid_, &at::meta::sigmoid_>(),
      Native<at::_ops::neg_, &at::meta::neg_>(),
      Native<at::_ops::sqrt_, &at::meta::sqrt_>(),
      Native<at::_ops::rsqrt_, &at::meta::rsqrt_>(),
      Native<at::_ops::log_, &at::meta::log_>(),
      Native<at::_ops::addcmul_, &at::meta::addcmul_>(),
      Native<at::_ops::addcdiv_, &at::meta::addcdiv_>(),
      Native<at::_ops::lerp__Scalar, &at::meta::lerp_>(),
      Native<at::_ops::lerp__Tensor, &at::meta::lerp_>(),
      Native<at::_ops::clamp_min_, &at::meta::clamp_min_>(),
      Native<at::_ops::clamp_max_, &at::meta::clamp_max_>(),
  };
  return *table;
}

}  // namespace

MetaOverride FindNativeMeta(const std::string& name) {
  auto it = Table().find(name);
  return it == Table().end() ? nullptr : it->second;
}

std::vector<std::string> NativeMetaOps() {
  std::vector<std::string> names;
  for (const auto& [name, fn] : Table()) names.push_back(name);
  return names;
}

std::string FullName(const c10::OperatorHandle& op) {
  const c10::FunctionSchema& s = op.schema();
  return s.name() + (s.overload_name().empty() ? "" : "." + s.overload_name());
}

// A native kernel that raises hands the call to torch's: on meta tensors some are stricter than
// the CPU kernel that runs them (index_add's with an empty index reads its first element), and
// an error here would send a valid call to the CPU. Where both raise, the CPU path raises CPU's
// own error as before.
void RunMetaKernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  if (MetaOverride native = FindNativeMeta(FullName(op))) {
    torch::jit::Stack results;
    try {
      native(*stack, &results);
      *stack = std::move(results);
      return;
    } catch (const std::exception&) {
    }
  }
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), stack);
}

}  // namespace torch_pjrt::aten
