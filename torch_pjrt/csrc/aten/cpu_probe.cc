#include "aten/cpu_probe.h"

#include <ATen/Dispatch.h>
#include <ATen/Dispatch_v2.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>

#include <cstring>
#include <functional>
#include <unordered_map>

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

bool IsDtypeRefusal(const CpuRefusal& e) {
  const char* m = e.message.c_str();
  // AT_DISPATCH's message; "Could not run 'aten::x' with arguments from the 'CPU' backend" (also a
  // NotImplementedError) says the op has no CPU kernel at all, which is no dtype refusal.
  if (e.not_implemented) return std::strstr(m, "not implemented for '") != nullptr;
  return std::strstr(m, "can't be cast to the desired output type") != nullptr ||  // in-place / out=
         std::strstr(m, "Found dtype") != nullptr;                                 // out= dtype rules
}

constexpr int64_t kMaxOverlapProbeElements = 1 << 24;

void ForEachTensor(const c10::IValue& iv, const std::function<void(const at::Tensor&)>& f) {
  if (iv.isTensor()) {
    if (iv.toTensor().defined()) f(iv.toTensor());
  } else if (iv.isTensorList()) {
    for (const at::Tensor& t : iv.toTensorList()) f(t);
  }
}

std::vector<at::Tensor> WrittenTensors(const OpSignature& sig, c10::ArrayRef<c10::IValue> args) {
  std::vector<at::Tensor> written;
  const std::vector<int>& which = sig.variant == Variant::kOut ? sig.out_args : sig.written_args;
  for (int a : which) ForEachTensor(args[a], [&](const at::Tensor& t) { written.push_back(t); });
  return written;
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

// Linear in the number of tensors (a _foreach_ op writes hundreds): only tensors on a storage
// some written tensor uses are compared with it.
bool WritesOverlap(const OpSignature& sig, c10::ArrayRef<c10::IValue> args) {
  std::unordered_map<const c10::StorageImpl*, std::vector<at::Tensor>> written;
  for (const at::Tensor& w : WrittenTensors(sig, args)) {
    if (!IsPjrt(w)) continue;
    if (at::has_internal_overlap(w) == at::MemOverlap::Yes) return true;
    written[w.storage().unsafeGetStorageImpl()].push_back(w);
  }
  bool partial = false;
  for (size_t i = 0; i < sig.num_functional_args && !partial && !written.empty(); ++i) {
    ForEachTensor(args[i], [&](const at::Tensor& t) {
      if (partial || !t.has_storage()) return;
      auto it = written.find(t.storage().unsafeGetStorageImpl());
      if (it == written.end()) return;
      for (const at::Tensor& w : it->second) partial = partial || PartlyOverlap(w, t);
    });
  }
  return partial;
}

// CPU zeros with the pjrt arguments' storage sharing and layouts; null when they cannot be
// mirrored (one storage seen with two dtypes) or are too large.
std::optional<torch::jit::Stack> MirrorStorages(const OpSignature& sig, c10::ArrayRef<c10::IValue> args) {
  std::unordered_map<const c10::StorageImpl*, at::Tensor> storages;
  bool ok = true;
  int64_t total = 0;
  auto mirror = [&](const at::Tensor& t) -> at::Tensor {
    if (!t.defined() || !IsPjrt(t)) return t;
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

// Whether a number lies outside the range of an integral (or bool) tensor argument's dtype.
bool NumberOutOfRange(const OpSignature& sig, c10::ArrayRef<c10::IValue> args) {
  std::optional<at::ScalarType> dtype;
  for (size_t i = 0; i < sig.num_functional_args && !dtype; ++i) {
    if (args[i].isTensor() && args[i].toTensor().defined()) dtype = args[i].toTensor().scalar_type();
  }
  if (!dtype || !at::isIntegralType(*dtype, /*includeBool=*/false)) return false;
  for (size_t i = 0; i < sig.num_functional_args; ++i) {
    if (!args[i].isScalar()) continue;
    bool overflows = false;
    // Unsigned 16/32/64-bit included: the plain integral dispatch lacks them and raised on them.
    AT_DISPATCH_V2(*dtype, "NumberOutOfRange", AT_WRAP([&] {
      overflows = args[i].isInt() ? c10::overflows<scalar_t>(args[i].toInt())
                                  : args[i].isDouble() && c10::overflows<scalar_t>(args[i].toDouble());
    }), AT_EXPAND(AT_INTEGRAL_TYPES_V2));
    if (overflows) return true;
  }
  return false;
}

std::optional<CpuRefusal> ProbeOnStandIns(const OpSignature& sig, c10::ArrayRef<c10::IValue> args,
                                          const std::function<bool(const CpuRefusal&)>& counts) {
  torch::jit::Stack probe;
  for (size_t i = 0; i < sig.num_args; ++i) {
    probe.push_back(StandInIValue(args[i], i >= sig.num_functional_args));
  }
  if (!ProbeIsSmall(sig, probe)) return std::nullopt;
  std::optional<CpuRefusal> error = RunOnCpu(sig, &probe);
  return error && counts(*error) ? error : std::nullopt;
}

}  // namespace

void CpuRefusal::Raise() const {
  if (not_implemented) TORCH_CHECK_NOT_IMPLEMENTED(false, message);
  TORCH_CHECK(false, message);
}

std::optional<CpuRefusal> CpuDtypeRefusal(const OpSignature& sig, c10::ArrayRef<c10::IValue> args) {
  if (!sig.cpu_probe || sig.random || sig.generator_arg >= 0 || !HasPjrtTensor(args)) return std::nullopt;
  return ProbeOnStandIns(sig, args, IsDtypeRefusal);
}

std::optional<CpuRefusal> CpuScalarRangeRefusal(const OpSignature& sig, c10::ArrayRef<c10::IValue> args) {
  if (!sig.cpu_probe || sig.random || sig.generator_arg >= 0 || !NumberOutOfRange(sig, args)) return std::nullopt;
  return ProbeOnStandIns(sig, args, [](const CpuRefusal& e) {
    return e.message.find("without overflow") != std::string::npos;
  });
}

}  // namespace torch_pjrt::aten

namespace torch_pjrt::aten {

std::optional<CpuRefusal> CpuOverlapRefusal(const OpSignature& sig, c10::ArrayRef<c10::IValue> args) {
  if (!sig.cpu_probe || sig.variant == Variant::kFunctional || sig.random || !WritesOverlap(sig, args)) {
    return std::nullopt;
  }
  std::optional<torch::jit::Stack> probe = MirrorStorages(sig, args);
  if (!probe) return std::nullopt;
  std::optional<CpuRefusal> error = RunOnCpu(sig, &*probe);
  return error && error->message.find("unsupported operation:") != std::string::npos ? error : std::nullopt;
}

}  // namespace torch_pjrt::aten
