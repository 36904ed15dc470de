// Fused optimizer steps (torch.optim's fused=True: _fused_adam, _fused_adamw, _fused_sgd,
// _fused_adagrad) and the AMP gradient-scaling ops (_amp_foreach_non_finite_check_and_unscale,
// _amp_update_scale). Each is one node for all parameters, so an optimizer step traces a handful
// of ops. Hyperparameters (lr, betas, eps, weight decay, momentum) are value scalars (the table's
// value_args): a learning-rate schedule never recompiles. The math follows torch's CPU kernels;
// a found_inf of 1 leaves every input unchanged, as they do.
#include <cmath>

#include "lowering/helpers.h"

namespace torch_pjrt::lowering {

namespace {

Val Mul(Emitter& e, const Val& a, const Val& b) { return e.Binary("multiply", a, b); }
Val Add(Emitter& e, const Val& a, const Val& b) { return e.Binary("add", a, b); }
Val Sub(Emitter& e, const Val& a, const Val& b) { return e.Binary("subtract", a, b); }
Val Div(Emitter& e, const Val& a, const Val& b) { return e.Binary("divide", a, b); }

// A scalar argument (value or tensor) broadcast to `like`'s shape in its dtype.
Val Hyper(LowerCtx& c, size_t i, const Val& like) {
  return c.e.BroadcastInDim(c.e.Reshape(c.scalar(i, like.dtype()), {}), like.dims(), {});
}

// What every fused optimizer starts with: the gradient unscaled by grad_scale (if given), and
// a predicate "skip this step" from found_inf (if given).
struct StepInputs {
  Val grad;   // in opmath, unscaled
  Val skip;   // pred[] or invalid
};

StepInputs Prepare(LowerCtx& c, const Val& grad, ElementType t, size_t grad_scale_arg, size_t found_inf_arg) {
  Emitter& e = c.e;
  StepInputs in{e.Convert(grad, t), Val()};
  if (!c.is_none(grad_scale_arg)) {
    in.grad = Div(e, in.grad, e.BroadcastInDim(e.Convert(e.Reshape(c.tensor(grad_scale_arg), {}), t), grad.dims(), {}));
  }
  if (!c.is_none(found_inf_arg)) {
    Val found = e.Reshape(c.tensor(found_inf_arg), {});
    in.skip = e.Compare("EQ", found, e.Full(1, TensorType{found.dtype(), {}}));
  }
  return in;
}

// `updated` converted to `old`'s dtype, or `old` itself when the step is skipped.
Val Result(Emitter& e, const StepInputs& in, const Val& old, const Val& updated) {
  Val r = e.Convert(updated, old.dtype());
  if (!in.skip.valid()) return r;
  return e.Select(e.BroadcastInDim(in.skip, old.dims(), {}), old, r);
}

// maximize flips the gradient; weight decay (when nonzero: it is a value) adds wd * param.
Val DecayedGrad(LowerCtx& c, const Val& g, const Val& p, bool maximize, size_t wd_arg) {
  Emitter& e = c.e;
  Val grad = maximize ? e.Unary("negate", g) : g;
  Val wd = Hyper(c, wd_arg, grad);
  Val decayed = Add(e, grad, Mul(e, p, wd));
  return e.Select(e.Compare("NE", wd, e.Full(0, wd.type)), decayed, grad);
}

// _fused_adam / _fused_adamw (self[], grads[], exp_avgs[], exp_avg_sqs[], max_exp_avg_sqs[],
// state_steps[], *, lr, beta1, beta2, weight_decay, eps, amsgrad, maximize, grad_scale?,
// found_inf?) -> the five lists updated.
std::vector<Val> LowerAdam(LowerCtx& c, bool decoupled) {
  Emitter& e = c.e;
  std::vector<Val> params = c.tensors(0), grads = c.tensors(1), avgs = c.tensors(2), sqs = c.tensors(3),
                   maxes = c.tensors(4), steps = c.tensors(5);
  bool amsgrad = c.bool_arg(11), maximize = c.bool_arg(12);
  std::vector<Val> out_p, out_g, out_m, out_v, out_max;
  for (size_t k = 0; k < params.size(); ++k) {
    const Val &p0 = params[k], &m0 = avgs[k], &v0 = sqs[k];
    ElementType t = Opmath(p0.dtype());
    StepInputs in = Prepare(c, grads[k], t, 13, 14);
    Val p = e.Convert(p0, t);
    Val lr = Hyper(c, 6, p), beta1 = Hyper(c, 7, p), beta2 = Hyper(c, 8, p), eps = Hyper(c, 10, p);
    Val one = e.Full(1, p.type);
    Val g;
    if (decoupled) {
      g = maximize ? e.Unary("negate", in.grad) : in.grad;
      p = Sub(e, p, Mul(e, Mul(e, lr, Hyper(c, 9, p)), p));  // p *= 1 - lr * wd
    } else {
      g = DecayedGrad(c, in.grad, p, maximize, 9);
    }
    Val m = Add(e, Mul(e, beta1, e.Convert(m0, t)), Mul(e, Sub(e, one, beta1), g));
    Val v = Add(e, Mul(e, beta2, e.Convert(v0, t)), Mul(e, Mul(e, Sub(e, one, beta2), g), g));
    Val step = e.BroadcastInDim(e.Convert(e.Reshape(steps[k], {}), t), p.dims(), {});
    Val bias1 = Sub(e, one, e.Binary("power", beta1, step));
    Val bias2_sqrt = e.Unary("sqrt", Sub(e, one, e.Binary("power", beta2, step)));
    Val second = v;
    if (amsgrad) {
      second = e.Binary("maximum", e.Convert(maxes[k], t), v);
      out_max.push_back(Result(e, in, maxes[k], second));
    }
    Val denom = Add(e, Div(e, e.Unary("sqrt", second), bias2_sqrt), eps);
    p = Sub(e, p, Mul(e, Div(e, lr, bias1), Div(e, m, denom)));
    out_p.push_back(Result(e, in, p0, p));
    out_g.push_back(Result(e, in, grads[k], in.grad));
    out_m.push_back(Result(e, in, m0, m));
    out_v.push_back(Result(e, in, v0, v));
  }
  if (!amsgrad) out_max = maxes;  // unused, returned as they were
  std::vector<Val> results;
  for (auto* list : {&out_p, &out_g, &out_m, &out_v, &out_max}) results.insert(results.end(), list->begin(), list->end());
  return results;
}
std::vector<Val> LowerFusedAdam(LowerCtx& c) { return LowerAdam(c, false); }
std::vector<Val> LowerFusedAdamW(LowerCtx& c) { return LowerAdam(c, true); }

// _fused_sgd(self[], grads[], momentum_buffer_list[], *, weight_decay, momentum, lr, dampening,
// nesterov, maximize, is_first_step, grad_scale?, found_inf?) -> the three lists updated.
std::vector<Val> LowerFusedSgd(LowerCtx& c) {
  Emitter& e = c.e;
  std::vector<Val> params = c.tensors(0), grads = c.tensors(1), buffers = c.tensors(2);
  bool nesterov = c.bool_arg(7), maximize = c.bool_arg(8), first = c.bool_arg(9);
  std::vector<Val> out_p, out_g, out_b;
  for (size_t k = 0; k < params.size(); ++k) {
    const Val& p0 = params[k];
    ElementType t = Opmath(p0.dtype());
    StepInputs in = Prepare(c, grads[k], t, 10, 11);
    Val p = e.Convert(p0, t);
    Val g = DecayedGrad(c, in.grad, p, maximize, 3);
    if (!buffers.empty()) {
      Val momentum = Hyper(c, 4, p), dampening = Hyper(c, 6, p);
      Val buf = first ? g
                      : Add(e, Mul(e, momentum, e.Convert(buffers[k], t)),
                            Mul(e, Sub(e, e.Full(1, p.type), dampening), g));
      out_b.push_back(Result(e, in, buffers[k], buf));
      g = nesterov ? Add(e, g, Mul(e, momentum, buf)) : buf;
    }
    p = Sub(e, p, Mul(e, Hyper(c, 5, p), g));
    out_p.push_back(Result(e, in, p0, p));
    out_g.push_back(Result(e, in, grads[k], in.grad));
  }
  std::vector<Val> results = out_p;
  results.insert(results.end(), out_g.begin(), out_g.end());
  results.insert(results.end(), out_b.begin(), out_b.end());
  return results;
}

// _fused_adagrad(self[], grads[], state_sums[], state_steps[], *, lr, lr_decay, weight_decay, eps,
// maximize, grad_scale?, found_inf?) -> (self, grads, state_sums, state_steps) updated.
std::vector<Val> LowerFusedAdagrad(LowerCtx& c) {
  Emitter& e = c.e;
  std::vector<Val> params = c.tensors(0), grads = c.tensors(1), sums = c.tensors(2), steps = c.tensors(3);
  bool maximize = c.bool_arg(8);
  std::vector<Val> out_p, out_g, out_s;
  for (size_t k = 0; k < params.size(); ++k) {
    const Val& p0 = params[k];
    ElementType t = Opmath(p0.dtype());
    StepInputs in = Prepare(c, grads[k], t, 9, 10);
    Val p = e.Convert(p0, t);
    Val g = DecayedGrad(c, in.grad, p, maximize, 6);
    Val step = e.BroadcastInDim(e.Convert(e.Reshape(steps[k], {}), t), p.dims(), {});
    Val one = e.Full(1, p.type);
    Val clr = Div(e, Hyper(c, 4, p), Add(e, one, Mul(e, Sub(e, step, one), Hyper(c, 5, p))));
    Val sum = Add(e, e.Convert(sums[k], t), Mul(e, g, g));
    Val std = Add(e, e.Unary("sqrt", sum), Hyper(c, 7, p));
    p = Sub(e, p, Mul(e, clr, Div(e, g, std)));
    out_p.push_back(Result(e, in, p0, p));
    out_g.push_back(Result(e, in, grads[k], in.grad));
    out_s.push_back(Result(e, in, sums[k], sum));
  }
  std::vector<Val> results = out_p;
  for (auto* list : {&out_g, &out_s}) results.insert(results.end(), list->begin(), list->end());
  results.insert(results.end(), steps.begin(), steps.end());  // state_steps are not changed
  return results;
}

// _amp_foreach_non_finite_check_and_unscale(self[], found_inf, inv_scale) -> (self[] * inv_scale,
// found_inf set to 1 if any element of any tensor is inf or NaN).
std::vector<Val> LowerAmpUnscale(LowerCtx& c) {
  Emitter& e = c.e;
  Val found = c.tensor(1), inv = e.Reshape(c.tensor(2), {});
  std::vector<Val> results;
  Val any_bad = e.Scalar(0, ElementType::kBool);
  for (const Val& x : c.tensors(0)) {
    ElementType t = Opmath(x.dtype());
    Val xt = e.Convert(x, t);
    results.push_back(e.Convert(Mul(e, xt, e.BroadcastInDim(e.Convert(inv, t), x.dims(), {})), x.dtype()));
    Val bad = e.Unary("not", e.Reduce(IsFinite(e, xt), e.Scalar(1, ElementType::kBool), NormDims({}, x.rank()), "and"));
    any_bad = e.Binary("or", any_bad, bad);
  }
  Val one = e.Full(1, found.type);
  results.push_back(e.Select(e.BroadcastInDim(any_bad, found.dims(), {}), one, found));
  return results;
}

// _amp_update_scale(self, growth_tracker, found_inf, growth_factor, backoff_factor,
// growth_interval) -> (scale, growth_tracker), like torch's kernel: back off and reset on inf,
// else count successes and grow every growth_interval of them (if the grown scale is finite).
std::vector<Val> LowerAmpUpdateScale(LowerCtx& c) {
  Emitter& e = c.e;
  Val scale = c.tensor(0), tracker = c.tensor(1);
  Val found = e.Compare("NE", e.Convert(c.tensor(2), scale.dtype()), e.Full(0, scale.type));
  Val successes = Add(e, tracker, e.Full(1, tracker.type));
  Val grow_now = e.Compare("EQ", successes, e.Full(static_cast<double>(c.int_arg(5)), tracker.type));
  Val grown = Mul(e, scale, e.Full(c.double_arg(3), scale.type));
  Val grown_ok = e.Binary("and", grow_now, IsFinite(e, grown));
  Val backed_off = Mul(e, scale, e.Full(c.double_arg(4), scale.type));
  Val new_scale = e.Select(found, backed_off, e.Select(grown_ok, grown, scale));
  Val zero = e.Full(0, tracker.type);
  Val new_tracker = e.Select(found, zero, e.Select(grow_now, zero, successes));
  return {new_scale, new_tracker};
}

}  // namespace

void RegisterOptimizerOps(Registry& r) {
  const std::vector<int> adam_values{6, 7, 8, 9, 10};  // lr, beta1, beta2, weight_decay, eps
  r.Add("_fused_adam", LowerFusedAdam).value_args = adam_values;
  r.Add("_fused_adam.tensor_lr", LowerFusedAdam).value_args = adam_values;
  r.Add("_fused_adamw", LowerFusedAdamW).value_args = adam_values;
  r.Add("_fused_adamw.tensor_lr", LowerFusedAdamW).value_args = adam_values;
  const std::vector<int> sgd_values{3, 4, 5, 6};  // weight_decay, momentum, lr, dampening
  r.Add("_fused_sgd", LowerFusedSgd).value_args = sgd_values;
  r.Add("_fused_sgd.tensor_lr", LowerFusedSgd).value_args = sgd_values;
  r.Add("_fused_adagrad", LowerFusedAdagrad).value_args = {4, 5, 6, 7};  // lr, lr_decay, weight_decay, eps
  r.Add("_amp_foreach_non_finite_check_and_unscale", LowerAmpUnscale);
  r.Add("_amp_update_scale", LowerAmpUpdateScale);
}

}  // namespace torch_pjrt::lowering
