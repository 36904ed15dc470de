// Factory ops that produce values without tensor inputs. zeros/ones/full arrive as empty + fill_
// (fill lives in indexing.cc); random factories in random.cc.
#include "lowering/helpers.h"

namespace torch_pjrt::lowering {

namespace {

// arange.start_out(start, end, step=1, *, out): start + i * step, computed in double (int64 for
// integer outputs) like torch's CPU kernel. The bounds are structural: they decide the length.
std::vector<Val> LowerArange(LowerCtx& c) {
  const TensorType& out = c.out();
  ElementType t = out.dtype;
  ElementType acc = IsFloating(t) ? ElementType::kF64 : ElementType::kS64;
  TensorType ta{acc, out.dims};
  Val i = c.e.Convert(c.e.Iota(TensorType{ElementType::kS64, out.dims}, 0), acc);
  Val v = c.e.Binary("add", c.e.Full(c.scalar_constant(0), ta),
                     c.e.Binary("multiply", i, c.e.Full(c.scalar_constant(2), ta)));
  return {c.e.Convert(v, t)};
}

}  // namespace

void RegisterFactoryOps(Registry& r) {
  r.Add("arange.start_out", LowerArange).structural_scalars = {0, 1, 2};
}

}  // namespace torch_pjrt::lowering
