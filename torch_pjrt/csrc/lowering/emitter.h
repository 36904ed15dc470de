// Builds the text of one StableHLO module (`func.func @main`) op by op. Lowering functions call
// these helpers; nothing here knows about ATen or PJRT.
#pragma once

#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/dtype.h"
#include "common/small_vec.h"

namespace torch_pjrt::lowering {

struct TensorType {
  ElementType dtype = ElementType::kInvalid;
  Dims dims;
  bool operator==(const TensorType& o) const { return dtype == o.dtype && dims == o.dims; }
};

// An SSA value of the module being built.
struct Val {
  int32_t id = -1;   // >= 0: %v<id>; for a parameter: %arg<id>
  int32_t sub = -1;  // result index of a multi-result op (%v<id>#<sub>)
  bool is_param = false;
  TensorType type;

  bool valid() const { return id >= 0; }
  ElementType dtype() const { return type.dtype; }
  const Dims& dims() const { return type.dims; }
  int64_t rank() const { return static_cast<int64_t>(type.dims.size()); }
  int64_t numel() const { return NumElements(type.dims); }
};

std::string TypeString(const TensorType& t);
inline std::string TypeString(const Val& v) { return TypeString(v.type); }

// What the target hardware prefers, from the active sub-plugin's capabilities. Lowerings read
// these instead of checking which chip they run on.
struct TargetOptions {
  // Gathers and scatters are fast. When false, row lookups (index_select, embedding backward)
  // become one-hot matmuls, which is what matrix units run well.
  bool dense_gather = true;
  // StableHLO precision of float dots and convolutions ("DEFAULT", "HIGH", "HIGHEST"); empty
  // leaves the attribute out (the compiler's default).
  std::string matmul_precision;
  // The compiler runs a 2-D dot whose right operand is contracted along its minor dimension
  // (x @ w.t(), every nn.Linear) well. When false, such a dot with the larger right operand is
  // emitted as (w @ x.t()).t(), the transpose kept apart by an optimization barrier.
  bool fast_transposed_matmul = true;
  // The compiler's maximum/minimum propagate NaN as StableHLO specifies. When false (XLA:CPU with
  // its fast min/max, which is 3-7x faster for reductions and relu), the emitter selects the NaN.
  bool nan_propagating_min_max = true;
  // The compiler's reductions run at memory speed. When false (XLA:CPU), a long float sum over
  // trailing dimensions becomes a dot with a ones vector, and a reduction over leading
  // dimensions gets its operand behind an optimization barrier (Emitter::RawReduce).
  bool fast_reductions = true;
  // The compiler computes float32 sin, cos, tan, atan2, pow, remainder and log1p in vectorized code. When
  // false (XLA:CPU, which calls libm per element), the lowering computes them in arithmetic it
  // vectorizes: float_math.h, trigonometric.cc, Emitter::Log1pFromLog.
  bool fast_transcendentals = true;
  // Device memory is host memory and torch's CPU kernels may run on it inside the program
  // (host_kernels/): float32 convolutions become custom calls to ATen's convolution.
  bool host_kernels = false;
};

class Emitter {
 public:
  explicit Emitter(TargetOptions target = {});
  const TargetOptions& target() const { return target_; }

  // ---- module structure
  Val Parameter(const TensorType& t);
  // Marks a 1-D parameter whose reshapes have flat forms (see FlatForm): a storage the program
  // overwrites, such as an optimizer's parameters and state.
  void MarkFlatSource(const Val& param);
  // Attribute dictionary entries for parameter `index`, e.g. "tf.aliasing_output = 0 : i32".
  void SetParameterAttr(int index, std::string attr);
  // The whole module, returning `results` from @main.
  std::string Finish(const std::vector<Val>& results);
  size_t num_ops() const { return num_ops_; }
  // The program's arithmetic, roughly: the elements of every value it computes, where a dot or a
  // convolution counts its multiply-adds. What the runtime sizes a program by (which client runs
  // it, runtime::CompileProgram).
  int64_t work() const { return work_; }

  // ---- constants
  Val Scalar(double value, ElementType t);            // 0-d constant
  Val Full(double value, const TensorType& t);        // splat constant
  Val Iota(const TensorType& t, int64_t dim);
  Val ScalarLike(double value, const Val& like) { return Full(value, like.type); }

  // ---- elementwise
  Val Unary(std::string_view op, const Val& x);  // op without the "stablehlo." prefix
  Val Binary(std::string_view op, const Val& a, const Val& b);  // operands of equal type
  Val Compare(std::string_view direction, const Val& a, const Val& b);  // EQ NE LT LE GT GE
  Val Select(const Val& pred, const Val& on_true, const Val& on_false);
  Val Clamp(const Val& lo, const Val& x, const Val& hi);
  Val Convert(const Val& x, ElementType t);  // no-op when already `t`
  Val BitcastConvert(const Val& x, const TensorType& t);

  // ---- shape and layout
  Val Reshape(const Val& x, const Dims& dims);  // no-op when dims are unchanged
  Val BroadcastInDim(const Val& x, const Dims& out_dims, const Dims& mapping);
  Val BroadcastTo(const Val& x, const Dims& out_dims);  // numpy rules (trailing alignment)
  Val Transpose(const Val& x, const Dims& perm);        // no-op for the identity
  Val OptimizationBarrier(const Val& x);  // keeps the compiler from folding across it
  Val Slice(const Val& x, const Dims& start, const Dims& limit, const Dims& strides);
  Val SliceDim(const Val& x, int64_t dim, int64_t start, int64_t limit, int64_t stride = 1);
  Val Concatenate(const std::vector<Val>& xs, int64_t dim);
  Val Pad(const Val& x, const Val& value, const Dims& lo, const Dims& hi, const Dims& interior);
  Val Reverse(const Val& x, const Dims& dims);
  Val DynamicSlice(const Val& x, const std::vector<Val>& starts, const Dims& sizes);
  Val DynamicUpdateSlice(const Val& x, const Val& update, const std::vector<Val>& starts);

  // ---- compute
  // `precision` overrides the target's matmul precision (one-hot dots must be exact: "HIGHEST").
  Val DotGeneral(const Val& a, const Val& b, const Dims& batch_a, const Dims& batch_b,
                 const Dims& contract_a, const Dims& contract_b, ElementType out,
                 std::string_view precision = {});
  // Single-operand reduction whose body is one binary op ("add", "maximum", "and", ...).
  Val Reduce(const Val& x, const Val& init, const Dims& dims, std::string_view op);

  // Body of a region: receives the block arguments, emits ops, returns the values to yield.
  using RegionBody = std::function<std::vector<Val>(Emitter&, const std::vector<Val>&)>;
  // Variadic reduce; block arguments are (acc_0..acc_n-1, x_0..x_n-1), each 0-d.
  std::vector<Val> ReduceVariadic(const std::vector<Val>& xs, const std::vector<Val>& inits,
                                  const Dims& dims, const RegionBody& body);
  // Variadic reduce_window; padding is [rank][2] (lo, hi).
  std::vector<Val> ReduceWindow(const std::vector<Val>& xs, const std::vector<Val>& inits,
                                const Dims& window, const Dims& strides, const Dims& base_dilation,
                                const Dims& window_dilation,
                                const std::vector<std::pair<int64_t, int64_t>>& padding,
                                const RegionBody& body);
  struct ConvDims {
    // Text of dim_numbers, e.g. "[b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1]".
    std::string layout;
    Dims stride, lhs_dilation, rhs_dilation;
    std::vector<std::pair<int64_t, int64_t>> padding;
    int64_t feature_group_count = 1;
    int64_t batch_group_count = 1;
  };
  Val Convolution(const Val& lhs, const Val& rhs, const ConvDims& dims, const TensorType& out);
  struct GatherDims {
    Dims offset_dims, collapsed_slice_dims, start_index_map, operand_batching_dims,
        start_indices_batching_dims;
    int64_t index_vector_dim = 0;
    Dims slice_sizes;
  };
  Val Gather(const Val& operand, const Val& indices, const GatherDims& dims, const TensorType& out);
  struct ScatterDims {
    Dims update_window_dims, inserted_window_dims, scatter_dims_to_operand_dims,
        input_batching_dims, scatter_indices_batching_dims;
    int64_t index_vector_dim = 0;
  };
  // `combine` is the body op ("add", "maximum", ...) or empty to replace with the update.
  Val Scatter(const Val& operand, const Val& indices, const Val& updates, const ScatterDims& dims,
              std::string_view combine);
  // Sort along `dim`; `body` gets (lhs_0, rhs_0, lhs_1, rhs_1, ...) and returns one i1.
  std::vector<Val> Sort(const std::vector<Val>& xs, int64_t dim, bool stable,
                        const RegionBody& body);
  // stablehlo.while over the loop-carried values `init`: `cond` gets them and returns one 0-d i1,
  // `body` gets them and returns their next values (same types).
  std::vector<Val> While(const std::vector<Val>& init, const RegionBody& cond, const RegionBody& body);
  // stablehlo.if on a 0-d i1: each branch (no block arguments; it reads values from outside)
  // returns values of the same types; only the taken branch runs.
  std::vector<Val> If(const Val& pred, const RegionBody& on_true, const RegionBody& on_false);
  // stablehlo.custom_call @target with a string backend_config, for calls the compiler expands
  // itself (XLA's "Qr", "Eigh", "ProductOfElementaryHouseholderReflectors").
  std::vector<Val> CustomCall(const std::string& target, const std::vector<Val>& operands,
                              const std::vector<TensorType>& results,
                              const std::string& backend_config = {});
  // ---- collectives across the replicas of a program, one group holding every replica
  // Marks the module as a program of `devices.size()` replicas, replica r on the job-wide device
  // devices[r]; every collective of one module must name the same devices (throws otherwise).
  void SetReplicaDevices(const Dims& devices);
  const Dims& replica_devices() const { return replica_devices_; }
  // `op` is the combining binary op, as in Reduce ("add", "maximum", "and", ...).
  Val AllReduce(const Val& x, std::string_view op);
  Val AllGather(const Val& x, int64_t dim);  // concatenates the replicas' x along `dim`
  Val ReduceScatter(const Val& x, int64_t dim, std::string_view op);  // replica r keeps block r

  // THREE_FRY random bits: returns (new_state, bits of `type`).
  std::pair<Val, Val> RngBitGenerator(const Val& state, const TensorType& type);

  // A typed FFI custom call (api_version 4); `attrs` is the attribute dictionary's body, e.g.
  // "ta = 0 : i64, tb = 1 : i64".
  std::vector<Val> FfiCall(const std::string& target, const std::vector<Val>& operands,
                           const std::vector<TensorType>& results, const std::string& attrs);
  // The same, with each operand's and result's memory layout (XLA's minor-to-major dimension
  // order, one per value) fixed: the handler reads and writes them so.
  std::vector<Val> FfiCall(const std::string& target, const std::vector<Val>& operands,
                           const std::vector<TensorType>& results, const std::string& attrs,
                           const std::vector<Dims>& operand_layouts, const std::vector<Dims>& result_layouts);

  // Escape hatch for ops without a helper: `text` is everything after "= " up to (not including)
  // the trailing type signature, e.g. "stablehlo.cbrt %v3"; `signature` is the type part.
  Val Raw(const std::string& text, const std::string& signature, const TensorType& result);
  // Name of a value in the text ("%v3", "%arg0", "%v5#1").
  std::string Name(const Val& v) const;

 private:
  Val NewValue(const TensorType& t);
  std::vector<Val> NewResults(const std::vector<TensorType>& types, std::string* lhs);
  void Line(const std::string& s);
  std::string Block(const std::vector<TensorType>& arg_types, const RegionBody& body);
  std::string ReplicaGroupsAttr() const;
  // stablehlo.custom_call with the attribute dictionary's body `attributes`.
  std::vector<Val> EmitCustomCall(const std::string& target, const std::vector<Val>& operands,
                                  const std::vector<TensorType>& results, const std::string& attributes);
  std::string CombinerBlock(ElementType t, std::string_view op);

  Val EmitDotGeneral(const Val& a, const Val& b, const Dims& batch_a, const Dims& batch_b,
                     const Dims& contract_a, const Dims& contract_b, ElementType out,
                     std::string_view precision);
  // A float sum over x's trailing dims as a dot with ones (fast_reductions false), else an
  // invalid Val.
  Val RowSumAsDot(const Val& x, const Val& init, const Dims& dims);
  // A float sum of a whole vector in two stages, the first a dot (fast_reductions false), else
  // an invalid Val.
  Val SumOfOneRow(const Val& row, const Val& init, const Dims& kept);
  // The operand of a 2-D transpose emitted by this emitter (invalid Val if `v` is not one).
  Val TransposeSource(const Val& v) const;
  // The precision attribute's value for a dot/convolution on `operand_type` ("" for none).
  std::string_view PrecisionFor(ElementType operand_type, std::string_view override_precision) const;

  // Flat forms (docs/design.md, "Flat storages"): a value of rank > 1 that is a reshape of a flat
  // source (MarkFlatSource), or the result of an elementwise op emitted in 1-D, has that 1-D
  // value as its flat form; a splat constant or a broadcast scalar of rank > 1 has a 1-D one made
  // when asked for. An elementwise op with an operand that has a flat form from a source is
  // emitted in 1-D, its other operands reshaped, so that an in-place update of storages (an
  // optimizer step) compiles to 1-D loops, which XLA:CPU vectorizes whatever the tensors'
  // trailing dims, and its results share one shape (XLA fuses multi-output loops only then).
  static int64_t FlatKey(const Val& v);
  bool FlatForm(const Val& v, Val* flat);
  // The operands' flat forms, or an empty vector where the op stays in its own shape.
  std::vector<Val> FlatOperands(std::initializer_list<Val> operands);
  // `flat` (a 1-D result) as a value of `dims`, with `flat` as its flat form.
  Val Unflatten(const Val& flat, const Dims& dims);
  bool NeedsExplicitNan(std::string_view op, ElementType t) const;
  Val NanPropagating(const Val& m, const Val& a, const Val& b);
  bool IsNonNanConstant(const Val& v) const;
  Val RawBinary(std::string_view op, const Val& a, const Val& b);
  Val RawUnary(std::string_view op, const Val& x);
  Val LogOfFoldable(const Val& x);
  Val Log1pFromLog(const Val& x);
  Val ExpPassingNaN(std::string_view op, const Val& x);
  Val ReduceRows(const Val& x, const Val& init, const Dims& dims, std::string_view op);
  Val RawReduce(const Val& x, const Val& init, const Dims& dims, std::string_view op);
  Val EmitReduce(const Val& operand, const Val& init, const Dims& reduced, std::string_view op);
  TargetOptions target_;
  std::unordered_set<int> non_nan_constants_;  // ids of constants that are not NaN
  std::unordered_map<int32_t, Val> transposed_2d_;  // result id -> operand, for DotGeneral
  std::unordered_set<int32_t> log_foldable_;  // float power / exponential results (LogOfFoldable)
  std::unordered_set<int64_t> flat_values_;            // FlatKeys of flat sources and 1-D results
  std::unordered_map<int64_t, Val> flat_forms_;        // FlatKey -> the 1-D value it reshapes
  std::unordered_map<int64_t, double> flat_splats_;    // FlatKey -> a splat constant's value
  std::unordered_map<int64_t, Val> flat_broadcasts_;   // FlatKey -> the one-element value broadcast
  std::string body_;
  std::vector<TensorType> params_;
  Dims replica_devices_;  // empty: an ordinary single-replica program
  std::vector<std::string> param_attrs_;
  int32_t next_id_ = 0;
  size_t num_ops_ = 0;
  int64_t work_ = 0;
};

// Formatting helpers shared with the lowerings.
std::string DimsString(const Dims& d);           // "[1, 2, 3]"
std::string ArrayAttr(const Dims& d);            // "array<i64: 1, 2, 3>"
std::string ConstantLiteral(double value, ElementType t);  // text inside dense<...>

}  // namespace torch_pjrt::lowering
