// What the generic kernel needs to know about one registered op, worked out once from its schema:
// how each argument is traced, which arguments it writes, and which functional op (and lowering)
// computes its result.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/SmallVector.h>

#include "lowering/lowering.h"

#include <string>
#include <vector>

namespace torch_pjrt::aten {

enum class ArgRole : uint8_t {
  kPlain,        // traced by IValue type: tensors, ints, floats, bools, strings, lists
  kScalarValue,  // a Scalar that enters the graph as a 0-d value (never recompiles)
  kScalarConst,  // a Scalar that is part of the graph's identity
  // A Scalar that enters the graph as a value but whose value a Meta kernel checks (softshrink's
  // lambd >= 0): part of the Meta cache key, so a new value runs the check again.
  kScalarChecked,
  kDtype,        // ScalarType
  kIgnored,      // Layout, Device, MemoryFormat, pin_memory: irrelevant to the computation
  kGenerator,
};

enum class Variant : uint8_t {
  kFunctional,  // returns fresh tensors
  kInplace,     // writes its first argument (self) and returns it
  kOut,         // writes its trailing out= arguments and returns them
};

struct OpSignature {
  int lowering = -1;                        // index into lowering::Table()
  Variant variant = Variant::kFunctional;
  c10::OperatorHandle op;                   // the op this kernel is registered for
  c10::OperatorHandle functional;           // the functional form of `op`
  std::string name;                         // "aten::add_.Tensor"
  size_t num_args = 0;                      // of `op`
  size_t num_functional_args = 0;           // arguments shared with the functional op
  std::vector<ArgRole> roles;               // per argument of `op`
  std::vector<std::optional<c10::IValue>> defaults;
  std::vector<int> out_args;                // kOut: indices of the out= arguments
  std::vector<int> written_args;            // kInplace: the arguments it writes (self, or lists)
  bool returns_nothing = false;             // `op` returns () (in-place list ops like _foreach_add_)
  std::vector<int> extra_mutations;         // from the lowering entry
  size_t num_returns = 0;                   // of `functional`
  bool meta_runs_op = false;                // `op` is an out= op lowered directly (no functional)
  bool integer_indices_only = false;        // boolean index tensors take the CPU path
  bool cpu_indices = false;                 // index tensors may be on the CPU (device_rules.h)
  std::vector<lowering::IndexArgSpec> index_checks;  // index arguments checked against bounds
  std::vector<lowering::ValueArgSpec> value_checks;  // arguments whose values are checked
  lowering::ZeroDivisorCheck zero_divisor_check;  // integer division: a zero divisor raises
  bool random = false;                      // draws from a pjrt Generator (lowering table)
  std::vector<int> cpu_contiguous_path_args;  // OpLowering::cpu_contiguous_path_args
  bool cpu_probe = true;                    // OpLowering::cpu_probe
  int generator_arg = -1;                   // the Generator? argument, if the schema has one
  // kOut reductions (sum, mean, ...): the `dtype` argument that, left None, is out's dtype on the
  // CPU (DtypeFromOut in op_signature.cc); -1 for other ops.
  int dtype_from_out = -1;
  bool dtype_from_out_floating_only = false;  // mean: only a floating or complex out

  OpSignature(c10::OperatorHandle op, c10::OperatorHandle functional)
      : op(std::move(op)), functional(std::move(functional)) {}

  // The arguments a call writes: the out= arguments, or the in-place ones.
  const std::vector<int>& writes() const { return variant == Variant::kOut ? out_args : written_args; }
};

// The tensors a call writes, list elements flattened, in schema order (the order the results take;
// an undefined one keeps its place).
c10::SmallVector<at::Tensor, 4> WrittenTensors(const OpSignature& sig, c10::ArrayRef<c10::IValue> args);

// Finds the in-place and out= variants of functional op `functional` among registered ops.
std::vector<c10::OperatorHandle> FindVariants(const c10::OperatorHandle& functional);
// Builds the signature of `op`, a variant of `functional`, lowered by table entry `lowering`.
OpSignature MakeSignature(const c10::OperatorHandle& op, const c10::OperatorHandle& functional,
                          int lowering);

}  // namespace torch_pjrt::aten
