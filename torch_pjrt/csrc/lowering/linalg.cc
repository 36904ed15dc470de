// Matrix products: mm, addmm, bmm, baddbmm, mv, dot, and addr's outer product. Products
// accumulate in opmath (float for half types) through dot_general's result type.
#include "lowering/helpers.h"

namespace torch_pjrt::lowering {

namespace {

Val Dot(LowerCtx& c, const Val& a, const Val& b, const Dims& batch, const Dims& ca, const Dims& cb) {
  ElementType acc = Opmath(c.out().dtype);
  Val x = c.e.Convert(a, c.out().dtype), y = c.e.Convert(b, c.out().dtype);
  return c.e.DotGeneral(x, y, batch, batch, ca, cb, acc);
}

// beta * self + alpha * product; beta == 0 ignores self entirely (even NaNs), as torch does.
Val Accumulate(LowerCtx& c, const Val& product, size_t self_i, size_t beta_i, size_t alpha_i) {
  ElementType acc = product.dtype();
  Val r = product;
  double alpha = c.is_none(alpha_i) ? 1.0 : c.scalar_constant(alpha_i);
  double beta = c.is_none(beta_i) ? 1.0 : c.scalar_constant(beta_i);
  if (alpha != 1.0) r = c.e.Binary("multiply", r, c.e.Full(alpha, r.type));
  if (beta != 0.0) {
    Val self = Coerce(c.e, c.tensor(self_i), r.dims(), acc);
    if (beta != 1.0) self = c.e.Binary("multiply", self, c.e.Full(beta, r.type));
    r = c.e.Binary("add", self, r);
  }
  return c.e.Convert(r, c.out().dtype);
}

std::vector<Val> LowerMm(LowerCtx& c) {  // mm(self, mat2)
  return {c.e.Convert(Dot(c, c.tensor(0), c.tensor(1), {}, {1}, {0}), c.out().dtype)};
}
std::vector<Val> LowerAddmm(LowerCtx& c) {  // addmm(self, mat1, mat2, *, beta=1, alpha=1)
  return {Accumulate(c, Dot(c, c.tensor(1), c.tensor(2), {}, {1}, {0}), 0, 3, 4)};
}
std::vector<Val> LowerBmm(LowerCtx& c) {  // bmm(self, mat2)
  return {c.e.Convert(Dot(c, c.tensor(0), c.tensor(1), {0}, {2}, {1}), c.out().dtype)};
}
std::vector<Val> LowerBaddbmm(LowerCtx& c) {  // baddbmm(self, batch1, batch2, *, beta=1, alpha=1)
  return {Accumulate(c, Dot(c, c.tensor(1), c.tensor(2), {0}, {2}, {1}), 0, 3, 4)};
}
// addbmm(self, batch1, batch2, *, beta=1, alpha=1): the batch is contracted with k.
std::vector<Val> LowerAddbmm(LowerCtx& c) {
  return {Accumulate(c, Dot(c, c.tensor(1), c.tensor(2), {}, {0, 2}, {0, 1}), 0, 3, 4)};
}
std::vector<Val> LowerMv(LowerCtx& c) {  // mv(self, vec)
  return {c.e.Convert(Dot(c, c.tensor(0), c.tensor(1), {}, {1}, {0}), c.out().dtype)};
}
std::vector<Val> LowerAddmv(LowerCtx& c) {  // addmv(self, mat, vec, *, beta=1, alpha=1)
  return {Accumulate(c, Dot(c, c.tensor(1), c.tensor(2), {}, {1}, {0}), 0, 3, 4)};
}
std::vector<Val> LowerDot(LowerCtx& c) {  // dot(self, tensor)
  return {c.e.Convert(Dot(c, c.tensor(0), c.tensor(1), {}, {0}, {0}), c.out().dtype)};
}

// addr(self, vec1, vec2, *, beta=1, alpha=1): beta * self + alpha * outer(vec1, vec2), elementwise
// as CPU's kernel computes it (addr_kernel): (alpha * vec1) * vec2 + beta * self, with a half type's
// every step rounded to it (Vectorized<Half> arithmetic) and its alpha and beta read in it. torch's
// composite, alpha * (vec1 * vec2), differed from CPU in 10-20% of bfloat16 elements. beta == 0
// ignores self (NaNs too); bool is (beta and self) or (alpha and vec1 and vec2).
std::vector<Val> LowerAddr(LowerCtx& c) {
  Emitter& e = c.e;
  const TensorType& out = c.out();
  const ElementType t = Opmath(out.dtype);
  double alpha = c.is_none(4) ? 1.0 : RoundedTo(c.scalar_constant(4), out.dtype);
  double beta = c.is_none(3) ? 1.0 : RoundedTo(c.scalar_constant(3), out.dtype);
  auto step = [&](const Val& v) { return RoundedTo(e, v, out.dtype); };  // a no-op unless half
  Val v1 = Coerce(e, e.Reshape(c.tensor(1), {out.dims[0], 1}), out.dims, t);
  Val v2 = Coerce(e, e.Reshape(c.tensor(2), {1, out.dims[1]}), out.dims, t);
  if (t == ElementType::kBool) {
    Val r = alpha != 0 ? e.Binary("and", v1, v2) : e.Full(0, v1.type);
    if (beta != 0) r = e.Binary("or", r, Coerce(e, c.tensor(0), out));
    return {r};
  }
  Val r = step(e.Binary("multiply", step(e.Binary("multiply", e.Full(alpha, v1.type), v1)), v2));
  if (beta != 0) {
    Val self = step(e.Binary("multiply", e.Full(beta, v1.type), Coerce(e, c.tensor(0), out.dims, t)));
    r = step(e.Binary("add", r, self));
  }
  return {e.Convert(r, out.dtype)};
}

}  // namespace

void RegisterLinalgOps(Registry& r) {
  r.Add("mm", LowerMm);
  // beta and alpha decide whether `self` is read at all: structural.
  r.Add("addmm", LowerAddmm).structural_scalars = {3, 4};
  r.Add("bmm", LowerBmm);
  r.Add("baddbmm", LowerBaddbmm).structural_scalars = {3, 4};
  r.Add("addbmm", LowerAddbmm).structural_scalars = {3, 4};
  r.Add("mv", LowerMv);
  r.Add("addmv", LowerAddmv).structural_scalars = {3, 4};
  r.Add("dot", LowerDot);
  r.Add("addr", LowerAddr).structural_scalars = {3, 4};
}

}  // namespace torch_pjrt::lowering
