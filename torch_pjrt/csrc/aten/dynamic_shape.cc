// Ops whose result size depends on the data: nonzero, masked_select, unique, unique_consecutive,
// bincount, repeat_interleave, and indexing with boolean masks. Instead of running them on the CPU (a sync plus copies of whole tensors), the
// size is computed on the device and only that number is read back (one small sync, counted as
// Sync::data_dependent_shape, never as a fallback); the op is then traced at that static size
// (lowering/dynamic_shape.cc). Each distinct size is its own compiled graph.
#include <ATen/ExpandUtils.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/searchsorted.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include "aten/cpu_probe.h"
#include "aten/dynamic_shape.h"
#include "aten/fallback.h"
#include "aten/kernel_util.h"
#include "aten/lazy_tensor.h"
#include "aten/torch_errors.h"

namespace torch_pjrt::aten {

namespace {

using graph::TensorType;


// The few numbers that cross: integer `values` computed on the device (a pjrt tensor), read back.
std::vector<int64_t> ReadInts(const at::Tensor& values) {
  at::Tensor host = ReadSizes(values, c10::kLong);
  const int64_t* p = host.const_data_ptr<int64_t>();
  return std::vector<int64_t>(p, p + host.numel());
}

// The one number that crosses: `count_op` over `self`, computed on the device and read back.
int64_t ReadCount(const char* count_op, const at::Tensor& self) {
  int device = self.device().index();
  graph::Value n = TraceInternalOp(count_op, {self}, {}, {TensorType{ElementType::kS64, {}}})[0];
  return ReadInts(TensorOfValue(std::move(n), {}, c10::kLong, device))[0];
}

// bincount(self, weights=None, minlength=0): the largest value (and the smallest, for CPU's
// non-negative check) crosses in one read; the counts are an index_add at that size. Weights of
// float sum as float, others as double, like the CPU kernel.
at::Tensor Bincount(const at::Tensor& self, const std::optional<at::Tensor>& weights, int64_t minlength) {
  TORCH_CHECK_NOT_IMPLEMENTED(c10::isIntegralType(self.scalar_type(), /*includeBool=*/false),
                              "\"bincount\" not implemented for '", self.scalar_type(), "'");
  TORCH_CHECK(minlength >= 0, "minlength should be >= 0");
  if (self.dim() == 1 && self.numel() == 0) return at::zeros({minlength}, self.options().dtype(c10::kLong));
  TORCH_CHECK(self.dim() == 1, "bincount only supports 1-d non-negative integral inputs.");
  std::vector<int64_t> bounds = ReadInts(at::stack({self.min(), self.max()}));
  TORCH_CHECK(bounds[0] >= 0, "bincount only supports 1-d non-negative integral inputs.");
  bool weighted = weights.has_value() && weights->defined();
  TORCH_CHECK(!weighted || (weights->dim() == 1 && weights->size(0) == self.size(0)),
              "weights should be 1-d and have the same length as input");
  int64_t size = std::max(bounds[1] + 1, minlength);
  at::Tensor index = self.to(c10::kLong);  // index_add takes int32/int64 indices (uint8 inputs)
  if (!weighted) {
    return at::zeros({size}, self.options().dtype(c10::kLong)).index_add_(0, index, at::ones_like(self, c10::kLong));
  }
  c10::ScalarType sum_type = weights->scalar_type() == c10::kFloat ? c10::kFloat : c10::kDouble;
  return at::zeros({size}, weights->options().dtype(sum_type)).index_add_(0, index, weights->to(sum_type));
}

at::Tensor BincountKernel(const at::Tensor& self, const std::optional<at::Tensor>& weights, int64_t minlength) {
  return WithTorchErrors([&] { return Bincount(self, weights, minlength); });
}

// repeat_interleave.Tensor(repeats, output_size=None): for each output position k, the index i with
// cumsum[i-1] <= k < cumsum[i] (a searchsorted). Without output_size the total (and the smallest
// repeat, for CPU's non-negative check) crosses in one read; with it, both checks are deferred.
at::Tensor RepeatInterleave(const at::Tensor& repeats, std::optional<int64_t> output_size) {
  TORCH_CHECK_NOT_IMPLEMENTED(c10::isIntegralType(repeats.scalar_type(), /*includeBool=*/false),
                              "\"repeat_interleave\" not implemented for '", repeats.scalar_type(), "'");
  TORCH_CHECK(repeats.dim() == 1, "repeat_interleave only accept 1D vector as repeat");
  TORCH_CHECK(repeats.scalar_type() == c10::kLong || repeats.scalar_type() == c10::kInt,
              "repeats has to be Long or Int tensor");
  if (repeats.numel() == 0) return at::empty_like(repeats, at::MemoryFormat::Contiguous);
  at::Tensor ends = repeats.cumsum(0, c10::kLong);
  int64_t total = 0;
  if (output_size.has_value()) {
    total = *output_size;
  } else {
    std::vector<int64_t> read = ReadInts(at::stack({ends[-1], repeats.min().to(c10::kLong)}));
    TORCH_CHECK(read[1] >= 0, "repeats can not be negative");
    total = read[0];
  }
  at::Tensor positions = at::arange(total, repeats.options().dtype(c10::kLong));
  at::Tensor result = at::searchsorted(ends, positions, /*out_int32=*/false, /*right=*/true).to(repeats.scalar_type());
  if (output_size.has_value()) {
    CheckRangeWhenRun(repeats, result, 0, kNoUpperBound, "repeats can not be negative");
    CheckRangeWhenRun(ends[-1].sub(total), result, 0, 1, "allocated size does not match required size");
  }
  return result;
}

at::Tensor RepeatInterleaveKernel(const at::Tensor& repeats, std::optional<int64_t> output_size) {
  return WithTorchErrors([&] { return RepeatInterleave(repeats, output_size); });
}

// [count, rank] with strides (1, count), as CPU's and CUDA's nonzero return it: the transpose of
// a [rank, count] result (set explicitly: for count 0, .t() would give strides (1, 1)).
at::Tensor Nonzero(const at::Tensor& self) {
  int64_t count = ReadCount("pjrt::count_nonzero", self);
  int64_t rank = self.dim();
  graph::Value v = TraceInternalOp("pjrt::nonzero", {self}, {},
                                 {TensorType{ElementType::kS64, {rank, count}}})[0];
  return TensorOfValue(std::move(v), {rank, count}, c10::kLong, self.device().index())
      .as_strided({count, rank}, {1, count});
}

at::Tensor NonzeroKernel(const at::Tensor& self) {
  return WithTorchErrors([&] { return Nonzero(self); });
}

// As CPU's nonzero_out: an out of the result's size keeps its layout; one that is resized gets the
// result's column-major strides.
at::Tensor& NonzeroOutKernel(const at::Tensor& self, at::Tensor& out) {
  TORCH_CHECK(out.scalar_type() == c10::kLong, "nonzero: Expected out tensor to have scalar type Long but got ",
              out.scalar_type());
  CheckNoOverlap(out, self);
  at::Tensor result = NonzeroKernel(self);
  if (at::native::resize_output(out, result.sizes())) out.as_strided_(result.sizes(), result.strides());
  out.copy_(result);
  return out;
}

at::Tensor MaskedSelect(const at::Tensor& self, const at::Tensor& mask) {
  TORCH_CHECK(mask.scalar_type() == c10::kBool, "masked_select: expected BoolTensor for mask");
  auto shape = at::infer_size(self.sizes(), mask.sizes());
  at::Tensor x = self.expand(shape), m = mask.expand(shape);
  int64_t count = ReadCount("pjrt::count_nonzero", m);
  graph::Value v = TraceInternalOp("pjrt::masked_select", {x, m}, {},
                                 {TensorType{ToElementType(self.scalar_type()), {count}}})[0];
  return TensorOfValue(std::move(v), {count}, self.scalar_type(), self.device().index());
}

at::Tensor MaskedSelectKernel(const at::Tensor& self, const at::Tensor& mask) {
  return WithTorchErrors([&] { return MaskedSelect(self, mask); });
}

// CPU's masked_select_out checks, which the functional kernel does not need.
at::Tensor& MaskedSelectOutKernel(const at::Tensor& self, const at::Tensor& mask, at::Tensor& out) {
  TORCH_CHECK(self.scalar_type() == out.scalar_type(),
              "masked_select(): self and result must have the same scalar type");
  CheckNoOverlap(out, self);
  CheckNoOverlap(out, mask);
  WriteOut(out, MaskedSelectKernel(self, mask));
  return out;
}

// The runs of equal values of flattened `self` (sorted first for unique, as they come for
// unique_consecutive): (values, inverse, counts), the last two empty unless asked for.
std::tuple<at::Tensor, at::Tensor, at::Tensor> Runs(const at::Tensor& self, const char* count_op, const char* op,
                                                    bool return_inverse, bool return_counts) {
  int device = self.device().index();
  int64_t count = ReadCount(count_op, self);
  Dims inverse_dims(self.sizes().begin(), self.sizes().end());
  std::vector<graph::Value> v = TraceInternalOp(
      op, {self}, {},
      {TensorType{ToElementType(self.scalar_type()), {count}}, TensorType{ElementType::kS64, inverse_dims},
       TensorType{ElementType::kS64, {count}}});
  at::Tensor values = TensorOfValue(v[0], {count}, self.scalar_type(), device);
  at::Tensor inverse = return_inverse ? TensorOfValue(v[1], self.sizes(), c10::kLong, device)
                                      : EmptyContiguous({0}, c10::kLong, device);
  at::Tensor counts = return_counts ? TensorOfValue(v[2], {count}, c10::kLong, device)
                                    : EmptyContiguous({0}, c10::kLong, device);
  return {values, inverse, counts};
}

// _unique2(self, sorted, return_inverse, return_counts): always sorted, like the CPU kernel.
std::tuple<at::Tensor, at::Tensor, at::Tensor> Unique2Kernel(const at::Tensor& self, bool sorted, bool return_inverse,
                                                        bool return_counts) {
  return WithTorchErrors(
      [&] { return Runs(self, "pjrt::count_unique", "pjrt::unique", return_inverse, return_counts); });
}

// _unique(self, sorted, return_inverse) (the older form, reached from index_fill's gradient):
// sorted either way, like the CPU kernel.
std::tuple<at::Tensor, at::Tensor> UniqueKernel(const at::Tensor& self, bool sorted, bool return_inverse) {
  auto r = WithTorchErrors([&] { return Runs(self, "pjrt::count_unique", "pjrt::unique", return_inverse, false); });
  return {std::get<0>(r), std::get<1>(r)};
}

// unique_consecutive along `dim`: runs of equal slices, found as runs of equal rows of self with
// `dim` moved first and the other dims flattened. Inverse and counts always come back, as on the
// CPU.
std::tuple<at::Tensor, at::Tensor, at::Tensor> SliceRuns(const at::Tensor& self, int64_t dim) {
  dim = c10::maybe_wrap_dim(dim, self.dim());
  int64_t n = self.size(dim);
  TORCH_CHECK(n == 0 || self.numel() > 0,
              "There are 0 sized dimensions, and they aren't selected, so unique cannot be applied");
  int device = self.device().index();
  at::Tensor moved = self.movedim(dim, 0);
  if (n == 0) {
    return {self.clone(), EmptyContiguous({0}, c10::kLong, device), EmptyContiguous({0}, c10::kLong, device)};
  }
  at::Tensor rows = moved.reshape({n, -1});
  int64_t count = ReadCount("pjrt::count_row_runs", rows), width = rows.size(1);
  std::vector<graph::Value> v = TraceInternalOp(
      "pjrt::row_runs", {rows}, {},
      {TensorType{ToElementType(self.scalar_type()), {count, width}}, TensorType{ElementType::kS64, {n}},
       TensorType{ElementType::kS64, {count}}});
  std::vector<int64_t> shape(moved.sizes().begin(), moved.sizes().end());
  shape[0] = count;
  at::Tensor values = TensorOfValue(v[0], {count, width}, self.scalar_type(), device).view(shape).movedim(0, dim);
  return {values, TensorOfValue(v[1], {n}, c10::kLong, device), TensorOfValue(v[2], {count}, c10::kLong, device)};
}

// unique_consecutive(self, return_inverse, return_counts, dim=None): runs of the flattened
// values, or of slices along `dim`.
void UniqueConsecutiveKernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  c10::ArrayRef<c10::IValue> args = torch::jit::last(*stack, 4);
  at::Tensor self = args[0].toTensor();
  bool inverse = args[1].toBool(), counts = args[2].toBool();
  std::optional<int64_t> dim = args[3].toOptional<int64_t>();
  auto result = WithTorchErrors([&] {
    if (dim.has_value()) return SliceRuns(self, *dim);
    return Runs(self, "pjrt::count_unique_consecutive", "pjrt::unique_consecutive", inverse, counts);
  });
  torch::jit::drop(*stack, 4);
  torch::jit::push(*stack, std::get<0>(result), std::get<1>(result), std::get<2>(result));
}

bool IsMask(const at::Tensor& t) {
  return t.defined() && (t.scalar_type() == c10::kBool || t.scalar_type() == c10::kByte);
}

}  // namespace

bool HasMaskIndices(c10::ArrayRef<c10::IValue> args) {
  for (const c10::IValue& iv : args) {
    if (!iv.isList() && !iv.isTensorList()) continue;
    for (const c10::IValue& e : iv.toListRef()) {
      if (e.isTensor() && IsMask(e.toTensor())) return true;
    }
  }
  return false;
}

namespace {

// x[mask] = value with one mask over leading dims and a single value, without accumulation, is
// masked_fill (as torch's own index_put_ does): no data-dependent size, so no sync.
bool TryMaskedFill(const c10::OperatorHandle& op, torch::jit::Stack* stack, size_t num_args) {
  const std::string& name = op.schema().name();
  bool in_place = name == "aten::index_put_" || name == "aten::_index_put_impl_";
  if (!in_place && name != "aten::index_put") return false;
  if (op.schema().arguments().size() != num_args) return false;  // an out= variant
  auto args = torch::jit::last(*stack, num_args);
  const at::Tensor& self = args[0].toTensor();
  const at::Tensor& value = args[2].toTensor();
  if (args[3].toBool() || value.numel() != 1 || value.dim() != 0) return false;
  auto indices = args[1].toListRef();
  if (indices.size() != 1 || !indices[0].isTensor()) return false;
  const at::Tensor& mask = indices[0].toTensor();
  if (mask.scalar_type() != c10::kBool || mask.dim() > self.dim()) return false;
  for (int64_t k = 0; k < mask.dim(); ++k) {
    if (mask.size(k) != self.size(k)) return false;
  }
  std::vector<int64_t> shape(mask.sizes().begin(), mask.sizes().end());
  shape.resize(self.dim(), 1);
  at::Tensor full_mask = mask.reshape(shape).expand(self.sizes());
  at::Tensor result = in_place ? self.masked_fill_(full_mask, value) : self.masked_fill(full_mask, value);
  torch::jit::drop(*stack, num_args);
  stack->push_back(result);
  return true;
}

}  // namespace

void RunWithIntegerIndices(const c10::OperatorHandle& op, torch::jit::Stack* stack, size_t num_args) {
  if (TryMaskedFill(op, stack, num_args)) return;
  auto args = torch::jit::last(*stack, num_args);
  const at::Tensor& self = args[0].toTensor();
  // torch's rule: a k-dim mask consumes k dims of self and becomes k index tensors, the
  // coordinates of its true elements.
  for (size_t a = 0; a < args.size(); ++a) {
    if (!args[a].isList() && !args[a].isTensorList()) continue;
    c10::List<std::optional<at::Tensor>> rewritten;
    int64_t dim = 0;
    for (const c10::IValue& e : args[a].toListRef()) {
      if (!e.isTensor() || !IsMask(e.toTensor())) {
        rewritten.push_back(e.isTensor() ? std::optional<at::Tensor>(e.toTensor()) : std::nullopt);
        ++dim;
        continue;
      }
      const at::Tensor& mask = e.toTensor();
      for (int64_t k = 0; k < mask.dim(); ++k) {
        TORCH_CHECK_INDEX(dim + k < self.dim() && mask.size(k) == self.size(dim + k),
                          "The shape of the mask ", mask.sizes(), " at index ", k,
                          " does not match the shape of the indexed tensor ", self.sizes(), " at index ", dim + k);
      }
      at::Tensor coords = NonzeroKernel(mask.to(c10::kBool));
      for (int64_t k = 0; k < mask.dim(); ++k) rewritten.push_back(coords.select(1, k));
      dim += mask.dim();
    }
    (*stack)[stack->size() - num_args + a] = c10::IValue(rewritten);
  }
  op.callBoxed(stack);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("nonzero", &NonzeroKernel);
  m.impl("nonzero.out", &NonzeroOutKernel);
  m.impl("masked_select", &MaskedSelectKernel);
  m.impl("masked_select.out", &MaskedSelectOutKernel);
  m.impl("_unique2", &Unique2Kernel);
  m.impl("_unique", &UniqueKernel);
  m.impl("unique_consecutive", torch::CppFunction::makeFromBoxedFunction<&UniqueConsecutiveKernel>());
  m.impl("bincount", &BincountKernel);
  m.impl("repeat_interleave.Tensor", &RepeatInterleaveKernel);
}

}  // namespace torch_pjrt::aten
