// The one PrivateUse1 kernel behind every op that has a lowering (design decision 2), boxed, with
// an unboxed entry for the commonest functional signatures (UnboxedLoweredKernel).
// It records a node instead of computing: output shapes and dtypes come from the op's Meta kernel
// (memoized per input signature), non-tensor arguments become node attributes, value scalars
// become 0-d graph inputs, and in-place / out= variants write the functional result back into
// their destination storages.
#include <ATen/Context.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/GradMode.h>
#include <c10/core/WrapDimMinimal.h>
#include <c10/util/SmallVector.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <torch/library.h>

#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "aten/autograd_state.h"
#include "aten/cpu_probe.h"
#include "aten/device_rules.h"
#include "aten/dynamic_shape.h"
#include "aten/fallback.h"
#include "aten/ivalue_map.h"
#include "aten/lazy_tensor.h"
#include "aten/meta_overrides.h"
#include "aten/native_meta.h"
#include "aten/lowered_kernel.h"
#include "aten/op_signature.h"
#include "aten/torch_errors.h"
#include "aten/zero_divisor.h"
#include "graph/index_checks.h"
#include "graph/metrics.h"
#include "graph/executor.h"
#include "lowering/lowering.h"

namespace torch_pjrt::aten {

namespace {

using graph::Arg;
using graph::ArgKind;

struct OutSpec {
  bool defined = true;  // false for results the op leaves undefined (masked-out gradients)
  c10::ScalarType dtype;
  c10::SmallVector<int64_t, 6> sizes;
  c10::SmallVector<int64_t, 6> strides;
};

// As CPU's structured kernels (resize_out) and TensorIterator: an out= tensor that is resized
// takes the result's strides (`add(x.t(), x.t(), out=empty(0))` is transposed there), where they
// are dense; one of the right size keeps its own layout.
void ResizeOutLikeCpu(const at::Tensor& out, const OutSpec& o) {
  if (!at::native::resize_output(out, o.sizes) || o.strides.size() != o.sizes.size()) return;
  auto meta = at::TensorOptions().device(c10::kMeta).dtype(out.scalar_type());
  if (at::empty_strided(o.sizes, o.strides, meta).is_non_overlapping_and_dense()) out.as_strided_(o.sizes, o.strides);
}

// sum(x, dim, out=o) reduces in o's dtype on the CPU, as if called with dtype=o.dtype
// (OpSignature::dtype_from_out); the call is traced so.
void TakeDtypeFromOut(const OpSignature& sig, torch::jit::Stack* stack) {
  size_t base = stack->size() - sig.num_args;
  c10::IValue& dtype = (*stack)[base + sig.dtype_from_out];
  const c10::IValue& out = (*stack)[base + sig.out_args.front()];
  if (!dtype.isNone() || !out.isTensor() || !out.toTensor().defined()) return;
  c10::ScalarType t = out.toTensor().scalar_type();
  if (sig.dtype_from_out_floating_only && !c10::isFloatingType(t) && !c10::isComplexType(t)) return;
  dtype = c10::IValue(t);
}

// The error the op's lowering raises for these arguments (graph::LoweringRefusal), found on the
// first call with them and raised on each.
struct LoweringVerdict {
  std::once_flag once;
  std::optional<std::string> refusal;
};

struct MetaResult {
  std::vector<OutSpec> outputs;  // functional results, flattened
  bool list_return = false;      // the op returns one Tensor[]
  std::optional<CpuRefusal> cpu_refusal;  // CPU eager's dtype error for these arguments (cpu_probe.h)
  std::shared_ptr<LoweringVerdict> lowering = std::make_shared<LoweringVerdict>();
};

// ---------------------------------------------------------------- meta inference

uint64_t Mix(uint64_t h, uint64_t v) { return graph::HashMix(h, v); }

uint64_t HashTensor(uint64_t h, const at::Tensor& t) {
  if (!t.defined()) return Mix(h, 0x55);
  h = Mix(h, static_cast<uint64_t>(t.scalar_type()) | (static_cast<uint64_t>(t.device().type()) << 8) |
                 (static_cast<uint64_t>(t.unsafeGetTensorImpl()->is_wrapped_number()) << 16));
  h = Mix(h, t.dim());
  for (int64_t s : t.sizes()) h = Mix(h, static_cast<uint64_t>(s));
  for (int64_t s : t.strides()) h = Mix(h, static_cast<uint64_t>(s));
  return h;
}

// A non-empty list of Python numbers (Scalar[]).
bool IsScalarList(const c10::IValue& list) {
  // int[], float[] and bool[] arguments are typed lists (structural); Scalar[] is a generic one.
  if (!list.isList() || list.isIntList() || list.isDoubleList() || list.isBoolList()) return false;
  for (const c10::IValue& e : list.toListRef()) {
    if (!(e.isDouble() || e.isInt() || e.isBool() || e.isComplexDouble())) return false;
  }
  return !list.toListRef().empty();
}

// Whether every element of a Scalar[] has the first's kind and bits (so -0.0 and 0.0 differ, as
// they would as separate values).
bool AllSameScalar(c10::ArrayRef<c10::IValue> elements) {
  const c10::IValue& first = elements[0];
  for (const c10::IValue& e : elements) {
    if (e.tagKind() != first.tagKind()) return false;
    if (e.isDouble()) {
      double a = e.toDouble(), b = first.toDouble();
      if (std::memcmp(&a, &b, sizeof a) != 0) return false;
    } else if (e.isInt()) {
      if (e.toInt() != first.toInt()) return false;
    } else if (e.isBool()) {
      if (e.toBool() != first.toBool()) return false;
    } else {
      c10::complex<double> a = e.toComplexDouble(), b = first.toComplexDouble();
      if (std::memcmp(&a, &b, sizeof a) != 0) return false;
    }
  }
  return true;
}

// Hashes everything about an argument that can change the Meta kernel's result: dtypes, sizes,
// strides, structural values, the *kind* of value scalars (never their value), and also the
// arguments the trace ignores (memory_format decides the result's strides, layout and device
// decide errors).
uint64_t HashIValue(uint64_t h, const c10::IValue& iv, ArgRole role) {
  if (role == ArgRole::kGenerator) return Mix(h, 0x1);
  if (role == ArgRole::kScalarValue && !iv.isNone()) {
    // Only the kind of a value scalar can change result types, never its value.
    return Mix(h, iv.isDouble() ? 0x10 : iv.isInt() ? 0x11 : iv.isBool() ? 0x12 : 0x13);
  }
  if (iv.isTensor()) return HashTensor(h, iv.toTensor());
  if (iv.isNone()) return Mix(h, 0x2);
  if (iv.isInt()) return Mix(Mix(h, 0x3), static_cast<uint64_t>(iv.toInt()));
  if (iv.isSymInt()) return Mix(Mix(h, 0x3), static_cast<uint64_t>(iv.toSymInt().guard_int(__FILE__, __LINE__)));
  if (iv.isDouble()) {
    double d = iv.toDouble();
    uint64_t bits;
    std::memcpy(&bits, &d, 8);
    return Mix(Mix(h, 0x4), bits);
  }
  if (iv.isBool()) return Mix(Mix(h, 0x5), iv.toBool());
  if (iv.isString()) return Mix(Mix(h, 0x6), std::hash<std::string_view>()(iv.toStringView()));
  if (iv.isIntList()) {
    h = Mix(h, 0x7);
    for (int64_t v : iv.toIntVector()) h = Mix(h, static_cast<uint64_t>(v));
    return h;
  }
  if (iv.isSymIntList()) {
    h = Mix(h, 0x7);
    for (const c10::SymInt& v : iv.toSymIntList()) h = Mix(h, static_cast<uint64_t>(v.guard_int(__FILE__, __LINE__)));
    return h;
  }
  if (iv.isTensorList()) {
    h = Mix(h, 0x8);
    for (const at::Tensor& t : iv.toTensorList()) h = HashTensor(h, t);
    return h;
  }
  if (iv.isList()) {
    h = Mix(h, 0x9);
    // Scalar[] elements are values (see PlainArg): only their kinds matter.
    ArgRole elements = IsScalarList(iv) ? ArgRole::kScalarValue : ArgRole::kPlain;
    for (const c10::IValue& e : iv.toListRef()) h = HashIValue(h, e, elements);
    return h;
  }
  if (iv.isDoubleList()) {
    h = Mix(h, 0xa);
    for (double d : iv.toDoubleVector()) {
      uint64_t bits;
      std::memcpy(&bits, &d, 8);
      h = Mix(h, bits);
    }
    return h;
  }
  if (iv.isComplexDouble()) return Mix(h, 0xb);
  return Mix(h, static_cast<uint64_t>(std::hash<std::string>()(iv.tagKind())));
}

at::Tensor ToMeta(const at::Tensor& t) {
  if (!t.defined() || !IsPjrt(t)) return t;  // undefined, or a CPU scalar the op accepts as-is
  return at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kMeta));
}

c10::IValue ToMetaIValue(const c10::IValue& iv) { return MapTensors(iv, ToMeta, c10::Device(c10::kMeta)); }

OutSpec SpecOf(const at::Tensor& t) {
  if (!t.defined()) return OutSpec{false, c10::ScalarType::Float, {}, {}};
  return OutSpec{true, t.scalar_type(), c10::SmallVector<int64_t, 6>(t.sizes().begin(), t.sizes().end()),
                 c10::SmallVector<int64_t, 6>(t.strides().begin(), t.strides().end())};
}

bool IsReadBy(const OpSignature& sig, c10::ArrayRef<c10::IValue> args, const at::Tensor& t) {
  for (size_t i = 0; i < sig.num_functional_args; ++i) {
    if (args[i].isTensor() && args[i].toTensor().is_same(t)) return true;
    if (args[i].isTensorList()) {
      for (const at::Tensor& e : args[i].toTensorList()) if (e.is_same(t)) return true;
    }
  }
  return false;
}

// Calls `f(written tensor, result sizes)` for each tensor the call writes whose result has another
// shape (another argument broadcasts it up). Ops whose results do not map one to one onto the
// written tensors: none.
template <class F>
void ForEachReshapedWrite(const OpSignature& sig, c10::ArrayRef<c10::IValue> args, const MetaResult& result, F f) {
  c10::SmallVector<at::Tensor, 4> written = WrittenTensors(sig, args);
  if (written.size() != result.outputs.size()) return;
  for (size_t j = 0; j < written.size(); ++j) {
    const OutSpec& o = result.outputs[j];
    if (o.defined && written[j].defined() && written[j].sizes() != c10::IntArrayRef(o.sizes)) {
      f(written[j], c10::IntArrayRef(o.sizes));
    }
  }
}

bool InplaceResultReshapes(const OpSignature& sig, c10::ArrayRef<c10::IValue> args, const MetaResult& result) {
  bool reshapes = false;
  if (sig.variant == Variant::kInplace) {
    ForEachReshapedWrite(sig, args, result, [&](const at::Tensor&, c10::IntArrayRef) { reshapes = true; });
  }
  return reshapes;
}

MetaResult RunMeta(const OpSignature& sig, c10::ArrayRef<c10::IValue> args) {
  c10::DispatchKeySet meta_keys(c10::DispatchKey::Meta);
  MetaOverride override_fn = nullptr;
  MetaResult result;
  torch::jit::Stack stack;
  if (sig.meta_runs_op) {
    for (size_t i = 0; i < sig.num_args; ++i) {
      const c10::IValue& iv = args[i];
      bool is_out = i >= sig.num_functional_args && iv.isTensor() && iv.toTensor().defined();
      stack.push_back(is_out ? c10::IValue(at::empty({0}, iv.toTensor().options().device(c10::kMeta)))
                             : ToMetaIValue(iv));
    }
    sig.op.redispatchBoxed(meta_keys, &stack);
  } else {
    for (size_t i = 0; i < sig.num_functional_args; ++i) stack.push_back(ToMetaIValue(args[i]));
    override_fn = FindMetaOverride(FullName(sig.functional));
    if (override_fn != nullptr) {
      torch::jit::Stack results;
      override_fn(stack, &results);
      stack = std::move(results);
    } else {
      RunMetaKernel(sig.functional, &stack);  // unlike an override, a native kernel keeps the variant's checks
    }
  }
  for (const c10::IValue& r : stack) {
    if (r.isNone()) {
      result.outputs.push_back(SpecOf(at::Tensor()));
    } else if (r.isTensor()) {
      result.outputs.push_back(SpecOf(r.toTensor()));
    } else if (r.isTensorList()) {
      result.list_return = true;
      for (const at::Tensor& t : r.toTensorList()) result.outputs.push_back(SpecOf(t));
    }
  }
  // (Ops with a Meta override have no Meta kernel for their variants either. An in-place call that
  // would reshape self is refused by CheckReadWriteKeepsShapes, where some variants' Python Meta
  // kernels resize self with a deprecation warning.)
  if (sig.variant != Variant::kFunctional && !sig.meta_runs_op && override_fn == nullptr &&
      !InplaceResultReshapes(sig, args, result)) {
    // The variant's own Meta kernel performs torch's checks (in-place broadcast and dtype
    // casting rules, out= dtype rules) with torch's messages. Out tensors are passed empty so
    // their resize warning comes from the real resize below, once per call.
    torch::jit::Stack check;
    for (size_t i = 0; i < sig.num_args; ++i) {
      const c10::IValue& iv = args[i];
      bool is_out = i >= sig.num_functional_args;
      if (is_out && iv.isTensor() && iv.toTensor().defined()) {
        check.push_back(at::empty({0}, iv.toTensor().options().device(c10::kMeta)));
      } else {
        check.push_back(ToMetaIValue(iv));
      }
    }
    RunMetaKernel(sig.op, &check);
  }
  return result;
}

// Refuses, with CPU eager's message, a call that would change the shape of a tensor it both reads
// and writes: self of an in-place op, or an out= tensor that is also an input (ldexp_ is
// mul_out(self, self, 2 ** other)), where the functional result is larger (another argument
// broadcasts it up): "output with shape [2, 1] doesn't match the broadcast shape [2, 3]". The
// variant's Meta kernel cannot be trusted with this: for ~30 in-place ops (fmod_, clamp_.Tensor,
// eq_, ...) it is a Python reference that resizes self with a deprecation warning instead, and the
// write then failed to compile or silently resized self. Per call, after the memoized Meta result:
// whether an out= tensor is also an input is aliasing, which the Meta cache key does not hold.
void CheckReadWriteKeepsShapes(const OpSignature& sig, c10::ArrayRef<c10::IValue> args, const MetaResult& result) {
  if (sig.variant == Variant::kFunctional || sig.meta_runs_op) return;
  ForEachReshapedWrite(sig, args, result, [&](const at::Tensor& written, c10::IntArrayRef shape) {
    if (sig.variant == Variant::kOut && !IsReadBy(sig, args, written)) return;  // resized, as on the CPU
    TORCH_CHECK(false, "output with shape ", written.sizes(), " doesn't match the broadcast shape ", shape);
  });
}

// Memoized meta results (null: the op has no meta result for these inputs, e.g. a data-dependent
// shape). The key covers the op, every argument (HashIValue) and the global state Meta kernels
// read: the default dtype (Python floats and factories without dtype= take it). Bounded: cleared
// wholesale when it grows past the limit. The lock is never held while a Meta kernel runs (some
// are Python decompositions, which take the GIL).
class MetaCache {
 public:
  using Entry = std::shared_ptr<const std::optional<MetaResult>>;

  Entry Get(const OpSignature& sig, c10::ArrayRef<c10::IValue> args) {
    uint64_t key = Key(sig, args);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = entries_.find(key);
      if (it != entries_.end()) return it->second;
    }
    Entry computed = std::make_shared<const std::optional<MetaResult>>(Compute(sig, args));
    std::lock_guard<std::mutex> lock(mutex_);
    if (entries_.size() > kMaxEntries) entries_.clear();  // callers keep their entries alive
    return entries_.emplace(key, std::move(computed)).first->second;
  }

 private:
  static constexpr size_t kMaxEntries = 200000;

  static uint64_t Key(const OpSignature& sig, c10::ArrayRef<c10::IValue> args) {
    uint64_t key = Mix(0x6d657461, reinterpret_cast<uintptr_t>(&sig));
    key = Mix(key, static_cast<uint64_t>(c10::get_default_dtype_as_scalartype()));
    for (size_t i = 0; i < sig.num_args; ++i) key = HashIValue(key, args[i], sig.roles[i]);
    return key;
  }

  static std::optional<MetaResult> Compute(const OpSignature& sig, c10::ArrayRef<c10::IValue> args) {
    try {
      MetaResult result = RunMeta(sig, args);
      result.cpu_refusal = CpuDtypeRefusal(sig, args);
      return result;
    } catch (const std::exception&) {
      // No shapes without running the op: data-dependent shapes (boolean masks), ops whose Meta
      // kernel is missing, or invalid arguments. The CPU path computes the result, or raises the
      // very error CPU eager raises for these arguments.
      return std::nullopt;
    }
  }

  std::mutex mutex_;
  std::unordered_map<uint64_t, Entry> entries_;
};

MetaCache::Entry CachedMeta(const OpSignature& sig, c10::ArrayRef<c10::IValue> args) {
  static auto* cache = new MetaCache();
  return cache->Get(sig, args);
}

// ---------------------------------------------------------------- tracing

struct NodeBuilder {
  int device;
  std::vector<graph::Value> inputs;
  graph::ArgList args;
  graph::ArgPool pool;

  int AddInput(graph::Value v) {
    inputs.push_back(std::move(v));
    return static_cast<int>(inputs.size() - 1);
  }

  // A tensor argument: a read of a pjrt tensor, or a CPU scalar tensor as a value slot.
  int AddTensor(const at::Tensor& t, bool* wrapped) {
    *wrapped = false;
    if (IsPjrt(t)) {
      if (t.device().index() != device) DeviceMismatch(t.device(), c10::Device(c10::DeviceType::PrivateUse1, device));
      return AddInput(ReadValue(t));
    }
    if (t.dim() != 0 || !t.device().is_cpu()) {
      DeviceMismatch(c10::Device(c10::DeviceType::PrivateUse1, device), t.device());
    }
    *wrapped = t.unsafeGetTensorImpl()->is_wrapped_number();
    return AddInput(graph::MakeSlot(device, ToElementType(t.scalar_type()), t.data_ptr()));
  }

  Arg TensorArg(const at::Tensor& t) {
    if (!t.defined()) return Arg::None();
    bool wrapped;
    Arg a = Arg::Tensor(AddTensor(t, &wrapped));
    a.start = wrapped ? 1 : 0;
    return a;
  }

  Arg ListArg(ArgKind kind, const std::vector<int64_t>& items) {
    Arg a{kind, static_cast<uint32_t>(pool.size()), static_cast<uint32_t>(items.size()), 0};
    for (int64_t v : items) pool.push_back(v);
    return a;
  }

  Arg ScalarArg(const c10::IValue& iv, bool structural) {
    if (structural) {
      if (iv.isDouble()) return Arg::Double(iv.toDouble());
      if (iv.isBool()) return Arg::Bool(iv.toBool());
      if (iv.isInt()) return Arg::Int(iv.toInt());
      c10::complex<double> c = iv.toComplexDouble();
      Arg a = Arg::Double(c.real());
      double im = c.imag();
      int64_t bits;
      std::memcpy(&bits, &im, 8);
      a.kind = ArgKind::kComplex;
      a.start = static_cast<uint32_t>(pool.size());
      a.len = 1;
      pool.push_back(bits);
      return a;
    }
    graph::Value slot;
    if (iv.isDouble()) {
      double v = iv.toDouble();
      slot = graph::MakeSlot(device, ElementType::kF64, &v);
    } else if (iv.isBool()) {
      bool v = iv.toBool();
      slot = graph::MakeSlot(device, ElementType::kBool, &v);
    } else if (iv.isInt()) {
      int64_t v = iv.toInt();
      slot = graph::MakeSlot(device, ElementType::kS64, &v);
    } else {
      c10::complex<double> v = iv.toComplexDouble();
      slot = graph::MakeSlot(device, ElementType::kC128, &v);
    }
    Arg a = Arg::Tensor(AddInput(std::move(slot)));
    a.start = 1;  // promotes like a Python number
    return a;
  }

  Arg PlainArg(const c10::IValue& iv) {
    if (iv.isTensor()) return TensorArg(iv.toTensor());
    if (iv.isNone()) return Arg::None();
    if (iv.isInt()) return Arg::Int(iv.toInt());
    if (iv.isSymInt()) return Arg::Int(iv.toSymInt().guard_int(__FILE__, __LINE__));
    if (iv.isDouble()) return Arg::Double(iv.toDouble());
    if (iv.isBool()) return Arg::Bool(iv.toBool());
    if (iv.isString()) {
      return Arg{ArgKind::kString, 0, 0, lowering::InternString(iv.toStringView())};
    }
    if (iv.isIntList()) return ListArg(ArgKind::kIntList, iv.toIntVector());
    if (iv.isSymIntList()) {
      std::vector<int64_t> v;
      for (const c10::SymInt& s : iv.toSymIntList()) v.push_back(s.guard_int(__FILE__, __LINE__));
      return ListArg(ArgKind::kIntList, v);
    }
    if (iv.isBoolList()) {
      std::vector<int64_t> v;
      for (bool b : iv.toBoolList()) v.push_back(b);
      return ListArg(ArgKind::kIntList, v);
    }
    if (iv.isDoubleList()) {
      std::vector<int64_t> v;
      for (double d : iv.toDoubleVector()) {
        int64_t bits;
        std::memcpy(&bits, &d, 8);
        v.push_back(bits);
      }
      return ListArg(ArgKind::kDoubleList, v);
    }
    if (iv.isList() && IsScalarList(iv)) {
      // Scalar[] (optimizers' per-parameter step sizes): each element a value, never a constant.
      // Equal elements (one param group's bias corrections: every parameter has the same step)
      // share one value, so the updates of same-shaped parameters are the same computation and
      // XLA compiles one kernel for all of them (docs/design.md, "The optimizer program's compile").
      c10::ArrayRef<c10::IValue> elements = iv.toListRef();
      if (AllSameScalar(elements)) {
        return ListArg(ArgKind::kValueList,
                       std::vector<int64_t>(elements.size(), ScalarArg(elements[0], /*structural=*/false).payload));
      }
      std::vector<int64_t> items;
      for (const c10::IValue& e : elements) items.push_back(ScalarArg(e, /*structural=*/false).payload);
      return ListArg(ArgKind::kValueList, items);
    }
    if (iv.isTensorList() || iv.isList()) {
      std::vector<int64_t> items;
      for (const c10::IValue& e : iv.toListRef()) {
        if (e.isNone() || (e.isTensor() && !e.toTensor().defined())) {
          items.push_back(-1);
        } else {
          bool wrapped;
          items.push_back(AddTensor(e.toTensor(), &wrapped));
        }
      }
      return ListArg(ArgKind::kTensorList, items);
    }
    if (iv.isDevice() || iv.isGenerator()) return Arg::None();
    TORCH_CHECK(false, "pjrt: cannot trace an argument of type ", iv.tagKind());
  }
};

// The one pjrt device every tensor argument is on (device_rules.h: CPU tensors only as 0-d
// scalars, as with CUDA). A factory without tensor arguments (_efficientzerotensor) runs on its
// `device` argument.
int FindDevice(const OpSignature& sig, c10::ArrayRef<c10::IValue> args) {
  int device = CommonPjrtDevice(args);
  if (device >= 0) return device;
  for (const c10::IValue& iv : args) {
    if (!iv.isDevice() || iv.toDevice().type() != c10::DeviceType::PrivateUse1) continue;
    device = iv.toDevice().has_index() ? iv.toDevice().index() : CurrentDevice();
  }
  TORCH_CHECK(device >= 0, "pjrt: ", sig.name, " was dispatched to pjrt without any pjrt tensor");
  return CommonPjrtDevice(args, /*cpu_index_lists=*/false, device);  // refuses foreign tensors
}

// The (seed, offset) a random op draws with, as value scalars, advancing the generator past the
// numbers it uses: the op's Generator argument, or the device's default one (torch's rule). The
// offset grows at trace time, so every draw of a step is distinct while the graph stays the same.
Arg RandomState(const OpSignature& sig, c10::ArrayRef<c10::IValue> args, const MetaResult& meta, int device,
                NodeBuilder* b) {
  std::optional<at::Generator> given;
  if (sig.generator_arg >= 0) given = args[sig.generator_arg].toOptional<at::Generator>();
  at::Generator gen = given && given->defined() ? *given : DefaultGenerator(device);
  TORCH_CHECK(gen.device().type() == c10::DeviceType::PrivateUse1,
              "Expected a '", c10::get_privateuse1_backend(), "' device type for generator but found '",
              gen.device().type(), "'");
  // Enough counter values for two draws per element of the largest tensor involved (normal
  // distributions use two uniforms per value), rounded to a multiple of 4 like torch's offsets.
  int64_t largest = 1;
  for (const OutSpec& o : meta.outputs) largest = std::max(largest, c10::multiply_integers(o.sizes));
  for (const c10::IValue& iv : args) {
    if (iv.isTensor() && iv.toTensor().defined()) largest = std::max(largest, iv.toTensor().numel());
  }
  uint64_t increment = (static_cast<uint64_t>(2 * largest) + 3) / 4 * 4;
  auto [seed, offset] = ReserveRandomOffsets(gen, increment);
  graph::Value seed_slot = graph::MakeSlot(device, ElementType::kU64, &seed);
  graph::Value offset_slot = graph::MakeSlot(device, ElementType::kU64, &offset);
  graph::NoteRandomDraw(device, seed_slot, offset_slot);
  std::vector<int64_t> slots{b->AddInput(std::move(seed_slot)), b->AddInput(std::move(offset_slot))};
  return b->ListArg(ArgKind::kTensorList, slots);
}

// Whether CPU's kernel takes its contiguous path for these arguments (OpLowering::
// cpu_contiguous_path_args): batch norm's rule, argument 0 contiguous in its suggested memory
// format and the others contiguous.
bool TakesCpuContiguousPath(const OpSignature& sig, c10::ArrayRef<c10::IValue> args) {
  for (int i : sig.cpu_contiguous_path_args) {
    if (!args[i].isTensor() || !args[i].toTensor().defined()) continue;
    const at::Tensor& t = args[i].toTensor();
    if (!t.is_contiguous(i == 0 ? t.suggest_memory_format() : at::MemoryFormat::Contiguous)) return false;
  }
  return true;
}

// An index input of the node being built and the range its values must lie in.
struct IndexBound {
  int input;
  int64_t lo, hi;
  std::string what;           // the bound, for an IndexError
  std::string runtime_error;  // non-empty: raise RuntimeError(this) instead
  std::optional<int64_t> exempt;
  ErrorKind kind;             // of the error naming the bound
};

// The index inputs of an op with index_checks (lowering table) and their bounds, from the
// arguments as traced (`b`: which node input each tensor became) and as given (`args`: sizes).
std::vector<IndexBound> IndexBounds(const OpSignature& sig, const NodeBuilder& b,
                                    c10::ArrayRef<c10::IValue> args, const std::string& where) {
  std::vector<IndexBound> bounds;
  for (const lowering::IndexArgSpec& spec : sig.index_checks) {
    const Arg& a = b.args[spec.indices];
    auto add = [&](int input, int64_t dim) {
      int64_t size;
      if (spec.bound == lowering::IndexArgSpec::Bound::kSizeListProduct) {
        size = c10::multiply_integers(args[spec.size_arg].toIntVector());
      } else if (spec.size_arg >= 0) {
        size = args[spec.size_arg].toInt();
      } else {
        const at::Tensor& source = args[spec.source].toTensor();
        if (spec.dim_arg >= 0) dim = c10::maybe_wrap_dim(args[spec.dim_arg].toInt(), source.dim());
        if (spec.bound == lowering::IndexArgSpec::Bound::kLastDim) dim = std::max<int64_t>(source.dim() - 1, 0);
        if (spec.bound == lowering::IndexArgSpec::Bound::kChannelDim) dim = source.dim() >= 2 ? 1 : 0;
        size = source.dim() == 0 ? 1 : source.size(dim);
        if (spec.bound == lowering::IndexArgSpec::Bound::kNumel) size = source.numel();
      }
      bool counts_elements = spec.bound == lowering::IndexArgSpec::Bound::kNumel ||
                             spec.bound == lowering::IndexArgSpec::Bound::kSizeListProduct;
      std::string bound = counts_elements
                              ? std::to_string(size) + " elements"
                              : "dimension " + std::to_string(dim) + " with size " + std::to_string(size);
      std::string what = bound + " in " + sig.name + (where.empty() ? "" : ", traced at " + where);
      std::optional<int64_t> exempt;
      if (spec.exempt_arg >= 0) exempt = args[spec.exempt_arg].toInt();
      bounds.push_back(IndexBound{input, spec.negative_wraps ? -size : spec.lowest, size, std::move(what),
                                  spec.runtime_error, exempt,
                                  spec.raises_runtime_error ? ErrorKind::kRuntime : ErrorKind::kIndex});
    };
    if (a.kind == ArgKind::kTensor) {
      add(static_cast<int>(a.payload), 0);
    } else if (a.kind == ArgKind::kTensorList) {
      for (uint32_t k = 0; k < a.len; ++k) {
        int64_t input = b.pool[a.start + k];
        if (input >= 0) add(static_cast<int>(input), k);
      }
    }
  }
  return bounds;
}

// kCountAtMost's bound: the nonzero values of the checked argument, broadcast to the result's
// shape, may number at most the bound argument's elements. Broadcasting repeats every element
// result / checked times, so the unbroadcast count may be at most bound / that. 0 for other rules.
int64_t CountBound(const lowering::ValueArgSpec& spec, c10::ArrayRef<c10::IValue> args, const MetaResult& meta) {
  if (spec.rule != lowering::CheckRule::kCountAtMost) return 0;
  int64_t checked = args[spec.arg].toTensor().numel();
  int64_t result = c10::multiply_integers(meta.outputs[0].sizes);
  if (result == 0) return checked;  // nothing is written: any count passes
  int64_t repeats = checked == 0 ? 1 : std::max<int64_t>(result / checked, 1);
  return args[spec.bound_arg].toTensor().numel() / repeats;
}

// Whether a value check applies to this call (see ValueArgSpec::only_if_equal_numbers).
bool ValueCheckApplies(const lowering::ValueArgSpec& spec, c10::ArrayRef<c10::IValue> args) {
  if (!spec.only_if_equal_numbers) return true;
  auto [a, b] = *spec.only_if_equal_numbers;
  return args[a].toScalar().toDouble() == args[b].toScalar().toDouble();
}

using Returns = c10::SmallVector<c10::IValue, 2>;  // inline: most ops return one or two tensors

// How TraceArgs handled a call. The two fallbacks run on the caller's stack.
enum class Traced { kTraced, kIntegerIndices, kNoStaticShape };

// Before an op is traced (graph lock held): the first op of a backward pass launches the pending
// forward (graph/trace.h, BackwardLaunchDue).
void BeginTracedOp(int device) {
  if (graph::BackwardLaunchDue(device) && InBackwardPass()) graph::SyncDevice(device, graph::SyncCause::kBackward);
}

// After an op is traced (graph lock held): notes whether autograd records it (grad mode on, or a
// backward pass) and a forward op's result elements, and cuts the trace where that is due: past
// the pending-node bound, or a pipelined launch (graph/trace.h).
void EndTracedOp(int device, int op, const MetaResult& meta) {
  bool in_backward = InBackwardPass();
  if (in_backward || c10::GradMode::is_enabled()) {
    int64_t elements = 0;  // counted for forwards only (BackwardLaunchDue)
    for (const OutSpec& o : meta.outputs) elements += o.defined && !in_backward ? c10::multiply_integers(o.sizes) : 0;
    graph::NoteAutogradOp(device, op, in_backward, elements);
  }
  if (graph::TraceTooLarge(device)) {
    graph::SyncDevice(device, graph::SyncCause::kGraphTooLarge);
  } else if (graph::PipelinedLaunchDue(device)) {
    graph::SyncDevice(device, graph::SyncCause::kPipelined);
  }
}

// One per op (and variant): its signature, and the tracing both its boxed and unboxed kernels run.
class LoweredKernel {
 public:
  explicit LoweredKernel(OpSignature sig) : sig_(std::move(sig)) {}

  const OpSignature& signature() const { return sig_; }

  void TraceBoxed(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
    if (sig_.dtype_from_out >= 0) TakeDtypeFromOut(sig_, stack);
    if (sig_.cpu_indices) MoveCpuIndicesToDevice(stack, sig_.num_args);
    Returns returns;
    switch (TraceArgs(torch::jit::last(*stack, sig_.num_args), &returns)) {
      case Traced::kIntegerIndices:
        RunWithIntegerIndices(op, stack, sig_.num_args);  // masks become coordinates on the device
        return;
      case Traced::kNoStaticShape:
        RunCpuFallback(op, stack, "has no static result shape for these arguments (e.g. a boolean mask)");
        return;
      case Traced::kTraced:
        break;
    }
    torch::jit::drop(*stack, sig_.num_args);
    for (c10::IValue& r : returns) stack->push_back(std::move(r));
  }

  // Records the call on `args` (which it only reads) and makes its results.
  Traced TraceArgs(c10::ArrayRef<c10::IValue> args, Returns* out) {
    const OpSignature& sig = sig_;
    int device = FindDevice(sig, args);
    if (sig.integer_indices_only && HasMaskIndices(args)) return Traced::kIntegerIndices;
    MetaCache::Entry meta_entry = CachedMeta(sig, args);
    // CPU's order (TensorIterator's): overlap, then shapes, then dtypes. Overlap before the CPU
    // path too: it runs on CPU copies, which no longer alias each other.
    if (auto refusal = CpuOverlapRefusal(sig, args)) refusal->Raise();
    if (!*meta_entry) return Traced::kNoStaticShape;
    const MetaResult& meta = **meta_entry;
    CheckReadWriteKeepsShapes(sig, args, meta);
    if (meta.cpu_refusal) meta.cpu_refusal->Raise();
    if (auto refusal = CpuScalarRangeRefusal(sig, args)) refusal->Raise();
    if (auto refusal = CpuRandomArgRefusal(sig, args)) refusal->Raise();

    bool check_divisor = sig.zero_divisor_check.enabled &&
                         CheckDivisorOnHost(sig, args, c10::multiply_integers(meta.outputs[0].sizes));
    // The Python line goes into check errors; found before locking (it runs Python).
    std::string where = sig.index_checks.empty() && !check_divisor ? std::string() : graph::SourceLocation();
    graph::GraphLock lock;
    BeginTracedOp(device);
    NodeBuilder b{device, {}, {}, {}};
    b.inputs.reserve(sig.num_functional_args + 2);  // one allocation (+2: a random op's seed and offset)
    for (size_t i = 0; i < sig.num_functional_args; ++i) {
      const c10::IValue& iv = args[i];
      switch (sig.roles[i]) {
        case ArgRole::kIgnored:
        case ArgRole::kGenerator:
          b.args.push_back(Arg::None());
          break;
        case ArgRole::kDtype:
          b.args.push_back(iv.isNone() ? Arg::None()
                                       : Arg::Type(ToElementType(static_cast<c10::ScalarType>(iv.toInt()))));
          break;
        case ArgRole::kScalarValue:
        case ArgRole::kScalarChecked:
        case ArgRole::kScalarConst: {
          if (iv.isNone()) {
            b.args.push_back(Arg::None());
            break;
          }
          // A Scalar equal to its schema default (add's alpha=1) is a constant: it almost never
          // changes, and as a constant XLA folds it away.
          bool structural = sig.roles[i] == ArgRole::kScalarConst ||
                            (sig.defaults[i].has_value() && sig.defaults[i]->isScalar() &&
                             iv.tagKind() == sig.defaults[i]->tagKind() && iv == *sig.defaults[i]);
          b.args.push_back(b.ScalarArg(iv, structural));
          break;
        }
        case ArgRole::kPlain:
          b.args.push_back(b.PlainArg(iv));
          break;
      }
    }
    if (sig.random) b.args.push_back(RandomState(sig, args, meta, device, &b));
    if (!sig.cpu_contiguous_path_args.empty()) b.args.push_back(Arg::Bool(TakesCpuContiguousPath(sig, args)));
    std::vector<graph::TensorType> out_types;
    out_types.reserve(meta.outputs.size() + sig.extra_mutations.size());
    for (const OutSpec& o : meta.outputs) {
      // Undefined results get an invalid type: the lowering may skip them.
      out_types.push_back(o.defined ? graph::TensorType{ToElementType(o.dtype), Dims(o.sizes.begin(), o.sizes.end())}
                                    : graph::TensorType{});
    }
    std::vector<at::Tensor> mutated;  // extra mutations whose argument is present
    for (int a : sig.extra_mutations) {
      const c10::IValue& iv = args[a];
      if (iv.isTensor() && iv.toTensor().defined()) {
        const at::Tensor& t = iv.toTensor();
        mutated.push_back(t);
        out_types.push_back(graph::TensorType{ToElementType(t.scalar_type()), Dims(t.sizes().begin(), t.sizes().end())});
      }
    }
    std::call_once(meta.lowering->once, [&] {
      meta.lowering->refusal = graph::LoweringRefusal(sig.lowering, b.inputs, b.args, b.pool, out_types);
    });
    if (meta.lowering->refusal) TORCH_CHECK(false, *meta.lowering->refusal);
    graph::Metrics::CountLoweredOp(sig.lowering);
    std::vector<IndexBound> bounds = IndexBounds(sig, b, args, where);
    std::vector<graph::Value> values;
    if (!out_types.empty()) {
      values = graph::MakeOp(sig.lowering, device, b.inputs, std::move(b.args), std::move(b.pool),
                             std::move(out_types));
      for (IndexBound& bound : bounds) {
        if (bound.runtime_error.empty()) {
          graph::AddIndexCheck(device, b.inputs[bound.input], values[0], bound.lo, bound.hi, std::move(bound.what),
                               bound.exempt, bound.kind);
        } else {
          graph::AddValueRangeCheck(device, b.inputs[bound.input], values[0], bound.lo, bound.hi, bound.runtime_error);
        }
      }
      for (const lowering::ValueArgSpec& spec : sig.value_checks) {
        const Arg& a = b.args[spec.arg];
        if (a.kind == ArgKind::kTensor && ValueCheckApplies(spec, args)) {
          graph::AddValueCheck(device, b.inputs[a.payload], values[0], spec.rule, spec.message,
                               CountBound(spec, args, meta));
        }
      }
      if (check_divisor && b.args[kDivisorArg].kind == ArgKind::kTensor) {
        graph::AddValueCheck(device, b.inputs[b.args[kDivisorArg].payload], values[0], lowering::CheckRule::kNonzero,
                             ZeroDivisorMessage(sig, where));
      }
    }
    for (size_t k = 0; k < mutated.size(); ++k) {
      const at::Tensor& t = mutated[k];
      WriteValue(t, Coerce(values[meta.outputs.size() + k], ToElementType(t.scalar_type()), t.sizes(), device));
    }

    Returns& returns = *out;
    switch (sig.variant) {
      case Variant::kFunctional: {
        auto result = [&](size_t j) {
          const OutSpec& o = meta.outputs[j];
          if (!o.defined) return at::Tensor();
          at::Tensor t = EmptyStrided(o.sizes, o.strides, o.dtype, device);
          if (t.numel() > 0) WriteValue(t, values[j]);
          return t;
        };
        if (meta.list_return) {
          c10::List<at::Tensor> results;
          for (size_t j = 0; j < meta.outputs.size(); ++j) results.push_back(result(j));
          returns.emplace_back(std::move(results));
        } else {
          for (size_t j = 0; j < meta.outputs.size(); ++j) returns.emplace_back(result(j));
        }
        break;
      }
      case Variant::kInplace: {
        // Every argument the op writes takes the next results, in schema order; a list takes
        // one per element (_foreach_add_, _fused_adam_).
        size_t next = 0;
        auto write = [&](const at::Tensor& t) {
          const graph::Value& v = values[next++];
          if (t.numel() > 0) WriteValue(t, Coerce(v, ToElementType(t.scalar_type()), t.sizes(), device));
        };
        for (int a : sig.written_args) {
          if (args[a].isTensor()) {
            write(args[a].toTensor());
          } else {
            for (const c10::IValue& e : args[a].toListRef()) write(e.toTensor());
          }
        }
        if (!sig.returns_nothing) returns.push_back(args[0]);
        break;
      }
      case Variant::kOut: {
        size_t next = 0;
        auto write = [&](const at::Tensor& out) {
          const OutSpec& o = meta.outputs[next];
          const graph::Value& v = values[next++];
          ResizeOutLikeCpu(out, o);
          if (out.numel() > 0) WriteValue(out, Coerce(v, ToElementType(out.scalar_type()), out.sizes(), device));
        };
        for (int a : sig.out_args) {
          if (args[a].isTensor()) {
            write(args[a].toTensor());
          } else {
            for (const c10::IValue& e : args[a].toListRef()) write(e.toTensor());
          }
          if (!sig.returns_nothing) returns.push_back(args[a]);
        }
        break;
      }
    }
    EndTracedOp(device, sig.lowering, meta);
    return Traced::kTraced;
  }

 private:
  OpSignature sig_;
};

class BoxedLoweredKernel final : public c10::OperatorKernel {
 public:
  explicit BoxedLoweredKernel(std::shared_ptr<LoweredKernel> kernel) : kernel_(std::move(kernel)) {}

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
    WithTorchErrors([&] { kernel_->TraceBoxed(op, stack); });
  }

 private:
  std::shared_ptr<LoweredKernel> kernel_;
};

// Tensor arguments the traced call reads without owning them. A stack the dispatcher boxes holds
// a reference to each tensor, and for a tensor Python also holds (every activation a module passes
// on) taking it (C++ refcount 1 -> 2) increfs the PyObject and dropping it decrefs it, each under
// the GIL, which torch's binding released: 9% of the 1000-op tracing loop's time, two GIL hand-offs
// per tensor per op. The borrowed IValues are released, never dropped, whatever TraceArgs does.
class BorrowedArgs {
 public:
  template <class... Args>
  explicit BorrowedArgs(const Args&... args) {
    (values_.push_back(Borrow(args)), ...);
  }
  ~BorrowedArgs() {
    for (c10::IValue& v : values_) {
      if (v.isTensor()) std::move(v).toTensor().unsafeReleaseTensorImpl();
    }
  }
  BorrowedArgs(const BorrowedArgs&) = delete;
  BorrowedArgs& operator=(const BorrowedArgs&) = delete;
  c10::ArrayRef<c10::IValue> values() const { return values_; }

 private:
  static c10::IValue Borrow(const at::Tensor& t) {
    return c10::IValue(at::Tensor(
        c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>::reclaim(t.unsafeGetTensorImpl())));
  }
  template <class A>
  static c10::IValue Borrow(const A& a) {  // not a tensor: boxed as the dispatcher boxes it
    return c10::IValue(a);
  }

  c10::SmallVector<c10::IValue, 5> values_;
};

// The unboxed kernel of a functional op returning one tensor whose arguments have one of
// UnboxedShapes() (mul.Tensor, add.Tensor, neg, mm, addmm, _softmax, mean.dim, ...): the dispatcher
// calls it without boxing. Boxed callers get torch's unboxing wrapper around it. Calls that need a stack of
// their own (a CPU fallback) box their arguments and take the boxed path.
template <class... Args>
class UnboxedLoweredKernel {
 public:
  UnboxedLoweredKernel(std::shared_ptr<LoweredKernel> kernel, c10::OperatorHandle op)
      : kernel_(std::move(kernel)), op_(std::move(op)) {}

  at::Tensor operator()(Args... args) const {
    return WithTorchErrors([&] {
      Returns returns;
      {
        BorrowedArgs borrowed(args...);
        if (kernel_->TraceArgs(borrowed.values(), &returns) == Traced::kTraced) return std::move(returns[0]).toTensor();
      }
      torch::jit::Stack stack{c10::IValue(args)...};
      kernel_->TraceBoxed(op_, &stack);
      return std::move(stack.back()).toTensor();
    });
  }

 private:
  std::shared_ptr<LoweredKernel> kernel_;
  c10::OperatorHandle op_;
};

// One letter per schema argument type the unboxed entry takes: T Tensor, S Scalar, i int, b bool,
// O int[]?, D ScalarType?, d ScalarType, r str; '?' for anything else (an aliased tensor, a SymInt).
char ArgLetter(const c10::Argument& a) {
  if (a.alias_info()) return '?';
  const c10::TypePtr& t = a.real_type();
  switch (t->kind()) {
    case c10::TypeKind::TensorType: return 'T';
    case c10::TypeKind::NumberType: return 'S';
    case c10::TypeKind::IntType: return 'i';
    case c10::TypeKind::BoolType: return 'b';
    case c10::TypeKind::ScalarTypeType: return 'd';
    case c10::TypeKind::StringType: return 'r';
    case c10::TypeKind::OptionalType: {
      const c10::TypePtr& e = t->expectRef<c10::OptionalType>().getElementType();
      if (e->kind() == c10::TypeKind::ScalarTypeType) return 'D';
      if (e->kind() == c10::TypeKind::ListType &&
          e->expectRef<c10::ListType>().getElementType()->kind() == c10::TypeKind::IntType) {
        return 'O';
      }
      return '?';
    }
    default: return '?';
  }
}

template <class... Args>
torch::CppFunction MakeUnboxed(std::shared_ptr<LoweredKernel> kernel, const c10::OperatorHandle& op) {
  return torch::CppFunction(UnboxedLoweredKernel<Args...>(std::move(kernel), op));
}

using UnboxedMaker = torch::CppFunction (*)(std::shared_ptr<LoweredKernel>, const c10::OperatorHandle&);

// The argument shapes with an unboxed entry, by ArgLetter: the elementwise ops, matmuls, Linear's
// addmm, softmax and its backward, reductions over dims, masked_fill / where / lerp, gelu.
const std::unordered_map<std::string, UnboxedMaker>& UnboxedShapes() {
  using T = const at::Tensor&;
  using S = const c10::Scalar&;
  using O = at::OptionalIntArrayRef;
  using D = std::optional<at::ScalarType>;
  static const auto* shapes = new std::unordered_map<std::string, UnboxedMaker>{
      {"T", &MakeUnboxed<T>},
      {"TT", &MakeUnboxed<T, T>},
      {"TS", &MakeUnboxed<T, S>},
      {"TTS", &MakeUnboxed<T, T, S>},
      {"TSS", &MakeUnboxed<T, S, S>},
      {"TTT", &MakeUnboxed<T, T, T>},
      {"TTTSS", &MakeUnboxed<T, T, T, S, S>},
      {"Ti", &MakeUnboxed<T, int64_t>},
      {"TTi", &MakeUnboxed<T, T, int64_t>},
      {"Tib", &MakeUnboxed<T, int64_t, bool>},
      {"TTid", &MakeUnboxed<T, T, int64_t, at::ScalarType>},
      {"TObD", &MakeUnboxed<T, O, bool, D>},
      {"Tr", &MakeUnboxed<T, c10::string_view>},
      {"TTr", &MakeUnboxed<T, T, c10::string_view>},
  };
  return *shapes;
}

// The unboxed entry for `op` where it is functional, returns one tensor and its arguments have one
// of UnboxedShapes(); otherwise the boxed kernel.
torch::CppFunction KernelFor(const c10::OperatorHandle& op, std::shared_ptr<LoweredKernel> kernel) {
  const c10::FunctionSchema& s = op.schema();
  bool one_tensor = s.returns().size() == 1 && s.returns()[0].type()->kind() == c10::TypeKind::TensorType &&
                    !s.returns()[0].alias_info();
  if (one_tensor && kernel->signature().variant == Variant::kFunctional) {
    std::string letters;
    for (const c10::Argument& a : s.arguments()) letters += ArgLetter(a);
    auto shape = UnboxedShapes().find(letters);
    if (shape != UnboxedShapes().end()) return shape->second(std::move(kernel), op);
  }
  return torch::CppFunction::makeFromBoxedFunctor(std::make_unique<BoxedLoweredKernel>(std::move(kernel)));
}

}  // namespace

std::vector<std::string> RegisterLoweredKernels() {
  static auto* library = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                            __FILE__, __LINE__);
  std::vector<std::string> missing;
  auto& dispatcher = c10::Dispatcher::singleton();
  const auto& table = lowering::Table();
  for (size_t i = 0; i < table.size(); ++i) {
    const std::string& schema = table[i].schema;
    if (schema.rfind("pjrt::", 0) == 0) continue;
    size_t dot = schema.find('.');
    std::string name = "aten::" + schema.substr(0, dot);
    std::string overload = dot == std::string::npos ? "" : schema.substr(dot + 1);
    auto functional = dispatcher.findSchema({name, overload});
    if (!functional) {
      missing.push_back(schema);
      continue;
    }
    std::vector<c10::OperatorHandle> ops{*functional};
    for (const auto& v : FindVariants(*functional)) ops.push_back(v);
    for (const std::string& extra : table[i].extra_variants) {
      size_t d = extra.find('.');
      auto variant = dispatcher.findSchema({"aten::" + extra.substr(0, d), d == std::string::npos ? "" : extra.substr(d + 1)});
      if (variant) ops.push_back(*variant);
      else missing.push_back(extra);
    }
    for (const c10::OperatorHandle& op : ops) {
      const c10::FunctionSchema& s = op.schema();
      std::string qualified = s.name().substr(6) + (s.overload_name().empty() ? "" : "." + s.overload_name());
      auto kernel = std::make_shared<LoweredKernel>(MakeSignature(op, *functional, static_cast<int>(i)));
      library->impl(qualified.c_str(), KernelFor(op, std::move(kernel)));
    }
  }
  return missing;
}

}  // namespace torch_pjrt::aten
