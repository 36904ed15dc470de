// Fused recurrent cells. PyTorch routes LSTMCell/GRUCell (and nn.LSTM/nn.GRU steps) on non-CPU
// devices through these fused ops; the workspace layout is ours, shared by forward and backward:
//   LSTM workspace [N, 4H] = activated gates (i, f, g, o)
//   GRU  workspace [N, 5H] = (r, z, n, hidden n-gate incl. bias, hx)
#include "lowering/helpers.h"

namespace torch_pjrt::lowering {

namespace {

Val Chunk(Emitter& e, const Val& x, int64_t k, int64_t parts) {
  int64_t h = x.dims()[1] / parts;
  return e.SliceDim(x, 1, k * h, (k + 1) * h);
}
Val Sigmoid(Emitter& e, const Val& x) { return e.Unary("logistic", x); }
Val OneMinus(Emitter& e, const Val& x) { return e.Binary("subtract", e.Full(1, x.type), x); }
Val Mul(Emitter& e, const Val& a, const Val& b) { return e.Binary("multiply", a, b); }
Val Add(Emitter& e, const Val& a, const Val& b) { return e.Binary("add", a, b); }
Val BatchBias(Emitter& e, LowerCtx& c, size_t i, const Dims& dims, ElementType t) {
  return e.BroadcastInDim(e.Convert(c.tensor(i), t), dims, {1});
}

// _thnn_fused_lstm_cell(input_gates, hidden_gates, cx, input_bias?, hidden_bias?) -> (hy, cy, workspace)
std::vector<Val> LowerLstmCell(LowerCtx& c) {
  Emitter& e = c.e;
  ElementType t = Opmath(c.out(0).dtype);
  Val gates = Add(e, e.Convert(c.tensor(0), t), e.Convert(c.tensor(1), t));
  if (!c.is_none(3)) gates = Add(e, gates, BatchBias(e, c, 3, gates.dims(), t));
  if (!c.is_none(4)) gates = Add(e, gates, BatchBias(e, c, 4, gates.dims(), t));
  Val i = Sigmoid(e, Chunk(e, gates, 0, 4)), f = Sigmoid(e, Chunk(e, gates, 1, 4));
  Val g = e.Unary("tanh", Chunk(e, gates, 2, 4)), o = Sigmoid(e, Chunk(e, gates, 3, 4));
  Val cx = e.Convert(c.tensor(2), t);
  Val cy = Add(e, Mul(e, f, cx), Mul(e, i, g));
  Val hy = Mul(e, o, e.Unary("tanh", cy));
  Val ws = e.Concatenate({i, f, g, o}, 1);
  return {e.Convert(hy, c.out(0).dtype), e.Convert(cy, c.out(1).dtype), e.Convert(ws, c.out(2).dtype)};
}

// _thnn_fused_lstm_cell_backward_impl(grad_hy?, grad_cy?, cx, cy, workspace, has_bias)
//   -> (grad_gates, grad_cx, grad_bias)
std::vector<Val> LowerLstmCellBackward(LowerCtx& c) {
  Emitter& e = c.e;
  ElementType t = Opmath(c.tensor(4).dtype());
  Val ws = e.Convert(c.tensor(4), t), cx = e.Convert(c.tensor(2), t), cy = e.Convert(c.tensor(3), t);
  Val i = Chunk(e, ws, 0, 4), f = Chunk(e, ws, 1, 4), g = Chunk(e, ws, 2, 4), o = Chunk(e, ws, 3, 4);
  Val gh = c.is_none(0) ? e.Full(0, cy.type) : e.Convert(c.tensor(0), t);
  Val gc = c.is_none(1) ? e.Full(0, cy.type) : e.Convert(c.tensor(1), t);
  Val tanh_cy = e.Unary("tanh", cy);
  Val d_o = Mul(e, Mul(e, gh, tanh_cy), Mul(e, o, OneMinus(e, o)));
  Val dc = Add(e, Mul(e, Mul(e, gh, o), OneMinus(e, Mul(e, tanh_cy, tanh_cy))), gc);
  Val d_i = Mul(e, Mul(e, dc, g), Mul(e, i, OneMinus(e, i)));
  Val d_f = Mul(e, Mul(e, dc, cx), Mul(e, f, OneMinus(e, f)));
  Val d_g = Mul(e, Mul(e, dc, i), OneMinus(e, Mul(e, g, g)));
  Val grad_gates = e.Concatenate({d_i, d_f, d_g, d_o}, 1);
  std::vector<Val> out{e.Convert(grad_gates, c.out(0).dtype), e.Convert(Mul(e, dc, f), c.out(1).dtype), Val()};
  if (c.bool_arg(5)) out[2] = e.Convert(SumDims(e, grad_gates, {0}, t), c.out(2).dtype);
  return out;
}

// _thnn_fused_gru_cell(input_gates, hidden_gates, hx, input_bias?, hidden_bias?) -> (hy, workspace)
std::vector<Val> LowerGruCell(LowerCtx& c) {
  Emitter& e = c.e;
  ElementType t = Opmath(c.out(0).dtype);
  Val ig = e.Convert(c.tensor(0), t), hg = e.Convert(c.tensor(1), t);
  if (!c.is_none(3)) ig = Add(e, ig, BatchBias(e, c, 3, ig.dims(), t));
  if (!c.is_none(4)) hg = Add(e, hg, BatchBias(e, c, 4, hg.dims(), t));
  Val hx = e.Convert(c.tensor(2), t);
  Val r = Sigmoid(e, Add(e, Chunk(e, ig, 0, 3), Chunk(e, hg, 0, 3)));
  Val z = Sigmoid(e, Add(e, Chunk(e, ig, 1, 3), Chunk(e, hg, 1, 3)));
  Val hn = Chunk(e, hg, 2, 3);
  Val n = e.Unary("tanh", Add(e, Chunk(e, ig, 2, 3), Mul(e, r, hn)));
  Val hy = Add(e, n, Mul(e, z, e.Binary("subtract", hx, n)));
  Val ws = e.Concatenate({r, z, n, hn, hx}, 1);
  return {e.Convert(hy, c.out(0).dtype), e.Convert(ws, c.out(1).dtype)};
}

// _thnn_fused_gru_cell_backward(grad_hy, workspace, has_bias)
//   -> (grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias, grad_hidden_bias)
std::vector<Val> LowerGruCellBackward(LowerCtx& c) {
  Emitter& e = c.e;
  ElementType t = Opmath(c.tensor(1).dtype());
  Val g = e.Convert(c.tensor(0), t), ws = e.Convert(c.tensor(1), t);
  Val r = Chunk(e, ws, 0, 5), z = Chunk(e, ws, 1, 5), n = Chunk(e, ws, 2, 5), hn = Chunk(e, ws, 3, 5),
      hx = Chunk(e, ws, 4, 5);
  Val dz = Mul(e, Mul(e, g, e.Binary("subtract", hx, n)), Mul(e, z, OneMinus(e, z)));
  Val dn = Mul(e, Mul(e, g, OneMinus(e, z)), OneMinus(e, Mul(e, n, n)));
  Val dr = Mul(e, Mul(e, dn, hn), Mul(e, r, OneMinus(e, r)));
  Val grad_ig = e.Concatenate({dr, dz, dn}, 1);
  Val grad_hg = e.Concatenate({dr, dz, Mul(e, dn, r)}, 1);
  std::vector<Val> out{e.Convert(grad_ig, c.out(0).dtype), e.Convert(grad_hg, c.out(1).dtype),
                       e.Convert(Mul(e, g, z), c.out(2).dtype), Val(), Val()};
  if (c.bool_arg(2)) {
    out[3] = e.Convert(SumDims(e, grad_ig, {0}, t), c.out(3).dtype);
    out[4] = e.Convert(SumDims(e, grad_hg, {0}, t), c.out(4).dtype);
  }
  return out;
}

}  // namespace

void RegisterRnnOps(Registry& r) {
  r.Add("_thnn_fused_lstm_cell", LowerLstmCell);
  r.Add("_thnn_fused_lstm_cell_backward_impl", LowerLstmCellBackward);
  r.Add("_thnn_fused_gru_cell", LowerGruCell);
  r.Add("_thnn_fused_gru_cell_backward", LowerGruCellBackward);
}

}  // namespace torch_pjrt::lowering
