#include "aten/meta_guards.h"

#include <ATen/ExpandUtils.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/index.h>
#include <c10/util/Exception.h>

#include <unordered_map>

namespace torch_pjrt::aten {

namespace {

using Args = c10::ArrayRef<c10::IValue>;

bool IsComplexTensor(const c10::IValue& v) { return v.isTensor() && v.toTensor().is_complex(); }
void NotComplex(const c10::IValue& v) {
  TORCH_CHECK(!IsComplexTensor(v), "complex inputs are not ordered: the CPU path raises");
}

// Ordering ops: complex inputs (CPU has no kernel for them either) take the CPU path, and so do
// bool inputs of the ops whose CPU kernels reject bool (kBoolOk false: topk, kthvalue, median,
// nanmedian, bucketize, searchsorted).
template <const char* kName, const char* kOverload, int kTensorArg, bool kBoolOk = true>
void Ordered(Args a, torch::jit::Stack* r) {
  NotComplex(a[kTensorArg]);
  TORCH_CHECK(kBoolOk || !a[kTensorArg].isTensor() || a[kTensorArg].toTensor().scalar_type() != c10::kBool,
              "bool input: the CPU path raises");
  RunOwnMeta(kName, kOverload, a, r);
}

// scatter_reduce / index_reduce with amax/amin on complex, or mean on bool (CPU rejects both);
// index_reduce with include_self=False on bool or complex (CPU's kernel has no such case).
template <const char* kName, const char* kOverload>
void ReduceByName(Args a, torch::jit::Stack* r) {
  const std::string reduce = a[4].toStringRef();
  if (reduce == "amax" || reduce == "amin") NotComplex(a[0]);
  const at::Tensor& self = a[0].toTensor();
  TORCH_CHECK(!(reduce == "mean" && self.scalar_type() == c10::kBool), "mean of bool: the CPU path raises");
  bool include_self = a.size() <= 5 || a[5].isNone() || a[5].toBool();
  TORCH_CHECK(std::string(kName) != "aten::index_reduce" || include_self ||
                  !(self.scalar_type() == c10::kBool || self.is_complex()),
              "index_reduce(include_self=False) of bool/complex: the CPU path raises");
  RunOwnMeta(kName, kOverload, a, r);
}

// bucketize / searchsorted (arguments 0 and 1: values and boundaries, in either order):
// complex takes the CPU path, and so does a bool common type (CPU's kernel has none), and a
// sorter of an N-D sequence (its index check bounds by size(0)).
bool IsBoolArg(const c10::IValue& v) {
  return v.isTensor() ? v.toTensor().scalar_type() == c10::kBool : v.isBool();
}
template <const char* kName, const char* kOverload>
void SearchGuard(Args a, torch::jit::Stack* r) {
  NotComplex(a[0]);
  NotComplex(a[1]);
  // Only bool with bool promotes to bool (a number or another tensor type wins).
  TORCH_CHECK(!(IsBoolArg(a[0]) && IsBoolArg(a[1])), "bool inputs: the CPU path raises");
  TORCH_CHECK(std::string(kName) != "aten::searchsorted" || a.size() <= 5 || a[5].isNone() ||
                  a[0].toTensor().dim() <= 1,
              "sorter of an N-D sequence: the CPU path runs it");
  RunOwnMeta(kName, kOverload, a, r);
}

// Floating-point only on CPU (histc), or floating/complex only (logcumsumexp).
template <const char* kName, bool kComplexOk>
void FloatingOnly(Args a, torch::jit::Stack* r) {
  const at::Tensor& t = a[0].toTensor();
  TORCH_CHECK(t.is_floating_point() || (kComplexOk && t.is_complex()), "not a floating type: the CPU path raises");
  RunOwnMeta(kName, "", a, r);
}

// bernoulli(self, p): a tensor p must expand to self's shape (CPU's p.expand_as(self)); the lowering
// would broadcast it down to self's shape and fail to compile.
template <const char* kName, const char* kOverload>
void ProbabilitiesExpandToSelf(Args a, torch::jit::Stack* r) {
  TORCH_CHECK(!a[1].isTensor() || at::is_expandable_to(a[1].toTensor().sizes(), a[0].toTensor().sizes()),
              "p does not expand to self's shape: the CPU path raises");
  RunOwnMeta(kName, kOverload, a, r);
}

// index_put(self, indices, values, ...): the CPU kernel's checks that the Meta kernel skips:
// values of self's dtype, broadcastable to the indexing result (self[indices]'s shape, from the
// Meta kernel of index). In the lowering they fired when the graph ran, at a later, unrelated sync.
template <const char* kName, const char* kOverload>
void IndexPutGuard(Args a, torch::jit::Stack* r) {
  const at::Tensor& self = a[0].toTensor();
  const at::Tensor& values = a[2].toTensor();
  TORCH_CHECK(values.scalar_type() == self.scalar_type(), "values of another dtype: the CPU path raises");
  at::Tensor indexed = at::index(self, a[1].toOptionalTensorList());
  TORCH_CHECK(at::is_expandable_to(values.sizes(), indexed.sizes()),
              "values do not broadcast to the indexing result: the CPU path raises");
  RunOwnMeta(kName, kOverload, a, r);
}

constexpr char kSort[] = "aten::sort", kStable[] = "stable", kNone[] = "", kTopk[] = "aten::topk",
               kKthvalue[] = "aten::kthvalue", kMedian[] = "aten::median", kDim[] = "dim",
               kNanmedian[] = "aten::nanmedian", kMode[] = "aten::mode", kCummax[] = "aten::cummax",
               kCummin[] = "aten::cummin", kAminmax[] = "aten::aminmax", kBucketize[] = "aten::bucketize", kSearchsorted[] = "aten::searchsorted",
               kTensor[] = "Tensor", kScalar[] = "Scalar", kScatterReduce[] = "aten::scatter_reduce",
               kTwo[] = "two", kIndexReduce[] = "aten::index_reduce",
               kHistc[] = "aten::histc", kLogcumsumexp[] = "aten::logcumsumexp",
               kNansum[] = "aten::nansum", kBernoulli[] = "aten::bernoulli",
               kIndexPut[] = "aten::index_put", kIndexPutImpl[] = "aten::_index_put_impl";

// nansum(self, dim=None, keepdim, dtype): complex takes the CPU path (its kernel rejects it), and
// an empty dim list reduces every dim, as CPU's kernel and sum's Meta kernel do (nansum's Meta kernel
// reduces none: nansum(x, ()) would keep x's shape).
void Nansum(Args a, torch::jit::Stack* r) {
  NotComplex(a[0]);
  std::vector<c10::IValue> args(a.begin(), a.end());
  if (args.size() > 1 && args[1].isIntList() && args[1].toDimVector().empty()) args[1] = c10::IValue();
  RunOwnMeta(kNansum, kNone, args, r);
}

}  // namespace

void RunOwnMeta(const char* name, const char* overload, c10::ArrayRef<c10::IValue> a, torch::jit::Stack* results) {
  c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow(name, overload);
  torch::jit::Stack stack(a.begin(), a.end());
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), &stack);
  *results = std::move(stack);
}

MetaOverride FindMetaGuard(const std::string& name) {
  static const auto* table = new std::unordered_map<std::string, MetaOverride>{
      // Functional ops and their in-place / out= variants (all run the functional Meta kernel).
      {"aten::sort.stable", &Ordered<kSort, kStable, 0>},
      {"aten::sort.values_stable", &Ordered<kSort, kStable, 0>},
      {"aten::topk", &Ordered<kTopk, kNone, 0, false>},
      {"aten::topk.values", &Ordered<kTopk, kNone, 0, false>},
      {"aten::kthvalue", &Ordered<kKthvalue, kNone, 0, false>},
      {"aten::kthvalue.values", &Ordered<kKthvalue, kNone, 0, false>},
      {"aten::median", &Ordered<kMedian, kNone, 0, false>},
      {"aten::median.out", &Ordered<kMedian, kNone, 0, false>},
      {"aten::median.dim", &Ordered<kMedian, kDim, 0, false>},
      {"aten::median.dim_values", &Ordered<kMedian, kDim, 0, false>},
      {"aten::nanmedian", &Ordered<kNanmedian, kNone, 0, false>},
      {"aten::nanmedian.out", &Ordered<kNanmedian, kNone, 0, false>},
      {"aten::nanmedian.dim", &Ordered<kNanmedian, kDim, 0, false>},
      {"aten::nanmedian.dim_values", &Ordered<kNanmedian, kDim, 0, false>},
      {"aten::mode", &Ordered<kMode, kNone, 0>},
      {"aten::mode.values", &Ordered<kMode, kNone, 0>},
      {"aten::cummax", &Ordered<kCummax, kNone, 0>},
      {"aten::cummax.out", &Ordered<kCummax, kNone, 0>},
      {"aten::cummin", &Ordered<kCummin, kNone, 0>},
      {"aten::cummin.out", &Ordered<kCummin, kNone, 0>},
      {"aten::aminmax", &Ordered<kAminmax, kNone, 0>},
      {"aten::aminmax.out", &Ordered<kAminmax, kNone, 0>},
      {"aten::bucketize.Tensor", &SearchGuard<kBucketize, kTensor>},
      {"aten::bucketize.Tensor_out", &SearchGuard<kBucketize, kTensor>},
      {"aten::bucketize.Scalar", &SearchGuard<kBucketize, kScalar>},
      {"aten::bucketize.Scalar_out", &SearchGuard<kBucketize, kScalar>},
      {"aten::searchsorted.Tensor", &SearchGuard<kSearchsorted, kTensor>},
      {"aten::searchsorted.Tensor_out", &SearchGuard<kSearchsorted, kTensor>},
      {"aten::searchsorted.Scalar", &SearchGuard<kSearchsorted, kScalar>},
      {"aten::searchsorted.Scalar_out", &SearchGuard<kSearchsorted, kScalar>},
      {"aten::scatter_reduce.two", &ReduceByName<kScatterReduce, kTwo>},
      {"aten::scatter_reduce_.two", &ReduceByName<kScatterReduce, kTwo>},
      {"aten::scatter_reduce.two_out", &ReduceByName<kScatterReduce, kTwo>},
      {"aten::index_reduce", &ReduceByName<kIndexReduce, kNone>},
      {"aten::index_reduce_", &ReduceByName<kIndexReduce, kNone>},
      {"aten::index_reduce.out", &ReduceByName<kIndexReduce, kNone>},
      {"aten::histc", &FloatingOnly<kHistc, false>},
      {"aten::histc.out", &FloatingOnly<kHistc, false>},
      {"aten::logcumsumexp", &FloatingOnly<kLogcumsumexp, true>},
      {"aten::logcumsumexp.out", &FloatingOnly<kLogcumsumexp, true>},
      {"aten::nansum", &Nansum},
      {"aten::nansum.out", &Nansum},
      {"aten::bernoulli.Tensor", &ProbabilitiesExpandToSelf<kBernoulli, kTensor>},
      {"aten::index_put", &IndexPutGuard<kIndexPut, kNone>},
      {"aten::_index_put_impl", &IndexPutGuard<kIndexPutImpl, kNone>},
  };
  auto it = table->find(name);
  return it == table->end() ? nullptr : it->second;
}

}  // namespace torch_pjrt::aten
