// Neural-network ops: convolution (any rank, grouped, transposed) and its gradients
// (pooling: pooling.cc), batch/layer/group norm, and losses (nll, mse),
// with their backward formulas.
// Convolution gradients follow the standard XLA formulation (the one JAX uses): the input
// gradient is a convolution of the output gradient with the spatially reversed kernel, the
// weight gradient a convolution of the input with the output gradient, batch and feature swapped.
#include <algorithm>
#include <cmath>

#include "lowering/helpers.h"
#include "lowering/host_calls.h"

namespace torch_pjrt::lowering {

namespace {

using Pads = std::vector<std::pair<int64_t, int64_t>>;

int64_t Dilated(int64_t size, int64_t dilation) { return size == 0 ? 0 : 1 + dilation * (size - 1); }

// "[b, f, 0, 1]" style layout strings for a rank-(2+n) convolution operand.
std::string Layout(const char* first, const char* second, int64_t spatial) {
  std::string s = std::string("[") + first + ", " + second;
  for (int64_t i = 0; i < spatial; ++i) s += ", " + std::to_string(i);
  return s + "]";
}

Dims Spatial(const Val& v) { return Dims(v.dims().begin() + 2, v.dims().end()); }

// Repeats a per-spatial-dim list given with a single value (torch's int[2] accepts [k]).
Dims Expand(const Dims& d, size_t n, int64_t fill) {
  if (d.empty()) return Dims(n, fill);
  if (d.size() == 1 && n > 1) return Dims(n, d[0]);
  return d;
}

struct ConvParams {
  Dims stride, padding, dilation;
  int64_t groups = 1;
};

ConvParams ReadConvParams(LowerCtx& c, size_t stride_i, size_t padding_i, size_t dilation_i,
                          size_t groups_i, size_t spatial) {
  return ConvParams{Expand(c.int_list(stride_i), spatial, 1), Expand(c.int_list(padding_i), spatial, 0),
                    Expand(c.int_list(dilation_i), spatial, 1), c.int_arg(groups_i)};
}

// y = conv(x, w): x [N, C, ...], w [O, C/groups, ...].
Val ConvForward(Emitter& e, const Val& x, const Val& w, const ConvParams& p, ElementType acc) {
  int64_t n = x.rank() - 2;
  Emitter::ConvDims d;
  d.layout = Layout("b", "f", n) + "x" + Layout("o", "i", n) + "->" + Layout("b", "f", n);
  d.stride = p.stride;
  d.lhs_dilation = Dims(n, 1);
  d.rhs_dilation = p.dilation;
  d.feature_group_count = p.groups;
  TensorType out{acc, {x.dims()[0], w.dims()[0]}};
  for (int64_t i = 0; i < n; ++i) {
    d.padding.push_back({p.padding[i], p.padding[i]});
    int64_t in = x.dims()[2 + i] + 2 * p.padding[i];
    int64_t k = Dilated(w.dims()[2 + i], p.dilation[i]);
    out.dims.push_back(in < k ? 0 : (in - k) / p.stride[i] + 1);
  }
  return e.Convolution(x, w, d, out);
}

// Gradient of conv(x, w) with respect to x, for x of spatial size `in_spatial`.
Val ConvGradInput(Emitter& e, const Val& g, const Val& w, const Dims& in_spatial, const ConvParams& p,
                  ElementType acc) {
  int64_t n = g.rank() - 2;
  int64_t groups = p.groups;
  // w [O, I/G, k] -> [O/G, I, k] so that a grouped convolution maps O features back to I.
  Dims wd = w.dims();
  int64_t o = wd[0], ig = wd[1];
  Val wk = w;
  if (groups > 1) {
    Dims split{groups, o / groups, ig};
    for (int64_t i = 0; i < n; ++i) split.push_back(wd[2 + i]);
    wk = e.Reshape(wk, split);
    Dims perm{1, 0, 2};
    for (int64_t i = 0; i < n; ++i) perm.push_back(3 + i);
    wk = e.Transpose(wk, perm);
    Dims merged{o / groups, groups * ig};
    for (int64_t i = 0; i < n; ++i) merged.push_back(wd[2 + i]);
    wk = e.Reshape(wk, merged);
  }
  Dims spatial_dims;
  for (int64_t i = 0; i < n; ++i) spatial_dims.push_back(2 + i);
  wk = e.Reverse(wk, spatial_dims);
  Emitter::ConvDims d;
  d.layout = Layout("b", "f", n) + "x" + Layout("i", "o", n) + "->" + Layout("b", "f", n);
  d.stride = Dims(n, 1);
  d.lhs_dilation = p.stride;
  d.rhs_dilation = p.dilation;
  d.feature_group_count = groups;
  TensorType out{acc, {g.dims()[0], groups * ig}};
  for (int64_t i = 0; i < n; ++i) {
    int64_t k = Dilated(wd[2 + i], p.dilation[i]);
    int64_t before = k - p.padding[i] - 1;
    int64_t after = in_spatial[i] + k - 1 - Dilated(g.dims()[2 + i], p.stride[i]) - before;
    d.padding.push_back({before, after});
    out.dims.push_back(in_spatial[i]);
  }
  return e.Convolution(g, wk, d, out);
}

// Gradient of conv(x, w) with respect to w (of spatial size `k_spatial`).
Val ConvGradWeight(Emitter& e, const Val& x, const Val& g, const Dims& k_spatial, const ConvParams& p,
                   ElementType acc) {
  int64_t n = x.rank() - 2;
  Emitter::ConvDims d;
  // Batch and feature swap roles: the result's "batch" is the input channel, its "feature" the
  // output channel.
  d.layout = Layout("f", "b", n) + "x" + Layout("i", "o", n) + "->" + Layout("f", "b", n);
  d.stride = p.dilation;
  d.lhs_dilation = Dims(n, 1);
  d.rhs_dilation = p.stride;
  d.batch_group_count = p.groups;
  TensorType out{acc, {g.dims()[1], x.dims()[1] / p.groups}};
  for (int64_t i = 0; i < n; ++i) {
    int64_t lo = p.padding[i];
    int64_t in = x.dims()[2 + i];
    int64_t out_dilated = Dilated(g.dims()[2 + i], p.stride[i]);
    int64_t k_dilated = Dilated(k_spatial[i], p.dilation[i]);
    int64_t hi = (out_dilated - in) + (k_dilated - lo - 1);
    d.padding.push_back({lo, hi});
    out.dims.push_back(k_spatial[i]);
  }
  return e.Convolution(x, g, d, out);
}

// ------------------------------------------------------------ patch convolutions
// A convolution whose stride equals its kernel, without padding, dilation or groups, reads each
// input element once (ViT's patch embedding: 16x16 kernel, stride 16). It is a matrix product of
// the input's non-overlapping patches with the weight, contracted over (channel, kernel offset),
// which XLA runs as one dot instead of a convolution (or, on the CPU plugin, a host-kernel call
// and its hand-off: ViT-tiny's training step 10% faster). 1x1 convolutions stay convolutions:
// as dots MobileNetV3-small ran 8-15% slower (docs/design.md, "Patch convolutions as dots").
bool IsPatchConvolution(const Val& w, const ConvParams& p, bool transposed) {
  if (transposed || p.groups != 1) return false;
  bool larger_than_one = false;
  for (size_t i = 0; i < p.stride.size(); ++i) {
    int64_t k = w.dims()[2 + i];
    if (p.stride[i] != k || p.padding[i] != 0 || p.dilation[i] != 1) return false;
    larger_than_one |= k > 1;
  }
  return larger_than_one;
}

// x [N, C, H0, H1, ...] -> [N, C, H0/k0, k0, H1/k1, k1, ...], dropping the rows and columns no
// patch covers (as the convolution does).
Val Patches(Emitter& e, const Val& x, const Dims& kernel) {
  Dims limit = x.dims(), split{x.dims()[0], x.dims()[1]};
  for (size_t i = 0; i < kernel.size(); ++i) {
    int64_t patches = x.dims()[2 + i] / kernel[i];
    limit[2 + i] = patches * kernel[i];
    split.push_back(patches);
    split.push_back(kernel[i]);
  }
  Val covered = e.Slice(x, Dims(x.rank(), 0), limit, Dims(x.rank(), 1));
  return e.Reshape(covered, split);
}

// The patches' (channel, offset) dimensions: 1, 3, 5, ...
Dims PatchContraction(size_t spatial) {
  Dims d{1};
  for (size_t i = 0; i < spatial; ++i) d.push_back(3 + 2 * i);
  return d;
}

// y [N, O, P0, P1, ...] = sum over c, offsets of patches(x) * w.
Val PatchConvForward(Emitter& e, const Val& x, const Val& w, ElementType acc) {
  size_t n = static_cast<size_t>(w.rank() - 2);
  Dims w_contract;
  for (size_t i = 1; i < 2 + n; ++i) w_contract.push_back(static_cast<int64_t>(i));
  Val y = e.DotGeneral(Patches(e, x, Spatial(w)), w, {}, {}, PatchContraction(n), w_contract, acc);
  Dims perm{0, static_cast<int64_t>(n) + 1};  // [N, P..., O] -> [N, O, P...]
  for (size_t i = 0; i < n; ++i) perm.push_back(1 + static_cast<int64_t>(i));
  return e.Transpose(y, perm);
}

// dx: each patch gets g's column times the weight; positions no patch covers get zero.
Val PatchConvGradInput(Emitter& e, const Val& g, const Val& w, const Dims& in_spatial, ElementType acc) {
  int64_t n = w.rank() - 2;
  Val d = e.DotGeneral(g, w, {}, {}, {1}, {0}, acc);  // [N, P..., C, k...]
  Dims perm{0, n + 1}, merged{g.dims()[0], w.dims()[1]}, hi{0, 0};
  for (int64_t i = 0; i < n; ++i) {
    perm.push_back(1 + i);
    perm.push_back(n + 2 + i);
    merged.push_back(g.dims()[2 + i] * w.dims()[2 + i]);
    hi.push_back(in_spatial[i] - merged.back());
  }
  Val dx = e.Reshape(e.Transpose(d, perm), merged);
  return e.Pad(dx, e.Full(0.0, TensorType{acc, {}}), Dims(dx.rank(), 0), hi, Dims(dx.rank(), 0));
}

// dw [O, C, k...] = sum over batch and patches of g * patches(x).
Val PatchConvGradWeight(Emitter& e, const Val& x, const Val& g, const Dims& kernel, ElementType acc) {
  size_t n = kernel.size();
  Dims g_contract{0}, p_contract{0};
  for (size_t i = 0; i < n; ++i) {
    g_contract.push_back(2 + static_cast<int64_t>(i));
    p_contract.push_back(2 + 2 * static_cast<int64_t>(i));
  }
  return e.DotGeneral(g, Patches(e, x, kernel), {}, {}, g_contract, p_contract, acc);
}

Val AddBias(Emitter& e, const Val& y, const Val& bias) {
  return e.Binary("add", y, e.BroadcastInDim(e.Convert(bias, y.dtype()), y.dims(), {1}));
}

// convolution_overrideable(input, weight, bias?, stride, padding, dilation, transposed,
//                          output_padding, groups)
// Host kernels (TargetOptions::host_kernels): float32 convolutions run as torch's own CPU
// convolution inside the program (host_kernels/convolution.cc), which XLA:CPU's Eigen
// convolution trails by 2-20x at the small spatial sizes of real models (docs/design.md).
bool UseHostConvolution(const Emitter& e, const Val& x, const Val& w, ElementType out) {
  return e.target().host_kernels && x.dtype() == ElementType::kF32 && w.dtype() == ElementType::kF32 &&
         out == ElementType::kF32;
}

// The attributes of torch_pjrt_conv and torch_pjrt_conv_backward: convolution's arguments.
std::string HostConvAttrs(const ConvParams& p, bool transposed, const Dims& output_padding) {
  return "dilation = " + ArrayAttr(p.dilation) + ", groups = " + std::to_string(p.groups) +
         " : i64, output_padding = " + ArrayAttr(output_padding) + ", padding = " + ArrayAttr(p.padding) +
         ", stride = " + ArrayAttr(p.stride) + ", transposed = " + (transposed ? "1" : "0") + " : i64";
}

std::vector<Val> LowerConvolution(LowerCtx& c) {
  Val x = c.tensor(0), w = c.tensor(1);
  size_t spatial = static_cast<size_t>(x.rank() - 2);
  ConvParams p = ReadConvParams(c, 3, 4, 5, 8, spatial);
  ElementType acc = Opmath(c.out().dtype);
  ElementType t = c.out().dtype;
  Val xc = c.e.Convert(x, t), wc = c.e.Convert(w, t);
  Val y;
  if (IsPatchConvolution(w, p, c.bool_arg(6))) {
    y = PatchConvForward(c.e, xc, wc, acc);
  } else if (UseHostConvolution(c.e, x, w, t)) {
    Dims output_padding = Expand(c.int_list(7), spatial, 0);
    y = CallHostKernel(c.e, "torch_pjrt_conv", {{x, true}, {w, false}}, {{c.out(), true}},
                       HostConvAttrs(p, c.bool_arg(6), output_padding),
                       ConvPrefersChannelsLast(x.type, w.type, c.out()))[0];
  } else if (c.bool_arg(6)) {  // transposed: the input-gradient of a convolution with this weight
    Dims out_spatial(c.out().dims.begin() + 2, c.out().dims.end());
    y = ConvGradInput(c.e, xc, wc, out_spatial, p, acc);
  } else {
    y = ConvForward(c.e, xc, wc, p, acc);
  }
  if (!c.is_none(2)) y = AddBias(c.e, y, c.tensor(2));
  return {c.e.Convert(y, t)};
}

// convolution_backward_overrideable(grad_output, input, weight, stride, padding, dilation,
//                                   transposed, output_padding, groups, output_mask)
std::vector<Val> LowerConvolutionBackward(LowerCtx& c) {
  Val g = c.tensor(0), x = c.tensor(1), w = c.tensor(2);
  size_t spatial = static_cast<size_t>(x.rank() - 2);
  ConvParams p = ReadConvParams(c, 3, 4, 5, 8, spatial);
  bool transposed = c.bool_arg(6);
  Dims mask = c.int_list(9);
  std::vector<Val> out(3);
  if (IsPatchConvolution(w, p, transposed)) {
    if (mask[0]) {
      ElementType t = c.out(0).dtype;
      out[0] = c.e.Convert(PatchConvGradInput(c.e, c.e.Convert(g, t), c.e.Convert(w, t), Spatial(x), Opmath(t)), t);
    }
    if (mask[1]) {
      ElementType t = c.out(1).dtype;
      out[1] = c.e.Convert(PatchConvGradWeight(c.e, c.e.Convert(x, t), c.e.Convert(g, t), Spatial(w), Opmath(t)), t);
    }
    mask[0] = mask[1] = 0;
  } else if ((mask[0] || mask[1]) && UseHostConvolution(c.e, x, w, g.dtype())) {
    std::string attrs = HostConvAttrs(p, transposed, Expand(c.int_list(7), spatial, 0)) +
                        ", grad_input = " + std::to_string(mask[0]) + " : i64, grad_weight = " +
                        std::to_string(mask[1]) + " : i64";
    std::vector<Val> grads = CallHostKernel(c.e, "torch_pjrt_conv_backward", {{g, true}, {x, true}, {w, false}},
                                            {{x.type, true}, {w.type, false}}, attrs,
                                            ConvPrefersChannelsLast(x.type, w.type, g.type));
    if (mask[0]) out[0] = grads[0];
    if (mask[1]) out[1] = grads[1];
    mask[0] = mask[1] = 0;
  }
  if (mask[0]) {
    ElementType acc = Opmath(c.out(0).dtype);
    out[0] = transposed ? ConvForward(c.e, g, w, p, acc) : ConvGradInput(c.e, g, w, Spatial(x), p, acc);
  }
  if (mask[1]) {
    ElementType acc = Opmath(c.out(1).dtype);
    out[1] = transposed ? ConvGradWeight(c.e, g, x, Spatial(w), p, acc)
                        : ConvGradWeight(c.e, x, g, Spatial(w), p, acc);
  }
  if (mask[2]) {
    Dims dims{0};
    for (int64_t i = 2; i < g.rank(); ++i) dims.push_back(i);
    out[2] = SumDims(c.e, g, dims, Opmath(c.out(2).dtype));
  }
  return out;
}

// ------------------------------------------------------------ normalization

Dims AllBut(int64_t rank, int64_t keep) {
  Dims d;
  for (int64_t i = 0; i < rank; ++i) {
    if (i != keep) d.push_back(i);
  }
  return d;
}

Val PerChannel(Emitter& e, const Val& v, const Dims& dims) { return e.BroadcastInDim(v, dims, {1}); }

// torch's CPU kernel normalizes in one of two forms (OpLowering::cpu_contiguous_path_args): with
// the input contiguous (or channels-last) and every parameter and statistic contiguous, folded,
// y = x * alpha + beta, alpha = invstd * weight, beta = bias - mean * alpha; otherwise centered,
// y = ((x - mean) * invstd) * weight + bias. They differ for infinite parameters (NaN where the
// centered form gives +-inf), in training and in evaluation alike.
struct BatchNormAffine {
  Val alpha, beta, bias;
};
BatchNormAffine AffineOf(LowerCtx& c, size_t w_i, size_t b_i, const Val& mean, const Val& invstd) {
  Emitter& e = c.e;
  BatchNormAffine a{invstd, Val(), e.Full(0, invstd.type)};
  if (!c.is_none(w_i)) a.alpha = e.Binary("multiply", a.alpha, e.Convert(c.tensor(w_i), invstd.dtype()));
  if (!c.is_none(b_i)) a.bias = e.Convert(c.tensor(b_i), invstd.dtype());
  a.beta = e.Binary("subtract", a.bias, e.Binary("multiply", mean, a.alpha));
  return a;
}

Val FoldedBatchNorm(LowerCtx& c, const Val& xc, const Val& mean, const Val& invstd, size_t w_i, size_t b_i,
                    bool half) {
  Emitter& e = c.e;
  BatchNormAffine a = AffineOf(c, w_i, b_i, mean, invstd);
  Val y = e.Binary("add", e.Binary("multiply", xc, PerChannel(e, a.alpha, xc.dims())), PerChannel(e, a.beta, xc.dims()));
  if (!half) return y;
  // CPU's half-type kernel rounds x * alpha before adding beta; XLA contracts the two into an FMA,
  // which leaves the rounding of beta behind: a constant channel of 10000 gave 0.082 instead of
  // 0. The centered form, (x - mean) * alpha + bias, has no such cancellation; the folded one
  // stays where alpha is not finite (NaN, as on the CPU).
  Val centered = e.Binary("add", e.Binary("multiply", e.Binary("subtract", xc, PerChannel(e, mean, xc.dims())),
                                          PerChannel(e, a.alpha, xc.dims())),
                          PerChannel(e, a.bias, xc.dims()));
  return e.Select(PerChannel(e, IsFinite(e, a.alpha), xc.dims()), centered, y);
}

Val CenteredBatchNorm(LowerCtx& c, const Val& xc, const Val& mean, const Val& invstd, size_t w_i, size_t b_i) {
  Emitter& e = c.e;
  Val y = e.Binary("multiply", e.Binary("subtract", xc, PerChannel(e, mean, xc.dims())), PerChannel(e, invstd, xc.dims()));
  if (!c.is_none(w_i)) y = e.Binary("multiply", y, PerChannel(e, e.Convert(c.tensor(w_i), xc.dtype()), xc.dims()));
  if (!c.is_none(b_i)) y = e.Binary("add", y, PerChannel(e, e.Convert(c.tensor(b_i), xc.dtype()), xc.dims()));
  return y;
}

// native_batch_norm(input, weight?, bias?, running_mean?, running_var?, training, momentum, eps)
//   -> (output, save_mean, save_invstd) [+ new running_mean, running_var when present]
std::vector<Val> BatchNorm(LowerCtx& c, size_t w_i, size_t b_i, size_t rm_i, size_t rv_i, bool training,
                           double momentum, double eps, size_t num_results) {
  Val x = c.tensor(0);
  Emitter& e = c.e;
  ElementType acc = Opmath(c.out(0).dtype);
  Val xc = e.Convert(x, acc);
  Dims reduce = AllBut(x.rank(), 1);
  int64_t count = x.numel() / std::max<int64_t>(x.dims()[1], 1);
  Val mean, var;
  bool half = acc != x.dtype();  // float16/bfloat16, whose statistics CPU sums in float
  if (training) {
    if (x.dtype() == ElementType::kF64 || half) {
      mean = e.Binary("divide", SumDims(e, xc, reduce, acc), e.Full(static_cast<double>(count), TensorType{acc, {x.dims()[1]}}));
      Val centered = e.Binary("subtract", xc, PerChannel(e, mean, xc.dims()));
      var = e.Binary("divide", SumDims(e, e.Binary("multiply", centered, centered), reduce, acc),
                     e.Full(static_cast<double>(count), mean.type));
    } else {
      // Means of x / n and of (x - mean)^2 / n: torch sums float32 (and half) values in double
      // (float), where these sums cannot overflow; a channel of values near float32's maximum
      // has a finite mean there.
      mean = ScaledMean(e, xc, reduce);
      Val centered = e.Binary("subtract", xc, PerChannel(e, mean, xc.dims()));
      var = ScaledMean(e, e.Binary("multiply", centered, centered), reduce);
    }
  } else {
    mean = e.Convert(c.tensor(rm_i), acc);
    var = e.Convert(c.tensor(rv_i), acc);
  }
  Val invstd = e.Unary("rsqrt", e.Binary("add", var, e.Full(eps, var.type)));
  Val y = c.cpu_contiguous_path() ? FoldedBatchNorm(c, xc, mean, invstd, w_i, b_i, half)
                                  : CenteredBatchNorm(c, xc, mean, invstd, w_i, b_i);
  std::vector<Val> out{e.Convert(y, c.out(0).dtype)};
  // save_mean / save_invstd: torch returns empty tensors for them in some eval paths.
  out.push_back(c.out(1).dims.empty() || c.out(1).dims[0] == x.dims()[1] ? e.Convert(mean, c.out(1).dtype) : e.Full(0, c.out(1)));
  out.push_back(c.out(2).dims.empty() || c.out(2).dims[0] == x.dims()[1] ? e.Convert(invstd, c.out(2).dtype) : e.Full(0, c.out(2)));
  while (out.size() < num_results) out.push_back(e.Full(0, c.out(out.size())));
  // Running statistics (an extra mutation when present): updated only in training.
  for (size_t i : {rm_i, rv_i}) {
    if (c.is_none(i)) continue;
    Val running = c.tensor(i);
    if (!training) {
      out.push_back(running);
      continue;
    }
    Val batch = i == rm_i ? mean
                          : e.Binary("multiply", var, e.Full(static_cast<double>(count) / std::max<int64_t>(count - 1, 1), var.type));
    Val r = e.Convert(running, acc);
    Val updated = e.Binary("add", e.Binary("multiply", r, e.Full(1 - momentum, r.type)),
                           e.Binary("multiply", batch, e.Full(momentum, r.type)));
    out.push_back(e.Convert(updated, running.dtype()));
  }
  return out;
}

// Batch norm in evaluation is increasing (OpLowering::increasing) where, in every channel, its
// folded form's alpha and its centered form's invstd and weight are finite and positive and beta,
// mean and bias finite: each step of either form is then non-decreasing in x and makes no NaN
// from a non-NaN value (no inf - inf, no inf * 0). Not in training, whose statistics come from x.
Increasing BatchNormIncreasing(LowerCtx& c, size_t w_i, size_t b_i, size_t rm_i, size_t rv_i, double eps) {
  if (c.is_none(rm_i) || c.is_none(rv_i) || !IsFloating(c.tensor(0).dtype())) return {};
  Emitter& e = c.e;
  ElementType acc = Opmath(c.out(0).dtype);
  Val mean = e.Convert(c.tensor(rm_i), acc), var = e.Convert(c.tensor(rv_i), acc);
  Val invstd = e.Unary("rsqrt", e.Binary("add", var, e.Full(eps, var.type)));
  BatchNormAffine a = AffineOf(c, w_i, b_i, mean, invstd);
  auto positive = [&](const Val& v) { return e.Binary("and", IsFinite(e, v), e.Compare("GT", v, e.Full(0, v.type))); };
  Val ok = e.Binary("and", positive(a.alpha), positive(invstd));
  if (!c.is_none(w_i)) ok = e.Binary("and", ok, positive(e.Convert(c.tensor(w_i), acc)));
  for (const Val& v : {a.beta, mean, a.bias}) ok = e.Binary("and", ok, IsFinite(e, v));
  return {true, e.Reduce(ok, e.Scalar(1, ElementType::kBool), {0}, "and")};
}
Increasing NativeBatchNormIncreasing(LowerCtx& c) {  // also _native_batch_norm_legit
  if (c.bool_arg(5)) return {};
  return BatchNormIncreasing(c, 1, 2, 3, 4, c.double_arg(7));
}
Increasing BatchNormNoTrainingIncreasing(LowerCtx& c) {  // also _batch_norm_no_update
  return BatchNormIncreasing(c, 1, 2, 3, 4, c.double_arg(6));
}

std::vector<Val> LowerNativeBatchNorm(LowerCtx& c) {
  return BatchNorm(c, 1, 2, 3, 4, c.bool_arg(5), c.double_arg(6), c.double_arg(7), 3);
}
// _native_batch_norm_legit(input, weight?, bias?, running_mean!, running_var!, training, momentum, eps)
std::vector<Val> LowerBatchNormLegit(LowerCtx& c) {
  return BatchNorm(c, 1, 2, 3, 4, c.bool_arg(5), c.double_arg(6), c.double_arg(7), 3);
}
// _native_batch_norm_legit.no_stats(input, weight?, bias?, training, momentum, eps)
std::vector<Val> LowerBatchNormLegitNoStats(LowerCtx& c) {
  return BatchNorm(c, 1, 2, 100, 101, true, c.double_arg(4), c.double_arg(5), 3);
}
// _native_batch_norm_legit_no_training(input, weight?, bias?, running_mean, running_var, momentum, eps)
// Its running statistics are read-only (no mutation outputs), unlike _native_batch_norm_legit's.
std::vector<Val> LowerBatchNormLegitNoTraining(LowerCtx& c) {
  std::vector<Val> r = BatchNorm(c, 1, 2, 3, 4, false, c.double_arg(5), c.double_arg(6), 3);
  r.resize(3);
  return r;
}
// _batch_norm_with_update(input, weight?, bias?, running_mean!, running_var!, momentum, eps)
//   -> (output, save_mean, save_invstd, reserve)
std::vector<Val> LowerBatchNormWithUpdate(LowerCtx& c) {
  return BatchNorm(c, 1, 2, 3, 4, true, c.double_arg(5), c.double_arg(6), 4);
}
// _batch_norm_no_update(input, weight?, bias?, running_mean?, running_var?, momentum, eps)
std::vector<Val> LowerBatchNormNoUpdate(LowerCtx& c) {
  bool have_stats = !c.is_none(3) && !c.is_none(4);
  std::vector<Val> r = BatchNorm(c, 1, 2, 3, 4, !have_stats, c.double_arg(5), c.double_arg(6), 4);
  r.resize(4);  // no_update never writes the running statistics
  return r;
}

// Shared backward: grad wrt input, weight, bias of a batch norm with per-channel mean/invstd.
std::vector<Val> BatchNormBackward(LowerCtx& c, const Val& g, const Val& x, size_t w_i, const Val& mean,
                                   const Val& invstd, bool training, const Dims& mask) {
  // torch's formulas and order (batch_norm_backward_cpu): dotp = sum((x - mean) * g),
  // grad_weight = dotp * invstd, grad_bias = sum(g), and in training
  // dx = (g - sum(g) / n - (x - mean) * dotp * invstd^2 / n) * invstd * w (so a channel whose
  // variance overflows gives NaN gradients there, not 0).
  Emitter& e = c.e;
  ElementType acc = Opmath(c.out(0).dtype == ElementType::kInvalid ? x.dtype() : c.out(0).dtype);
  Val gc = e.Convert(g, acc), xc = e.Convert(x, acc);
  Val m = e.Convert(mean, acc), is = e.Convert(invstd, acc);
  Dims reduce = AllBut(x.rank(), 1);
  double count = static_cast<double>(x.numel() / std::max<int64_t>(x.dims()[1], 1));
  Val xmu = e.Binary("subtract", xc, PerChannel(e, m, xc.dims()));
  Val sum_g = SumDims(e, gc, reduce, acc);
  Val dotp = SumDims(e, e.Binary("multiply", xmu, gc), reduce, acc);
  Val w = c.is_none(w_i) ? e.Full(1, TensorType{acc, {x.dims()[1]}}) : e.Convert(c.tensor(w_i), acc);
  std::vector<Val> out(3);
  if (mask[0]) {
    Val scale = e.Binary("multiply", is, w);
    Val gi;
    if (training) {
      Val n = e.Full(count, sum_g.type);
      Val k = e.Binary("divide", e.Binary("multiply", e.Binary("multiply", dotp, is), is), n);
      Val grad_mean = e.Binary("divide", sum_g, n);
      Val dx = e.Binary("multiply", xmu, PerChannel(e, k, xc.dims()));
      gi = e.Binary("subtract", e.Binary("subtract", gc, PerChannel(e, grad_mean, xc.dims())), dx);
      gi = e.Binary("multiply", gi, PerChannel(e, scale, xc.dims()));
    } else {
      gi = e.Binary("multiply", gc, PerChannel(e, scale, xc.dims()));
    }
    out[0] = gi;
  }
  if (mask[1]) out[1] = e.Binary("multiply", dotp, is);
  if (mask[2]) out[2] = sum_g;
  return out;
}

// native_batch_norm_backward(grad_out, input, weight?, running_mean?, running_var?, save_mean?,
//                            save_invstd?, train, eps, output_mask)
// also batch_norm_backward(grad_out, input, weight, running_mean?, running_var?, save_mean?,
//                          save_var?, update, eps, output_mask, reserve): the same arguments in
// the same places (its save_var holds the inverse std, as native_batch_norm's results do).
std::vector<Val> LowerNativeBatchNormBackward(LowerCtx& c) {
  Val g = c.tensor(0), x = c.tensor(1);
  bool train = c.bool_arg(7);
  double eps = c.double_arg(8);
  Val mean, invstd;
  if (train) {
    mean = c.tensor(5);
    invstd = c.tensor(6);
  } else {
    mean = c.tensor(3);
    Val var = c.e.Convert(c.tensor(4), Opmath(x.dtype()));
    invstd = c.e.Unary("rsqrt", c.e.Binary("add", var, c.e.Full(eps, var.type)));
  }
  return BatchNormBackward(c, g, x, 2, mean, invstd, train, c.int_list(9));
}
// native_layer_norm(input, normalized_shape, weight?, bias?, eps) -> (out, mean, rstd)
std::vector<Val> LowerLayerNorm(LowerCtx& c) {
  Val x = c.tensor(0);
  Emitter& e = c.e;
  int64_t k = static_cast<int64_t>(c.int_list(1).size());
  int64_t axis = x.rank() - k;
  ElementType acc = Opmath(c.out(0).dtype);
  Val xc = e.Convert(x, acc);
  Dims reduce;
  for (int64_t i = axis; i < x.rank(); ++i) reduce.push_back(i);
  double count = 1;
  for (int64_t i = axis; i < x.rank(); ++i) count *= static_cast<double>(x.dims()[i]);
  Dims lead(x.dims().begin(), x.dims().begin() + axis);
  Dims keep;
  for (int64_t i = 0; i < axis; ++i) keep.push_back(i);
  // Plain sums, like torch's: a row whose sum overflows normalizes to NaN on CPU eager too.
  Val mean = e.Binary("divide", SumDims(e, xc, reduce, acc), e.Full(count, TensorType{acc, lead}));
  Val centered = e.Binary("subtract", xc, e.BroadcastInDim(mean, xc.dims(), keep));
  Val var = e.Binary("divide", SumDims(e, e.Binary("multiply", centered, centered), reduce, acc),
                     e.Full(count, mean.type));
  Val rstd = e.Unary("rsqrt", e.Binary("add", var, e.Full(c.double_arg(4), var.type)));
  Val y = e.Binary("multiply", centered, e.BroadcastInDim(rstd, xc.dims(), keep));
  Dims trailing;
  for (int64_t i = axis; i < x.rank(); ++i) trailing.push_back(i);
  if (!c.is_none(2)) y = e.Binary("multiply", y, e.BroadcastInDim(e.Convert(c.tensor(2), acc), xc.dims(), trailing));
  if (!c.is_none(3)) y = e.Binary("add", y, e.BroadcastInDim(e.Convert(c.tensor(3), acc), xc.dims(), trailing));
  return {e.Convert(y, c.out(0).dtype), e.Convert(e.Reshape(mean, c.out(1).dims), c.out(1).dtype),
          e.Convert(e.Reshape(rstd, c.out(2).dims), c.out(2).dtype)};
}

// native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight?, bias?, output_mask)
std::vector<Val> LowerLayerNormBackward(LowerCtx& c) {
  Val g = c.tensor(0), x = c.tensor(1);
  Emitter& e = c.e;
  int64_t k = static_cast<int64_t>(c.int_list(2).size());
  int64_t axis = x.rank() - k;
  Dims mask = c.int_list(7);
  ElementType acc = Opmath(x.dtype());
  Val gc = e.Convert(g, acc), xc = e.Convert(x, acc);
  Dims lead(x.dims().begin(), x.dims().begin() + axis);
  Dims keep, reduce, trailing(x.dims().begin() + axis, x.dims().end());
  for (int64_t i = 0; i < axis; ++i) keep.push_back(i);
  for (int64_t i = axis; i < x.rank(); ++i) reduce.push_back(i);
  double count = static_cast<double>(NumElements(trailing));
  Val mean = e.BroadcastInDim(e.Reshape(e.Convert(c.tensor(3), acc), lead), xc.dims(), keep);
  Val rstd = e.BroadcastInDim(e.Reshape(e.Convert(c.tensor(4), acc), lead), xc.dims(), keep);
  Val xhat = e.Binary("multiply", e.Binary("subtract", xc, mean), rstd);
  Dims trailing_dims;
  for (int64_t i = axis; i < x.rank(); ++i) trailing_dims.push_back(i);
  Val gw = gc;
  if (!c.is_none(5)) gw = e.Binary("multiply", gc, e.BroadcastInDim(e.Convert(c.tensor(5), acc), xc.dims(), trailing_dims));
  std::vector<Val> out(3);
  if (mask[0]) {
    Val sum_gw = e.BroadcastInDim(SumDims(e, gw, reduce, acc), xc.dims(), keep);
    Val sum_gwx = e.BroadcastInDim(SumDims(e, e.Binary("multiply", gw, xhat), reduce, acc), xc.dims(), keep);
    Val n = e.Full(count, xc.type);
    Val inner = e.Binary("subtract", e.Binary("subtract", e.Binary("multiply", gw, n), sum_gw),
                         e.Binary("multiply", xhat, sum_gwx));
    out[0] = e.Binary("divide", e.Binary("multiply", inner, rstd), n);
  }
  if (mask[1] && !c.is_none(5)) out[1] = e.Reshape(SumDims(e, e.Binary("multiply", gc, xhat), keep, acc), trailing);
  if (mask[2] && !c.is_none(6)) out[2] = e.Reshape(SumDims(e, gc, keep, acc), trailing);
  return out;
}

// native_group_norm(input, weight?, bias?, N, C, HxW, group, eps) -> (out, mean [N, G], rstd [N, G])
std::vector<Val> LowerGroupNorm(LowerCtx& c) {
  Val x = c.tensor(0);
  Emitter& e = c.e;
  int64_t n = c.int_arg(3), ch = c.int_arg(4), hw = c.int_arg(5), groups = c.int_arg(6);
  ElementType acc = Opmath(c.out(0).dtype);
  Val xg = e.Reshape(e.Convert(x, acc), {n, groups, ch / groups * hw});
  double count = static_cast<double>(ch / groups * hw);
  // Plain sums, like torch's: a group whose sum overflows normalizes to NaN on CPU eager too.
  Val mean = e.Binary("divide", SumDims(e, xg, {2}, acc), e.Full(count, TensorType{acc, {n, groups}}));
  Val centered = e.Binary("subtract", xg, e.BroadcastInDim(mean, xg.dims(), {0, 1}));
  Val var = e.Binary("divide", SumDims(e, e.Binary("multiply", centered, centered), {2}, acc), e.Full(count, mean.type));
  Val rstd = e.Unary("rsqrt", e.Binary("add", var, e.Full(c.double_arg(7), var.type)));
  Val y = e.Reshape(e.Binary("multiply", centered, e.BroadcastInDim(rstd, xg.dims(), {0, 1})), x.dims());
  if (!c.is_none(1)) y = e.Binary("multiply", y, e.BroadcastInDim(e.Convert(c.tensor(1), acc), x.dims(), {1}));
  if (!c.is_none(2)) y = e.Binary("add", y, e.BroadcastInDim(e.Convert(c.tensor(2), acc), x.dims(), {1}));
  return {e.Convert(y, c.out(0).dtype), e.Convert(mean, c.out(1).dtype), e.Convert(rstd, c.out(2).dtype)};
}

// native_group_norm_backward(grad_out, input, mean, rstd, weight?, N, C, HxW, group, output_mask)
std::vector<Val> LowerGroupNormBackward(LowerCtx& c) {
  Val g = c.tensor(0), x = c.tensor(1);
  Emitter& e = c.e;
  int64_t n = c.int_arg(5), ch = c.int_arg(6), hw = c.int_arg(7), groups = c.int_arg(8);
  Dims mask = c.int_list(9);
  ElementType acc = Opmath(x.dtype());
  Dims shape4{n, groups, ch / groups, hw};
  Val gc = e.Reshape(e.Convert(g, acc), shape4), xc = e.Reshape(e.Convert(x, acc), shape4);
  Val mean = e.BroadcastInDim(e.Convert(c.tensor(2), acc), shape4, {0, 1});
  Val rstd = e.BroadcastInDim(e.Convert(c.tensor(3), acc), shape4, {0, 1});
  Val xhat = e.Binary("multiply", e.Binary("subtract", xc, mean), rstd);
  Val w = c.is_none(4) ? e.Full(1, TensorType{acc, {ch}}) : e.Convert(c.tensor(4), acc);
  Val w4 = e.BroadcastInDim(e.Reshape(w, {groups, ch / groups}), shape4, {1, 2});
  Val gw = e.Binary("multiply", gc, w4);
  std::vector<Val> out(3);
  if (mask[0]) {
    double count = static_cast<double>(ch / groups * hw);
    Val sum_gw = e.BroadcastInDim(SumDims(e, gw, {2, 3}, acc), shape4, {0, 1});
    Val sum_gwx = e.BroadcastInDim(SumDims(e, e.Binary("multiply", gw, xhat), {2, 3}, acc), shape4, {0, 1});
    Val cnt = e.Full(count, xc.type);
    Val inner = e.Binary("subtract", e.Binary("subtract", e.Binary("multiply", gw, cnt), sum_gw),
                         e.Binary("multiply", xhat, sum_gwx));
    out[0] = e.Reshape(e.Binary("divide", e.Binary("multiply", inner, rstd), cnt), x.dims());
  }
  if (mask[1]) out[1] = e.Reshape(SumDims(e, e.Binary("multiply", gc, xhat), {0, 3}, acc), {ch});
  if (mask[2]) out[2] = e.Reshape(SumDims(e, gc, {0, 3}, acc), {ch});
  return out;
}

// ------------------------------------------------------------ losses

enum Reduction { kNone = 0, kMean = 1, kSum = 2 };

// One-hot mask [..., C] (class dim `class_dim`) of `target`, all-zero where target is out of range.
Val OneHot(Emitter& e, const Val& target, const Dims& dims, int64_t class_dim) {
  Dims mapping;
  for (int64_t i = 0; i < static_cast<int64_t>(dims.size()); ++i) {
    if (i != class_dim) mapping.push_back(i);
  }
  Val t = e.BroadcastInDim(e.Convert(target, ElementType::kS64), dims, mapping);
  return e.Compare("EQ", t, e.Iota(TensorType{ElementType::kS64, dims}, class_dim));
}

struct NllParts {
  Val weight;      // per-sample weight (0 where ignored), shape of target
  Val onehot;      // [..., C] bool
  int64_t class_dim;
};

NllParts NllSetup(LowerCtx& c, const Val& self, const Val& target, size_t weight_i, int64_t ignore_index,
                  ElementType acc) {
  Emitter& e = c.e;
  NllParts p;
  p.class_dim = self.rank() == 1 ? 0 : 1;
  p.onehot = OneHot(e, target, self.dims(), p.class_dim);
  Val tgt = e.Convert(target, ElementType::kS64);
  Val keep = e.Compare("NE", tgt, e.Full(static_cast<double>(ignore_index), tgt.type));
  Val w = e.Convert(keep, acc);
  if (!c.is_none(weight_i)) {
    // weight[target] as a masked sum over classes.
    Val cw = e.BroadcastInDim(e.Convert(c.tensor(weight_i), acc), self.dims(), {p.class_dim});
    Val picked = SumDims(e, e.Select(p.onehot, cw, e.Full(0, cw.type)), {p.class_dim}, acc);
    w = e.Binary("multiply", w, picked);
  }
  p.weight = w;
  return p;
}

// nll_loss_forward / nll_loss2d_forward(self, target, weight?, reduction, ignore_index)
//   -> (output, total_weight)
std::vector<Val> LowerNllLoss(LowerCtx& c) {
  Val self = c.tensor(0), target = c.tensor(1);
  Emitter& e = c.e;
  ElementType acc = Opmath(self.dtype());
  NllParts p = NllSetup(c, self, target, 2, c.int_arg(4), acc);
  Val x = e.Convert(self, acc);
  Val picked = SumDims(e, e.Select(p.onehot, x, e.Full(0, x.type)), {p.class_dim}, acc);
  Val losses = e.Unary("negate", e.Binary("multiply", picked, p.weight));
  Dims all;
  for (int64_t i = 0; i < losses.rank(); ++i) all.push_back(i);
  Val total_weight = SumDims(e, p.weight, all, acc);
  int64_t reduction = c.int_arg(3);
  Val out;
  if (reduction == kNone) {
    out = losses;
  } else {
    out = SumDims(e, losses, all, acc);
    if (reduction == kMean) out = e.Binary("divide", out, total_weight);
  }
  return {e.Convert(e.Reshape(out, c.out(0).dims), c.out(0).dtype),
          e.Convert(e.Reshape(total_weight, c.out(1).dims), c.out(1).dtype)};
}

// nll_loss_backward / nll_loss2d_backward(grad_output, self, target, weight?, reduction,
//                                         ignore_index, total_weight)
std::vector<Val> LowerNllLossBackward(LowerCtx& c) {
  Val g = c.tensor(0), self = c.tensor(1), target = c.tensor(2);
  Emitter& e = c.e;
  ElementType acc = Opmath(self.dtype());
  NllParts p = NllSetup(c, self, target, 3, c.int_arg(5), acc);
  int64_t reduction = c.int_arg(4);
  Val scale = p.weight;  // per sample
  Val gc = e.Convert(g, acc);
  if (reduction == kNone) {
    scale = e.Binary("multiply", scale, e.Reshape(gc, scale.dims()));
  } else {
    Val gs = e.Reshape(gc, {});
    if (reduction == kMean) gs = e.Binary("divide", gs, e.Reshape(e.Convert(c.tensor(6), acc), {}));
    scale = e.Binary("multiply", scale, e.BroadcastTo(gs, scale.dims()));
  }
  Dims mapping;
  for (int64_t i = 0; i < self.rank(); ++i) {
    if (i != p.class_dim) mapping.push_back(i);
  }
  Val spread = e.BroadcastInDim(e.Unary("negate", scale), self.dims(), mapping);
  Val grad = e.Select(p.onehot, spread, e.Full(0, spread.type));
  return {e.Convert(grad, c.out().dtype)};
}

// mse_loss(self, target, reduction=1)
std::vector<Val> LowerMseLoss(LowerCtx& c) {
  Emitter& e = c.e;
  ElementType acc = Opmath(c.out().dtype);
  Val a = e.Convert(c.tensor(0), acc), b = Coerce(e, c.tensor(1), c.tensor(0).dims(), acc);
  Val d = e.Binary("subtract", a, b);
  Val sq = e.Binary("multiply", d, d);
  int64_t reduction = c.int_arg(2, kMean);
  if (reduction == kNone) return {e.Convert(sq, c.out().dtype)};
  Dims all;
  for (int64_t i = 0; i < sq.rank(); ++i) all.push_back(i);
  Val s = SumDims(e, sq, all, acc);
  if (reduction == kMean) s = e.Binary("divide", s, e.Scalar(static_cast<double>(std::max<int64_t>(sq.numel(), 1)), acc));
  if (reduction == kMean && sq.numel() == 0) s = e.Scalar(NAN, acc);
  return {e.Convert(s, c.out().dtype)};
}

// mse_loss_backward(grad_output, self, target, reduction)
std::vector<Val> LowerMseLossBackward(LowerCtx& c) {
  Emitter& e = c.e;
  ElementType acc = Opmath(c.out().dtype);
  Val x = c.tensor(1);
  Val a = e.Convert(x, acc), b = Coerce(e, c.tensor(2), x.dims(), acc);
  Val g = Coerce(e, c.tensor(0), x.dims(), acc);
  double scale = 2.0;
  if (c.int_arg(3) == kMean) scale /= static_cast<double>(std::max<int64_t>(x.numel(), 1));
  Val r = e.Binary("multiply", e.Binary("multiply", e.Full(scale, a.type), e.Binary("subtract", a, b)), g);
  return {e.Convert(r, c.out().dtype)};
}

}  // namespace

void RegisterNNOps(Registry& r) {
  // PrivateUse1 receives convolutions as convolution_overrideable, which has no Meta kernel of
  // its own: its shapes and strides come from aten/meta_overrides.cc.
  r.Add("convolution_overrideable", LowerConvolution).host_kernel = true;
  r.Add("convolution_backward_overrideable", LowerConvolutionBackward).host_kernel = true;
  // Batch norms: CPU's form depends on the layout of the input, parameters and statistics
  // (BatchNormAffine), and in evaluation max pooling after them runs first (increasing).
  auto batch_norm = [&r](const char* schema, LowerFn fn, std::vector<int> contiguous_path_args,
                         IncreasingFn increasing) -> OpLowering& {
    OpLowering& op = r.Add(schema, fn);
    op.cpu_contiguous_path_args = std::move(contiguous_path_args);
    op.increasing = increasing;
    return op;
  };
  // native_batch_norm updates running_mean/var in place without saying so in its schema.
  batch_norm("native_batch_norm", LowerNativeBatchNorm, {0, 1, 2, 3, 4}, NativeBatchNormIncreasing)
      .extra_mutations = {3, 4};
  batch_norm("_native_batch_norm_legit", LowerBatchNormLegit, {0, 1, 2, 3, 4}, NativeBatchNormIncreasing);
  batch_norm("_native_batch_norm_legit.no_stats", LowerBatchNormLegitNoStats, {0, 1, 2}, nullptr);
  batch_norm("_native_batch_norm_legit_no_training", LowerBatchNormLegitNoTraining, {0, 1, 2, 3, 4},
             BatchNormNoTrainingIncreasing);
  batch_norm("_batch_norm_with_update", LowerBatchNormWithUpdate, {0, 1, 2, 3, 4}, nullptr);
  batch_norm("_batch_norm_no_update", LowerBatchNormNoUpdate, {0, 1, 2, 3, 4}, BatchNormNoTrainingIncreasing);
  r.Add("native_batch_norm_backward", LowerNativeBatchNormBackward);
  r.Add("batch_norm_backward", LowerNativeBatchNormBackward);
  r.Add("native_layer_norm", LowerLayerNorm);
  r.Add("native_layer_norm_backward", LowerLayerNormBackward);
  r.Add("native_group_norm", LowerGroupNorm);
  r.Add("native_group_norm_backward", LowerGroupNormBackward);
  // Targets are class indices along self's dim 1 (0 for a 1-d self), or ignore_index: checked
  // (design "Index bounds"); an out-of-range target picked nothing from the one-hot (a loss of 0).
  using Bound = IndexArgSpec::Bound;
  IndexArgSpec targets{1, 0, -1, -1, false, Bound::kChannelDim, 0, "", 4};
  IndexArgSpec backward_targets{2, 1, -1, -1, false, Bound::kChannelDim, 0, "", 5};
  r.Add("nll_loss_forward", LowerNllLoss).index_checks = {targets};
  r.Add("nll_loss2d_forward", LowerNllLoss).index_checks = {targets};
  r.Add("nll_loss_backward", LowerNllLossBackward).index_checks = {backward_targets};
  r.Add("nll_loss2d_backward", LowerNllLossBackward).index_checks = {backward_targets};
  r.Add("mse_loss", LowerMseLoss);
  r.Add("mse_loss_backward", LowerMseLossBackward);
}

}  // namespace torch_pjrt::lowering
