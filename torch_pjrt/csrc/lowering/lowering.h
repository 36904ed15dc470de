// The lowering table: one small function per ATen op that emits its StableHLO. To find an op's
// lowering, grep for its schema name ("add.Tensor") under lowering/.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lowering/emitter.h"
#include "lowering/op_args.h"

namespace torch_pjrt::lowering {

// What a lowering function sees of one traced op.
class LowerCtx {
 public:
  LowerCtx(Emitter& e, const Arg* args, size_t num_args, const int64_t* pool, const Val* inputs,
           const TensorType* outs, size_t num_outs, const struct OpLowering* entry = nullptr)
      : e(e), args_(args), num_args_(num_args), pool_(pool), inputs_(inputs), outs_(outs),
        num_outs_(num_outs), entry_(entry) {}

  Emitter& e;

  size_t num_args() const { return num_args_; }
  const Arg& arg(size_t i) const;
  bool is_none(size_t i) const { return i >= num_args_ || args_[i].kind == ArgKind::kNone; }
  bool is_tensor(size_t i) const { return i < num_args_ && args_[i].kind == ArgKind::kTensor; }

  // Tensor argument (also value scalars, which arrive as 0-d tensors).
  Val tensor(size_t i) const;
  // True when tensor argument i came from a Python number (it then promotes like one).
  bool is_wrapped_number(size_t i) const;
  std::vector<Val> tensors(size_t i) const;      // Tensor[] (None elements are skipped)
  std::vector<Val> opt_tensors(size_t i) const;  // Tensor?[] (None elements are invalid Vals)
  int64_t int_arg(size_t i) const;
  int64_t int_arg(size_t i, int64_t default_value) const;
  double double_arg(size_t i) const;
  bool bool_arg(size_t i) const;
  bool bool_arg(size_t i, bool default_value) const;
  const std::string& string_arg(size_t i) const;
  Dims int_list(size_t i) const;
  std::vector<double> double_list(size_t i) const;
  ElementType dtype_arg(size_t i) const;
  // A Scalar argument as a 0-d value of type `t`, whether it was traced as a value or a constant.
  Val scalar(size_t i, ElementType t) const;
  double scalar_constant(size_t i) const;  // structural Scalar arguments only

  // The (seed, offset) of a random op's draw (see OpLowering::random): 0-d values.
  std::pair<Val, Val> rng_state() const;
  // Whether CPU's kernel takes its contiguous path for this call (OpLowering::
  // cpu_contiguous_path_args): the last argument.
  bool cpu_contiguous_path() const { return bool_arg(num_args_ - 1); }

  size_t num_outputs() const { return num_outs_; }
  const TensorType& out(size_t i = 0) const { return outs_[i]; }

  // The table entry being lowered (null for lowerings called directly).
  const struct OpLowering* entry() const { return entry_; }
  // Lowers element k of a list op (_foreach_add.List, one result per list element) with the
  // single-tensor lowering `fn`: every Tensor[]/Scalar[] argument becomes its k-th tensor or
  // value, other arguments stay, and the output is out(k). `args` replaces the arguments first
  // when the element op's schema differs (see foreach.cc).
  std::vector<Val> LowerElement(size_t k, std::vector<Val> (*fn)(LowerCtx&),
                                const std::vector<Arg>* args = nullptr) const;

 private:
  const Arg* args_;
  size_t num_args_;
  const int64_t* pool_;
  const Val* inputs_;
  const TensorType* outs_;
  size_t num_outs_;
  const struct OpLowering* entry_;
};

using LowerFn = std::vector<Val> (*)(LowerCtx&);

// Whether an op is, for the arguments of one call, an increasing map of its argument 0 (see
// OpLowering::increasing). `when`: a 0-d i1 the program computes from the other arguments
// (batch norm's statistics and affine parameters), or invalid where it holds for any values.
struct Increasing {
  bool applies = false;
  Val when;
};
using IncreasingFn = Increasing (*)(LowerCtx&);

// A chain of increasing ops (OpLowering::increasing) that max pooling can run ahead of: `apply`
// lowers the chain again on a value of another spatial size (the pooled one); `when` is the
// chain's runtime condition (invalid: none).
struct IncreasingChain {
  std::function<Val(Emitter&, const Val&)> apply;
  Val when;
};
// Lowers a max pooling whose argument 0 is `chain` applied to `y`, pooling `y` first; empty where
// that would not pay (the pooling then stays after the chain).
using PoolThroughFn = std::vector<Val> (*)(LowerCtx&, const Val& y, const IncreasingChain& chain);

// An index tensor argument whose values must be in range (design: "Index bounds"). The bound is
// a dimension of another argument, or an int argument.
struct IndexArgSpec {
  int indices;              // the index tensor, or a Tensor?[] whose k-th entry indexes dim k
  int source = 0;           // the tensor whose dimension bounds the indices
  int dim_arg = -1;         // int argument naming that dimension (-1: the list position)
  int size_arg = -1;        // int argument giving the bound instead (num_weights), or with
                            // kSizeListProduct an int[] whose product it is (max_unpool's output_size)
  bool negative_wraps = false;  // -size <= i < 0 counts from the end (advanced indexing)
  // What bounds the indices when size_arg is not given: the source's dimension (dim_arg, or the
  // list position), its last dimension (class indices), or its element count (flat indices).
  // kChannelDim: dim 1, or 0 for a 1-d source (nll_loss's classes).
  enum class Bound : uint8_t { kDim, kLastDim, kNumel, kChannelDim, kSizeListProduct } bound = Bound::kDim;
  int64_t lowest = 0;  // the smallest valid index without negative_wraps (-1: multilabel targets)
  // Non-empty: an index out of range raises RuntimeError(runtime_error), as torch's CPU kernel
  // words it (class targets), instead of an IndexError naming the bound.
  std::string runtime_error;
  int exempt_arg = -1;  // int argument whose value is never out of range (nll_loss's ignore_index)
  // The error naming the bound is a RuntimeError, the type CPU's kernel raises (gather and the
  // scatter family, whose CPU message is the same "index 3 is out of bounds for dimension 0 with
  // size 3"), instead of an IndexError (indexing, index_select, take).
  bool raises_runtime_error = false;
};

// `spec` raising CPU's RuntimeError for an index out of range (see raises_runtime_error).
inline IndexArgSpec WithRuntimeError(IndexArgSpec spec) {
  spec.raises_runtime_error = true;
  return spec;
}

// A tensor argument whose values must pass `rule` (binary_cross_entropy's input and target in
// [0, 1], normal's std >= 0), which torch's CPU kernel checks by reading them: checked when the
// graph runs; a failure raises RuntimeError(message), CPU's text, at the next sync point.
struct ValueArgSpec {
  int arg;
  CheckRule rule;
  std::string message;
  // kCountAtMost: the tensor argument whose element count bounds the nonzero count of `arg`
  // broadcast to the result's shape (masked_scatter's source and mask).
  int bound_arg = -1;
  // Set: checked only for calls whose two number arguments at these positions are equal (histc's
  // min and max: its range then comes from the data, which CPU's kernel requires to be finite).
  std::optional<std::pair<int, int>> only_if_equal_numbers;
};

// An integer division, argument 1 dividing argument 0 (floor_divide, remainder, fmod, div with a
// rounding mode): where the two promote to an integer type, CPU's kernels raise
// RuntimeError("ZeroDivisionError") for a zero divisor, and XLA's integer division would give -1
// or the dividend. A number is checked at the call, a tensor when the graph runs.
struct ZeroDivisorCheck {
  bool enabled = false;
  // div's rounding_mode: None is true division (a float result, nothing to check).
  int rounding_mode_arg = -1;
};

struct OpLowering {
  // Schema name without the "aten::" namespace ("add.Tensor", "relu"), or "pjrt::<name>" for our
  // internal ops (views, layout changes), which are never registered with the dispatcher.
  std::string schema;
  LowerFn fn = nullptr;
  // Scalar arguments that are part of the graph's identity (arange's bounds, pow's exponent).
  // Every other Scalar is a value: a 0-d graph input, so a new value never recompiles.
  std::vector<int> structural_scalars;
  // Value Scalars whose values torch's Meta kernel checks (softshrink's lambd >= 0, histc's
  // min <= max): the Meta cache keys them by value, so a call with a new value runs the check
  // (a cached result from a valid value let an invalid one through); the graph still takes them
  // as values.
  std::vector<int> checked_scalars;
  // Arguments the op writes although its schema has no (a!) annotation (native_batch_norm's
  // running stats). The lowering returns their new values after the op's own results.
  std::vector<int> extra_mutations;
  // Index-list ops whose boolean-mask indices make the result depend on data: such calls take
  // the CPU path.
  bool integer_indices_only = false;
  // Index arguments checked against their bounds.
  std::vector<IndexArgSpec> index_checks;
  // Arguments whose values are checked.
  std::vector<ValueArgSpec> value_checks;
  ZeroDivisorCheck zero_divisor_check;
  // The op draws random numbers: the ATen layer appends one argument, the generator's (seed,
  // offset) as value scalars (LowerCtx::rng_state), and advances the generator.
  bool random = false;
  // CPU's kernel computes another formula where these tensor arguments are all contiguous
  // (argument 0 in its suggested memory format: contiguous, channels-last) than where one of them
  // is strided (batch norm: x * alpha + beta against ((x - mean) * invstd) * weight + bias, which
  // differ for infinite parameters). The ATen layer appends one bool argument saying which path
  // CPU takes (LowerCtx::cpu_contiguous_path); absent arguments count as contiguous.
  std::vector<int> cpu_contiguous_path_args;
  // Variants that FindVariants cannot pair by name (normal_ for normal_functional), registered
  // as in-place variants of this op.
  std::vector<std::string> extra_variants;
  // float arguments that enter the graph as values instead of constants (an optimizer's lr).
  std::vector<int> value_args;
  // A list op applying another op's lowering to each element (_foreach_add.List: "add.Tensor").
  std::string foreach_of;
  // Whether the generic kernel may run the CPU kernel on zero-filled stand-ins of the arguments to
  // find the calls CPU refuses (aten/cpu_probe.h). False where the CPU kernel trusts index data
  // that stand-ins cannot make consistent (embedding_bag's offsets): it could crash.
  bool cpu_probe = true;
  // The op may run as a host kernel (TargetOptions::host_kernels: a convolution or max pooling
  // through torch's CPU kernel). The graph counts such nodes per trace: where they are a large
  // part of a backward, a device-graph capture makes the optimizer's step a program of its own
  // (graph/executor.h, LaunchBeforeOptimizerStep).
  bool host_kernel = false;
  // The op is, for these arguments (`applies`) and where `when` holds, a non-decreasing map of
  // argument 0, element by element with parameters per channel (dim 1) at most, that sends NaN to
  // NaN and no other value to NaN: relu, batch norm in evaluation with a positive finite scale.
  // Rounding is monotone, so the maximum of its results over a window is exactly its result on
  // the window's maximum, and max pooling can run first, on 1/k of the elements (pool_through).
  IncreasingFn increasing = nullptr;
  // Max pooling: its lowering when argument 0 comes from a chain of increasing ops
  // (docs/design.md, "Max pooling before batch norm and ReLU").
  PoolThroughFn pool_through = nullptr;
};

class Registry {
 public:
  OpLowering& Add(std::string schema, LowerFn fn);
  // The entry registered so far for `schema`, or nullptr: lets a later file wrap another file's
  // lowering (complex.cc routes complex inputs of real-only lowerings to its own code).
  OpLowering* Find(std::string_view schema);
  const std::vector<OpLowering>& entries() const { return entries_; }
  bool Has(std::string_view schema) const;

 private:
  std::vector<OpLowering> entries_;
};

// All lowerings, built once on first use. Indices are stable for the life of the process.
const std::vector<OpLowering>& Table();
// Index into Table() of `schema`, or -1.
int FindLowering(std::string_view schema);

// Per-area registration functions, one per file.
void RegisterInternalOps(Registry& r);
void RegisterCollectiveOps(Registry& r);
void RegisterElementwiseOps(Registry& r);
void RegisterActivationOps(Registry& r);
void RegisterLossOps(Registry& r);
void RegisterDistanceOps(Registry& r);
void RegisterReductionOps(Registry& r);
void RegisterLinalgOps(Registry& r);
void RegisterNNOps(Registry& r);
void RegisterIndexingOps(Registry& r);
void RegisterFactoryOps(Registry& r);
void RegisterRnnOps(Registry& r);
void RegisterLstmLayerOps(Registry& r);
void RegisterFftOps(Registry& r);
void RegisterLinalgDecompositionOps(Registry& r);
void RegisterLinalgMiscOps(Registry& r);
void RegisterDynamicShapeOps(Registry& r);
void RegisterRandomOps(Registry& r);
void RegisterOptimizerOps(Registry& r);
void RegisterPaddingOps(Registry& r);
void RegisterPoolingOps(Registry& r);
void RegisterUpsampleOps(Registry& r);
void RegisterSamplingOps(Registry& r);
void RegisterSortingOps(Registry& r);
void RegisterScanOps(Registry& r);
void RegisterScatterReduceOps(Registry& r);
void RegisterSpecialOps(Registry& r);
void RegisterTrigonometricOps(Registry& r);  // trigonometric.cc: sin, cos, tan
void RegisterPolynomialOps(Registry& r);
void RegisterBesselOps(Registry& r);
void RegisterIncompleteGammaOps(Registry& r);
void RegisterCtcLossOps(Registry& r);
void RegisterAttentionOps(Registry& r);
void RegisterSegmentReduceOps(Registry& r);
void RegisterEmbeddingBagOps(Registry& r);
void RegisterComplexOps(Registry& r);  // after the others: it wraps some of their entries
void RegisterForeachOps(Registry& r);  // called last: it pairs with ops registered before it

}  // namespace torch_pjrt::lowering
