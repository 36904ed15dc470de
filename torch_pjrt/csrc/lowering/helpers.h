// Small pieces shared by the lowering files: torch's type promotion, opmath types, dim handling.
#pragma once

#include <initializer_list>
#include <vector>

#include "lowering/lowering.h"

namespace torch_pjrt::lowering {

// torch.promote_types.
ElementType PromoteTypes(ElementType a, ElementType b);
// The type torch computes in for `t`: float for half types, `t` otherwise.
ElementType Opmath(ElementType t);
// torch.result_type over the tensor/scalar arguments at `arg_indices` (dimensioned tensors win
// over 0-d tensors, which win over Python numbers, within a category).
ElementType ResultType(const LowerCtx& c, std::initializer_list<size_t> arg_indices);

// How a binary op's CPU kernel reads a 0-d tensor or Python number (a CPU scalar) when the common
// dtype is float16 or bfloat16. TensorIterator casts every input to the common dtype first, CPU
// scalars included, so bfloat16 -9984 + 10000.0 is 0 and x % 0.1003 divides by 0.10009765625.
// mul, div and floor_divide read their second operand as given (TensorIterator's
// original_scalar_value), which is what the other dtypes see in their compute type anyway.
enum class ScalarRead { kAsGiven, kInCommonDtype };

// Argument i of an op over the arguments `operands` in the compute type `t`, as TensorIterator
// reads it: a dimensioned tensor is cast to the op's common dtype first (an int64 9e18 beside
// float16 is inf there, not float32's 9e18); a CPU scalar as `scalars` says; inputs of the
// common dtype and bools are converted to `t` directly.
Val ThroughCommonDtype(LowerCtx& c, size_t i, ElementType t, ScalarRead scalars = ScalarRead::kAsGiven,
                       std::initializer_list<size_t> operands = {0, 1});

// An operand of a TensorIterator op (remainder, atan2, pow, xlogy, ...) as its CPU kernel reads
// it: through the common dtype, CPU scalars included (see ScalarRead).
inline Val Operand(LowerCtx& c, size_t i, ElementType t, std::initializer_list<size_t> operands = {0, 1}) {
  return ThroughCommonDtype(c, i, t, ScalarRead::kInCommonDtype, operands);
}

// v as a Python number reaches a float16 or bfloat16 CPU kernel that reads it in that type
// (c10's Scalar::to<Half>, through float, rounded to nearest even); other types: v.
double RoundedTo(double v, ElementType t);

// v rounded to the half type t and back to v's type: the steps that a half type's CPU kernel
// computes in scalar_t (c10's std::log overload returns the type; Vectorized<BFloat16> and
// c10::Half arithmetic round after each operation). v itself for other types.
Val RoundedTo(Emitter& e, const Val& v, ElementType t);

// c10::div_floor_floating, Python's a // b for floats, in a's type; every step rounded to
// `steps` where that is a half type (see RoundedTo).
Val FloorDivFloat(Emitter& e, const Val& a, const Val& b, ElementType steps);

// What the steps of torch's floor and trunc division round to (div_floor_kernel, div_trunc_kernel):
// a half type's own scalar_t math rounds each step, unless the divisor (argument `divisor`) is a
// single value, which those kernels read as given and divide by in float (the output's dtype or
// its compute type).
ElementType DivisionSteps(const LowerCtx& c, size_t divisor);

// Wraps a negative dim; rank 0 tensors accept dims 0 and -1.
int64_t NormDim(int64_t dim, int64_t rank);
// Normalized, sorted dims; an empty list means every dim (torch's reduction convention).
Dims NormDims(const Dims& dims, int64_t rank, bool empty_means_all = true);

// Broadcasts (numpy rules) and converts `v` to `dims` and `t`.
// x with denormals replaced by zeros of the same sign, on the bits (float32 and float64; other
// types as they are): what XLA:CPU's arithmetic, which runs with denormals-are-zero, reads them as.
Val FlushDenormals(Emitter& e, const Val& x);
Val Coerce(Emitter& e, const Val& v, const Dims& dims, ElementType t);
inline Val Coerce(Emitter& e, const Val& v, const TensorType& t) { return Coerce(e, v, t.dims, t.dtype); }

// Wraps negative integer indices into [0, size), as int64.
Val WrapNegative(Emitter& e, const Val& index, int64_t size);
// Full coordinates [..., rank] for a gather or scatter along `dim`: `index` there (negatives
// wrapped), iota elsewhere.
Val DimIndices(Emitter& e, const Val& index, int64_t dim, int64_t rank, int64_t size);
// x.gather(dim, index): index has x's rank (its sizes may be smaller); negatives wrap.
Val GatherAlong(Emitter& e, const Val& x, const Val& index, int64_t dim);

// Keeps reduced dims as size 1 (keepdim=True) by reshaping.
Val KeepDims(Emitter& e, const Val& reduced, const Dims& input_dims, const Dims& reduced_dims);

// amax/amin of x over `dims` (any/all for bool), NaN where a reduced element is NaN.
Val ReduceMax(Emitter& e, const Val& x, const Dims& dims, bool max);
// The int64 index along `dim` (removed) of the first largest (smallest) element, a NaN counting
// as larger (smaller) than everything, as torch's argmax/argmin.
Val FirstExtremeIndex(Emitter& e, const Val& x, int64_t dim, bool max);

// Smallest/largest value of a type, used as reduction identities (+-inf for floats).
double LowestValue(ElementType t);
double HighestValue(ElementType t);

// Largest finite value of a floating type.
double HighestFinite(ElementType t);

// Whether each element of float `v` is finite: |v| < inf, false for NaN and +-inf.
Val IsFinite(Emitter& e, const Val& v);

// Sum of `x` over `dims` accumulated in `acc` type.
Val SumDims(Emitter& e, const Val& x, const Dims& dims, ElementType acc);

// The input of a reduction or scan with a result dtype (sum, nansum, prod, cumsum, cumprod; their
// dtype= or out=) as torch's CPU kernel reads it: cast to the result dtype first
// (make_reduction_from_out_ty, self.toType(dtype)), so a float32 value rounds to a float16
// result's precision, or overflows to inf there, before it is accumulated in float. (mean does
// not: its half types sum their input in float.)
Val InResultDtype(Emitter& e, const Val& x, ElementType result);
// rows[i, :] = table[index[i], :] for table [V, D] and index [N] (s64).
Val TakeRows(Emitter& e, const Val& table, const Val& index);
// The p-norm over `dims` of non-negative `magnitudes` (|x|), in their type: ord inf / -inf is
// the max / min, 0 counts non-zeros, 1 and 2 are sums, anything else (sum a^p)^(1/p).
Val PNorm(Emitter& e, const Val& magnitudes, double ord, const Dims& dims);
// Mean of `x` (already of type `acc`) over `dims` as the sum of x / n, which cannot overflow where
// the sum of x would (torch's CPU statistics accumulate in double or by Welford's method: the mean
// of {3e38, 3e38} is finite there).
Val ScaledMean(Emitter& e, const Val& x, const Dims& dims);

// Row t (a 0-d s64 value) of a [T, N, S] array, as [N, S]; and x with row t replaced: the
// per-step reads and writes of a stablehlo.while over time.
Val Row(Emitter& e, const Val& x, const Val& t);
Val WithRow(Emitter& e, const Val& x, const Val& row, const Val& t);

inline std::vector<Val> One(const Val& v) { return {v}; }

}  // namespace torch_pjrt::lowering
