#include "aten/dtype_policy.h"

#include <c10/util/Exception.h>

#include <atomic>
#include <bitset>
#include <sstream>
#include <string>

#include "runtime/client.h"
#include "runtime/runtime.h"

namespace torch_pjrt::aten {

namespace {

constexpr size_t kNumScalarTypes = static_cast<size_t>(c10::ScalarType::NumOptions);

struct DtypePolicy {
  std::bitset<kNumScalarTypes> unsupported;
  bool error = true;    // "error" raises; "warn" lets the plugin's compiler emulate the dtype
  std::string plugin;   // for messages
  std::string supported;  // the plugin's list, as given
};

// torch's Python name of a dtype ("float64"); empty for types torch gives no name.
std::string DtypeName(c10::ScalarType t) {
  try {
    return std::string(c10::getDtypeNames(t).first);
  } catch (const c10::Error&) {
    return "";
  }
}

DtypePolicy LoadPolicy() {
  DtypePolicy policy;
  // The capabilities belong to the plugin whose client is running.
  policy.plugin = runtime::GetClient()->plugin().name();
  const auto& caps = runtime::ActiveCapabilities();
  auto it = caps.find("supported_dtypes");
  if (it == caps.end()) return policy;  // every dtype pjrt tensors can hold
  policy.supported = it->second;
  std::string list = "," + it->second + ",";
  for (size_t i = 0; i < kNumScalarTypes; ++i) {
    policy.unsupported[i] = list.find("," + DtypeName(static_cast<c10::ScalarType>(i)) + ",") == std::string::npos;
  }
  auto p = caps.find("unsupported_dtype_policy");
  policy.error = p == caps.end() || p->second != "warn";
  return policy;
}

// The usual stand-in for a wide type the hardware lacks.
c10::ScalarType NarrowerScalarType(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Double: return c10::ScalarType::Float;
    case c10::ScalarType::ComplexDouble: return c10::ScalarType::ComplexFloat;
    case c10::ScalarType::Long: return c10::ScalarType::Int;
    case c10::ScalarType::UInt64: return c10::ScalarType::UInt32;
    default: return c10::ScalarType::Undefined;
  }
}

std::string NarrowerType(c10::ScalarType t) {
  c10::ScalarType n = NarrowerScalarType(t);
  return n == c10::ScalarType::Undefined ? "" : DtypeName(n);
}

std::atomic<uint64_t> g_warned{0};

}  // namespace

void CheckDtypeSupported(c10::ScalarType dtype) {
  static const DtypePolicy policy = LoadPolicy();
  size_t i = static_cast<size_t>(dtype);
  if (i >= kNumScalarTypes || !policy.unsupported[i]) return;
  std::string name = DtypeName(dtype);
  if (policy.error) {
    std::string narrower = NarrowerType(dtype);
    std::string fix = narrower.empty() || policy.unsupported[static_cast<size_t>(
                                              NarrowerScalarType(dtype))]
                          ? "convert to one of those first"
                          : "convert first with tensor.to(torch." + narrower + ")";
    TORCH_CHECK_TYPE(false, "pjrt: the '", policy.plugin, "' device does not support torch.", name,
                     " tensors (it supports ", policy.supported, "): ", fix,
                     ", or pick another plugin with PJRT_DEVICE.");
  }
  uint64_t bit = 1ull << (i % 64);
  if ((g_warned.fetch_or(bit) & bit) == 0) {
    TORCH_WARN("pjrt: the '", policy.plugin, "' device has no native torch.", name,
               " arithmetic; its compiler emulates it, which can be much slower (native: ",
               policy.supported, ").");
  }
}

}  // namespace torch_pjrt::aten
