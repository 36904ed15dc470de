// Scaled dot-product attention as one op each way: pjrt::attention and pjrt::attention_backward,
// traced by aten/attention.cc for torch's `_scaled_dot_product_fused_attention_overrideable` and
// its backward (the SDPA backend a PrivateUse1 device may claim). One node replaces the ~15 ops of
// torch's math decomposition (scale, transpose, matmul, mask, safe softmax, matmul) and the ~20 of
// its backward: less tracing per layer, and grouped-query attention without materializing the
// repeated keys and values.
//
// Shapes: q [B, Hq, L, E], k [B, Hk, S, E], v [B, Hk, S, Ev] (3-d inputs have no B), bias (an
// additive mask, boolean masks already made 0/-inf by torch) broadcastable to [B, Hq, L, S].
// Query head h attends with key head h / G, G = Hq / Hk (repeat_interleave's order), so the query
// is viewed as [B, Hk, G L, E] (its groups become rows) and every product batches over (B, Hk).
//
// Numerics follow torch's math path: q and k are each scaled by sqrt(|scale|) (the sign on q),
// the softmax is computed in the accumulation type and is the "safe" one: a row masked
// everywhere gives zeros, not NaN (CPU's flash kernel gives zeros too).
#include <cmath>

#include "lowering/lowering.h"
#include "lowering/pointwise_util.h"

namespace torch_pjrt::lowering {

namespace {

using namespace pw;

// What both ops read after their tensors q, k, v: an optional bias tensor, then is_causal and
// the scale.
struct AttentionArgs {
  Val bias;  // invalid when there is none
  bool is_causal;
  double scale;
};

AttentionArgs ArgsAfter(const LowerCtx& c, size_t bias_arg) {
  bool has_bias = c.is_tensor(bias_arg);
  size_t next = has_bias ? bias_arg + 1 : bias_arg;
  return {has_bias ? c.tensor(bias_arg) : Val{}, c.bool_arg(next), c.double_arg(next + 1)};
}

// The operands with the query's groups folded into its rows, in the accumulation type, q and k
// scaled: every product is then a plain batched matmul over (B, Hk), the form XLA:CPU runs best
// (a 5-d [B, Hk, G, L, E] form with two free or two contracted dims looked slower than the math
// path in GPT-2's and ViT's replays).
struct Grouped {
  Val q;  // [B, Hk, G L, E] * sign(scale) sqrt(|scale|)
  Val k;  // [B, Hk, S, E] * sqrt(|scale|)
  Val v;  // [B, Hk, S, Ev]
  double q_factor, k_factor;  // sign(scale) sqrt(|scale|), sqrt(|scale|): the gradients' too
  int64_t batch, kv_heads, groups, queries, keys;
  ElementType acc;
};

Dims As4d(const Val& x) {
  Dims d = x.dims();
  if (d.size() == 3) d.insert_at(0, 1);
  return d;
}

Grouped Prepare(Emitter& e, const Val& q, const Val& k, const Val& v, double scale) {
  Grouped g;
  g.acc = Opmath(q.dtype());
  Dims qd = As4d(q), kd = As4d(k), vd = As4d(v);
  g.batch = qd[0];
  g.kv_heads = kd[1];
  g.groups = qd[1] / kd[1];
  g.queries = qd[2];
  g.keys = kd[2];
  g.k_factor = std::sqrt(std::abs(scale));
  g.q_factor = scale < 0 ? -g.k_factor : g.k_factor;
  Val rows = e.Reshape(e.Convert(q, g.acc), {g.batch, g.kv_heads, g.groups * g.queries, qd[3]});
  g.q = Mul(e, rows, K(e, g.q_factor, rows));
  Val k4 = e.Reshape(e.Convert(k, g.acc), kd);
  g.k = Mul(e, k4, K(e, g.k_factor, k4));
  g.v = e.Reshape(e.Convert(v, g.acc), vd);
  return g;
}

Dims ScoreDims(const Grouped& g) { return {g.batch, g.kv_heads, g.groups * g.queries, g.keys}; }
Dims HeadDims(const Grouped& g) { return {g.batch, g.kv_heads * g.groups, g.queries, g.keys}; }

// q k^T + bias, -inf above the diagonal when causal: [B, Hk, G L, S].
Val Scores(Emitter& e, const Grouped& g, const AttentionArgs& a) {
  Val s = e.DotGeneral(g.q, g.k, {0, 1}, {0, 1}, {3}, {3}, g.acc);
  Dims full = ScoreDims(g);
  if (a.bias.valid()) s = Add(e, s, e.Reshape(e.BroadcastTo(e.Convert(a.bias, g.acc), HeadDims(g)), full));
  if (a.is_causal) {  // torch's ones(L, S).tril(): key j is visible to query i when j <= i
    TensorType grid{ElementType::kS64, {g.groups, g.queries, g.keys}};
    Val hidden = Cmp(e, "GT", e.Iota(grid, 2), e.Iota(grid, 1));
    hidden = e.BroadcastInDim(e.Reshape(hidden, {g.groups * g.queries, g.keys}), full, {2, 3});
    s = Sel(e, hidden, K(e, -INFINITY, s), s);
  }
  return s;
}

// Softmax over the keys (the last dim) that gives 0 for a row with no visible key; also the
// row's log-sum-exp (-inf for such a row).
std::pair<Val, Val> SafeSoftmax(Emitter& e, const Val& s) {
  Dims keep = {0, 1, 2};
  Val max = e.Reduce(s, e.Scalar(-INFINITY, s.dtype()), {3}, "maximum");
  Val none_visible = Cmp(e, "EQ", max, K(e, -INFINITY, max));
  Val shift = Sel(e, none_visible, K(e, 0, max), max);  // exp(-inf - 0) = 0 everywhere
  Val ex = Exp(e, Sub(e, s, e.BroadcastInDim(shift, s.dims(), keep)));
  Val sum = SumDims(e, ex, {3}, s.dtype());
  Val divisor = Sel(e, none_visible, K(e, 1, sum), sum);
  Val p = Div(e, ex, e.BroadcastInDim(divisor, s.dims(), keep));
  return {p, Add(e, max, Log(e, sum))};
}

Val Ungroup(Emitter& e, const Val& x, const Dims& original, ElementType t) {
  return e.Convert(e.Reshape(x, original), t);
}

// pjrt::attention(q, k, v, [bias], is_causal, scale)
//   -> (out, logsumexp [B, Hq, L], philox seed, philox offset): no dropout, so the last two are 0.
std::vector<Val> LowerAttention(LowerCtx& c) {
  Emitter& e = c.e;
  AttentionArgs a = ArgsAfter(c, 3);
  Grouped g = Prepare(e, c.tensor(0), c.tensor(1), c.tensor(2), a.scale);
  auto [p, lse] = SafeSoftmax(e, Scores(e, g, a));
  Val out = e.DotGeneral(p, g.v, {0, 1}, {0, 1}, {3}, {2}, g.acc);  // [B, Hk, G L, Ev]
  Val zero = e.Full(0, c.out(2));
  return {Ungroup(e, out, c.out(0).dims, c.out(0).dtype), Ungroup(e, lse, c.out(1).dims, c.out(1).dtype), zero, zero};
}

// pjrt::attention_backward(grad_out, q, k, v, [bias], is_causal, scale)
//   -> (grad_q, grad_k, grad_v[, grad_bias])
// The probabilities are recomputed (in one graph with the forward, XLA may reuse its). With
// P = softmax(S), dS = P * (dP - rowsum(dP * P)); a masked position has P = 0, so dS = 0.
std::vector<Val> LowerAttentionBackward(LowerCtx& c) {
  Emitter& e = c.e;
  Val grad = c.tensor(0);
  AttentionArgs a = ArgsAfter(c, 4);
  Grouped g = Prepare(e, c.tensor(1), c.tensor(2), c.tensor(3), a.scale);
  Val p = SafeSoftmax(e, Scores(e, g, a)).first;
  Val dout = e.Reshape(e.Convert(grad, g.acc), {g.batch, g.kv_heads, g.groups * g.queries, As4d(grad)[3]});
  Val dv = e.DotGeneral(p, dout, {0, 1}, {0, 1}, {2}, {2}, g.acc);  // [B, Hk, S, Ev]
  Val dp = e.DotGeneral(dout, g.v, {0, 1}, {0, 1}, {3}, {3}, g.acc);  // [B, Hk, G L, S]
  Val row = SumDims(e, Mul(e, dp, p), {3}, g.acc);
  Val ds = Mul(e, p, Sub(e, dp, e.BroadcastInDim(row, dp.dims(), {0, 1, 2})));
  Val dq = e.DotGeneral(ds, g.k, {0, 1}, {0, 1}, {3}, {2}, g.acc);  // [B, Hk, G L, E]
  dq = Mul(e, dq, K(e, g.q_factor, dq));
  Val dk = e.DotGeneral(ds, g.q, {0, 1}, {0, 1}, {2}, {2}, g.acc);  // [B, Hk, S, E]
  dk = Mul(e, dk, K(e, g.k_factor, dk));
  std::vector<Val> out = {Ungroup(e, dq, c.out(0).dims, c.out(0).dtype), Ungroup(e, dk, c.out(1).dims, c.out(1).dtype),
                          Ungroup(e, dv, c.out(2).dims, c.out(2).dtype)};
  if (c.num_outputs() > 3) {  // summed over the dims the bias broadcast along
    Val dbias = SumTo(e, e.Reshape(ds, HeadDims(g)), a.bias.dims(), g.acc);
    out.push_back(e.Convert(e.Reshape(dbias, c.out(3).dims), c.out(3).dtype));
  }
  return out;
}

}  // namespace

void RegisterAttentionOps(Registry& r) {
  r.Add("pjrt::attention", LowerAttention);
  r.Add("pjrt::attention_backward", LowerAttentionBackward);
}

}  // namespace torch_pjrt::lowering
