// Whole LSTM layers: aten::mkldnn_rnn_layer and aten::mkldnn_rnn_layer_backward, the per-layer
// ops torch's CPU LSTM runs (torch_pjrt/rnn.py calls them for pjrt tensors). Each is one
// stablehlo.while over the time steps, with the products that do not depend on the recurrence
// (the input projection, the weight gradients) taken over all steps at once outside it.
//
// torch's Meta kernel gives the forward's workspace no elements, so the backward recomputes what
// it needs from the forward's output: every step's gates follow from the inputs and the previous
// step's h (two products over all steps), and only the cell state c needs a loop of its own
// (elementwise, no product).
#include <functional>
#include <stdexcept>

#include "lowering/helpers.h"

namespace torch_pjrt::lowering {

namespace {

constexpr ElementType kS64 = ElementType::kS64;
constexpr int64_t kLstmMode = 2;  // torch's RNN mode numbering (cuDNN's): RNN_RELU, RNN_TANH, LSTM, GRU

struct LayerShape {
  ElementType t;  // the compute type
  bool reverse, batch_first;
  int64_t steps, batch, hidden;
};

LayerShape CheckLayer(LowerCtx& c, size_t reverse, size_t batch_sizes, size_t mode, size_t batch_first) {
  if (c.int_arg(mode) != kLstmMode) {
    throw std::invalid_argument("pjrt: mkldnn_rnn_layer is lowered for LSTM layers (mode 2) only");
  }
  if (!c.int_list(batch_sizes).empty()) {
    throw std::invalid_argument("pjrt: mkldnn_rnn_layer does not take packed sequences (batch_sizes)");
  }
  LayerShape s{Opmath(c.tensor(0).dtype()), c.bool_arg(reverse), c.bool_arg(batch_first), 0, 0, 0};
  const Dims& x = c.tensor(0).dims();
  if (x.size() != 3 || x[0] == 0 || x[1] == 0) {
    throw std::invalid_argument("pjrt: mkldnn_rnn_layer needs a non-empty 3-d input");
  }
  s.steps = s.batch_first ? x[1] : x[0];
  s.batch = s.batch_first ? x[0] : x[1];
  s.hidden = c.tensor(2).dims()[1];  // weight_hh [4H, H]
  return s;
}

// A [B, T, F] or [T, B, F] argument as [T, B, F] in processing order, of the compute type.
Val ToSteps(Emitter& e, const Val& x, const LayerShape& s) {
  Val v = e.Convert(s.batch_first ? e.Transpose(x, {1, 0, 2}) : x, s.t);
  return s.reverse ? e.Reverse(v, {0}) : v;
}
Val FromSteps(Emitter& e, const Val& steps, const LayerShape& s, ElementType out) {
  Val v = s.reverse ? e.Reverse(steps, {0}) : steps;
  return e.Convert(s.batch_first ? e.Transpose(v, {1, 0, 2}) : v, out);
}
Val State(Emitter& e, const Val& x, const LayerShape& s) {  // hx/cx as [B, H]
  return e.Reshape(e.Convert(x, s.t), {s.batch, s.hidden});
}

Val Flat(Emitter& e, const Val& steps) {  // [T, B, F] -> [T * B, F]
  const Dims& d = steps.dims();
  return e.Reshape(steps, {d[0] * d[1], d[2]});
}
// Every step's x_t @ w.t() for w [G, F]: [T, B, G] in one product.
Val StepsTimesWeightT(Emitter& e, const Val& steps, const Val& w) {
  const Dims& d = steps.dims();
  Val p = e.DotGeneral(Flat(e, steps), w, {}, {}, {1}, {1}, steps.dtype());
  return e.Reshape(p, {d[0], d[1], w.dims()[0]});
}
// The sum over steps and batch of a_t.t() @ b_t: [T, B, G] x [T, B, F] -> [G, F].
Val SumOfOuterProducts(Emitter& e, const Val& a, const Val& b) {
  return e.DotGeneral(Flat(e, a), Flat(e, b), {}, {}, {0}, {0}, a.dtype());
}

Val Gate(Emitter& e, const Val& gates, int64_t k, int64_t count) {  // along the last dim
  int64_t last = gates.rank() - 1, h = gates.dims()[last] / count;
  return e.SliceDim(gates, last, k * h, (k + 1) * h);
}
Val Sigmoid(Emitter& e, const Val& x) { return e.Unary("logistic", x); }
Val Mul(Emitter& e, const Val& a, const Val& b) { return e.Binary("multiply", a, b); }
Val Add(Emitter& e, const Val& a, const Val& b) { return e.Binary("add", a, b); }
Val OneMinus(Emitter& e, const Val& x) { return e.Binary("subtract", e.Full(1, x.type), x); }

// Runs `body` once per time step k = 0 .. steps - 1 (or back down) over the values `carried`:
// body(b, values, k) returns their next values; one stablehlo.while. (Unrolled, the LSTM benchmark's
// step ran as fast: 2.75 against 2.77 ms replayed, and it compiled more.)
using StepBody = std::function<std::vector<Val>(Emitter&, const std::vector<Val>&, const Val&)>;
std::vector<Val> OverSteps(Emitter& e, int64_t steps, bool backwards, const std::vector<Val>& carried,
                           const StepBody& body) {
  auto cond = [steps, backwards](Emitter& b, const std::vector<Val>& w) -> std::vector<Val> {
    return {backwards ? b.Compare("GE", w[0], b.Scalar(0, kS64))
                      : b.Compare("LT", w[0], b.Scalar(static_cast<double>(steps), kS64))};
  };
  auto loop_body = [&body, backwards](Emitter& b, const std::vector<Val>& w) -> std::vector<Val> {
    std::vector<Val> next{b.Binary("add", w[0], b.Scalar(backwards ? -1 : 1, kS64))};
    std::vector<Val> v = body(b, std::vector<Val>(w.begin() + 1, w.end()), w[0]);
    next.insert(next.end(), v.begin(), v.end());
    return next;
  };
  std::vector<Val> init{e.Scalar(static_cast<double>(backwards ? steps - 1 : 0), kS64)};
  init.insert(init.end(), carried.begin(), carried.end());
  std::vector<Val> r = e.While(init, cond, loop_body);
  return std::vector<Val>(r.begin() + 1, r.end());
}

// Pre-activation gates of every step without the recurrent term: x_t @ w_ih.t() + biases.
Val InputGates(Emitter& e, LowerCtx& c, const Val& x, const LayerShape& s, size_t first_weight, bool has_biases) {
  Val gates = StepsTimesWeightT(e, x, e.Convert(c.tensor(first_weight), s.t));
  if (!has_biases) return gates;
  Val bias = Add(e, e.Convert(c.tensor(first_weight + 2), s.t), e.Convert(c.tensor(first_weight + 3), s.t));
  return Add(e, gates, e.BroadcastInDim(bias, gates.dims(), {2}));
}

// (i, f, g, o) activated from pre-activation gates [..., 4H].
struct Activated {
  Val i, f, g, o;
};
Activated Activate(Emitter& e, const Val& pre) {
  return {Sigmoid(e, Gate(e, pre, 0, 4)), Sigmoid(e, Gate(e, pre, 1, 4)), e.Unary("tanh", Gate(e, pre, 2, 4)),
          Sigmoid(e, Gate(e, pre, 3, 4))};
}

// mkldnn_rnn_layer(input, w_ih, w_hh, b_ih, b_hh, hx, cx, reverse, batch_sizes, mode, hidden_size,
//   num_layers, has_biases, bidirectional, batch_first, train) -> (output, hy, cy, workspace)
std::vector<Val> LowerLstmLayer(LowerCtx& c) {
  Emitter& e = c.e;
  LayerShape s = CheckLayer(c, 7, 8, 9, 14);
  Val input_gates = InputGates(e, c, ToSteps(e, c.tensor(0), s), s, 1, c.bool_arg(12));
  Val hs0 = e.Full(0, TensorType{s.t, {s.steps, s.batch, s.hidden}});
  auto body = [](Emitter& b, const std::vector<Val>& w, const Val& k) -> std::vector<Val> {
    const Val &h = w[0], &cell = w[1], &input_gates = w[2], &w_hh_t = w[3], &hs = w[4];
    Val pre = Add(b, Row(b, input_gates, k), b.DotGeneral(h, w_hh_t, {}, {}, {1}, {0}, h.dtype()));
    Activated a = Activate(b, pre);
    Val next_c = Add(b, Mul(b, a.f, cell), Mul(b, a.i, a.g));
    Val next_h = Mul(b, a.o, b.Unary("tanh", next_c));
    return {next_h, next_c, input_gates, w_hh_t, WithRow(b, hs, next_h, k)};
  };
  // w_hh transposed once, before the loop: the step's product is then h @ w (XLA:CPU's fastest
  // form) with no transpose inside the loop (the benchmark's step replayed in 2.45-2.5 ms, 2.8
  // with h @ w_hh.t() in the loop).
  Val w_hh_t = e.Transpose(e.Convert(c.tensor(2), s.t), {1, 0});
  std::vector<Val> r = OverSteps(e, s.steps, false, {State(e, c.tensor(5), s), State(e, c.tensor(6), s), input_gates,
                                 w_hh_t, hs0}, body);
  return {FromSteps(e, r[4], s, c.out(0).dtype), e.Reshape(e.Convert(r[0], c.out(1).dtype), c.out(1).dims),
          e.Reshape(e.Convert(r[1], c.out(2).dtype), c.out(2).dims), e.Full(0, c.out(3))};
}

// Every step's cell state [T, B, H] from the activated gates: c_t = f_t c_{t-1} + i_t g_t.
Val CellStates(Emitter& e, const Activated& a, const Val& c0, const LayerShape& s) {
  auto body = [](Emitter& b, const std::vector<Val>& w, const Val& k) -> std::vector<Val> {
    const Val &cell = w[0], &i = w[1], &f = w[2], &g = w[3], &cs = w[4];
    Val next = Add(b, Mul(b, Row(b, f, k), cell), Mul(b, Row(b, i, k), Row(b, g, k)));
    return {next, i, f, g, WithRow(b, cs, next, k)};
  };
  Val cs0 = e.Full(0, TensorType{s.t, {s.steps, s.batch, s.hidden}});
  return OverSteps(e, s.steps, false, {c0, a.i, a.f, a.g, cs0}, body)[4];
}

// x shifted one step later, with `first` as step 0: the previous step's state for every step.
Val Previous(Emitter& e, const Val& first, const Val& steps, const LayerShape& s) {
  Val head = e.Reshape(first, {1, s.batch, s.hidden});
  if (s.steps == 1) return head;
  return e.Concatenate({head, e.SliceDim(steps, 0, 0, s.steps - 1)}, 0);
}

// The backward's per-step factors [T, B, 6H], so that with dh the gradient reaching h_t and dc the
// one reaching c_t from later steps:
//   dc_t = dh * kc + dc;  d(i, f, g) = dc_t * (ki, kf, kg);  do = dh * ko;  dc_{t-1} = dc_t * f.
Val BackwardFactors(Emitter& e, const Activated& a, const Val& cs, const Val& c_prev) {
  Val tc = e.Unary("tanh", cs);
  Val ko = Mul(e, tc, Mul(e, a.o, OneMinus(e, a.o)));
  Val kc = Mul(e, a.o, OneMinus(e, Mul(e, tc, tc)));
  Val ki = Mul(e, a.g, Mul(e, a.i, OneMinus(e, a.i)));
  Val kf = Mul(e, c_prev, Mul(e, a.f, OneMinus(e, a.f)));
  Val kg = Mul(e, a.i, OneMinus(e, Mul(e, a.g, a.g)));
  return e.Concatenate({ki, kf, kg, ko, kc, a.f}, 2);
}

// Runs the steps backwards: returns (gate gradients [T, B, 4H], dh_0, dc_0).
std::vector<Val> GateGradients(Emitter& e, const Val& factors, const Val& grad_out, const Val& w_hh,
                               const Val& dh, const Val& dc, const LayerShape& s) {
  auto body = [](Emitter& b, const std::vector<Val>& w, const Val& k) -> std::vector<Val> {
    const Val &dh_later = w[0], &dc_later = w[1], &factors = w[2], &grad_out = w[3], &w_hh = w[4], &dgates = w[5];
    Val f = Row(b, factors, k);
    Val dh = Add(b, Row(b, grad_out, k), dh_later);
    Val dc = Add(b, Mul(b, dh, Gate(b, f, 4, 6)), dc_later);
    Val d = b.Concatenate({Mul(b, dc, Gate(b, f, 0, 6)), Mul(b, dc, Gate(b, f, 1, 6)), Mul(b, dc, Gate(b, f, 2, 6)),
                           Mul(b, dh, Gate(b, f, 3, 6))},
                          1);
    Val dh_earlier = b.DotGeneral(d, w_hh, {}, {}, {1}, {0}, d.dtype());
    return {dh_earlier, Mul(b, dc, Gate(b, f, 5, 6)), factors, grad_out, w_hh, WithRow(b, dgates, d, k)};
  };
  Val dgates0 = e.Full(0, TensorType{s.t, {s.steps, s.batch, 4 * s.hidden}});
  std::vector<Val> r = OverSteps(e, s.steps, true, {dh, dc, factors, grad_out, w_hh, dgates0}, body);
  return {r[5], r[0], r[1]};
}

Val GradOrZeros(Emitter& e, LowerCtx& c, size_t i, const TensorType& zeros, const LayerShape& s, bool steps) {
  if (c.is_none(i)) return e.Full(0, zeros);
  return steps ? ToSteps(e, c.tensor(i), s) : State(e, c.tensor(i), s);
}

// mkldnn_rnn_layer_backward(input, w_ih, w_hh, b_ih, b_hh, hx, cx, output, hy, cy, grad_output?,
//   grad_hy?, grad_cy?, reverse, mode, hidden_size, num_layers, has_biases, train, bidirectional,
//   batch_sizes, batch_first, workspace) -> (d input, d w_ih, d w_hh, d b_ih, d b_hh, d hx, d cx)
std::vector<Val> LowerLstmLayerBackward(LowerCtx& c) {
  Emitter& e = c.e;
  LayerShape s = CheckLayer(c, 13, 20, 14, 21);
  Val x = ToSteps(e, c.tensor(0), s), w_ih = e.Convert(c.tensor(1), s.t), w_hh = e.Convert(c.tensor(2), s.t);
  Val h0 = State(e, c.tensor(5), s), c0 = State(e, c.tensor(6), s);
  Val h_prev = Previous(e, h0, ToSteps(e, c.tensor(7), s), s);
  Val pre = Add(e, InputGates(e, c, x, s, 1, c.bool_arg(17)), StepsTimesWeightT(e, h_prev, w_hh));
  Activated a = Activate(e, pre);
  Val cs = CellStates(e, a, c0, s);
  Val factors = BackwardFactors(e, a, cs, Previous(e, c0, cs, s));
  TensorType state{s.t, {s.batch, s.hidden}};
  Val grad_out = GradOrZeros(e, c, 10, TensorType{s.t, {s.steps, s.batch, s.hidden}}, s, true);
  std::vector<Val> g = GateGradients(e, factors, grad_out, w_hh, GradOrZeros(e, c, 11, state, s, false),
                                     GradOrZeros(e, c, 12, state, s, false), s);
  const Val& dgates = g[0];
  Val dx = e.Reshape(e.DotGeneral(Flat(e, dgates), w_ih, {}, {}, {1}, {0}, s.t), x.dims());
  Val dbias = SumDims(e, dgates, {0, 1}, s.t);
  auto out = [&](size_t i, const Val& v) { return e.Reshape(e.Convert(v, c.out(i).dtype), c.out(i).dims); };
  return {FromSteps(e, dx, s, c.out(0).dtype), out(1, SumOfOuterProducts(e, dgates, x)),
          out(2, SumOfOuterProducts(e, dgates, h_prev)), out(3, dbias), out(4, dbias), out(5, g[1]), out(6, g[2])};
}

}  // namespace

void RegisterLstmLayerOps(Registry& r) {
  // No CPU probe: the CPU backward reads oneDNN's workspace, which the Meta kernel (and so a
  // stand-in) leaves empty; it crashes on one.
  r.Add("mkldnn_rnn_layer", LowerLstmLayer).cpu_probe = false;
  r.Add("mkldnn_rnn_layer_backward", LowerLstmLayerBackward).cpu_probe = false;
}

}  // namespace torch_pjrt::lowering
