#include "lowering/lowering.h"

#include <mutex>
#include <stdexcept>
#include <unordered_map>

namespace torch_pjrt::lowering {

// ---------------------------------------------------------------- interned strings

namespace {
struct StringTable {
  std::mutex mutex;
  std::unordered_map<std::string, int64_t> ids;
  std::vector<const std::string*> strings;
};
StringTable& strings() {
  static StringTable* t = new StringTable();
  return *t;
}
}  // namespace

int64_t InternString(std::string_view s) {
  StringTable& t = strings();
  std::lock_guard<std::mutex> lock(t.mutex);
  auto it = t.ids.find(std::string(s));
  if (it != t.ids.end()) return it->second;
  int64_t id = static_cast<int64_t>(t.strings.size());
  auto inserted = t.ids.emplace(std::string(s), id).first;
  t.strings.push_back(&inserted->first);
  return id;
}

const std::string& InternedString(int64_t id) {
  StringTable& t = strings();
  std::lock_guard<std::mutex> lock(t.mutex);
  return *t.strings.at(static_cast<size_t>(id));
}

// ---------------------------------------------------------------- LowerCtx

const Arg& LowerCtx::arg(size_t i) const {
  if (i >= num_args_) throw std::logic_error("lowering asked for argument " + std::to_string(i) + " of " + std::to_string(num_args_));
  return args_[i];
}

Val LowerCtx::tensor(size_t i) const {
  const Arg& a = arg(i);
  if (a.kind != ArgKind::kTensor) throw std::logic_error("argument " + std::to_string(i) + " is not a tensor");
  return inputs_[a.payload];
}

bool LowerCtx::is_wrapped_number(size_t i) const {
  return i < num_args_ && args_[i].kind == ArgKind::kTensor && (args_[i].start & 1);
}

std::vector<Val> LowerCtx::tensors(size_t i) const {
  std::vector<Val> out;
  for (const Val& v : opt_tensors(i)) {
    if (v.valid()) out.push_back(v);
  }
  return out;
}

std::vector<Val> LowerCtx::opt_tensors(size_t i) const {
  const Arg& a = arg(i);
  if (a.kind != ArgKind::kTensorList) throw std::logic_error("argument " + std::to_string(i) + " is not a tensor list");
  std::vector<Val> out;
  for (int k = 0; k < a.len; ++k) {
    int64_t input = pool_[a.start + k];
    out.push_back(input < 0 ? Val() : inputs_[input]);
  }
  return out;
}

int64_t LowerCtx::int_arg(size_t i) const {
  const Arg& a = arg(i);
  if (a.kind != ArgKind::kInt && a.kind != ArgKind::kBool) throw std::logic_error("argument " + std::to_string(i) + " is not an int");
  return a.payload;
}

int64_t LowerCtx::int_arg(size_t i, int64_t default_value) const {
  return is_none(i) ? default_value : int_arg(i);
}

double LowerCtx::double_arg(size_t i) const { return arg(i).as_double(); }

bool LowerCtx::bool_arg(size_t i) const { return arg(i).payload != 0; }

bool LowerCtx::bool_arg(size_t i, bool default_value) const {
  return is_none(i) ? default_value : bool_arg(i);
}

const std::string& LowerCtx::string_arg(size_t i) const {
  const Arg& a = arg(i);
  if (a.kind != ArgKind::kString) throw std::logic_error("argument " + std::to_string(i) + " is not a string");
  return InternedString(a.payload);
}

Dims LowerCtx::int_list(size_t i) const {
  const Arg& a = arg(i);
  if (a.kind == ArgKind::kInt) return Dims{a.payload};
  if (a.kind == ArgKind::kNone) return Dims{};
  if (a.kind != ArgKind::kIntList) throw std::logic_error("argument " + std::to_string(i) + " is not an int list");
  return Dims(pool_ + a.start, pool_ + a.start + a.len);
}

std::vector<double> LowerCtx::double_list(size_t i) const {
  const Arg& a = arg(i);
  std::vector<double> out;
  for (int k = 0; k < a.len; ++k) {
    double d;
    std::memcpy(&d, &pool_[a.start + k], sizeof(d));
    out.push_back(d);
  }
  return out;
}

ElementType LowerCtx::dtype_arg(size_t i) const {
  const Arg& a = arg(i);
  if (a.kind != ArgKind::kScalarType) throw std::logic_error("argument " + std::to_string(i) + " is not a dtype");
  return static_cast<ElementType>(a.payload);
}

Val LowerCtx::scalar(size_t i, ElementType t) const {
  const Arg& a = arg(i);
  if (a.kind == ArgKind::kTensor) return e.Convert(inputs_[a.payload], t);
  return e.Scalar(a.as_double(), t);
}

std::pair<Val, Val> LowerCtx::rng_state() const {
  const Arg& a = arg(num_args_ - 1);
  if (a.kind != ArgKind::kTensorList || a.len != 2) throw std::logic_error("this op has no random state argument");
  return {inputs_[pool_[a.start]], inputs_[pool_[a.start + 1]]};
}

std::vector<Val> LowerCtx::LowerElement(size_t k, std::vector<Val> (*fn)(LowerCtx&),
                                        const std::vector<Arg>* replaced) const {
  std::vector<Arg> args = replaced ? *replaced : std::vector<Arg>(args_, args_ + num_args_);
  for (Arg& a : args) {
    if (a.kind == ArgKind::kTensorList) {
      int64_t input = pool_[a.start + k];
      a = input < 0 ? Arg::None() : Arg::Tensor(static_cast<int>(input));
    } else if (a.kind == ArgKind::kValueList) {
      a = Arg::Tensor(static_cast<int>(pool_[a.start + k]));
      a.start = 1;  // a Python number: promotes like one
    }
  }
  LowerCtx element(e, args.data(), args.size(), pool_, inputs_, outs_ + k, 1, entry_);
  return fn(element);
}

double LowerCtx::scalar_constant(size_t i) const {
  const Arg& a = arg(i);
  if (a.kind == ArgKind::kTensor) throw std::logic_error("argument " + std::to_string(i) + " is a traced value, not a constant");
  return a.as_double();
}

// ---------------------------------------------------------------- table

bool Registry::Has(std::string_view schema) const {
  for (const OpLowering& e : entries_) {
    if (e.schema == schema) return true;
  }
  return false;
}

OpLowering& Registry::Add(std::string schema, LowerFn fn) {
  OpLowering entry;
  entry.schema = std::move(schema);
  entry.fn = fn;
  entries_.push_back(std::move(entry));
  return entries_.back();
}

OpLowering* Registry::Find(std::string_view schema) {
  for (OpLowering& e : entries_) {
    if (e.schema == schema) return &e;
  }
  return nullptr;
}

namespace {
struct TableData {
  std::vector<OpLowering> entries;
  std::unordered_map<std::string, int> index;
};
const TableData& Data() {
  static const TableData* data = [] {
    Registry r;
    RegisterInternalOps(r);
    RegisterCollectiveOps(r);
    RegisterElementwiseOps(r);
    RegisterTrigonometricOps(r);
    RegisterActivationOps(r);
    RegisterLossOps(r);
    RegisterDistanceOps(r);
    RegisterReductionOps(r);
    RegisterLinalgOps(r);
    RegisterNNOps(r);
    RegisterIndexingOps(r);
    RegisterFactoryOps(r);
    RegisterRnnOps(r);
    RegisterLstmLayerOps(r);
    RegisterFftOps(r);
    RegisterLinalgDecompositionOps(r);
    RegisterLinalgMiscOps(r);
    RegisterDynamicShapeOps(r);
    RegisterRandomOps(r);
    RegisterOptimizerOps(r);
    RegisterPaddingOps(r);
    RegisterPoolingOps(r);
    RegisterUpsampleOps(r);
    RegisterSamplingOps(r);
    RegisterSortingOps(r);
    RegisterScanOps(r);
    RegisterScatterReduceOps(r);
    RegisterSpecialOps(r);
    RegisterPolynomialOps(r);
    RegisterBesselOps(r);
    RegisterIncompleteGammaOps(r);
    RegisterCtcLossOps(r);
    RegisterAttentionOps(r);
    RegisterSegmentReduceOps(r);
    RegisterEmbeddingBagOps(r);
    RegisterComplexOps(r);  // after the ops it wraps
    RegisterForeachOps(r);  // last: it pairs with ops registered before it
    auto* d = new TableData();
    d->entries = r.entries();
    for (size_t i = 0; i < d->entries.size(); ++i) {
      if (!d->index.emplace(d->entries[i].schema, static_cast<int>(i)).second) {
        throw std::logic_error("two lowerings for " + d->entries[i].schema);
      }
    }
    return d;
  }();
  return *data;
}
}  // namespace

const std::vector<OpLowering>& Table() { return Data().entries; }

int FindLowering(std::string_view schema) {
  const auto& index = Data().index;
  auto it = index.find(std::string(schema));
  return it == index.end() ? -1 : it->second;
}

}  // namespace torch_pjrt::lowering
