// Upsampling (nearest, nearest-exact, linear/bilinear/trilinear, bicubic, anti-aliased bilinear
// and bicubic) and their gradients. Every mode is separable: one set of taps per spatial dim,
// applied last dim first (the innermost loop of torch's CPU kernels), with index and weight tables
// computed here the way ATen's UpSample.h / UpSampleKernel.cpp compute them (in the opmath type,
// weights stored in the input dtype where the CPU kernel stores them so). Gradients apply the
// transposed taps: gathers too, no scatter.
#include <algorithm>
#include <cmath>
#include <optional>

#include "lowering/spatial.h"

namespace torch_pjrt::lowering {

namespace {

using spatial::Taps;

enum class Mode { kNearest, kNearestExact, kLinear, kCubic, kLinearAA, kCubicAA };

std::optional<double> OptScale(LowerCtx& c, size_t i) {
  if (c.is_none(i)) return std::nullopt;
  return c.double_arg(i);
}

// ---- ATen's index arithmetic, in the opmath type T (float, or double for float64 inputs)

template <typename T>
T ComputeScalesValue(std::optional<double> scale, int64_t in, int64_t out) {
  return (scale.has_value() && *scale > 0.) ? static_cast<T>(1.0 / *scale) : (static_cast<T>(in) / out);
}

template <typename T>
T AreaPixelScale(int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  if (align_corners) return out > 1 ? static_cast<T>(in - 1) / (out - 1) : static_cast<T>(0);
  return ComputeScalesValue<T>(scale, in, out);
}

template <typename T>
T AreaPixelSourceIndex(T scale, int64_t dst, bool align_corners, bool cubic) {
  if (align_corners) return scale * dst;
  T src = scale * (dst + static_cast<T>(0.5)) - static_cast<T>(0.5);
  return (!cubic && src < static_cast<T>(0)) ? T(0) : src;
}

template <typename T>
void GuardIndexAndLambda(T real, int64_t in, int64_t& index, T& lambda) {
  index = std::min(static_cast<int64_t>(floorf(static_cast<float>(real))), in - 1);
  lambda = std::min(std::max(real - index, static_cast<T>(0)), static_cast<T>(1));
}

template <typename T>
T CubicConvolution1(T x, T a) { return ((a + 2) * x - (a + 3)) * x * x + 1; }
template <typename T>
T CubicConvolution2(T x, T a) { return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a; }

// Forward nearest (HelperInterpNearest / HelperInterpNearestExact).
template <typename T>
Taps NearestTaps(int64_t in, int64_t out, std::optional<double> scale, bool exact) {
  T s = AreaPixelScale<T>(in, out, false, scale);
  std::vector<int64_t> idx(out);
  for (int64_t i = 0; i < out; ++i) {
    int64_t k;
    if (exact) {
      T real = AreaPixelSourceIndex<T>(s, i, false, false);
      k = static_cast<int64_t>(floorf(static_cast<float>(real + 0.5)));
    } else {
      T real = AreaPixelSourceIndex<T>(s, i, true, false);
      k = static_cast<int64_t>(floorf(static_cast<float>(real)));
    }
    idx[i] = std::min(k, in - 1);
  }
  Taps t{in, out};
  t.Add(idx);
  return t;
}

// Backward nearest (nearest_idx / nearest_exact_idx in UpSample.h).
Taps NearestBackwardTaps(int64_t in, int64_t out, std::optional<double> scale, bool exact) {
  std::vector<int64_t> idx(out);
  for (int64_t i = 0; i < out; ++i) {
    if (exact) {
      float s = ComputeScalesValue<float>(scale, in, out);
      idx[i] = std::min(static_cast<int64_t>(floorf((i + 0.5) * s)), in - 1);
    } else if (out == in) {
      idx[i] = i;
    } else if (out == 2 * in) {
      idx[i] = i >> 1;
    } else {
      float s = ComputeScalesValue<float>(scale, in, out);
      idx[i] = std::min(static_cast<int64_t>(floorf(i * s)), in - 1);
    }
  }
  Taps t{in, out};
  t.Add(idx);
  return t;
}

// compute_source_index_and_lambda (UpSample.h).
template <typename T>
Taps LinearTaps(int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  T ratio = AreaPixelScale<T>(in, out, align_corners, scale);
  std::vector<int64_t> i0(out), i1(out);
  std::vector<double> l0(out), l1(out);
  for (int64_t o = 0; o < out; ++o) {
    if (out == in) {
      i0[o] = i1[o] = o;
      l0[o] = 1;
      l1[o] = 0;
      continue;
    }
    T real = AreaPixelSourceIndex<T>(ratio, o, align_corners, false);
    int64_t index;
    T lambda;
    GuardIndexAndLambda<T>(real, in, index, lambda);
    i0[o] = index;
    i1[o] = index + ((index < in - 1) ? 1 : 0);
    l1[o] = lambda;
    l0[o] = static_cast<T>(1) - lambda;
  }
  Taps t{in, out};
  t.Add(i0, l0);
  t.Add(i1, l1);
  return t;
}

// HelperInterpCubic::compute_indices_weights.
template <typename T>
Taps CubicTaps(int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  T s = AreaPixelScale<T>(in, out, align_corners, scale);
  std::vector<std::vector<int64_t>> idx(4, std::vector<int64_t>(out));
  std::vector<std::vector<double>> w(4, std::vector<double>(out));
  const T a = static_cast<T>(-0.75);
  for (int64_t o = 0; o < out; ++o) {
    T real = AreaPixelSourceIndex<T>(s, o, align_corners, true);
    int64_t index;
    T t;
    GuardIndexAndLambda<T>(real, in, index, t);
    T coeffs[4];
    coeffs[0] = CubicConvolution2<T>(t + static_cast<T>(1.0), a);
    coeffs[1] = CubicConvolution1<T>(t, a);
    T t2 = static_cast<T>(1.0) - t;
    coeffs[2] = CubicConvolution1<T>(t2, a);
    coeffs[3] = CubicConvolution2<T>(t2 + static_cast<T>(1.0), a);
    for (int j = 0; j < 4; ++j) {
      idx[j][o] = std::max<int64_t>(std::min<int64_t>(index + j - 1, in - 1), 0);
      w[j][o] = coeffs[j];
    }
  }
  Taps taps{in, out};
  for (int j = 0; j < 4; ++j) taps.Add(idx[j], w[j]);
  return taps;
}

// HelperInterpBase::_compute_indices_min_size_weights_aa with the linear or Keys-cubic filter.
template <typename T>
T AaFilter(T x, bool cubic) {
  x = std::abs(x);
  if (!cubic) return x < 1.0 ? static_cast<T>(1.0 - x) : static_cast<T>(0.0);
  const T a = static_cast<T>(-0.5);
  if (x < 1.0) return CubicConvolution1<T>(x, a);
  if (x < 2.0) return CubicConvolution2<T>(x, a);
  return 0.0;
}

template <typename T>
Taps AntialiasTaps(int64_t in, int64_t out, bool align_corners, std::optional<double> opt_scale, bool cubic) {
  T scale = AreaPixelScale<T>(in, out, align_corners, opt_scale);
  int interp_size = cubic ? 4 : 2;
  T support = (scale >= 1.0) ? (interp_size * 0.5) * scale : interp_size * 0.5;
  int64_t max_interp = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  std::vector<std::vector<int64_t>> idx(max_interp, std::vector<int64_t>(out, 0));
  std::vector<std::vector<double>> w(max_interp, std::vector<double>(out, 0.0));
  std::vector<std::vector<bool>> valid(max_interp, std::vector<bool>(out, false));
  for (int64_t i = 0; i < out; ++i) {
    T center = scale * (i + 0.5);
    T total = 0.0;
    T invscale = (scale >= 1.0) ? 1.0 / scale : 1.0;
    int64_t xmin = std::max(static_cast<int64_t>(center - support + 0.5), static_cast<int64_t>(0));
    int64_t xsize = std::min(static_cast<int64_t>(center + support + 0.5), in) - xmin;
    xsize = std::clamp(xsize, static_cast<int64_t>(0), max_interp);
    std::vector<T> wt(static_cast<size_t>(xsize));
    for (int64_t j = 0; j < xsize; ++j) {
      T v = AaFilter<T>((j + xmin - center + 0.5) * invscale, cubic);
      wt[j] = v;
      total += v;
    }
    if (total != 0.0) {
      for (int64_t j = 0; j < xsize; ++j) wt[j] /= total;
    }
    for (int64_t j = 0; j < xsize; ++j) {
      idx[j][i] = xmin + j;
      w[j][i] = wt[j];
      valid[j][i] = true;
    }
  }
  Taps taps{in, out};
  for (int64_t j = 0; j < max_interp; ++j) taps.Add(idx[j], w[j], valid[j]);
  return taps;
}

template <typename T>
Taps ForwardTapsT(Mode mode, int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  switch (mode) {
    case Mode::kNearest: return NearestTaps<T>(in, out, scale, false);
    case Mode::kNearestExact: return NearestTaps<T>(in, out, scale, true);
    case Mode::kLinear: return LinearTaps<T>(in, out, align_corners, scale);
    case Mode::kCubic: return CubicTaps<T>(in, out, align_corners, scale);
    case Mode::kLinearAA: return AntialiasTaps<T>(in, out, align_corners, scale, false);
    case Mode::kCubicAA: return AntialiasTaps<T>(in, out, align_corners, scale, true);
  }
  return {};
}

Taps ForwardTaps(Mode mode, ElementType t, int64_t in, int64_t out, bool align_corners,
                 std::optional<double> scale) {
  if (t == ElementType::kF64) return ForwardTapsT<double>(mode, in, out, align_corners, scale);
  return ForwardTapsT<float>(mode, in, out, align_corners, scale);
}

bool IsNearest(Mode m) { return m == Mode::kNearest || m == Mode::kNearestExact; }
bool IsAntialias(Mode m) { return m == Mode::kLinearAA || m == Mode::kCubicAA; }

// How the CPU kernels weigh a half type's input: the generic separable kernel stores the weights
// in the input dtype, and linear's lambda0 is scalar_t's 1 - lambda1 (ATen's
// compute_source_index_and_lambda), so bfloat16 weights are (round(1 - round(l)), round(l)).
// upsample_bilinear2d computes in float with float weights: its storage is the opmath type.
Val ApplyWeighted(Emitter& e, const Val& x, int64_t dim, const Taps& taps, ElementType storage, bool linear) {
  if (taps.w.empty() || Opmath(storage) == storage) return spatial::ApplyTaps(e, x, dim, taps);
  Taps rounded = taps;
  for (auto& row : rounded.w) {
    for (double& v : row) v = RoundedTo(v, storage);
  }
  if (linear) {
    for (size_t o = 0; o < rounded.w[0].size(); ++o) rounded.w[0][o] = RoundedTo(1.0 - rounded.w[1][o], storage);
  }
  return spatial::ApplyTaps(e, x, dim, rounded);
}

// Arguments: nearest(self, output_size, scales...); others (self, output_size, align_corners,
// scales...).
template <Mode mode, int n>
std::vector<Val> LowerUpsample(LowerCtx& c) {
  Val x = c.tensor(0);
  Dims out_size = c.int_list(1);
  bool align_corners = IsNearest(mode) ? false : c.bool_arg(2);
  size_t scales_at = IsNearest(mode) ? 2 : 3;
  ElementType t = c.out().dtype;
  int64_t first = x.rank() - n;
  Val y = IsNearest(mode) ? x : c.e.Convert(x, Opmath(t));
  for (int i = n - 1; i >= 0; --i) {
    int64_t d = first + i;
    int64_t in = x.dims()[d], out = out_size[i];
    if (IsAntialias(mode) && in == out) continue;  // the CPU kernel skips such passes
    Taps taps = ForwardTaps(mode, t == ElementType::kF64 ? t : ElementType::kF32, in, out, align_corners,
                            OptScale(c, scales_at + i));
    ElementType storage = mode == Mode::kLinear && n == 2 ? Opmath(t) : t;
    y = IsAntialias(mode) ? spatial::ApplyTaps(c.e, y, d, taps)
                          : ApplyWeighted(c.e, y, d, taps, storage, mode == Mode::kLinear);
  }
  return {c.e.Convert(y, t)};
}

// Arguments: nearest(grad_output, output_size, input_size, scales...); others (grad_output,
// output_size, input_size, align_corners, scales...).
template <Mode mode, int n>
std::vector<Val> LowerUpsampleBackward(LowerCtx& c) {
  Val g = c.tensor(0);
  Dims out_size = c.int_list(1), in_size = c.int_list(2);
  bool align_corners = IsNearest(mode) ? false : c.bool_arg(3);
  size_t scales_at = IsNearest(mode) ? 3 : 4;
  ElementType t = c.out().dtype;
  int64_t first = g.rank() - n;
  Val y = c.e.Convert(g, Opmath(t));
  for (int i = n - 1; i >= 0; --i) {
    int64_t d = first + i;
    int64_t in = in_size[in_size.size() - n + i], out = out_size[i];
    std::optional<double> scale = OptScale(c, scales_at + i);
    ElementType wt = t == ElementType::kF64 ? t : ElementType::kF32;
    Taps taps = IsNearest(mode) ? NearestBackwardTaps(in, out, scale, mode == Mode::kNearestExact)
                                : ForwardTaps(mode, wt, in, out, align_corners, scale);
    y = spatial::ApplyTaps(c.e, y, d, spatial::Transpose(taps));
  }
  return {c.e.Convert(y, t)};
}

}  // namespace

void RegisterUpsampleOps(Registry& r) {
  r.Add("upsample_nearest1d", LowerUpsample<Mode::kNearest, 1>);
  r.Add("upsample_nearest2d", LowerUpsample<Mode::kNearest, 2>);
  r.Add("upsample_nearest3d", LowerUpsample<Mode::kNearest, 3>);
  r.Add("_upsample_nearest_exact1d", LowerUpsample<Mode::kNearestExact, 1>);
  r.Add("_upsample_nearest_exact2d", LowerUpsample<Mode::kNearestExact, 2>);
  r.Add("_upsample_nearest_exact3d", LowerUpsample<Mode::kNearestExact, 3>);
  r.Add("upsample_linear1d", LowerUpsample<Mode::kLinear, 1>);
  r.Add("upsample_bilinear2d", LowerUpsample<Mode::kLinear, 2>);
  r.Add("upsample_trilinear3d", LowerUpsample<Mode::kLinear, 3>);
  r.Add("upsample_bicubic2d", LowerUpsample<Mode::kCubic, 2>);
  r.Add("_upsample_bilinear2d_aa", LowerUpsample<Mode::kLinearAA, 2>);
  r.Add("_upsample_bicubic2d_aa", LowerUpsample<Mode::kCubicAA, 2>);
  r.Add("upsample_nearest1d_backward", LowerUpsampleBackward<Mode::kNearest, 1>);
  r.Add("upsample_nearest2d_backward", LowerUpsampleBackward<Mode::kNearest, 2>);
  r.Add("upsample_nearest3d_backward", LowerUpsampleBackward<Mode::kNearest, 3>);
  r.Add("_upsample_nearest_exact1d_backward", LowerUpsampleBackward<Mode::kNearestExact, 1>);
  r.Add("_upsample_nearest_exact2d_backward", LowerUpsampleBackward<Mode::kNearestExact, 2>);
  r.Add("_upsample_nearest_exact3d_backward", LowerUpsampleBackward<Mode::kNearestExact, 3>);
  r.Add("upsample_linear1d_backward", LowerUpsampleBackward<Mode::kLinear, 1>);
  r.Add("upsample_bilinear2d_backward", LowerUpsampleBackward<Mode::kLinear, 2>);
  r.Add("upsample_trilinear3d_backward", LowerUpsampleBackward<Mode::kLinear, 3>);
  r.Add("upsample_bicubic2d_backward", LowerUpsampleBackward<Mode::kCubic, 2>);
  r.Add("_upsample_bilinear2d_aa_backward", LowerUpsampleBackward<Mode::kLinearAA, 2>);
  r.Add("_upsample_bicubic2d_aa_backward", LowerUpsampleBackward<Mode::kCubicAA, 2>);
}

}  // namespace torch_pjrt::lowering
