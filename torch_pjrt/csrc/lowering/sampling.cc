// im2col / col2im (F.unfold / F.fold) as strided slices and interior-padded sums, channel_shuffle
// as a reshape-transpose, sgn (reached by lp_pool's backward), and grid sampling (grid_sampler_2d /
// 3d and their gradients: data-dependent gathers and scatter-adds).
#include <algorithm>

#include "lowering/spatial.h"

namespace torch_pjrt::lowering {

namespace {

using spatial::ExpandList;

// im2col(self, kernel_size, dilation, padding, stride): [N, C, H, W] -> [N, C*kh*kw, L]
std::vector<Val> LowerIm2Col(LowerCtx& c) {
  Val x = c.tensor(0);
  Emitter& e = c.e;
  Dims k = ExpandList(c.int_list(1), 2, 1), dil = ExpandList(c.int_list(2), 2, 1),
       pad = ExpandList(c.int_list(3), 2, 0), stride = ExpandList(c.int_list(4), 2, 1);
  int64_t r = x.rank();
  int64_t h = x.dims()[r - 2], w = x.dims()[r - 1];
  int64_t oh = (h + 2 * pad[0] - (dil[0] * (k[0] - 1) + 1)) / stride[0] + 1;
  int64_t ow = (w + 2 * pad[1] - (dil[1] * (k[1] - 1) + 1)) / stride[1] + 1;
  if (c.out().dims.empty() || NumElements(c.out().dims) == 0) return {e.Full(0, c.out())};
  Dims lo(r, 0), interior(r, 0);
  lo[r - 2] = pad[0];
  lo[r - 1] = pad[1];
  Val xp = e.Pad(x, e.Scalar(0, x.dtype()), lo, lo, interior);
  std::vector<Val> taps;
  Dims tap_dims(x.dims().begin(), x.dims().end() - 2);
  tap_dims.push_back(1);
  tap_dims.push_back(oh);
  tap_dims.push_back(ow);
  for (int64_t i = 0; i < k[0]; ++i) {
    for (int64_t j = 0; j < k[1]; ++j) {
      Dims start(r, 0), limit = xp.dims(), strides(r, 1);
      start[r - 2] = i * dil[0];
      start[r - 1] = j * dil[1];
      limit[r - 2] = start[r - 2] + (oh - 1) * stride[0] + 1;
      limit[r - 1] = start[r - 1] + (ow - 1) * stride[1] + 1;
      strides[r - 2] = stride[0];
      strides[r - 1] = stride[1];
      taps.push_back(e.Reshape(e.Slice(xp, start, limit, strides), tap_dims));
    }
  }
  Val stacked = e.Concatenate(taps, r - 2);  // [..., C, kh*kw, oh, ow]
  return {e.Reshape(stacked, c.out().dims)};
}

// col2im(self, output_size, kernel_size, dilation, padding, stride): [N, C*kh*kw, L] -> [N, C, H, W]
std::vector<Val> LowerCol2Im(LowerCtx& c) {
  Val col = c.tensor(0);
  Emitter& e = c.e;
  Dims out_size = ExpandList(c.int_list(1), 2, 1), k = ExpandList(c.int_list(2), 2, 1),
       dil = ExpandList(c.int_list(3), 2, 1), pad = ExpandList(c.int_list(4), 2, 0),
       stride = ExpandList(c.int_list(5), 2, 1);
  const Dims& od = c.out().dims;
  int64_t r = static_cast<int64_t>(od.size());
  int64_t h = out_size[0], w = out_size[1];
  int64_t oh = (h + 2 * pad[0] - (dil[0] * (k[0] - 1) + 1)) / stride[0] + 1;
  int64_t ow = (w + 2 * pad[1] - (dil[1] * (k[1] - 1) + 1)) / stride[1] + 1;
  ElementType acc = Opmath(c.out().dtype);
  if (NumElements(od) == 0 || col.numel() == 0) return {e.Full(0, c.out())};
  int64_t channels = od[r - 3];
  Dims split(od.begin(), od.end() - 2);  // [..., C]
  split.push_back(k[0] * k[1]);
  split.push_back(oh);
  split.push_back(ow);
  Val cols = e.Reshape(e.Convert(col, acc), split);  // [..., C, kh*kw, oh, ow]
  int64_t hp = h + 2 * pad[0], wp = w + 2 * pad[1];
  Val sum;
  for (int64_t i = 0; i < k[0]; ++i) {
    for (int64_t j = 0; j < k[1]; ++j) {
      Val tap = e.SliceDim(cols, r - 2, i * k[1] + j, i * k[1] + j + 1);
      Dims tap_dims(od.begin(), od.end() - 2);
      tap_dims.push_back(oh);
      tap_dims.push_back(ow);
      tap = e.Reshape(tap, tap_dims);
      Dims lo(r, 0), hi(r, 0), interior(r, 0);
      lo[r - 2] = i * dil[0];
      lo[r - 1] = j * dil[1];
      hi[r - 2] = hp - (lo[r - 2] + (oh - 1) * stride[0] + 1);
      hi[r - 1] = wp - (lo[r - 1] + (ow - 1) * stride[1] + 1);
      interior[r - 2] = stride[0] - 1;
      interior[r - 1] = stride[1] - 1;
      Val placed = e.Pad(tap, e.Scalar(0, acc), lo, hi, interior);
      sum = sum.valid() ? e.Binary("add", sum, placed) : placed;
    }
  }
  (void)channels;
  Dims start(r, 0), limit = sum.dims(), strides(r, 1);
  start[r - 2] = pad[0];
  start[r - 1] = pad[1];
  limit[r - 2] = pad[0] + h;
  limit[r - 1] = pad[1] + w;
  return {e.Convert(e.Slice(sum, start, limit, strides), c.out().dtype)};
}

// channel_shuffle(self, groups): [N, g*k, ...] -> [N, k*g, ...] (channel i*g + j <- j*k + i)
std::vector<Val> LowerChannelShuffle(LowerCtx& c) {
  Val x = c.tensor(0);
  int64_t groups = c.int_arg(1);
  if (x.numel() == 0) return {c.e.Full(0, c.out())};
  Dims split{x.dims()[0], groups, x.dims()[1] / groups};
  for (int64_t i = 2; i < x.rank(); ++i) split.push_back(x.dims()[i]);
  Dims perm{0, 2, 1};
  for (int64_t i = 3; i < static_cast<int64_t>(split.size()); ++i) perm.push_back(i);
  return {c.e.Reshape(c.e.Transpose(c.e.Reshape(x, split), perm), x.dims())};
}

// sgn(self): sign for real inputs (0 for NaN and -0.0, as sign); z / |z| (0 at 0) for complex.
std::vector<Val> LowerSgn(LowerCtx& c) {
  Val x = c.tensor(0);
  Emitter& e = c.e;
  ElementType t = c.out().dtype;
  if (IsComplex(x.dtype())) {
    ElementType real = x.dtype() == ElementType::kC64 ? ElementType::kF32 : ElementType::kF64;
    TensorType rt{real, x.dims()};
    Val mag = e.Raw("\"stablehlo.abs\"(" + e.Name(x) + ")", "(" + TypeString(x) + ") -> " + TypeString(rt), rt);
    Val zero = e.Full(0, mag.type);
    Val is_zero = e.Compare("EQ", mag, zero);
    Val safe = e.Select(is_zero, e.Full(1, mag.type), mag);
    Val cmag = e.Raw("\"stablehlo.complex\"(" + e.Name(safe) + ", " + e.Name(zero) + ")",
                     "(" + TypeString(rt) + ", " + TypeString(rt) + ") -> " + TypeString(x), x.type);
    Val q = e.Binary("divide", x, cmag);
    return {e.Select(is_zero, e.Full(0, x.type), q)};
  }
  if (x.dtype() == ElementType::kBool) return {e.Convert(x, t)};
  ElementType acc = Opmath(t);
  Val xc = e.Convert(x, acc);
  Val zero = e.Full(0, xc.type);
  Val pos = e.Convert(e.Compare("GT", xc, zero), acc), neg = e.Convert(e.Compare("LT", xc, zero), acc);
  return {e.Convert(e.Binary("subtract", pos, neg), t)};
}


// ------------------------------------------------------------ grid sampling
//
// grid_sampler_2d / 3d(input [N, C, *in], grid [N, *out, k], interpolation, padding, align_corners)
// following ATen's GridSampler.h: grid component 0 is x (the last spatial dim). Corner values are
// gathered per (n, position) with the channel dim as the slice; out-of-range corners contribute
// nothing (a select, so an inf elsewhere never leaks in as 0 * inf). Gradients scatter-add into
// the input and differentiate the interpolation weights for the grid.

enum Interp { kBilinear = 0, kNearest = 1, kBicubic = 2 };
enum Padding { kZeros = 0, kBorder = 1, kReflection = 2 };

struct Coord {
  Val c;     // source coordinate
  Val mult;  // d c / d grid (only when asked for)
};

struct Sampler {
  Emitter& e;
  TensorType pos;  // [N, *out] in the compute type
  int64_t k;       // spatial dims
  bool align;
  int padding;
  // Where the forward's clip sends a NaN coordinate. CPU's 2-d kernel clamps NaN to 0 on purpose
  // (GridSamplerKernel.cpp, clip_coordinates); its 3-d kernel's std::min(size - 1, std::max(NaN,
  // 0)) gives size - 1. The backward kernels keep NaN, which then samples nothing.
  enum class NanClip { kKeep, kLow, kHigh } nan_clip = NanClip::kKeep;

  Val F(double v) { return e.Full(v, pos); }

  Val Unnormalize(const Val& g, int64_t size) {
    if (align) {
      return e.Binary("multiply", e.Binary("divide", e.Binary("add", g, F(1)), F(2)), F(static_cast<double>(size - 1)));
    }
    return e.Binary("divide", e.Binary("subtract", e.Binary("multiply", e.Binary("add", g, F(1)), F(static_cast<double>(size))), F(1)),
                    F(2));
  }

  // clip_coordinates(_set_grad)
  Val Clip(const Val& c, int64_t size, Val* grad) {
    Val hi = F(static_cast<double>(size - 1));
    if (grad) {
      Val inside = e.Binary("and", e.Compare("GT", c, F(0)), e.Compare("LT", c, hi));
      *grad = e.Select(inside, F(1), F(0));
    }
    Val clipped = e.Binary("minimum", hi, e.Binary("maximum", c, F(0)));
    if (nan_clip == NanClip::kKeep) return clipped;
    return e.Select(e.Compare("NE", c, c), nan_clip == NanClip::kLow ? F(0) : hi, clipped);
  }

  // reflect_coordinates(_set_grad)
  Val Reflect(const Val& c, int64_t twice_low, int64_t twice_high, Val* grad) {
    if (twice_low == twice_high) {
      if (grad) *grad = F(0);
      return F(0);
    }
    double lo = static_cast<double>(twice_low) / 2, span = static_cast<double>(twice_high - twice_low) / 2;
    Val in = e.Binary("subtract", c, F(lo));
    Val negative = e.Compare("LT", in, F(0));
    in = e.Unary("abs", in);
    Val extra = e.Binary("remainder", in, F(span));
    Val flips = e.Unary("floor", e.Binary("divide", in, F(span)));
    Val even = e.Compare("EQ", e.Binary("remainder", flips, F(2)), F(0));
    if (grad) {
      Val mult = e.Select(negative, F(-1), F(1));
      *grad = e.Select(even, mult, e.Unary("negate", mult));
    }
    return e.Select(even, e.Binary("add", extra, F(lo)), e.Binary("add", e.Binary("subtract", F(span), extra), F(lo)));
  }

  // compute_coordinates(_set_grad) on an unnormalized coordinate.
  Val Pad(const Val& c, int64_t size, Val* grad) {
    if (padding == kBorder) return Clip(c, size, grad);
    if (padding == kReflection) {
      Val g_refl, g_clip;
      Val r = align ? Reflect(c, 0, 2 * (size - 1), grad ? &g_refl : nullptr)
                    : Reflect(c, -1, 2 * size - 1, grad ? &g_refl : nullptr);
      r = Clip(r, size, grad ? &g_clip : nullptr);
      if (grad) *grad = e.Binary("multiply", g_refl, g_clip);
      return r;
    }
    if (grad) *grad = F(1);
    return c;
  }

  Coord Source(const Val& g, int64_t size, bool want_grad) {
    Coord r;
    r.c = Unnormalize(g, size);
    Val pad_grad;
    r.c = Pad(r.c, size, want_grad ? &pad_grad : nullptr);
    if (want_grad) {
      double m = align ? static_cast<double>(size - 1) / 2 : static_cast<double>(size) / 2;
      r.mult = e.Binary("multiply", F(m), pad_grad);
    }
    return r;
  }

  // Gather indices [N, *out, 1 + k] for integer-valued float coordinates (clamped into range; the
  // caller masks out-of-range ones) and the in-range mask [N, *out].
  std::pair<Val, Val> Indices(const std::vector<Val>& coords, const Dims& in_spatial) {
    Dims idx_dims = pos.dims;
    idx_dims.push_back(1);
    TensorType it{ElementType::kS64, idx_dims};
    std::vector<Val> parts{e.Iota(it, 0)};
    Val inb;
    for (int64_t d = 0; d < k; ++d) {
      Val hi = F(static_cast<double>(in_spatial[d] - 1));
      Val ok = e.Binary("and", e.Compare("GE", coords[d], F(0)), e.Compare("LE", coords[d], hi));
      inb = inb.valid() ? e.Binary("and", inb, ok) : ok;
      Val clamped = e.Clamp(e.Scalar(0, pos.dtype), coords[d], e.Scalar(static_cast<double>(in_spatial[d] - 1), pos.dtype));
      parts.push_back(e.Reshape(e.Convert(clamped, ElementType::kS64), idx_dims));
    }
    return {e.Concatenate(parts, static_cast<int64_t>(idx_dims.size()) - 1), inb};
  }
};

Val BroadcastPos(Emitter& e, const Val& v, const Dims& out_dims) {
  Dims mapping{0};
  for (int64_t i = 2; i < static_cast<int64_t>(out_dims.size()); ++i) mapping.push_back(i);
  return e.BroadcastInDim(v, out_dims, mapping);
}

// x [N, C, *in] at indices [N, *out, 1 + k] -> [N, C, *out]
Val GatherCorner(Emitter& e, const Val& x, const Val& indices, int64_t k) {
  Emitter::GatherDims d;
  d.offset_dims = {1};
  d.collapsed_slice_dims.push_back(0);
  d.start_index_map.push_back(0);
  for (int64_t i = 0; i < k; ++i) {
    d.collapsed_slice_dims.push_back(2 + i);
    d.start_index_map.push_back(2 + i);
  }
  d.index_vector_dim = k + 1;
  d.slice_sizes = Dims(x.rank(), 1);
  d.slice_sizes[1] = x.dims()[1];
  TensorType out{x.dtype(), {indices.dims()[0], x.dims()[1]}};
  for (int64_t i = 0; i < k; ++i) out.dims.push_back(indices.dims()[1 + i]);
  return e.Gather(x, indices, d, out);
}

// target [N, C, *in] += updates [N, C, *out] at indices [N, *out, 1 + k]
Val ScatterCorner(Emitter& e, const Val& target, const Val& indices, const Val& updates, int64_t k) {
  Emitter::ScatterDims d;
  d.update_window_dims = {1};
  d.inserted_window_dims.push_back(0);
  d.scatter_dims_to_operand_dims.push_back(0);
  for (int64_t i = 0; i < k; ++i) {
    d.inserted_window_dims.push_back(2 + i);
    d.scatter_dims_to_operand_dims.push_back(2 + i);
  }
  d.index_vector_dim = k + 1;
  return e.Scatter(target, indices, updates, d, "add");
}

// get_cubic_upsample_coefficients (A = -0.75) and get_cubic_coefficients_grad, elementwise.
std::vector<Val> CubicCoefficients(Sampler& s, const Val& t) {
  Emitter& e = s.e;
  double a = -0.75;
  auto cc1 = [&](const Val& x) {  // ((A + 2) * x - (A + 3)) * x * x + 1
    Val r = e.Binary("subtract", e.Binary("multiply", s.F(a + 2), x), s.F(a + 3));
    return e.Binary("add", e.Binary("multiply", e.Binary("multiply", r, x), x), s.F(1));
  };
  auto cc2 = [&](const Val& x) {  // ((A * x - 5A) * x + 8A) * x - 4A
    Val r = e.Binary("subtract", e.Binary("multiply", s.F(a), x), s.F(5 * a));
    r = e.Binary("add", e.Binary("multiply", r, x), s.F(8 * a));
    return e.Binary("subtract", e.Binary("multiply", r, x), s.F(4 * a));
  };
  Val t2 = e.Binary("subtract", s.F(1), t);
  return {cc2(e.Binary("add", t, s.F(1))), cc1(t), cc1(t2), cc2(e.Binary("add", t2, s.F(1)))};
}

std::vector<Val> CubicCoefficientsGrad(Sampler& s, const Val& t) {
  Emitter& e = s.e;
  double a = -0.75;
  Val x0 = e.Binary("subtract", s.F(-1), t), x1 = e.Unary("negate", t), x2 = e.Binary("subtract", s.F(1), t),
      x3 = e.Binary("subtract", s.F(2), t);
  auto mul = [&](const Val& u, const Val& v) { return e.Binary("multiply", u, v); };
  Val c0 = e.Binary("subtract", mul(e.Binary("subtract", mul(s.F(-3 * a), x0), s.F(10 * a)), x0), s.F(8 * a));
  Val c1 = mul(e.Binary("subtract", mul(s.F(-3 * (a + 2)), x1), s.F(2 * (a + 3))), x1);
  Val c2 = mul(e.Binary("subtract", mul(s.F(3 * (a + 2)), x2), s.F(2 * (a + 3))), x2);
  Val c3 = e.Binary("add", mul(e.Binary("subtract", mul(s.F(3 * a), x3), s.F(10 * a)), x3), s.F(8 * a));
  return {c0, c1, c2, c3};
}

// A sampling plan: per tap, gather indices, in-range mask and weight; plus what the grid gradient
// needs.
struct Tap {
  Val indices, inb, weight;
};

struct GridContext {
  Val x, grid, g;  // x [N, C, *in], grid [N, *out, k], g [N, C, *out] (backward only)
  int64_t k;
  int interp, padding;
  bool align;
  ElementType acc;
};

std::vector<Val> GridSample(LowerCtx& c, const GridContext& gc, bool want_input_grad, bool want_grid_grad,
                            Val* out) {
  Emitter& e = c.e;
  int64_t k = gc.k;
  Val x = e.Convert(gc.x, gc.acc), grid = e.Convert(gc.grid, gc.acc);
  Dims in_spatial(x.dims().begin() + 2, x.dims().end());
  Dims pos_dims(grid.dims().begin(), grid.dims().end() - 1);
  Dims out_dims{x.dims()[0], x.dims()[1]};
  for (int64_t d : Dims(pos_dims.begin() + 1, pos_dims.end())) out_dims.push_back(d);
  Sampler s{e, TensorType{gc.acc, pos_dims}, k, gc.align, gc.padding};
  if (out) s.nan_clip = k == 3 ? Sampler::NanClip::kHigh : Sampler::NanClip::kLow;
  // coordinate inputs per spatial dim d (0 = first spatial dim): grid component k - 1 - d
  std::vector<Val> gcoord(k);
  for (int64_t d = 0; d < k; ++d) {
    gcoord[d] = e.Reshape(e.SliceDim(grid, grid.rank() - 1, k - 1 - d, k - d), pos_dims);
  }
  Val zeros_out = e.Full(0, TensorType{gc.acc, out_dims});
  Val gx = gc.g.valid() ? e.Convert(gc.g, gc.acc) : Val();
  Val input_grad = want_input_grad ? e.Full(0, x.type) : Val();
  std::vector<Val> grid_grad(k);
  Val result;
  auto masked = [&](const Val& inb, const Val& v) { return e.Select(BroadcastPos(e, inb, out_dims), v, zeros_out); };

  if (gc.interp == kBilinear || gc.interp == kNearest) {
    std::vector<Coord> src(k);
    for (int64_t d = 0; d < k; ++d) src[d] = s.Source(gcoord[d], in_spatial[d], want_grid_grad);
    if (gc.interp == kNearest) {
      std::vector<Val> rounded(k);
      for (int64_t d = 0; d < k; ++d) rounded[d] = e.Unary("round_nearest_even", src[d].c);
      auto [indices, inb] = s.Indices(rounded, in_spatial);
      if (out) result = masked(inb, GatherCorner(e, x, indices, k));
      if (want_input_grad) input_grad = ScatterCorner(e, input_grad, indices, masked(inb, gx), k);
      for (int64_t d = 0; d < k && want_grid_grad; ++d) grid_grad[d] = s.F(0);
    } else {
      std::vector<Val> lo(k), frac(k), rest(k);
      for (int64_t d = 0; d < k; ++d) {
        lo[d] = e.Unary("floor", src[d].c);
        frac[d] = e.Binary("subtract", src[d].c, lo[d]);
        rest[d] = e.Binary("subtract", s.F(1), frac[d]);
      }
      std::vector<Val> gsum(k);
      for (int64_t corner = 0; corner < (int64_t{1} << k); ++corner) {
        std::vector<Val> at(k);
        std::vector<bool> bit(k);
        for (int64_t d = 0; d < k; ++d) {
          bit[d] = (corner >> (k - 1 - d)) & 1;
          at[d] = bit[d] ? e.Binary("add", lo[d], s.F(1)) : lo[d];
        }
        // weight: product of per-dim factors, x (the last dim) first
        Val w;
        for (int64_t d = k - 1; d >= 0; --d) {
          Val f = bit[d] ? frac[d] : rest[d];
          w = w.valid() ? e.Binary("multiply", w, f) : f;
        }
        auto [indices, inb] = s.Indices(at, in_spatial);
        Val wb = BroadcastPos(e, w, out_dims);
        if (out || want_grid_grad) {
          // CPU's 2-d kernel (vectorized) multiplies the masked corner value by its weight; its 3-d
          // kernel adds a corner only where it is in range. They differ where a weight is NaN (a
          // NaN coordinate): NaN in 2-d, 0 in 3-d.
          bool mask_after = k == 3;
          Val gathered = GatherCorner(e, x, indices, k);
          Val v = mask_after ? gathered : masked(inb, gathered);
          auto in_range = [&](const Val& term) { return mask_after ? masked(inb, term) : term; };
          if (out) {
            Val contrib = in_range(e.Binary("multiply", v, wb));
            result = result.valid() ? e.Binary("add", result, contrib) : contrib;
          }
          if (want_grid_grad) {
            Val vg = e.Binary("multiply", v, gx);
            for (int64_t d = 0; d < k; ++d) {
              // d w / d c_d: +-1 times the other dims' factors
              Val dw;
              for (int64_t j = k - 1; j >= 0; --j) {
                if (j == d) continue;
                Val f = bit[j] ? frac[j] : rest[j];
                dw = dw.valid() ? e.Binary("multiply", dw, f) : f;
              }
              if (!dw.valid()) dw = s.F(1);
              if (!bit[d]) dw = e.Unary("negate", dw);
              Val term = in_range(e.Binary("multiply", vg, BroadcastPos(e, dw, out_dims)));
              gsum[d] = gsum[d].valid() ? e.Binary("add", gsum[d], term) : term;
            }
          }
        }
        if (want_input_grad) {
          input_grad = ScatterCorner(e, input_grad, indices, masked(inb, e.Binary("multiply", gx, wb)), k);
        }
      }
      for (int64_t d = 0; d < k && want_grid_grad; ++d) {
        grid_grad[d] = e.Binary("multiply", SumDims(e, gsum[d], {1}, gc.acc), src[d].mult);
      }
    }
  } else {  // bicubic, 2-d only
    std::vector<Val> raw(k), lo(k), t(k), mult(k);
    std::vector<std::vector<Val>> coef(k), coef_grad(k);
    for (int64_t d = 0; d < k; ++d) {
      raw[d] = s.Unnormalize(gcoord[d], in_spatial[d]);
      lo[d] = e.Unary("floor", raw[d]);
      t[d] = e.Binary("subtract", raw[d], lo[d]);
      coef[d] = CubicCoefficients(s, t[d]);
      if (want_grid_grad) {
        coef_grad[d] = CubicCoefficientsGrad(s, t[d]);
        mult[d] = s.F(gc.align ? static_cast<double>(in_spatial[d] - 1) / 2 : static_cast<double>(in_spatial[d]) / 2);
      }
    }
    // rows (dim 0 = y) of x-interpolations (dim 1 = x)
    std::vector<Val> gsum(k);
    for (int j = 0; j < 4; ++j) {
      Val row;
      for (int i = 0; i < 4; ++i) {
        std::vector<Val> at(k);
        at[0] = e.Binary("add", lo[0], s.F(j - 1));
        at[1] = e.Binary("add", lo[1], s.F(i - 1));
        for (int64_t d = 0; d < k; ++d) {
          at[d] = s.Pad(at[d], in_spatial[d], nullptr);
          // static_cast<int64_t> truncates toward zero
          at[d] = e.Select(e.Compare("LT", at[d], s.F(0)), e.Unary("ceil", at[d]), e.Unary("floor", at[d]));
        }
        auto [indices, inb] = s.Indices(at, in_spatial);
        Val v = masked(inb, GatherCorner(e, x, indices, k));
        Val cx = BroadcastPos(e, coef[1][i], out_dims), cy = BroadcastPos(e, coef[0][j], out_dims);
        if (out) {
          Val term = e.Binary("multiply", v, cx);
          row = row.valid() ? e.Binary("add", row, term) : term;
        }
        if (want_input_grad) {
          Val upd = e.Binary("multiply", e.Binary("multiply", gx, cx), cy);
          input_grad = ScatterCorner(e, input_grad, indices, masked(inb, upd), k);
        }
        if (want_grid_grad) {
          Val vg = e.Binary("multiply", v, gx);
          Val tx = e.Binary("multiply", e.Binary("multiply", vg, BroadcastPos(e, coef_grad[1][i], out_dims)), cy);
          Val ty = e.Binary("multiply", e.Binary("multiply", vg, BroadcastPos(e, coef_grad[0][j], out_dims)), cx);
          gsum[1] = gsum[1].valid() ? e.Binary("subtract", gsum[1], tx) : e.Unary("negate", tx);
          gsum[0] = gsum[0].valid() ? e.Binary("subtract", gsum[0], ty) : e.Unary("negate", ty);
        }
      }
      if (out) {
        Val term = e.Binary("multiply", row, BroadcastPos(e, coef[0][j], out_dims));
        result = result.valid() ? e.Binary("add", result, term) : term;
      }
    }
    for (int64_t d = 0; d < k && want_grid_grad; ++d) {
      grid_grad[d] = e.Binary("multiply", SumDims(e, gsum[d], {1}, gc.acc), mult[d]);
    }
  }
  if (out) *out = result;
  std::vector<Val> grads(2);
  grads[0] = input_grad;
  if (want_grid_grad) {
    Dims one = pos_dims;
    one.push_back(1);
    std::vector<Val> comps;
    for (int64_t d = k - 1; d >= 0; --d) comps.push_back(e.Reshape(grid_grad[d], one));
    grads[1] = e.Concatenate(comps, static_cast<int64_t>(one.size()) - 1);
  }
  return grads;
}

// grid_sampler_2d / 3d(input, grid, interpolation_mode, padding_mode, align_corners)
template <int k>
std::vector<Val> LowerGridSampler(LowerCtx& c) {
  if (NumElements(c.out().dims) == 0) return {c.e.Full(0, c.out())};
  GridContext gc{c.tensor(0), c.tensor(1), Val(), k, static_cast<int>(c.int_arg(2)), static_cast<int>(c.int_arg(3)),
                 c.bool_arg(4), Opmath(c.out().dtype)};
  Val out;
  GridSample(c, gc, false, false, &out);
  return {c.e.Convert(out, c.out().dtype)};
}

// grid_sampler_2d / 3d_backward(grad_output, input, grid, interpolation_mode, padding_mode,
//                               align_corners, output_mask) -> (grad_input, grad_grid)
template <int k>
std::vector<Val> LowerGridSamplerBackward(LowerCtx& c) {
  Dims mask = c.int_list(6);
  Val x = c.tensor(1), grid = c.tensor(2);
  ElementType acc = Opmath(x.dtype());
  std::vector<Val> r(2);
  bool want_input = mask.size() > 0 && mask[0], want_grid = mask.size() > 1 && mask[1];
  if (x.numel() == 0 || grid.numel() == 0) {
    for (size_t i = 0; i < 2; ++i) {
      if (c.out(i).dtype != ElementType::kInvalid) r[i] = c.e.Full(0, c.out(i));
    }
    return r;
  }
  GridContext gc{x, grid, c.tensor(0), k, static_cast<int>(c.int_arg(3)), static_cast<int>(c.int_arg(4)),
                 c.bool_arg(5), acc};
  std::vector<Val> g = GridSample(c, gc, want_input, want_grid, nullptr);
  if (want_input) r[0] = c.e.Convert(g[0], c.out(0).dtype);
  if (want_grid) r[1] = c.e.Convert(g[1], c.out(1).dtype);
  // The Meta kernel allocates both gradients whatever the mask says: unasked ones are zeros.
  for (size_t i = 0; i < 2; ++i) {
    if (!r[i].valid() && c.out(i).dtype != ElementType::kInvalid) r[i] = c.e.Full(0, c.out(i));
  }
  return r;
}

}  // namespace

void RegisterSamplingOps(Registry& r) {
  r.Add("im2col", LowerIm2Col);
  r.Add("col2im", LowerCol2Im);
  r.Add("channel_shuffle", LowerChannelShuffle);
  r.Add("sgn", LowerSgn);
  r.Add("grid_sampler_2d", LowerGridSampler<2>);
  r.Add("grid_sampler_3d", LowerGridSampler<3>);
  r.Add("grid_sampler_2d_backward", LowerGridSamplerBackward<2>);
  r.Add("grid_sampler_3d_backward", LowerGridSamplerBackward<3>);
}

}  // namespace torch_pjrt::lowering
