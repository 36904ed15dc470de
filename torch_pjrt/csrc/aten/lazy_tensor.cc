#include "aten/lazy_tensor.h"

#include <ATen/Context.h>
#include <ATen/EmptyTensor.h>
#include <c10/core/AutogradState.h>
#include <c10/core/StorageImpl.h>
#include <c10/core/TensorImpl.h>

#include <array>
#include <atomic>
#include <mutex>

#include "aten/dtype_policy.h"
#include "runtime/runtime.h"

namespace torch_pjrt::aten {

namespace {

// Storage addresses are never dereferenced. They are non-canonical x86-64/arm64 addresses (bit 60
// set), so a stray dereference faults instead of touching real memory, and each device owns
// 2^52 bytes of address space, so getDeviceFromPtr can read the device back.
constexpr uint64_t kAddressBase = 1ull << 60;
constexpr int kAddressDeviceShift = 52;
constexpr int kMaxDevices = 256;
std::array<std::atomic<uint64_t>, kMaxDevices> g_next_address{};

thread_local c10::DeviceIndex t_current_device = 0;

}  // namespace

c10::DeviceIndex CurrentDevice() { return t_current_device; }
void SetCurrentDevice(c10::DeviceIndex index) { t_current_device = index; }

ElementType ToElementType(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Bool: return ElementType::kBool;
    case c10::ScalarType::Char: return ElementType::kS8;
    case c10::ScalarType::Short: return ElementType::kS16;
    case c10::ScalarType::Int: return ElementType::kS32;
    case c10::ScalarType::Long: return ElementType::kS64;
    case c10::ScalarType::Byte: return ElementType::kU8;
    case c10::ScalarType::UInt16: return ElementType::kU16;
    case c10::ScalarType::UInt32: return ElementType::kU32;
    case c10::ScalarType::UInt64: return ElementType::kU64;
    case c10::ScalarType::Half: return ElementType::kF16;
    case c10::ScalarType::BFloat16: return ElementType::kBF16;
    case c10::ScalarType::Float: return ElementType::kF32;
    case c10::ScalarType::Double: return ElementType::kF64;
    case c10::ScalarType::ComplexFloat: return ElementType::kC64;
    case c10::ScalarType::ComplexDouble: return ElementType::kC128;
    case c10::ScalarType::Float8_e5m2: return ElementType::kF8E5M2;
    case c10::ScalarType::Float8_e4m3fn: return ElementType::kF8E4M3FN;
    default:
      TORCH_CHECK_TYPE(false, "pjrt tensors cannot hold dtype ", t,
                       ": supported are bool, (u)int8/16/32/64, float16, bfloat16, float32, "
                       "float64, complex64, complex128, float8_e5m2 and float8_e4m3fn");
  }
}

c10::ScalarType ToScalarType(ElementType t) {
  switch (t) {
    case ElementType::kBool: return c10::ScalarType::Bool;
    case ElementType::kS8: return c10::ScalarType::Char;
    case ElementType::kS16: return c10::ScalarType::Short;
    case ElementType::kS32: return c10::ScalarType::Int;
    case ElementType::kS64: return c10::ScalarType::Long;
    case ElementType::kU8: return c10::ScalarType::Byte;
    case ElementType::kU16: return c10::ScalarType::UInt16;
    case ElementType::kU32: return c10::ScalarType::UInt32;
    case ElementType::kU64: return c10::ScalarType::UInt64;
    case ElementType::kF16: return c10::ScalarType::Half;
    case ElementType::kBF16: return c10::ScalarType::BFloat16;
    case ElementType::kF32: return c10::ScalarType::Float;
    case ElementType::kF64: return c10::ScalarType::Double;
    case ElementType::kC64: return c10::ScalarType::ComplexFloat;
    case ElementType::kC128: return c10::ScalarType::ComplexDouble;
    case ElementType::kF8E5M2: return c10::ScalarType::Float8_e5m2;
    case ElementType::kF8E4M3FN: return c10::ScalarType::Float8_e4m3fn;
    default: TORCH_CHECK(false, "pjrt: invalid element type");
  }
}

void DeleteLazyStorage(void* ctx) { delete static_cast<graph::LazyStorage*>(ctx); }

c10::DataPtr AllocateLazyStorage(size_t nbytes, c10::DeviceIndex device) {
  TORCH_CHECK(device >= 0 && device < kMaxDevices, "pjrt: invalid device index ", int(device));
  uint64_t rounded = (std::max<uint64_t>(nbytes, 1) + 63) & ~uint64_t{63};
  uint64_t offset = g_next_address[device].fetch_add(rounded);
  void* address = reinterpret_cast<void*>(kAddressBase |
                                          (static_cast<uint64_t>(device) << kAddressDeviceShift) |
                                          offset);
  auto* storage = new graph::LazyStorage(device, nbytes);
  return c10::DataPtr(address, storage, &DeleteLazyStorage,
                      c10::Device(c10::DeviceType::PrivateUse1, device));
}

bool IsPjrt(const at::Tensor& t) {
  return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1;
}

graph::LazyStorage* StorageOf(const c10::Storage& s) {
  const c10::DataPtr& p = s.data_ptr();
  TORCH_CHECK(p.get_deleter() == &DeleteLazyStorage,
              "pjrt: this storage was not created by torch_pjrt (unsupported external storage)");
  return static_cast<graph::LazyStorage*>(p.get_context());
}

graph::LazyStorage* StorageOf(const at::Tensor& t) {
  TORCH_CHECK(t.has_storage(), "pjrt: tensor has no storage");
  return StorageOf(t.storage());
}

graph::TensorView ViewOf(const at::Tensor& t) {
  graph::TensorView v;
  v.dtype = ToElementType(t.scalar_type());
  v.sizes.assign(t.sizes().begin(), t.sizes().end());
  v.strides.assign(t.strides().begin(), t.strides().end());
  v.offset = t.storage_offset();
  return v;
}

at::Generator DefaultGenerator(int device) {
  return at::globalContext().defaultGenerator(c10::Device(c10::DeviceType::PrivateUse1, device));
}

std::pair<uint64_t, uint64_t> ReserveRandomOffsets(at::Generator gen, uint64_t increment) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  c10::GeneratorImpl* impl = gen.unsafeGetGeneratorImpl();
  uint64_t offset = impl->get_offset();
  impl->set_offset(offset + increment);
  return {impl->current_seed(), offset};
}

namespace {

// Backward passes of a thread that makes pjrt tensors run in that thread, as torch runs those of
// the CPU and of its own lazy device (kLazy). A pjrt backward is host work (tracing, or handing
// buffers to a captured executable): the autograd engine's per-device worker thread buys no
// overlap, and waking it costs two thread handoffs per backward. While an execution keeps every
// core busy (a compiled forward in flight, or the previous lazy step) each handoff waits for a
// scheduler slice: a compiled MLP backward took 2.9-3.6 ms instead of 0.35. It is the thread's
// autograd state, set once per thread; torch.autograd.set_multithreading_enabled(True) restores
// torch's default. Threads that never make a pjrt tensor keep torch's default.
void RunBackwardsInThisThread() {
  thread_local bool done = false;
  if (done) return;
  c10::AutogradState::get_tls_state().set_multithreading_enabled(false);
  done = true;
}

}  // namespace

c10::Storage NewStorage(size_t nbytes, c10::DeviceIndex device) {
  RunBackwardsInThisThread();
  return c10::Storage(c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), nbytes, AllocateLazyStorage(nbytes, device),
      c10::GetAllocator(c10::DeviceType::PrivateUse1), /*resizable=*/true));
}

at::Tensor TensorOver(c10::Storage storage, c10::IntArrayRef sizes, c10::IntArrayRef strides, int64_t offset,
                      c10::ScalarType dtype) {
  auto tensor = at::detail::make_tensor<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), caffe2::TypeMeta::fromScalarType(dtype));
  tensor.unsafeGetTensorImpl()->set_sizes_and_strides(sizes, strides, offset);
  return tensor;
}

at::Tensor EmptyStrided(c10::IntArrayRef sizes, c10::IntArrayRef strides, c10::ScalarType dtype,
                        c10::DeviceIndex device) {
  ToElementType(dtype);  // rejects dtypes pjrt tensors cannot hold with a TypeError
  CheckDtypeSupported(dtype);  // and those the active plugin does not support
  size_t nbytes = at::detail::computeStorageNbytes(sizes, strides, c10::elementSize(dtype));
  return TensorOver(NewStorage(nbytes, device), sizes, strides, 0, dtype);
}

at::Tensor EmptyContiguous(c10::IntArrayRef sizes, c10::ScalarType dtype, c10::DeviceIndex device) {
  c10::SmallVector<int64_t, 6> strides(sizes.size());
  int64_t s = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = s;
    s *= std::max<int64_t>(sizes[i], 1);
  }
  return EmptyStrided(sizes, strides, dtype, device);
}

namespace {

// Applies torch's lazy conjugate / negative bits (both involutions) to a value.
graph::Value ApplyMathBits(graph::Value v, const at::Tensor& t) {
  int device = t.device().index();
  if (t.is_conj()) {
    static const int conj = graph::InternalOp("pjrt::conj");
    graph::TensorType type = v.type();
    v = graph::MakeOp(conj, device, {v}, {graph::Arg::Tensor(0)}, {}, {type})[0];
  }
  if (t.is_neg()) {
    static const int neg = graph::InternalOp("pjrt::neg");
    graph::TensorType type = v.type();
    v = graph::MakeOp(neg, device, {v}, {graph::Arg::Tensor(0)}, {}, {type})[0];
  }
  return v;
}

}  // namespace

graph::Value ReadValue(const at::Tensor& t) {
  return ApplyMathBits(graph::ReadTensor(StorageOf(t), ViewOf(t)), t);
}

void WriteValue(const at::Tensor& t, graph::Value v) {
  graph::WriteTensor(StorageOf(t), ViewOf(t), ApplyMathBits(std::move(v), t));
}

std::vector<graph::Value> TraceInternalOpWith(const char* name, const std::vector<at::Tensor>& inputs,
                                              const graph::ArgList& attrs, std::vector<graph::TensorType> outs) {
  int device = inputs[0].device().index();
  graph::GraphLock lock;
  std::vector<graph::Value> values;
  graph::ArgList args;
  for (const at::Tensor& t : inputs) {
    args.push_back(graph::Arg::Tensor(static_cast<int>(values.size())));
    values.push_back(ReadValue(t));
  }
  for (const graph::Arg& a : attrs) args.push_back(a);
  return graph::MakeOp(graph::InternalOp(name), device, values, std::move(args), {}, std::move(outs));
}

std::vector<graph::Value> TraceInternalOp(const char* name, const std::vector<at::Tensor>& inputs,
                                          const std::vector<int64_t>& ints, std::vector<graph::TensorType> outs) {
  graph::ArgList attrs;
  for (int64_t v : ints) attrs.push_back(graph::Arg::Int(v));
  return TraceInternalOpWith(name, inputs, attrs, std::move(outs));
}

at::Tensor TensorOfValue(graph::Value v, c10::IntArrayRef sizes, c10::ScalarType dtype, int device) {
  at::Tensor t = EmptyContiguous(sizes, dtype, device);
  if (t.numel() > 0) {
    graph::GraphLock lock;
    WriteValue(t, std::move(v));
  }
  return t;
}

graph::Value Coerce(graph::Value v, ElementType dtype, c10::IntArrayRef sizes, int device) {
  if (v.type().dtype != dtype) {
    static const int convert = graph::InternalOp("pjrt::convert");
    graph::TensorType t{dtype, v.type().dims};
    v = graph::MakeOp(convert, device, {v}, {graph::Arg::Tensor(0), graph::Arg::Type(dtype)}, {}, {t})[0];
  }
  Dims want(sizes.begin(), sizes.end());
  if (v.type().dims != want) {
    static const int expand = graph::InternalOp("pjrt::expand");
    graph::ArgPool pool(want.begin(), want.end());
    graph::ArgList args{graph::Arg::Tensor(0),
                        graph::Arg{graph::ArgKind::kIntList, 0, static_cast<uint32_t>(want.size()), 0}};
    v = graph::MakeOp(expand, device, {v}, std::move(args), std::move(pool), {graph::TensorType{dtype, want}})[0];
  }
  return v;
}

void CheckDeviceIndex(c10::DeviceIndex index) {
  std::shared_ptr<runtime::Client> client;
  try {
    client = runtime::GetClient();
  } catch (const std::exception& e) {
    TORCH_CHECK(false, e.what());
  }
  TORCH_CHECK(index >= 0 && index < client->device_count(), "pjrt device index ", int(index),
              " is out of range: plugin '", client->plugin().name(), "' has ",
              client->device_count(), " device(s) (valid: 0..", client->device_count() - 1, ")");
}

}  // namespace torch_pjrt::aten
