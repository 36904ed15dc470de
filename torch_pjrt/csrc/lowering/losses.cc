// Pointwise regression losses with their backward ops: smooth L1, Huber. Formulas follow torch's
// CPU kernels (aten/src/ATen/native/cpu/PointwiseOpsKernel.cpp), computed in the op-math type;
// the reduction is torch's apply_loss_reduction (mean of nothing is NaN).
#include "lowering/lowering.h"
#include "lowering/pointwise_util.h"

namespace torch_pjrt::lowering {

namespace {

using namespace pw;

constexpr int64_t kNone = 0, kMean = 1;

// The per-element loss reduced as `reduction` asks, in the output's dtype.
Val ApplyReduction(LowerCtx& c, const Val& loss, int64_t reduction) {
  Emitter& e = c.e;
  if (reduction == kNone) return Done(c, loss);
  Val s = SumDims(e, loss, AllDims(loss.rank()), loss.dtype());
  if (reduction == kMean) {
    s = loss.numel() == 0 ? e.Scalar(NAN, loss.dtype())
                          : Div(e, s, e.Scalar(static_cast<double>(loss.numel()), loss.dtype()));
  }
  return Done(c, s);
}

// |self - target| at their broadcast shape, with the dims and type the loss is computed in.
struct LossInputs {
  Val diff;  // self - target
  ElementType t;
};
LossInputs Difference(LowerCtx& c, size_t self, size_t target, const Dims& dims) {
  ElementType t = Opmath(c.out().dtype);
  return {Sub(c.e, ArgAt(c, self, t, dims), ArgAt(c, target, t, dims)), t};
}
Dims BroadcastDims(LowerCtx& c, size_t a, size_t b) {
  Dims x = c.tensor(a).dims(), y = c.tensor(b).dims();
  if (x.size() < y.size()) std::swap(x, y);
  size_t lead = x.size() - y.size();
  for (size_t i = 0; i < y.size(); ++i) {
    if (x[lead + i] == 1) x[lead + i] = y[i];
  }
  return x;
}

// smooth_l1_loss(self, target, reduction=1, beta=1.0): 0.5 z^2 / beta below beta, z - beta / 2
// above (z = |self - target|); beta = 0 is the L1 loss.
std::vector<Val> LowerSmoothL1Loss(LowerCtx& c) {
  Emitter& e = c.e;
  LossInputs in = Difference(c, 0, 1, BroadcastDims(c, 0, 1));
  Val z = Abs(e, in.diff);
  double beta = c.is_none(3) ? 1.0 : c.double_arg(3);
  Val loss = z;
  if (beta != 0) {
    Val b = K(e, beta, z);
    loss = Sel(e, Cmp(e, "LT", z, b), Div(e, Mul(e, Mul(e, K(e, 0.5, z), z), z), b),
               Sub(e, z, K(e, 0.5 * beta, z)));
  }
  return {ApplyReduction(c, loss, c.int_arg(2, kMean))};
}

// huber_loss(self, target, reduction=1, delta=1.0): 0.5 z^2 below delta, delta (z - delta / 2)
// above.
std::vector<Val> LowerHuberLoss(LowerCtx& c) {
  Emitter& e = c.e;
  LossInputs in = Difference(c, 0, 1, BroadcastDims(c, 0, 1));
  Val z = Abs(e, in.diff);
  double delta = c.is_none(3) ? 1.0 : c.double_arg(3);
  Val d = K(e, delta, z);
  Val loss = Sel(e, Cmp(e, "LT", z, d), Mul(e, Mul(e, K(e, 0.5, z), z), z),
                 Mul(e, d, Sub(e, z, K(e, 0.5 * delta, z))));
  return {ApplyReduction(c, loss, c.int_arg(2, kMean))};
}

// The backward of both: -norm * g * bound at or below -bound, norm * g * bound at or above it,
// norm * x * g * inner_scale between (norm = 1 / numel for a mean). For smooth L1 the outer
// slope is 1 and the inner one 1 / beta; for Huber delta and 1.
Val PiecewiseLinearBackward(LowerCtx& c, double bound, double outer_slope, double inner_scale) {
  Emitter& e = c.e;
  Dims dims = c.out().dims;
  LossInputs in = Difference(c, 1, 2, dims);
  Val x = in.diff;
  Val g = ArgAt(c, 0, in.t, dims);
  double norm = c.int_arg(3) == kMean ? 1.0 / static_cast<double>(std::max<int64_t>(x.numel(), 1)) : 1.0;
  Val n = K(e, norm, x);
  Val outer = Mul(e, Mul(e, n, g), K(e, outer_slope, x));
  Val inner = Mul(e, Mul(e, n, x), g);
  if (inner_scale != 1.0) inner = Div(e, inner, K(e, 1.0 / inner_scale, x));
  Val below = Cmp(e, "LE", x, K(e, -bound, x)), above = Cmp(e, "GE", x, K(e, bound, x));
  return Done(c, Sel(e, below, Neg(e, outer), Sel(e, above, outer, inner)));
}

// smooth_l1_loss_backward(grad_output, self, target, reduction, beta)
std::vector<Val> LowerSmoothL1LossBackward(LowerCtx& c) {
  double beta = c.double_arg(4);
  return {PiecewiseLinearBackward(c, beta, 1.0, beta == 0 ? 1.0 : 1.0 / beta)};
}

// huber_loss_backward(grad_output, self, target, reduction, delta)
std::vector<Val> LowerHuberLossBackward(LowerCtx& c) {
  double delta = c.double_arg(4);
  return {PiecewiseLinearBackward(c, delta, delta, 1.0)};
}

}  // namespace

void RegisterLossOps(Registry& r) {
  r.Add("smooth_l1_loss", LowerSmoothL1Loss);
  r.Add("smooth_l1_loss_backward", LowerSmoothL1LossBackward);
  r.Add("huber_loss", LowerHuberLoss);
  r.Add("huber_loss_backward", LowerHuberLossBackward);
}

}  // namespace torch_pjrt::lowering
