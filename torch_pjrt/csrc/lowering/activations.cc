// Activations beyond the basic ones of elementwise.cc, with their backward ops: threshold, the
// shrink functions, log-sigmoid, GLU and PReLU. Formulas and evaluation order follow torch's CPU kernels
// (aten/src/ATen/native/cpu/Activation.cpp), computed in the op-math type.
#include "lowering/lowering.h"
#include "lowering/pointwise_util.h"

namespace torch_pjrt::lowering {

namespace {

using namespace pw;

// -lambd <= x <= lambd: where both shrink functions are 0 and their gradients vanish. False for
// NaN, so NaN passes through like any value outside the band.
Val InShrinkBand(Emitter& e, const Val& x, const Val& lambd) {
  return And(e, Cmp(e, "GE", x, Neg(e, lambd)), Cmp(e, "LE", x, lambd));
}

// hardshrink(self, lambd=0.5); lambd is read in self's dtype, as the CPU kernel reads it.
std::vector<Val> LowerHardshrink(LowerCtx& c) {
  ElementType t = Compute(c);
  Val x = In(c, 0, t), lambd = Operand(c, 1, t);
  return {Done(c, Sel(c.e, InShrinkBand(c.e, x, lambd), K(c.e, 0, x), x))};
}

// softshrink(self, lambd=0.5): x - lambd above the band, x + lambd below it, NaN stays NaN.
std::vector<Val> LowerSoftshrink(LowerCtx& c) {
  ElementType t = Compute(c);
  Emitter& e = c.e;
  Val x = In(c, 0, t), lambd = In(c, 1, t);
  Val shrunk = Sel(e, Cmp(e, "GT", x, lambd), Sub(e, x, lambd),
                   Sel(e, Cmp(e, "LT", x, Neg(e, lambd)), Add(e, x, lambd), K(e, 0, x)));
  return {Done(c, Sel(e, IsNan(e, x), x, shrunk))};
}

// hardshrink_backward / softshrink_backward(grad_out, self, lambd): the gradient outside the band
// (lambd read in the tensors' dtype, as both CPU kernels read it).
std::vector<Val> LowerShrinkBackward(LowerCtx& c) {
  ElementType t = Compute(c);
  Val g = In(c, 0, t), x = In(c, 1, t), lambd = Operand(c, 2, t, {0, 1, 2});
  return {Done(c, Sel(c.e, InShrinkBand(c.e, x, lambd), K(c.e, 0, g), g))};
}

// log_sigmoid_forward(self) -> (output, buffer): min(x, 0) - log1p(exp(-|x|)); the buffer holds
// exp(-|x|) as on the CPU (the backward recomputes it anyway).
std::vector<Val> LowerLogSigmoidForward(LowerCtx& c) {
  ElementType t = Compute(c);
  Emitter& e = c.e;
  Val x = In(c, 0, t);
  Val z = Exp(e, Neg(e, Abs(e, x)));
  Val out = Sub(e, Min(e, x, K(e, 0, x)), Log1p(e, z));
  Val buffer = c.out(1).dims == x.dims() ? Done(c, z, 1) : e.Full(0, c.out(1));
  return {Done(c, out), buffer};
}

// log_sigmoid_backward(grad_output, self, buffer): g * (max_deriv - sign * z / (1 + z)) with
// max_deriv, sign = (1, 1) for x < 0 and (0, -1) otherwise.
std::vector<Val> LowerLogSigmoidBackward(LowerCtx& c) {
  ElementType t = Compute(c);
  Emitter& e = c.e;
  Val g = In(c, 0, t), x = In(c, 1, t);
  Val z = Exp(e, Neg(e, Abs(e, x)));
  Val negative = Cmp(e, "LT", x, K(e, 0, x));
  Val max_deriv = Sel(e, negative, K(e, 1, x), K(e, 0, x));
  Val sign = Sel(e, negative, K(e, 1, x), K(e, -1, x));
  Val d = Sub(e, max_deriv, Mul(e, sign, Div(e, z, Add(e, K(e, 1, z), z))));
  return {Done(c, Mul(e, g, d))};
}

Val Sigmoid(Emitter& e, const Val& x) { return Div(e, K(e, 1, x), Add(e, K(e, 1, x), Exp(e, Neg(e, x)))); }

struct GluHalves {
  Val a, b;
  int64_t dim;
};
// The two halves of `x` along `dim` (torch has checked that its size is even).
GluHalves SplitHalves(Emitter& e, const Val& x, int64_t dim_arg) {
  int64_t dim = NormDims({dim_arg}, x.rank())[0];
  int64_t half = x.dims()[dim] / 2;
  return {e.SliceDim(x, dim, 0, half), e.SliceDim(x, dim, half, 2 * half), dim};
}

std::vector<Val> LowerGlu(LowerCtx& c) {  // glu(self, dim=-1): a * sigmoid(b)
  ElementType t = Compute(c);
  GluHalves h = SplitHalves(c.e, c.e.Convert(c.tensor(0), t), c.int_arg(1, -1));
  return {Done(c, Mul(c.e, h.a, Sigmoid(c.e, h.b)))};
}

// glu_backward(grad_output, self, dim): d/da = sig(b) * g, d/db = (1 - sig(b)) * sig(b) * a * g.
std::vector<Val> LowerGluBackward(LowerCtx& c) {
  ElementType t = Compute(c);
  Emitter& e = c.e;
  GluHalves h = SplitHalves(e, e.Convert(c.tensor(1), t), c.int_arg(2));
  Val g = Coerce(e, c.tensor(0), h.a.dims(), t);
  Val sig = Sigmoid(e, h.b);
  Val grad_a = Mul(e, sig, g);
  Val grad_b = Mul(e, Mul(e, Mul(e, Sub(e, K(e, 1, sig), sig), sig), h.a), g);
  return {Done(c, e.Concatenate({grad_a, grad_b}, h.dim))};
}

// _prelu_kernel(self, weight): x where x > 0, else weight * x (weight already broadcastable).
std::vector<Val> LowerPreluKernel(LowerCtx& c) {
  ElementType t = Compute(c);
  Val x = In(c, 0, t), w = In(c, 1, t);
  return {Done(c, Sel(c.e, Cmp(c.e, "GT", x, K(c.e, 0, x)), x, Mul(c.e, w, x)))};
}

// _prelu_kernel_backward(grad_output, self, weight) -> (grad_self, grad_weight): the weight's
// gradient is x * g where x <= 0, summed over the dims the weight was broadcast along.
std::vector<Val> LowerPreluKernelBackward(LowerCtx& c) {
  ElementType t = Compute(c);
  Emitter& e = c.e;
  Dims full = c.out(0).dims;
  Val g = ArgAt(c, 0, t, full), x = ArgAt(c, 1, t, full), w = ArgAt(c, 2, t, full);
  Val positive = Cmp(e, "GT", x, K(e, 0, x));
  Val grad_self = Sel(e, positive, g, Mul(e, w, g));
  Val grad_weight = Sel(e, positive, K(e, 0, x), Mul(e, x, g));
  return {Done(c, grad_self, 0), Done(c, SumTo(e, grad_weight, c.out(1).dims, t), 1)};
}

// threshold(self, threshold, value): value where x <= threshold, else x (NaN stays).
std::vector<Val> LowerThreshold(LowerCtx& c) {
  ElementType t = Compute(c);
  Val x = In(c, 0, t);
  return {Done(c, Sel(c.e, Cmp(c.e, "LE", x, In(c, 1, t)), In(c, 2, t), x))};
}

}  // namespace

void RegisterActivationOps(Registry& r) {
  r.Add("threshold", LowerThreshold);
  r.Add("hardshrink", LowerHardshrink);
  r.Add("hardshrink_backward", LowerShrinkBackward);
  r.Add("softshrink", LowerSoftshrink).checked_scalars = {1};  // lambd >= 0
  r.Add("softshrink_backward", LowerShrinkBackward);
  r.Add("log_sigmoid_forward", LowerLogSigmoidForward);
  r.Add("log_sigmoid_backward", LowerLogSigmoidBackward);
  r.Add("glu", LowerGlu);
  r.Add("glu_backward", LowerGluBackward);
  r.Add("_prelu_kernel", LowerPreluKernel);
  r.Add("_prelu_kernel_backward", LowerPreluKernelBackward);
}

}  // namespace torch_pjrt::lowering
