// Pieces shared by the FFT, complex-number and linear-algebra lowerings (fft.cc, complex.cc,
// linalg_*.cc): complex parts, conversions that understand complex types, and batched matrix
// helpers over the two innermost dims.
#pragma once

#include "lowering/helpers.h"

namespace torch_pjrt::lowering {

// f32 for complex64, f64 for complex128; real types map to themselves.
ElementType ComplexPartType(ElementType t);
// complex128 for f64 (and complex128), complex64 otherwise.
ElementType ComplexTypeOf(ElementType t);

Val RealPart(Emitter& e, const Val& x);  // real types: x itself
Val ImagPart(Emitter& e, const Val& x);  // real types: zeros
Val MakeComplex(Emitter& e, const Val& re, const Val& im);  // re, im of the same real type
Val Conj(Emitter& e, const Val& x);       // identity for real types
// |x| as torch.abs computes it; real-typed for complex x (C's hypot of the parts).
Val Magnitude(Emitter& e, const Val& x);
// Element type conversion with torch's complex rules: real -> complex gets a zero imaginary
// part, complex -> real keeps the real part (XLA rejects a complex-to-real convert).
Val ConvertTo(Emitter& e, const Val& x, ElementType t);

// ---- matrices: the two innermost dims of a batch [..., m, n]
Val MatrixTranspose(Emitter& e, const Val& x);
Val Adjoint(Emitter& e, const Val& x);  // conjugate transpose
// [..., m, k] @ [..., k, n] (equal batch dims), accumulated in the operands' type at HIGHEST
// precision.
Val BatchMatmul(Emitter& e, const Val& a, const Val& b);
// Identity matrices of type t ([..., n, n]).
Val Identity(Emitter& e, const TensorType& t);
// The diagonal [..., n] of [..., n, n].
Val Diagonal(Emitter& e, const Val& x);
// Batch dims of a [..., m, n] value.
Dims BatchDims(const Val& x);
// Keeps the lower (or upper) triangle of [..., m, n] (diagonal offset k as in torch.tril), zeros
// elsewhere.
Val Triangle(Emitter& e, const Val& x, bool lower, int64_t k = 0);
// A 0-d s64 or s32 constant / value helpers for loops.
Val IndexScalar(Emitter& e, int64_t v);

}  // namespace torch_pjrt::lowering

namespace torch_pjrt::lowering {

// ---- batched factorizations shared by the linalg files (linalg_decomp.cc)

// [..., m, n] -> [B, m, n] with B the product of the batch dims (B = 1 for a plain matrix).
Val FlattenBatch(Emitter& e, const Val& x);
// stablehlo.triangular_solve: op(a) x = b (left) or x op(a) = b; `transpose` is "NO_TRANSPOSE",
// "TRANSPOSE" or "ADJOINT". a and b have equal batch dims. Only a's `lower` triangle is read.
Val TriangularSolve(Emitter& e, const Val& a, const Val& b, bool left, bool lower, bool unit_diagonal,
                    const char* transpose);

// LU factorization with partial pivoting (LAPACK getrf's pivot choice) of a [B, m, n] batch.
struct LuResult {
  Val lu;      // [B, m, n]: unit-lower L below the diagonal, U on and above it
  Val pivots;  // [B, min(m, n)] s32, 1-based row swaps (LAPACK ipiv)
  Val perm;    // [B, m] s64: row i of L U is row perm[i] of A
  Val info;    // [B] s32: 1-based index of the first zero pivot, 0 if none
};
LuResult LuFactor(Emitter& e, const Val& a, bool pivot = true);
// Solves A x = b (or A^H x = b) from A's LU: lu [B, n, n], perm [B, n], b [B, n, r].
Val LuSolve(Emitter& e, const Val& lu, const Val& perm, const Val& b, bool adjoint);
// out[b, i, :] = x[b, idx[b, i], :] for x [B, m, r] and idx [B, k] (s64).
Val GatherRows(Emitter& e, const Val& x, const Val& idx);
// The inverse of a batch of permutations [B, m] (s64).
Val InversePermutation(Emitter& e, const Val& perm);

}  // namespace torch_pjrt::lowering
