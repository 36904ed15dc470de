// Indexing and data movement: cat, index_select, gather, scatter, clone, fill.
#include "lowering/helpers.h"

namespace torch_pjrt::lowering {

namespace {

std::vector<Val> LowerClone(LowerCtx& c) { return {c.tensor(0)}; }  // clone(self, *, memory_format)

std::vector<Val> LowerFill(LowerCtx& c) {  // fill.Scalar / fill.Tensor(self, value)
  return {Coerce(c.e, c.scalar(1, c.out().dtype), c.out())};
}
std::vector<Val> LowerZero(LowerCtx& c) { return {c.e.Full(0, c.out())}; }  // zero(self)

}  // namespace

void RegisterIndexingOps(Registry& r) {
  r.Add("clone", LowerClone);
  r.Add("fill.Scalar", LowerFill);
  r.Add("fill.Tensor", LowerFill);
  r.Add("zero", LowerZero);
}

}  // namespace torch_pjrt::lowering
