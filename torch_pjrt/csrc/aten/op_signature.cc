#include "aten/op_signature.h"

#include <ATen/core/jit_type.h>

#include <algorithm>
#include <array>
#include <unordered_map>

#include "aten/device_rules.h"
#include "lowering/lowering.h"

namespace torch_pjrt::aten {

namespace {

c10::TypePtr Unwrap(const c10::TypePtr& t) {
  if (auto opt = t->cast<c10::OptionalType>()) return opt->getElementType();
  return t;
}

ArgRole RoleOf(const c10::Argument& arg) {
  c10::TypePtr t = Unwrap(arg.real_type());
  switch (t->kind()) {
    case c10::TypeKind::NumberType: return ArgRole::kScalarValue;
    case c10::TypeKind::ScalarTypeType: return ArgRole::kDtype;
    case c10::TypeKind::LayoutType:
    case c10::TypeKind::MemoryFormatType:
    case c10::TypeKind::DeviceObjType: return ArgRole::kIgnored;
    case c10::TypeKind::GeneratorType: return ArgRole::kGenerator;
    default: break;
  }
  if (arg.name() == "pin_memory") return ArgRole::kIgnored;
  return ArgRole::kPlain;
}

bool IsWritten(const c10::Argument& arg) { return arg.alias_info() && arg.alias_info()->isWrite(); }

bool SameArgument(const c10::Argument& a, const c10::Argument& b) {
  return a.name() == b.name() && a.type()->str() == b.type()->str();
}

}  // namespace

std::vector<c10::OperatorHandle> FindVariants(const c10::OperatorHandle& functional) {
  const c10::FunctionSchema& fs = functional.schema();
  const std::string& name = fs.name();           // "aten::add"
  const std::string& overload = fs.overload_name();  // "Tensor"
  std::vector<c10::OperatorHandle> out;
  auto& dispatcher = c10::Dispatcher::singleton();
  // In-place: name_ with the same overload and the same arguments in the same order
  // (polygamma_(self, n) is not polygamma(n, self): aten/reordered_inplace.cc).
  if (auto inplace = dispatcher.findSchema({name + "_", overload})) {
    const auto& args = inplace->schema().arguments();
    bool same = args.size() == fs.arguments().size() && !args.empty() && IsWritten(args[0]);
    for (size_t i = 0; i < args.size() && same; ++i) same = SameArgument(args[i], fs.arguments()[i]);
    if (same) out.push_back(*inplace);
  }
  // Out variants: same name, the functional arguments followed by written out= arguments. Not
  // for functional ops that write arguments themselves (_native_batch_norm_legit's running
  // stats): torch has no Meta kernel for their out= forms, written by hand (generic_kernels.cc).
  for (const c10::Argument& a : fs.arguments()) {
    if (IsWritten(a)) return out;
  }
  static const auto* overloads = [] {
    auto* index = new std::unordered_map<std::string, std::vector<c10::OperatorName>>();
    for (const c10::OperatorName& n : c10::Dispatcher::singleton().getAllOpNames()) {
      (*index)[n.name].push_back(n);
    }
    return index;
  }();
  auto same_name = overloads->find(name);
  if (same_name == overloads->end()) return out;
  for (const c10::OperatorName& candidate : same_name->second) {
    if (candidate.overload_name == overload) continue;
    auto handle = dispatcher.findSchema(candidate);
    if (!handle) continue;
    const auto& args = handle->schema().arguments();
    size_t n = fs.arguments().size();
    if (args.size() <= n) continue;
    bool match = true;
    for (size_t i = 0; i < n && match; ++i) match = SameArgument(args[i], fs.arguments()[i]);
    for (size_t i = n; i < args.size() && match; ++i) match = IsWritten(args[i]) && args[i].kwarg_only();
    if (match && args.size() - n == fs.returns().size()) out.push_back(*handle);
  }
  return out;
}

// Reductions whose CPU out= kernel reduces in out's dtype when `dtype` is None
// (infer_dtype_from_optional, get_dtype_from_result): sum(bfloat16, out=float32) accumulates in
// float32, and sum(float, out=int64) casts each element first. mean does so through sum_out, for
// a floating or complex out (an integer out raises there).
void DtypeFromOut(const c10::FunctionSchema& functional, OpSignature* sig) {
  static const std::array<const char*, 6> kOps = {"aten::sum", "aten::prod", "aten::nansum",
                                                  "aten::cumsum", "aten::cumprod", "aten::mean"};
  const std::string& name = functional.name();
  if (std::find(kOps.begin(), kOps.end(), name) == kOps.end() || sig->out_args.size() != 1) return;
  for (size_t i = 0; i < functional.arguments().size(); ++i) {
    if (functional.arguments()[i].name() == "dtype") sig->dtype_from_out = static_cast<int>(i);
  }
  sig->dtype_from_out_floating_only = name == "aten::mean";
}

OpSignature MakeSignature(const c10::OperatorHandle& op, const c10::OperatorHandle& functional,
                          int lowering) {
  const lowering::OpLowering& entry = lowering::Table()[lowering];
  OpSignature sig(op, functional);
  const c10::FunctionSchema& s = op.schema();
  const c10::FunctionSchema& fs = functional.schema();
  sig.lowering = lowering;
  sig.name = s.name() + (s.overload_name().empty() ? "" : "." + s.overload_name());
  sig.num_args = s.arguments().size();
  sig.num_functional_args = fs.arguments().size();
  sig.num_returns = fs.returns().size();
  sig.returns_nothing = s.returns().empty();
  sig.extra_mutations = entry.extra_mutations;
  sig.integer_indices_only = entry.integer_indices_only;
  sig.cpu_indices = TakesCpuIndices(op);
  sig.index_checks = entry.index_checks;
  sig.value_checks = entry.value_checks;
  sig.zero_divisor_check = entry.zero_divisor_check;
  sig.random = entry.random;
  sig.cpu_contiguous_path_args = entry.cpu_contiguous_path_args;
  sig.cpu_probe = entry.cpu_probe;
  for (size_t i = 0; i < sig.num_args; ++i) {
    const c10::Argument& a = s.arguments()[i];
    ArgRole role = RoleOf(a);
    auto listed = [&](const std::vector<int>& args) {
      return std::find(args.begin(), args.end(), static_cast<int>(i)) != args.end();
    };
    if (role == ArgRole::kScalarValue && listed(entry.structural_scalars)) role = ArgRole::kScalarConst;
    if (role == ArgRole::kScalarValue && listed(entry.checked_scalars)) role = ArgRole::kScalarChecked;
    if (std::find(entry.value_args.begin(), entry.value_args.end(), static_cast<int>(i)) != entry.value_args.end() &&
        role == ArgRole::kPlain && Unwrap(a.real_type())->kind() == c10::TypeKind::FloatType) {
      role = ArgRole::kScalarValue;
    }
    sig.roles.push_back(role);
    if (role == ArgRole::kGenerator) sig.generator_arg = static_cast<int>(i);
    sig.defaults.push_back(a.default_value());
  }
  bool has_out_args = std::any_of(s.arguments().begin(), s.arguments().end(),
                                  [](const c10::Argument& a) { return a.is_out(); });
  if (op == functional && has_out_args) {
    // An out= op lowered directly (arange.start_out): its own Meta kernel sizes the outputs.
    sig.variant = Variant::kOut;
    sig.meta_runs_op = true;
    for (size_t i = 0; i < sig.num_args; ++i) {
      if (s.arguments()[i].is_out()) sig.out_args.push_back(static_cast<int>(i));
    }
    sig.num_functional_args = static_cast<size_t>(sig.out_args.front());
    sig.num_returns = sig.out_args.size();
  } else if (op == functional) {
    sig.variant = Variant::kFunctional;
    // A lowered op that writes some arguments itself (_native_batch_norm_legit's running stats):
    // the lowering returns their new values after its results, like extra_mutations.
    for (size_t i = 0; i < sig.num_args; ++i) {
      if (IsWritten(s.arguments()[i]) &&
          std::find(sig.extra_mutations.begin(), sig.extra_mutations.end(), static_cast<int>(i)) ==
              sig.extra_mutations.end()) {
        sig.extra_mutations.push_back(static_cast<int>(i));
      }
    }
  } else if (sig.num_args == sig.num_functional_args) {
    sig.variant = Variant::kInplace;
    for (size_t i = 0; i < sig.num_args; ++i) {
      if (IsWritten(s.arguments()[i])) sig.written_args.push_back(static_cast<int>(i));
    }
  } else {
    sig.variant = Variant::kOut;
    for (size_t i = sig.num_functional_args; i < sig.num_args; ++i) sig.out_args.push_back(static_cast<int>(i));
    DtypeFromOut(fs, &sig);
  }
  return sig;
}

c10::SmallVector<at::Tensor, 4> WrittenTensors(const OpSignature& sig, c10::ArrayRef<c10::IValue> args) {
  c10::SmallVector<at::Tensor, 4> written;
  for (int a : sig.writes()) {
    if (args[a].isTensor()) {
      written.push_back(args[a].toTensor());
    } else if (args[a].isTensorList()) {
      for (const at::Tensor& t : args[a].toTensorList()) written.push_back(t);
    }
  }
  return written;
}

}  // namespace torch_pjrt::aten
