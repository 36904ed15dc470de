// Losses with their backward ops: binary cross entropy, multi-class margin, smooth L1, Huber. Formulas follow torch's
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

// binary_cross_entropy(self, target, weight=None, reduction=1):
// (t - 1) max(log1p(-x), -100) - t max(log x, -100), times the weight. torch's CPU kernel raises
// for values outside [0, 1]; here the table's value_checks do (at the next sync point).
std::vector<Val> LowerBinaryCrossEntropy(LowerCtx& c) {
  Emitter& e = c.e;
  ElementType t = Opmath(c.out().dtype);
  Dims dims = c.tensor(0).dims();
  Val x = ArgAt(c, 0, t, dims), y = ArgAt(c, 1, t, dims);
  Val floor = K(e, -100, x);
  Val loss = Sub(e, Mul(e, Sub(e, y, K(e, 1, y)), Max(e, Log1p(e, Neg(e, x)), floor)),
                 Mul(e, y, Max(e, Log(e, x), floor)));
  if (c.is_tensor(2)) loss = Mul(e, loss, ArgAt(c, 2, t, dims));
  return {ApplyReduction(c, loss, c.int_arg(3, kMean))};
}

// binary_cross_entropy_backward(grad_output, self, target, weight=None, reduction=1):
// g (x - t) / max((1 - x) x, 1e-12), times the weight, over numel for a mean.
std::vector<Val> LowerBinaryCrossEntropyBackward(LowerCtx& c) {
  Emitter& e = c.e;
  ElementType t = Opmath(c.out().dtype);
  Dims dims = c.out().dims;
  Val g = ArgAt(c, 0, t, dims), x = ArgAt(c, 1, t, dims), y = ArgAt(c, 2, t, dims);
  Val denominator = Max(e, Mul(e, Sub(e, K(e, 1, x), x), x), K(e, 1e-12, x));
  Val grad = Div(e, Mul(e, g, Sub(e, x, y)), denominator);
  if (c.is_tensor(3)) grad = Mul(e, grad, ArgAt(c, 3, t, dims));
  if (c.int_arg(4, kMean) == kMean) grad = Div(e, grad, K(e, static_cast<double>(std::max<int64_t>(x.numel(), 1)), grad));
  return {Done(c, grad)};
}

// The pieces of a multi-class margin loss over self [N, C] (or [C], or 0-d) and class indices
// target [N]:
// the target class as a one-hot mask, the target's score and weight per sample, and the margin
// terms z = margin - x[target] + x[d] with where they count (z > 0, d != target).
struct MarginTerms {
  Val x, onehot, z, active, target_weight;  // [N, C]
  int64_t classes;
};
MarginTerms Margins(LowerCtx& c, size_t self_i, size_t target_i, size_t margin_i, size_t weight_i, ElementType t) {
  Emitter& e = c.e;
  Val x = e.Convert(c.tensor(self_i), t);
  if (x.rank() <= 1) x = e.Reshape(x, {1, x.numel()});  // one sample ([C] or a 0-d score)
  int64_t n = x.dims()[0], classes = x.dims()[1];
  Val target = e.Reshape(e.Convert(c.tensor(target_i), ElementType::kS64), {n});
  TensorType grid{ElementType::kS64, x.dims()};
  Val onehot = Cmp(e, "EQ", e.Iota(grid, 1), e.BroadcastInDim(target, x.dims(), {0}));
  auto row_pick = [&](const Val& v) {  // v [N, C] -> v[i, target_i] broadcast over C, NaN-safe
    Val picked = SumDims(e, Sel(e, onehot, v, K(e, 0, v)), {1}, t);
    return e.BroadcastInDim(picked, x.dims(), {0});
  };
  Val z = Add(e, Sub(e, e.BroadcastTo(c.scalar(margin_i, t), x.dims()), row_pick(x)), x);
  Val active = And(e, Cmp(e, "GT", z, K(e, 0, z)), Not(e, onehot));
  Val w = K(e, 1, x);
  if (c.is_tensor(weight_i)) w = row_pick(e.BroadcastInDim(e.Convert(c.tensor(weight_i), t), x.dims(), {1}));
  return {x, onehot, z, active, w, classes};
}

// multi_margin_loss(self, target, p=1, margin=1, weight=None, reduction=1): per sample
// sum over d != target of max(0, margin - x[target] + x[d])^p * weight[target], over C.
std::vector<Val> LowerMultiMarginLoss(LowerCtx& c) {
  Emitter& e = c.e;
  ElementType t = Opmath(c.out().dtype);
  MarginTerms m = Margins(c, 0, 1, 3, 4, t);
  Val h = c.scalar_constant(2) == 1 ? m.z : Mul(e, m.z, m.z);
  h = Mul(e, Sel(e, m.active, h, K(e, 0, h)), m.target_weight);
  Val per_sample = Div(e, SumDims(e, h, {1}, t), e.Full(static_cast<double>(m.classes), TensorType{t, {h.dims()[0]}}));
  int64_t reduction = c.int_arg(5, kMean);
  if (reduction == kNone) return {Done(c, e.Reshape(per_sample, c.out().dims))};
  return {ApplyReduction(c, per_sample, reduction)};
}

// multi_margin_loss_backward(grad_output, self, target, p, margin, weight, reduction): g = 1/C
// (1/(N C) for a mean); each counting term gives x[d] +h and x[target] -h, h = g (p = 1) or
// 2 g z, times weight[target] and the incoming gradient.
std::vector<Val> LowerMultiMarginLossBackward(LowerCtx& c) {
  Emitter& e = c.e;
  ElementType t = Opmath(c.out().dtype);
  MarginTerms m = Margins(c, 1, 2, 4, 5, t);
  int64_t n = m.x.dims()[0], reduction = c.int_arg(6, kMean);
  double g = 1.0 / static_cast<double>(m.classes * (reduction == kMean ? n : 1));
  Val h = c.scalar_constant(3) == 1 ? K(e, g, m.z) : Mul(e, K(e, 2 * g, m.z), m.z);
  h = Mul(e, Sel(e, m.active, h, K(e, 0, h)), m.target_weight);
  Val to_target = e.BroadcastInDim(SumDims(e, h, {1}, t), m.x.dims(), {0});
  Val grad = Sub(e, h, Sel(e, m.onehot, to_target, K(e, 0, h)));
  Val incoming = e.Convert(c.tensor(0), t);
  incoming = reduction == kNone ? e.BroadcastInDim(e.Reshape(incoming, {n}), m.x.dims(), {0})
                                : e.BroadcastTo(e.Reshape(incoming, {}), m.x.dims());
  return {Done(c, e.Reshape(Mul(e, grad, incoming), c.out().dims))};
}

// The terms of multilabel_margin_loss (self, target [, is_target]): x [N, C]; per (n, j) whether
// target j counts (it precedes the row's first negative entry) and which class it names; per
// (n, d) whether d is a target; per (n, j, d) the hinge z = 1 - x[target_j] + x[d] and whether it
// counts (j counts, d is not a target, z > 0).
struct MultilabelTerms {
  Val x, valid, names, is_target, z, active;
  int64_t frames, classes;
};
MultilabelTerms Multilabel(LowerCtx& c, size_t self_i, size_t target_i, int is_target_i, ElementType t) {
  Emitter& e = c.e;
  Val self = c.tensor(self_i);
  int64_t n = self.rank() == 2 ? self.dims()[0] : 1, classes = self.rank() == 0 ? 1 : self.dims().back();
  Val x = e.Reshape(e.Convert(self, t), {n, classes});
  Val target = e.Reshape(e.Convert(c.tensor(target_i), ElementType::kS64), {n, classes});
  // Negative entries so far along each row: a target counts while there are none.
  Val negative = e.Convert(Cmp(e, "LT", target, e.Full(0, target.type)), ElementType::kS64);
  auto add = [](Emitter& b, const std::vector<Val>& a) -> std::vector<Val> { return {b.Binary("add", a[0], a[1])}; };
  Val seen = e.ReduceWindow({negative}, {e.Scalar(0, ElementType::kS64)}, {1, classes}, {1, 1}, {1, 1}, {1, 1},
                            {{0, 0}, {classes - 1, 0}}, add)[0];
  Val valid = Cmp(e, "EQ", seen, e.Full(0, seen.type));
  Dims cube{n, classes, classes};  // [frame, target j, class d]
  Val class_d = e.Iota(TensorType{ElementType::kS64, cube}, 2);
  Val names = And(e, Cmp(e, "EQ", e.BroadcastInDim(target, cube, {0, 1}), class_d), e.BroadcastInDim(valid, cube, {0, 1}));
  Val is_target = is_target_i >= 0
      ? Cmp(e, "NE", e.Reshape(c.tensor(is_target_i), {n, classes}), e.Full(0, TensorType{c.tensor(is_target_i).dtype(), {n, classes}}))
      : e.Reduce(names, e.Scalar(0, ElementType::kBool), {1}, "or");
  Val x_d = e.BroadcastInDim(x, cube, {0, 2});
  Val x_target = SumDims(e, Sel(e, names, x_d, K(e, 0, x_d)), {2}, t);  // x[target_j], 0 where j does not count
  Val z = Add(e, Sub(e, K(e, 1, x_d), e.BroadcastInDim(x_target, cube, {0, 1})), x_d);
  Val active = And(e, And(e, e.BroadcastInDim(valid, cube, {0, 1}), Not(e, e.BroadcastInDim(is_target, cube, {0, 2}))),
                   Cmp(e, "GT", z, K(e, 0, z)));
  return {x, valid, names, is_target, z, active, n, classes};
}

// multilabel_margin_loss_forward(self, target, reduction) -> (output, is_target): per frame the
// sum of the counting hinges over C; the mean divides the total by N C as well. A 1-d input gives
// a 0-d output for every reduction, like the CPU kernel.
std::vector<Val> LowerMultilabelMarginLoss(LowerCtx& c) {
  Emitter& e = c.e;
  ElementType t = Opmath(c.out(0).dtype);
  MultilabelTerms m = Multilabel(c, 0, 1, -1, t);
  Val per_frame = SumDims(e, Sel(e, m.active, m.z, K(e, 0, m.z)), {1, 2}, t);
  per_frame = Div(e, per_frame, K(e, static_cast<double>(m.classes), per_frame));
  int64_t reduction = c.int_arg(2, kMean);
  Val is_target = e.Reshape(e.Convert(m.is_target, c.out(1).dtype), c.out(1).dims);
  if (reduction == kNone) return {Done(c, e.Reshape(per_frame, c.out(0).dims)), is_target};
  Val total = SumDims(e, per_frame, {0}, t);
  if (reduction == kMean) total = Div(e, total, K(e, static_cast<double>(m.frames), total));
  return {Done(c, total), is_target};
}

// multilabel_margin_loss_backward(grad_output, self, target, reduction, is_target): each counting
// hinge (n, j, d) adds g to x[d] and -g to x[target_j], g = 1/C (1/(N C) for a mean), times the
// incoming gradient (per frame without reduction).
std::vector<Val> LowerMultilabelMarginLossBackward(LowerCtx& c) {
  Emitter& e = c.e;
  ElementType t = Opmath(c.out().dtype);
  MultilabelTerms m = Multilabel(c, 1, 2, 4, t);
  int64_t reduction = c.int_arg(3, kMean);
  double g = 1.0 / static_cast<double>(m.classes * (reduction == kMean ? m.frames : 1));
  Val counts = e.Convert(m.active, t);
  Val as_class = SumDims(e, counts, {1}, t);                                   // [N, C]: hinges with d = k
  Val per_target = e.BroadcastInDim(SumDims(e, counts, {2}, t), counts.dims(), {0, 1});  // hinges of target j
  Val as_target = SumDims(e, Sel(e, m.names, per_target, K(e, 0, per_target)), {1}, t);
  Val grad = Mul(e, Sub(e, as_class, as_target), K(e, g, as_class));
  Val incoming = e.Convert(c.tensor(0), t);
  bool per_frame = reduction == kNone && incoming.rank() > 0;
  incoming = per_frame ? e.BroadcastInDim(e.Reshape(incoming, {m.frames}), grad.dims(), {0})
                       : e.BroadcastTo(e.Reshape(incoming, {}), grad.dims());
  return {Done(c, e.Reshape(Mul(e, grad, incoming), c.out().dims))};
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
// CPU's kernel writes into a tensor like self: the loss is computed in the common dtype and each
// element stored in self's (float32 for a float64 target), then reduced.
std::vector<Val> LowerHuberLoss(LowerCtx& c) {
  Emitter& e = c.e;
  Dims dims = BroadcastDims(c, 0, 1);
  ElementType t = Opmath(PromoteTypes(c.tensor(0).dtype(), c.tensor(1).dtype()));
  Val z = Abs(e, Sub(e, ArgAt(c, 0, t, dims), ArgAt(c, 1, t, dims)));
  double delta = c.is_none(3) ? 1.0 : c.double_arg(3);
  Val d = K(e, delta, z);
  Val loss = Sel(e, Cmp(e, "LT", z, d), Mul(e, Mul(e, K(e, 0.5, z), z), z),
                 Mul(e, d, Sub(e, z, K(e, 0.5 * delta, z))));
  loss = e.Convert(loss, c.out().dtype);
  return {ApplyReduction(c, e.Convert(loss, Opmath(c.out().dtype)), c.int_arg(2, kMean))};
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
  r.Add("binary_cross_entropy", LowerBinaryCrossEntropy).value_checks = {
      {0, CheckRule::kUnitInterval, "all elements of input should be between 0 and 1"},
      {1, CheckRule::kUnitInterval, "all elements of target should be between 0 and 1"}};
  r.Add("binary_cross_entropy_backward", LowerBinaryCrossEntropyBackward);
  // The target holds class indices: checked against the number of classes (self's last dim).
  IndexArgSpec classes{1, 0, -1, -1, false, IndexArgSpec::Bound::kLastDim, 0, "target out of range"};
  // p chooses the formula (1 or 2, torch's check): structural.
  OpLowering& margin = r.Add("multi_margin_loss", LowerMultiMarginLoss);
  margin.index_checks = {classes};
  margin.structural_scalars = {2};
  IndexArgSpec backward_classes{2, 1, -1, -1, false, IndexArgSpec::Bound::kLastDim, 0, "target out of range"};
  OpLowering& margin_backward = r.Add("multi_margin_loss_backward", LowerMultiMarginLossBackward);
  margin_backward.index_checks = {backward_classes};
  margin_backward.structural_scalars = {3};
  // Targets are classes or -1 (the end of a row's list).
  r.Add("multilabel_margin_loss_forward", LowerMultilabelMarginLoss).index_checks = {
      IndexArgSpec{1, 0, -1, -1, false, IndexArgSpec::Bound::kLastDim, -1, "argument #2 'target' is out of range"}};
  r.Add("multilabel_margin_loss_backward", LowerMultilabelMarginLossBackward).index_checks = {
      IndexArgSpec{2, 1, -1, -1, false, IndexArgSpec::Bound::kLastDim, -1, "argument #3 'target' is out of range"}};
  r.Add("smooth_l1_loss", LowerSmoothL1Loss);
  r.Add("smooth_l1_loss_backward", LowerSmoothL1LossBackward);
  r.Add("huber_loss", LowerHuberLoss);
  r.Add("huber_loss_backward", LowerHuberLossBackward);
}

}  // namespace torch_pjrt::lowering
