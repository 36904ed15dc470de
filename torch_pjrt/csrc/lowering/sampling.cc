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

}  // namespace

void RegisterSamplingOps(Registry& r) {
  r.Add("im2col", LowerIm2Col);
  r.Add("col2im", LowerCol2Im);
  r.Add("channel_shuffle", LowerChannelShuffle);
  r.Add("sgn", LowerSgn);
}

}  // namespace torch_pjrt::lowering
