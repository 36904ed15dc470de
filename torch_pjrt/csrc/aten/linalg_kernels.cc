// Linear-algebra ops whose results depend on their input's memory layout, written as
// compositions of lowered ops instead of lowerings.
//
// torch's CPU kernels of _linalg_det and _linalg_slogdet factor A^H instead of A when A is a
// contiguous real matrix (it is then F-contiguous for LAPACK), and return that LU and its pivots;
// their backward formulas read the same condition from A's strides to know which LU they received.
// A lowering only sees values, so these kernels make the choice here, like BatchLinearAlgebra.cpp,
// and run linalg_lu_factor_ex (lowered) and elementwise ops on the result.
//
// cholesky (the deprecated op) is what torch's CPU kernel computes, from lowered parts:
// linalg_cholesky_ex and the error check that reads `info` (a sync, as linalg.cholesky's).
#include <ATen/core/Tensor.h>
#include <ATen/ops/_linalg_check_errors.h>
#include <ATen/ops/linalg_cholesky_ex.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/linalg_lu_factor_ex.h>
#include <ATen/ops/prod.h>
#include <ATen/ops/sgn.h>
#include <ATen/ops/sum.h>
#include <torch/library.h>

#include <tuple>

#include "aten/kernel_util.h"

namespace torch_pjrt::aten {

namespace {

bool FactorTransposed(const at::Tensor& A) { return A.is_contiguous() && !A.is_complex(); }

// (-1)^(number of row swaps) of LAPACK pivots, as int64.
at::Tensor PermutationSign(const at::Tensor& pivots) {
  at::Tensor swaps = at::arange(1, pivots.size(-1) + 1, pivots.options()).ne(pivots);
  at::Tensor count = swaps.sum(-1, /*keepdim=*/false, at::kLong);
  // 1 - 2 * (count mod 2)
  return count.bitwise_and(1).mul(-2).add(1);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> LinalgDet(const at::Tensor& A) {
  auto [LU, pivots, info] = at::linalg_lu_factor_ex(FactorTransposed(A) ? A.mH() : A);
  at::Tensor det = PermutationSign(pivots).mul(LU.diagonal(0, -2, -1).prod(-1));
  return {det.to(A.scalar_type()), LU, pivots};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> LinalgSlogdet(const at::Tensor& A) {
  auto [LU, pivots, info] = at::linalg_lu_factor_ex(FactorTransposed(A) ? A.mH() : A);
  at::Tensor diag = LU.diagonal(0, -2, -1);
  at::Tensor logabsdet = diag.abs().log().sum(-1);
  at::Tensor sign = diag.sgn().prod(-1).mul(PermutationSign(pivots)).to(A.scalar_type());
  return {sign, logabsdet, LU, pivots};
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> LinalgDetOut(const at::Tensor& A, at::Tensor& result,
                                                                at::Tensor& LU, at::Tensor& pivots) {
  auto r = LinalgDet(A);
  WriteOut(result, std::get<0>(r));
  WriteOut(LU, std::get<1>(r));
  WriteOut(pivots, std::get<2>(r));
  return {result, LU, pivots};
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&, at::Tensor&> LinalgSlogdetOut(
    const at::Tensor& A, at::Tensor& sign, at::Tensor& logabsdet, at::Tensor& LU, at::Tensor& pivots) {
  auto r = LinalgSlogdet(A);
  WriteOut(sign, std::get<0>(r));
  WriteOut(logabsdet, std::get<1>(r));
  WriteOut(LU, std::get<2>(r));
  WriteOut(pivots, std::get<3>(r));
  return {sign, logabsdet, LU, pivots};
}

at::Tensor Cholesky(const at::Tensor& self, bool upper) {
  auto [L, info] = at::linalg_cholesky_ex(self, upper, /*check_errors=*/false);
  at::_linalg_check_errors(info, "cholesky", /*is_matrix=*/self.dim() == 2);
  return L;
}

at::Tensor& CholeskyOut(const at::Tensor& self, bool upper, at::Tensor& out) {
  WriteOut(out, Cholesky(self, upper));
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_linalg_det", LinalgDet);
  m.impl("_linalg_det.result", LinalgDetOut);
  m.impl("_linalg_slogdet", LinalgSlogdet);
  m.impl("_linalg_slogdet.sign", LinalgSlogdetOut);
  m.impl("cholesky", Cholesky);
  m.impl("cholesky.out", CholeskyOut);
}

}  // namespace torch_pjrt::aten
