#include "aten/cpu_probe.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Dispatch.h>
#include <ATen/Dispatch_v2.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "aten/ivalue_map.h"
#include "aten/lazy_tensor.h"
#include "aten/native_meta.h"

namespace torch_pjrt::aten {

namespace {

constexpr int64_t kMaxProbeElements = 1 << 16;

// Discards warnings: the real call warns, the probe must not warn a second time.
class SilentWarnings : public c10::WarningHandler {
 public:
  void process(const c10::Warning&) override {}
};

at::Tensor StandIn(const at::Tensor& t) {
  if (!t.defined() || !IsPjrt(t)) return t;  // CPU scalars are passed as they are
  c10::SmallVector<int64_t, 6> sizes(t.sizes().begin(), t.sizes().end());
  for (int64_t& s : sizes) s = std::min<int64_t>(s, 1);
  return at::zeros(sizes, t.options().device(c10::kCPU));
}

// Out tensors are passed empty (no resize warning; out= dtype rules still apply).
at::Tensor EmptyOut(const at::Tensor& t) {
  if (!t.defined()) return t;
  return at::empty({0}, t.options().device(c10::kCPU));
}

c10::IValue StandInIValue(const c10::IValue& iv, bool is_out) {
  return MapTensors(iv, is_out ? EmptyOut : StandIn, c10::Device(c10::kCPU));
}

bool HasPjrtTensor(c10::ArrayRef<c10::IValue> args) {
  for (const c10::IValue& iv : args) {
    if (iv.isTensor() && IsPjrt(iv.toTensor())) return true;
    if (iv.isTensorList()) {
      for (const at::Tensor& t : iv.toTensorList()) if (IsPjrt(t)) return true;
    }
  }
  return false;
}

// Runs the op on CPU arguments with warnings discarded; the error it raised, if any. Some CPU
// checks throw std::runtime_error (Scalar conversions), most c10::Error.
std::optional<CpuRefusal> RunOnCpu(const OpSignature& sig, torch::jit::Stack* stack) {
  SilentWarnings silent;
  c10::WarningUtils::WarningHandlerGuard guard(&silent);
  try {
    sig.op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
  } catch (const c10::NotImplementedError& e) {
    return CpuRefusal{true, e.msg()};
  } catch (const c10::Error& e) {
    return CpuRefusal{false, e.msg()};
  } catch (const std::exception& e) {
    return CpuRefusal{false, e.what()};
  }
  return std::nullopt;
}

// Whether the stand-in call stays small: its Meta results (sized from the stand-ins and the integer
// arguments, e.g. new_zeros(size) or an upsample's output_size) hold few elements.
bool ProbeIsSmall(const OpSignature& sig, const torch::jit::Stack& probe) {
  torch::jit::Stack meta;
  for (const c10::IValue& iv : probe) {
    if (iv.isTensor() && iv.toTensor().defined()) {
      meta.push_back(at::empty(iv.toTensor().sizes(), iv.toTensor().options().device(c10::kMeta)));
    } else if (iv.isTensorList()) {
      c10::List<at::Tensor> list;
      for (const at::Tensor& t : iv.toTensorList()) list.push_back(at::empty(t.sizes(), t.options().device(c10::kMeta)));
      meta.push_back(list);
    } else {
      meta.push_back(iv);
    }
  }
  try {
    RunMetaKernel(sig.op, &meta);
  } catch (const std::exception&) {
    // No Meta kernel for the op itself, invalid stand-in shapes, or a Meta kernel refusing a
    // value (masked_fill's of an infinite fill): small if no integer list can size a result.
    for (const c10::IValue& iv : probe) {
      if (iv.isIntList() || iv.isSymIntList()) return false;
    }
    return true;
  }
  int64_t total = 0;
  for (const c10::IValue& r : meta) {
    if (r.isTensor()) total += r.toTensor().numel();
    if (r.isTensorList()) for (const at::Tensor& t : r.toTensorList()) total += t.numel();
  }
  return total <= kMaxProbeElements;
}

// A refusal of what the Meta key holds of a call: dtypes mostly, and a few keyed non-dtype arguments.
bool IsKeyedArgRefusal(const CpuRefusal& e) {
  const char* m = e.message.c_str();
  // AT_DISPATCH's message; "Could not run 'aten::x' with arguments from the 'CPU' backend" (also a
  // NotImplementedError) says the op has no CPU kernel at all, which is no dtype refusal.
  if (e.not_implemented) return std::strstr(m, "not implemented for '") != nullptr;
  return std::strstr(m, "can't be cast to the desired output type") != nullptr ||  // in-place / out=
         std::strstr(m, "Found dtype") != nullptr ||                               // out= dtype rules
         // add/sub's alpha_check, which the Meta kernels skip for bool results and bool alphas:
         // it depends on the result dtype and the kind of alpha, both in the Meta key.
         std::strstr(m, "argument alpha must not be") != nullptr ||
         std::strstr(m, "Boolean alpha only supported") != nullptr ||
         // Dtype rules the Meta kernels leave out: addcdiv counts bool as an integer type, and
         // heaviside wants one dtype for both operands.
         std::strstr(m, "Integer division with addcdiv is no longer supported") != nullptr ||
         std::strstr(m, "heaviside is not yet implemented for tensors with different dtypes") != nullptr ||
         // nll_loss's class targets (an empty float target too, which the lowering never reads).
         std::strstr(m, "expected target dtype to be Long or Byte") != nullptr ||
         // Found by OpInfo's error inputs (2026-11-28): complex's operands and out=, masked_scatter's
         // uint8 mask, aminmax's out= dtypes.
         std::strstr(m, "Expected object of scalar type") != nullptr ||
         std::strstr(m, "only supports boolean masks") != nullptr ||
         std::strstr(m, "Expected out tensor to have dtype") != nullptr ||
         std::strstr(m, "only supports floating-point dtypes") != nullptr ||  // multinomial's input
         // Not dtypes but a string and a float argument, which the Meta key holds as well (gelu's
         // approximate, smooth_l1_loss's beta).
         std::strstr(m, "approximate argument must be either none or tanh") != nullptr ||
         std::strstr(m, "does not support negative values for beta") != nullptr ||
         std::strstr(m, "] is not finite") != nullptr;  // histc's min and max (keyed by value)
}

constexpr int64_t kMaxOverlapProbeElements = 1 << 24;

template <typename F>
void ForEachTensor(const c10::IValue& iv, F&& f) {
  if (iv.isTensor()) {
    if (iv.toTensor().defined()) f(iv.toTensor());
  } else if (iv.isTensorList()) {
    for (const at::Tensor& t : iv.toTensorList()) f(t);
  }
}

// torch's get_overlap_status (MemoryOverlap.cpp) from offsets instead of data pointers, which
// lazy storages do not have: partial when the byte ranges of two dense tensors on one storage
// intersect without being the same tensor layout.
bool PartlyOverlap(const at::Tensor& a, const at::Tensor& b) {
  if (a.is_same(b) || a.numel() == 0 || b.numel() == 0) return false;
  if (!a.storage().is_alias_of(b.storage())) return false;
  if (!a.is_non_overlapping_and_dense() || !b.is_non_overlapping_and_dense()) return false;
  int64_t a_begin = a.storage_offset() * a.itemsize(), a_end = a_begin + a.numel() * a.itemsize();
  int64_t b_begin = b.storage_offset() * b.itemsize(), b_end = b_begin + b.numel() * b.itemsize();
  if (a_begin == b_begin && a_end == b_end) return a.strides() != b.strides();
  return a_begin < b_end && b_begin < a_end;
}

struct WriteOverlap {
  enum Kind { kNone, kFull, kOther } kind;  // kOther: a written tensor overlaps itself, or partly an input
  int arg;                                  // kFull: the argument that is a written tensor
};

// The same elements in the same layout: one tensor, or a view of a storage laid out like it.
bool FullyOverlap(const at::Tensor& a, const at::Tensor& b) {
  if (a.is_same(b)) return true;  // torch's get_overlap_status: even when empty
  if (a.numel() == 0 || b.numel() == 0) return false;
  return a.storage().is_alias_of(b.storage()) && a.storage_offset() == b.storage_offset() &&
         a.sizes() == b.sizes() && a.strides() == b.strides() && a.itemsize() == b.itemsize();
}

// Orders tensors by their storage, and finds those on a storage among them.
struct StorageOrder {
  static const c10::StorageImpl* Of(const at::Tensor& t) { return t.storage().unsafeGetStorageImpl(); }
  bool operator()(const at::Tensor& a, const at::Tensor& b) const { return std::less<>()(Of(a), Of(b)); }
  bool operator()(const at::Tensor& a, const c10::StorageImpl* s) const { return std::less<>()(Of(a), s); }
  bool operator()(const c10::StorageImpl* s, const at::Tensor& a) const { return std::less<>()(s, Of(a)); }
};

// How the tensors a call writes overlap themselves and what it reads. A _foreach_ op writes
// hundreds, so the written tensors are sorted by storage and each argument looks up those on its
// own storage (n log n, and no allocation for an in-place op's one written tensor: this runs for
// every in-place and out= op traced). A written argument is not compared with itself (self of an
// in-place op).
WriteOverlap ClassifyWriteOverlap(const OpSignature& sig, c10::ArrayRef<c10::IValue> args) {
  c10::SmallVector<at::Tensor, 4> written = WrittenTensors(sig, args);
  written.erase(std::remove_if(written.begin(), written.end(), [](const at::Tensor& w) { return !IsPjrt(w); }),
                written.end());
  for (const at::Tensor& w : written) {
    if (at::has_internal_overlap(w) == at::MemOverlap::Yes) return {WriteOverlap::kOther, -1};
  }
  std::sort(written.begin(), written.end(), StorageOrder());
  WriteOverlap found{WriteOverlap::kNone, -1};
  const std::vector<int>& writes = sig.writes();
  for (size_t i = 0; i < sig.num_functional_args && found.kind != WriteOverlap::kOther && !written.empty(); ++i) {
    bool is_written = std::find(writes.begin(), writes.end(), static_cast<int>(i)) != writes.end();
    ForEachTensor(args[i], [&](const at::Tensor& t) {
      if (found.kind == WriteOverlap::kOther || !t.has_storage()) return;
      auto [begin, end] = std::equal_range(written.begin(), written.end(), StorageOrder::Of(t), StorageOrder());
      for (auto w = begin; w != end; ++w) {
        if (PartlyOverlap(*w, t)) {
          found = {WriteOverlap::kOther, -1};
        } else if (!is_written && FullyOverlap(*w, t) && found.kind == WriteOverlap::kNone) {
          found = {WriteOverlap::kFull, static_cast<int>(i)};
        }
      }
    });
  }
  return found;
}

// CPU zeros with the pjrt arguments' storage sharing and layouts; null when they cannot be
// mirrored (one storage seen with two dtypes) or are too large.
std::optional<torch::jit::Stack> MirrorStorages(const OpSignature& sig, c10::ArrayRef<c10::IValue> args) {
  std::unordered_map<const c10::StorageImpl*, at::Tensor> storages;
  // One tensor passed twice stays one tensor: torch's overlap checks treat the same TensorImpl as
  // a full overlap even where its layout (an expanded tensor) makes comparing views "too hard".
  std::unordered_map<const c10::TensorImpl*, at::Tensor> tensors;
  bool ok = true;
  int64_t total = 0;
  auto mirror_view = [&](const at::Tensor& t) -> at::Tensor {
    const c10::StorageImpl* key = t.storage().unsafeGetStorageImpl();
    auto it = storages.find(key);
    if (it == storages.end()) {
      int64_t elements = static_cast<int64_t>(t.storage().nbytes()) / t.itemsize();
      total += elements;
      if (total > kMaxOverlapProbeElements) ok = false;
      it = storages.emplace(key, at::zeros({ok ? elements : 0}, t.options().device(c10::kCPU))).first;
    }
    if (it->second.scalar_type() != t.scalar_type()) ok = false;
    if (!ok) return t;
    return it->second.as_strided(t.sizes(), t.strides(), t.storage_offset());
  };
  auto mirror = [&](const at::Tensor& t) -> at::Tensor {
    if (!t.defined() || !IsPjrt(t)) return t;
    auto seen = tensors.find(t.unsafeGetTensorImpl());
    if (seen != tensors.end()) return seen->second;
    at::Tensor view = mirror_view(t);
    if (ok) tensors.emplace(t.unsafeGetTensorImpl(), view);
    return view;
  };
  torch::jit::Stack probe;
  for (size_t i = 0; i < sig.num_args; ++i) {
    const c10::IValue& iv = args[i];
    if (iv.isTensor()) {
      probe.push_back(mirror(iv.toTensor()));
    } else if (iv.isTensorList()) {
      c10::List<at::Tensor> list;
      for (const at::Tensor& t : iv.toTensorList()) list.push_back(mirror(t));
      probe.push_back(list);
    } else {
      probe.push_back(StandInIValue(iv, false));  // optional-tensor lists: overlap not mirrored
    }
  }
  if (!ok) return std::nullopt;
  return probe;
}

// Whether a number lies outside the range of an integral tensor argument's dtype. Every integral
// argument counts, not only the first (addcmul(bool, uint8, ...) computes in uint8): a number that
// fits the type the op computes in only costs a probe that passes. With a floating argument the
// number converts to a floating type (scatter(logits, 1, index, -inf) must not probe each call).
bool NumberOutOfRange(const OpSignature& sig, c10::ArrayRef<c10::IValue> args) {
  for (size_t i = 0; i < sig.num_functional_args; ++i) {
    if (args[i].isTensor() && args[i].toTensor().defined() &&
        (args[i].toTensor().is_floating_point() || args[i].toTensor().is_complex())) {
      return false;
    }
  }
  auto overflows_any = [&](const c10::IValue& number) {
    for (size_t i = 0; i < sig.num_functional_args; ++i) {
      if (!args[i].isTensor() || !args[i].toTensor().defined()) continue;
      at::ScalarType dtype = args[i].toTensor().scalar_type();
      if (!at::isIntegralType(dtype, /*includeBool=*/false)) continue;
      bool overflows = false;
      // Unsigned 16/32/64-bit included: the plain integral dispatch lacks them and raised on them.
      AT_DISPATCH_V2(dtype, "NumberOutOfRange", AT_WRAP([&] {
        overflows = number.isInt() ? c10::overflows<scalar_t>(number.toInt())
                                   : number.isDouble() && c10::overflows<scalar_t>(number.toDouble());
      }), AT_EXPAND(AT_INTEGRAL_TYPES_V2));
      if (overflows) return true;
    }
    return false;
  };
  for (size_t i = 0; i < sig.num_functional_args; ++i) {
    if (args[i].isScalar() && overflows_any(args[i])) return true;
  }
  return false;
}

torch::jit::Stack StandInStack(const OpSignature& sig, c10::ArrayRef<c10::IValue> args) {
  torch::jit::Stack probe;
  for (size_t i = 0; i < sig.num_args; ++i) {
    probe.push_back(StandInIValue(args[i], i >= sig.num_functional_args));
  }
  return probe;
}

std::optional<CpuRefusal> ProbeOnStandIns(const OpSignature& sig, c10::ArrayRef<c10::IValue> args,
                                          const std::function<bool(const CpuRefusal&)>& counts) {
  torch::jit::Stack probe = StandInStack(sig, args);
  if (!ProbeIsSmall(sig, probe)) return std::nullopt;
  std::optional<CpuRefusal> error = RunOnCpu(sig, &probe);
  return error && counts(*error) ? error : std::nullopt;
}

// A random op's probe verdict depends on the op, its tensors' dtypes and its numbers: the key of
// the calls that passed ("" without numbers: nothing to probe).
std::string RandomProbeKey(const OpSignature& sig, c10::ArrayRef<c10::IValue> args) {
  std::string key;
  bool numbers = false;
  for (size_t i = 0; i < sig.num_functional_args; ++i) {
    const c10::IValue& iv = args[i];
    numbers |= iv.isDouble() || iv.isInt() || iv.isBool();
    if (iv.isTensor() && iv.toTensor().defined()) {
      key += static_cast<char>(iv.toTensor().scalar_type());
    } else if (iv.isDouble()) {
      double v = iv.toDouble();
      key.append(reinterpret_cast<const char*>(&v), sizeof v);
    } else if (iv.isInt() || iv.isBool()) {
      key += std::to_string(iv.isInt() ? iv.toInt() : iv.toBool()) + ",";
    }
  }
  return numbers ? sig.name + "|" + key : std::string();
}

// A refusal of the numbers themselves ("uniform_ expects ...", "from is out of bounds for float"),
// not of the stand-ins' values.
bool IsNumberRefusal(const CpuRefusal& e) {
  const std::string& m = e.message;
  return (m.find(" expects ") != std::string::npos && m.find("all elements") == std::string::npos) ||
         m.find(" is out of bounds for ") != std::string::npos ||
         m.find("cannot sample n_sample <= 0 samples") != std::string::npos;  // multinomial's
         // (not its "n_sample > prob_dist.size(-1)", which the stand-ins' cut sizes would cause)
}

}  // namespace

void CpuRefusal::Raise() const {
  if (not_implemented) TORCH_CHECK_NOT_IMPLEMENTED(false, message);
  TORCH_CHECK(false, message);
}

std::optional<CpuRefusal> CpuDtypeRefusal(const OpSignature& sig, c10::ArrayRef<c10::IValue> args) {
  if (!sig.cpu_probe || sig.random || sig.generator_arg >= 0 || !HasPjrtTensor(args)) return std::nullopt;
  return ProbeOnStandIns(sig, args, IsKeyedArgRefusal);
}

std::optional<CpuRefusal> CpuRandomArgRefusal(const OpSignature& sig, c10::ArrayRef<c10::IValue> args) {
  if (!sig.random || sig.generator_arg < 0 || !HasPjrtTensor(args)) return std::nullopt;
  std::string key = RandomProbeKey(sig, args);
  if (key.empty()) return std::nullopt;
  constexpr size_t kMaxRemembered = 4096;
  static std::mutex mutex;
  static auto* passed = new std::unordered_set<std::string>();
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (passed->count(key) > 0) return std::nullopt;
  }
  torch::jit::Stack probe = StandInStack(sig, args);
  if (!ProbeIsSmall(sig, probe)) return std::nullopt;
  probe[sig.generator_arg] = at::detail::createCPUGenerator();
  std::optional<CpuRefusal> error = RunOnCpu(sig, &probe);
  if (error && (IsNumberRefusal(*error) || IsKeyedArgRefusal(*error))) return error;
  std::lock_guard<std::mutex> lock(mutex);
  if (passed->size() >= kMaxRemembered) passed->clear();
  passed->insert(std::move(key));
  return std::nullopt;
}

std::optional<CpuRefusal> CpuScalarRangeRefusal(const OpSignature& sig, c10::ArrayRef<c10::IValue> args) {
  if (!sig.cpu_probe || sig.random || sig.generator_arg >= 0 || !NumberOutOfRange(sig, args)) return std::nullopt;
  return ProbeOnStandIns(sig, args, [](const CpuRefusal& e) {
    return e.message.find("without overflow") != std::string::npos;
  });
}

}  // namespace torch_pjrt::aten

namespace torch_pjrt::aten {

namespace {

std::optional<CpuRefusal> ProbeOverlap(const OpSignature& sig, c10::ArrayRef<c10::IValue> args, bool* decided) {
  std::optional<torch::jit::Stack> probe = MirrorStorages(sig, args);
  *decided = false;
  if (!probe) return std::nullopt;
  // A random op draws from a generator of its own: the CPU's default one must not advance.
  if (sig.generator_arg >= 0) (*probe)[sig.generator_arg] = at::detail::createCPUGenerator();
  std::optional<CpuRefusal> error = RunOnCpu(sig, &*probe);
  bool overlap_refusal = error && error->message.find("unsupported operation:") != std::string::npos;
  *decided = !error || overlap_refusal;  // another error may have come before the overlap check
  return overlap_refusal ? error : std::nullopt;
}

// Whether an op refuses an argument that is one of the tensors it writes (index_put_'s values:
// torch's assert_no_overlap) or accepts it (x.add_(x): TensorIterator), per op and argument: the
// answer does not depend on shapes or values, and `x.mul_(x)` in a loop must not probe each call.
class FullOverlapVerdicts {
 public:
  std::optional<CpuRefusal> Get(const OpSignature& sig, int arg, c10::ArrayRef<c10::IValue> args) {
    auto key = std::make_pair(&sig, arg);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = verdicts_.find(key);
      if (it != verdicts_.end()) return it->second;
    }
    bool decided = false;
    std::optional<CpuRefusal> refusal = ProbeOverlap(sig, args, &decided);
    if (decided) {
      std::lock_guard<std::mutex> lock(mutex_);
      verdicts_.emplace(key, refusal);
    }
    return refusal;
  }

 private:
  std::mutex mutex_;
  std::map<std::pair<const OpSignature*, int>, std::optional<CpuRefusal>> verdicts_;
};

}  // namespace

std::optional<CpuRefusal> CpuOverlapRefusal(const OpSignature& sig, c10::ArrayRef<c10::IValue> args) {
  if (!sig.cpu_probe || sig.variant == Variant::kFunctional) return std::nullopt;
  // A random op without a Generator argument (rand.out) would draw from the CPU's default
  // generator: only the written tensors' own overlap is checked (torch's check, which raises), as
  // torch's nullary kernels do.
  if (sig.random && sig.generator_arg < 0) {
    for (const at::Tensor& w : WrittenTensors(sig, args)) {
      if (IsPjrt(w)) at::assert_no_internal_overlap(w);
    }
    return std::nullopt;
  }
  WriteOverlap overlap = ClassifyWriteOverlap(sig, args);
  if (overlap.kind == WriteOverlap::kNone) return std::nullopt;
  if (overlap.kind == WriteOverlap::kFull) {
    static auto* verdicts = new FullOverlapVerdicts();
    return verdicts->Get(sig, overlap.arg, args);
  }
  bool decided = false;
  return ProbeOverlap(sig, args, &decided);
}

// torch's assert_no_overlap / assert_no_partial_overlap message.
constexpr char kInputOverlapMessage[] =
    "unsupported operation: some elements of the input tensor and the written-to tensor refer to a single memory "
    "location. Please clone() the tensor before performing the operation.";

void CheckNoOverlap(const at::Tensor& written, const at::Tensor& input) {
  TORCH_CHECK(!FullyOverlap(written, input) && !PartlyOverlap(written, input), kInputOverlapMessage);
}

void CheckCopyOverlap(const at::Tensor& dst, const at::Tensor& src) {
  at::assert_no_internal_overlap(dst);
  // One element copied onto itself is no copy, and is allowed. torch's check calls it partial when
  // the two views' strides differ, and CPU eager raises for `x[-1] = x` (x of shape [1, 1]) but not
  // for `x.view(1, 1)[0:1] = x` (x 0-d: indexing fills from a 0-d CPU value instead of copying).
  // Both arrive here alike, as a 0-d view expanded, so allowing both is the side that breaks no
  // program CPU runs (the fuzzer leaves such writes out).
  bool same_element = dst.numel() == 1 && src.numel() == 1 && dst.storage().is_alias_of(src.storage()) &&
                      dst.storage_offset() == src.storage_offset() && dst.itemsize() == src.itemsize();
  TORCH_CHECK(same_element || !PartlyOverlap(dst, src), kInputOverlapMessage);
}

}  // namespace torch_pjrt::aten
