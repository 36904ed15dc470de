// CTC loss (Graves et al. 2006, in log space), as torch's CPU kernel computes it (LossCTC.cpp):
// pjrt::ctc_loss gives the negative log likelihood and log alpha, pjrt::ctc_loss_backward the
// gradient with respect to the log probabilities from log alpha and log beta. The ATen kernels
// (aten/ctc_loss.cc) pass the lengths as tensors, so a new set of lengths does not recompile;
// the longest target is an attribute (it sizes log alpha: [N, T, 2 L + 1]).
//
// Per batch element b the extended target is l' = (blank, t_1, blank, t_2, ..., blank), of
// length 2 L_b + 1 (padded with blanks to 2 L + 1); the recursions run over time as one
// stablehlo.while, vectorized over the batch and the positions s of l'. Positions past
// 2 L_b + 1, and times past the input length, are -inf in the recursion where torch's kernel
// leaves them unwritten: nothing reads them.
#include <cmath>

#include "lowering/lowering.h"
#include "lowering/pointwise_util.h"

namespace torch_pjrt::lowering {

namespace {

using namespace pw;

constexpr ElementType kS64 = ElementType::kS64;

struct CtcInputs {
  Val log_probs;            // [T, N, C]
  Val extended;             // [N, S] s64: l', S = 2 L + 1
  Val input_lengths;        // [N] s64
  Val target_lengths;       // [N] s64
  Val log_probs_extended;   // [T, N, S]: log_probs[t, b, l'[b, s]]
  Val skip;                 // [N, S] pred: s - 2 -> s is allowed (s >= 2, l'[s] != l'[s - 2])
  Val inside;               // [N, S] pred: s < 2 L_b + 1
  int64_t time, batch, positions;
};

Val NegInf(Emitter& e, const TensorType& t) { return e.Full(-INFINITY, t); }

// l' from targets [N, L] (padded): blanks interleaved with the labels.
Val Extended(Emitter& e, const Val& targets, int64_t blank) {
  int64_t n = targets.dims()[0], l = targets.dims()[1];
  Val blanks = e.Full(static_cast<double>(blank), TensorType{kS64, {n, l, 1}});
  Val pairs = e.Concatenate({blanks, e.Reshape(targets, {n, l, 1})}, 2);  // [N, L, 2]
  return e.Concatenate({e.Reshape(pairs, {n, 2 * l}), e.Full(static_cast<double>(blank), TensorType{kS64, {n, 1}})}, 1);
}

// out[t, b, s] = log_probs[t, b, extended[b, s]]: a gather with the batch as a batching dim.
Val GatherExtended(Emitter& e, const Val& log_probs, const Val& extended) {
  int64_t t = log_probs.dims()[0], n = extended.dims()[0], s = extended.dims()[1];
  Emitter::GatherDims g;
  g.offset_dims = {2};
  g.collapsed_slice_dims = {2};
  g.start_index_map = {2};
  g.operand_batching_dims = {1};
  g.start_indices_batching_dims = {0};
  g.index_vector_dim = 2;
  g.slice_sizes = {t, 1, 1};
  Val rows = e.Gather(log_probs, e.Reshape(extended, {n, s, 1}), g, TensorType{log_probs.dtype(), {n, s, t}});
  return e.Transpose(rows, {2, 0, 1});
}

CtcInputs Prepare(LowerCtx& c, size_t log_probs_i, size_t targets_i, size_t il_i, size_t tl_i, int64_t blank) {
  Emitter& e = c.e;
  CtcInputs in;
  in.log_probs = c.tensor(log_probs_i);
  in.time = in.log_probs.dims()[0];
  in.batch = in.log_probs.dims()[1];
  in.extended = Extended(e, e.Convert(c.tensor(targets_i), kS64), blank);
  in.positions = in.extended.dims()[1];
  in.input_lengths = e.Convert(c.tensor(il_i), kS64);
  in.target_lengths = e.Convert(c.tensor(tl_i), kS64);
  in.log_probs_extended = GatherExtended(e, in.log_probs, in.extended);
  Dims ns{in.batch, in.positions};
  Val s = e.Iota(TensorType{kS64, ns}, 1);
  // l'[s - 2] (-1 where s < 2).
  Val two_back = in.positions > 2
      ? e.Pad(e.SliceDim(in.extended, 1, 0, in.positions - 2), e.Scalar(-1, kS64), {0, 2}, {0, 0}, {0, 0})
      : e.Full(-1, TensorType{kS64, ns});
  in.skip = And(e, Cmp(e, "GE", s, e.Full(2, s.type)), Cmp(e, "NE", in.extended, two_back));
  Val ends = Add(e, Mul(e, e.BroadcastInDim(in.target_lengths, ns, {0}), e.Full(2, s.type)), e.Full(1, s.type));
  in.inside = Cmp(e, "LT", s, ends);
  return in;
}

// log(exp(a) + exp(b) + exp(c)) with torch's guard: an all -inf set stays -inf, not NaN.
Val LogSumExp3(Emitter& e, const Val& a, const Val& b, const Val& c) {
  Val m = Max(e, Max(e, a, b), c);
  m = Sel(e, Cmp(e, "EQ", m, K(e, -INFINITY, m)), K(e, 0, m), m);
  Val sum = Add(e, Add(e, Exp(e, Sub(e, a, m)), Exp(e, Sub(e, b, m))), Exp(e, Sub(e, c, m)));
  return Add(e, Log(e, sum), m);
}

// x shifted by k positions along s, filled with -inf: forward (x[s - k]) or backward (x[s + k]).
Val Shift(Emitter& e, const Val& x, int64_t k, bool from_below) {
  int64_t s = x.dims()[1];
  if (k >= s) return NegInf(e, x.type);
  Val fill = e.Scalar(-INFINITY, x.dtype());
  return from_below ? e.Pad(e.SliceDim(x, 1, 0, s - k), fill, {0, k}, {0, 0}, {0, 0})
                    : e.Pad(e.SliceDim(x, 1, k, s), fill, {0, 0}, {0, k}, {0, 0});
}

// Per batch element, the entry of rows [T, N, S] at time index[b] (s64 [N]): [N, S].
Val AtTime(Emitter& e, const Val& rows, const Val& index) {
  Dims tns = rows.dims();
  Val at = Cmp(e, "EQ", e.Iota(TensorType{kS64, tns}, 0), e.BroadcastInDim(index, tns, {1}));
  return e.Reduce(Sel(e, at, rows, NegInf(e, rows.type)), e.Scalar(-INFINITY, rows.dtype()), {0}, "maximum");
}
// Per batch element, the entry of x [N, S] at position index[b]: [N].
Val AtPosition(Emitter& e, const Val& x, const Val& index) {
  Val at = Cmp(e, "EQ", e.Iota(TensorType{kS64, x.dims()}, 1), e.BroadcastInDim(index, x.dims(), {0}));
  return e.Reduce(Sel(e, at, x, NegInf(e, x.type)), e.Scalar(-INFINITY, x.dtype()), {1}, "maximum");
}

// log alpha [T, N, S] (eq. 6-7).
Val LogAlpha(Emitter& e, const CtcInputs& in) {
  Dims ns{in.batch, in.positions};
  Val s = e.Iota(TensorType{kS64, ns}, 1);
  Val first = Row(e, in.log_probs_extended, e.Scalar(0, kS64));
  Val has_labels = e.BroadcastInDim(Cmp(e, "GT", in.target_lengths, e.Full(0, in.target_lengths.type)), ns, {0});
  Val start = Or(e, Cmp(e, "EQ", s, e.Full(0, s.type)), And(e, Cmp(e, "EQ", s, e.Full(1, s.type)), has_labels));
  Val la0 = Sel(e, start, first, NegInf(e, first.type));
  Val alphas = WithRow(e, NegInf(e, in.log_probs_extended.type), la0, e.Scalar(0, kS64));
  int64_t time = in.time;
  auto cond = [time](Emitter& b, const std::vector<Val>& w) -> std::vector<Val> {
    return {b.Compare("LT", w[0], b.Scalar(time, kS64))};
  };
  auto body = [](Emitter& b, const std::vector<Val>& w) -> std::vector<Val> {
    const Val &t = w[0], &la = w[1], &alphas = w[2], &lpe = w[3], &skip = w[4], &inside = w[5];
    Val three = Sel(b, skip, Shift(b, la, 2, true), NegInf(b, la.type));
    Val next = Add(b, LogSumExp3(b, la, Shift(b, la, 1, true), three), Row(b, lpe, t));
    next = Sel(b, inside, next, NegInf(b, next.type));
    return {b.Binary("add", t, b.Scalar(1, kS64)), next, WithRow(b, alphas, next, t), lpe, skip, inside};
  };
  return e.While({e.Scalar(1, kS64), la0, alphas, in.log_probs_extended, in.skip, in.inside}, cond, body)[2];
}

// pjrt::ctc_loss(log_probs [T, N, C], targets [N, L] s64, input_lengths [N], target_lengths [N],
//                blank) -> (neg_log_likelihood [N], log_alpha [N, T, 2 L + 1])
std::vector<Val> LowerCtcLoss(LowerCtx& c) {
  Emitter& e = c.e;
  CtcInputs in = Prepare(c, 0, 1, 2, 3, c.int_arg(4));
  Val alphas = LogAlpha(e, in);
  Val one = e.Full(1, in.input_lengths.type);
  Val last = AtTime(e, alphas, Sub(e, in.input_lengths, one));  // [N, S] at t = T_b - 1
  Val end = Mul(e, in.target_lengths, e.Full(2, in.target_lengths.type));
  Val l1 = AtPosition(e, last, end), l2 = AtPosition(e, last, Sub(e, end, one));
  Val m = Max(e, l1, l2);
  m = Sel(e, Cmp(e, "EQ", m, K(e, -INFINITY, m)), K(e, 0, m), m);
  Val both = Add(e, Log(e, Add(e, Exp(e, Sub(e, l1, m)), Exp(e, Sub(e, l2, m)))), m);
  Val no_labels = Cmp(e, "EQ", in.target_lengths, e.Full(0, in.target_lengths.type));
  Val likelihood = Sel(e, no_labels, AtPosition(e, last, e.Full(0, end.type)), both);
  // No input at all: the empty target is certain, any other impossible.
  Val no_input = Cmp(e, "EQ", in.input_lengths, e.Full(0, in.input_lengths.type));
  likelihood = Sel(e, no_input, Sel(e, no_labels, K(e, 0, likelihood), K(e, -INFINITY, likelihood)), likelihood);
  return {Neg(e, likelihood), e.Transpose(alphas, {1, 0, 2})};
}

// log beta [T, N, S] (eq. 10-11), starting per batch element at its own last time.
Val LogBeta(Emitter& e, const CtcInputs& in) {
  int64_t time = in.time;
  Dims ns{in.batch, in.positions};
  // The two start positions 2 L_b and 2 L_b - 1 (the latter only with labels).
  Val s = e.Iota(TensorType{kS64, ns}, 1);
  Val end = e.BroadcastInDim(Mul(e, in.target_lengths, e.Full(2, in.target_lengths.type)), ns, {0});
  Val start = Or(e, Cmp(e, "EQ", s, end), And(e, Cmp(e, "EQ", s, Sub(e, end, e.Full(1, end.type))),
                                              Cmp(e, "GT", end, e.Full(0, end.type))));
  Val last_time = e.BroadcastInDim(Sub(e, in.input_lengths, e.Full(1, in.input_lengths.type)), ns, {0});
  // lb[s + 2] counts when l'[s + 2] may follow l'[s]: the forward's skip, two positions back.
  Val skip_ahead = in.positions > 2
      ? e.Pad(e.SliceDim(in.skip, 1, 2, in.positions), e.Scalar(0, ElementType::kBool), {0, 0}, {0, 2}, {0, 0})
      : e.Full(0, TensorType{ElementType::kBool, ns});
  auto cond = [](Emitter& b, const std::vector<Val>& w) -> std::vector<Val> {
    return {b.Compare("GE", w[0], b.Scalar(0, kS64))};
  };
  auto body = [](Emitter& b, const std::vector<Val>& w) -> std::vector<Val> {
    const Val &t = w[0], &lb = w[1], &betas = w[2], &lpe = w[3], &skip = w[4], &inside = w[5], &start = w[6],
              &last = w[7];
    Val lp = Row(b, lpe, t);
    Val three = Sel(b, skip, Shift(b, lb, 2, false), NegInf(b, lb.type));
    Val rec = Add(b, LogSumExp3(b, lb, Shift(b, lb, 1, false), three), lp);
    Val tb = b.BroadcastInDim(t, last.dims(), {});
    Val at_last = b.Compare("EQ", tb, last), before = b.Compare("LT", tb, last);
    Val next = Sel(b, at_last, Sel(b, start, lp, NegInf(b, lp.type)), Sel(b, before, rec, NegInf(b, lp.type)));
    next = Sel(b, inside, next, NegInf(b, next.type));
    return {b.Binary("subtract", t, b.Scalar(1, kS64)), next, WithRow(b, betas, next, t), lpe, skip, inside, start,
            last};
  };
  std::vector<Val> init = {e.Scalar(time - 1, kS64), NegInf(e, TensorType{in.log_probs.dtype(), ns}),
                           NegInf(e, in.log_probs_extended.type), in.log_probs_extended, skip_ahead, in.inside, start,
                           last_time};
  return e.While(init, cond, body)[2];
}

// pjrt::ctc_loss_backward(grad [N], log_probs, targets [N, L], input_lengths, target_lengths,
//                         neg_log_likelihood [N], log_alpha [N, T, S], blank, zero_infinity)
//   -> grad_log_probs [T, N, C] = (exp(lp) - exp(lcab + nll - lp)) * grad for t < T_b, else 0,
// lcab[t, b, c] = log sum over s with l'[s] = c of alpha beta (eq. 16).
std::vector<Val> LowerCtcLossBackward(LowerCtx& c) {
  Emitter& e = c.e;
  CtcInputs in = Prepare(c, 1, 2, 3, 4, c.int_arg(7));
  bool zero_infinity = c.int_arg(8) != 0;
  Val lp = in.log_probs;
  ElementType t = lp.dtype();
  int64_t classes = lp.dims()[2];
  Val alphas = e.Transpose(e.Convert(c.tensor(6), t), {1, 0, 2});  // [T, N, S]
  Val betas = LogBeta(e, in);
  Val ab = Add(e, alphas, betas);
  Val m = e.Reduce(ab, e.Scalar(-INFINITY, t), {2}, "maximum");  // [T, N]
  m = Sel(e, Cmp(e, "EQ", m, K(e, -INFINITY, m)), K(e, 0, m), m);
  Val weights = Exp(e, Sub(e, ab, e.BroadcastInDim(m, ab.dims(), {0, 1})));
  weights = Sel(e, e.BroadcastInDim(in.inside, ab.dims(), {1, 2}), weights, K(e, 0, weights));
  // Collect by class: [N, S, C] one-hot of l', contracted over s with the batch as a batch dim.
  Dims nsc{in.batch, in.positions, classes};
  Val onehot = e.Convert(Cmp(e, "EQ", e.BroadcastInDim(in.extended, nsc, {0, 1}), e.Iota(TensorType{kS64, nsc}, 2)), t);
  Val by_class = e.DotGeneral(e.Transpose(weights, {1, 0, 2}), onehot, {0}, {0}, {2}, {1}, t, "HIGHEST");  // [N, T, C]
  by_class = e.Transpose(by_class, {1, 0, 2});                                                           // [T, N, C]
  Val lcab = Add(e, Log(e, by_class), e.BroadcastInDim(m, by_class.dims(), {0, 1}));
  Val nll = e.BroadcastInDim(e.Convert(c.tensor(5), t), lp.dims(), {1});
  Val g = e.BroadcastInDim(e.Convert(c.tensor(0), t), lp.dims(), {1});
  Val grad = Mul(e, Sub(e, Exp(e, lp), Exp(e, Sub(e, Add(e, lcab, nll), lp))), g);
  Val live = Cmp(e, "LT", e.Iota(TensorType{kS64, lp.dims()}, 0), e.BroadcastInDim(in.input_lengths, lp.dims(), {1}));
  if (zero_infinity) live = And(e, live, Cmp(e, "NE", nll, K(e, INFINITY, nll)));
  return {Done(c, Sel(e, live, grad, K(e, 0, grad)))};
}

}  // namespace

void RegisterCtcLossOps(Registry& r) {
  r.Add("pjrt::ctc_loss", LowerCtcLoss);
  r.Add("pjrt::ctc_loss_backward", LowerCtcLossBackward);
}

}  // namespace torch_pjrt::lowering
