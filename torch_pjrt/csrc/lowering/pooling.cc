// Pooling beyond nn.cc's 2-d ops: max pooling with indices (a maximum over the window taps'
// strided slices), average pooling in 3-d (windowed reductions), adaptive average and max pooling
// (separable taps; a reshape and a reduction where the windows are uniform), max unpooling (a
// scatter) and fractional max pooling.
//
// Max pooling's selection follows torch's CPU kernels, which scan a window in row-major order and
// take an element when `val > max || isnan(val)`: the result is the last NaN if there is one, else
// the first maximum. As a commutative reduction body: a NaN beats a number, two NaNs keep the later
// index, two numbers keep the larger value and on ties the earlier index. Window padding carries
// the largest index, so a real element always wins a tie against it (a window of -inf values
// reports its first element, as torch does).
#include <algorithm>
#include <limits>
#include <tuple>

#include "lowering/host_calls.h"
#include "lowering/spatial.h"

namespace torch_pjrt::lowering {

namespace {

using Pads = std::vector<std::pair<int64_t, int64_t>>;
using spatial::ExpandList;
using spatial::Taps;

int64_t Dilated(int64_t size, int64_t dilation) { return size == 0 ? 0 : 1 + dilation * (size - 1); }
Dims Trailing(const Dims& d, size_t n) { return Dims(d.end() - n, d.end()); }
constexpr double kNoIndex = 9223372036854775807.0;

// Index arithmetic in 32 bits where the positions fit (vectorizes twice as wide on the CPU).
ElementType IndexType(const Dims& dims, size_t n) {
  int64_t volume = 1;
  for (size_t i = dims.size() - n; i < dims.size(); ++i) volume *= dims[i];
  return volume < 2147483647 ? ElementType::kS32 : ElementType::kS64;
}
double NoIndex(ElementType t) { return t == ElementType::kS32 ? 2147483647.0 : kNoIndex; }

// Should (xv, xi) replace (av, ai)? See the file comment.
Val MaxTakes(Emitter& b, const Val& av, const Val& ai, const Val& xv, const Val& xi) {
  Val greater = b.Compare("GT", xv, av);
  Val tie = b.Binary("and", b.Compare("EQ", xv, av), b.Compare("LT", xi, ai));
  Val take = b.Binary("or", greater, tie);
  if (IsFloating(xv.dtype())) {
    Val xnan = b.Compare("NE", xv, xv), anan = b.Compare("NE", av, av);
    Val both = b.Binary("and", xnan, anan);
    Val nan_take = b.Select(both, b.Compare("GT", xi, ai), xnan);
    take = b.Select(b.Binary("or", xnan, anan), nan_take, take);
  }
  return take;
}

std::vector<Val> MaxBody(Emitter& b, const std::vector<Val>& a) {
  Val take = MaxTakes(b, a[0], a[1], a[2], a[3]);
  return {b.Select(take, a[2], a[0]), b.Select(take, a[3], a[1])};
}

// Flat index within the trailing n dims, for every element of `dims`.
Val FlatIndex(Emitter& e, const Dims& dims, size_t n, ElementType t = ElementType::kS64) {
  TensorType it{t, dims};
  int64_t r = static_cast<int64_t>(dims.size());
  Val idx;
  int64_t stride = 1;
  for (int64_t i = r - 1; i >= r - static_cast<int64_t>(n); --i) {
    Val term = e.Iota(it, i);
    if (stride != 1) term = e.Binary("multiply", term, e.Full(static_cast<double>(stride), it));
    idx = idx.valid() ? e.Binary("add", idx, term) : term;
    stride *= dims[i];
  }
  return idx;
}

// Windowed reduction geometry over the trailing n dims.
struct Window {
  Dims window, strides, dilation;
  Pads padding;
};

Window PoolWindow(const Val& x, size_t n, const Dims& kernel, const Dims& stride, const Dims& padding,
                  const Dims& dilation, const Dims& out_spatial) {
  Window w;
  size_t lead = static_cast<size_t>(x.rank()) - n;
  for (size_t i = 0; i < lead; ++i) {
    w.window.push_back(1);
    w.strides.push_back(1);
    w.dilation.push_back(1);
    w.padding.push_back({0, 0});
  }
  for (size_t i = 0; i < n; ++i) {
    int64_t k = kernel[i], s = stride[i], pad = padding[i], d = dilation[i];
    int64_t in = x.dims()[lead + i];
    // Enough high padding for the output size torch computed (covers ceil_mode).
    int64_t needed = (out_spatial[i] - 1) * s + Dilated(k, d);
    int64_t hi = std::max<int64_t>(pad, needed - in - pad);
    w.window.push_back(k);
    w.strides.push_back(s);
    w.dilation.push_back(d);
    w.padding.push_back({pad, hi});
  }
  return w;
}

struct PoolArgs {
  Dims kernel, stride, padding, dilation;
};

PoolArgs ReadPoolArgs(LowerCtx& c, size_t n, size_t kernel_i, size_t stride_i, size_t padding_i,
                      int64_t dilation_i) {
  PoolArgs p;
  p.kernel = ExpandList(c.int_list(kernel_i), n, 1);
  Dims stride = c.int_list(stride_i);
  p.stride = stride.empty() ? p.kernel : ExpandList(stride, n, 1);
  p.padding = ExpandList(c.int_list(padding_i), n, 0);
  p.dilation = dilation_i < 0 ? Dims(n, 1) : ExpandList(c.int_list(dilation_i), n, 1);
  return p;
}

// ------------------------------------------------------------ max pooling

// Host kernels (TargetOptions::host_kernels): the float32 2-d max pooling backward runs as torch's
// own CPU kernel inside the program (host_kernels/pooling.cc); XLA:CPU ran this file's backward
// 4-5x slower than eager (docs/design.md). The forward stays XLA's (LowerMaxPool).
bool UseHostMaxPoolBackward(const Emitter& e, int n, const Val& x) {
  return n == 2 && e.target().host_kernels && x.dtype() == ElementType::kF32;
}

// The attributes of torch_pjrt_max_pool2d_backward: the pooling's arguments.
std::string HostPoolAttrs(const PoolArgs& p, bool ceil_mode) {
  return "ceil_mode = " + std::string(ceil_mode ? "1" : "0") + " : i64, dilation = " + ArrayAttr(p.dilation) +
         ", kernel = " + ArrayAttr(p.kernel) + ", padding = " + ArrayAttr(p.padding) +
         ", stride = " + ArrayAttr(p.stride);
}

// Tap `tap` (row-major over the kernel) of every window: one strided slice of the padded input
// `xp`, shaped like the pooled output `out`.
Val TapSlice(Emitter& e, const Val& xp, size_t n, const PoolArgs& p, const Dims& out, int64_t tap) {
  int64_t lead = xp.rank() - static_cast<int64_t>(n);
  Dims start(xp.rank(), 0), limit = xp.dims(), strides(xp.rank(), 1);
  for (int64_t d = static_cast<int64_t>(n) - 1; d >= 0; --d) {
    int64_t j = tap % p.kernel[d];
    tap /= p.kernel[d];
    int64_t a = lead + d;
    start[a] = j * p.dilation[d];
    limit[a] = start[a] + (out[a] - 1) * p.stride[d] + 1;
    strides[a] = p.stride[d];
  }
  return e.Slice(xp, start, limit, strides);
}

// The low and high padding of every dim of `x` that pooling into `out` reads past its edges.
std::pair<Dims, Dims> WindowPads(const Val& x, size_t n, const PoolArgs& p, const Dims& out) {
  Window w = PoolWindow(x, n, p.kernel, p.stride, p.padding, p.dilation, Trailing(out, n));
  Dims lo, hi;
  for (const auto& pr : w.padding) {
    lo.push_back(pr.first);
    hi.push_back(pr.second);
  }
  return {lo, hi};
}

// The window taps of `x` (padded with its lowest value) for pooling into `out`: one strided
// slice per tap.
std::vector<Val> MaxPoolTaps(Emitter& e, const Val& x, size_t n, const PoolArgs& p, const Dims& out) {
  auto [lo, hi] = WindowPads(x, n, p, out);
  Val xp = e.Pad(x, e.Scalar(LowestValue(x.dtype()), x.dtype()), lo, hi, Dims(x.rank(), 0));
  int64_t taps = 1;
  for (int64_t k : p.kernel) taps *= k;
  std::vector<Val> values;
  for (int64_t tap = 0; tap < taps; ++tap) values.push_back(TapSlice(e, xp, n, p, out, tap));
  return values;
}

Val MaxOf(Emitter& e, const std::vector<Val>& taps) {
  Val mx;
  for (const Val& v : taps) mx = mx.valid() ? e.Binary("maximum", mx, v) : v;
  return mx;
}

// The indices of max pooling `x` into `out` whose taps are `taps` and maximum `mx`: per window,
// the first tap equal to the maximum, or the last NaN tap (torch's CPU kernel).
Val MaxPoolIndices(Emitter& e, const Val& x, const std::vector<Val>& taps, const Val& mx, size_t n,
                   const PoolArgs& p, const Dims& out) {
  auto [lo, hi] = WindowPads(x, n, p, out);
  ElementType ix = IndexType(x.dims(), n);
  Val ip = e.Pad(FlatIndex(e, x.dims(), n, ix), e.Scalar(NoIndex(ix), ix), lo, hi, Dims(x.rank(), 0));
  TensorType it{ix, out};
  Val first = e.Full(NoIndex(ix), it), last_nan = e.Full(-1, it);
  bool is_float = IsFloating(x.dtype());
  for (size_t tap = 0; tap < taps.size(); ++tap) {
    Val xt = taps[tap], itap = TapSlice(e, ip, n, p, out, static_cast<int64_t>(tap));
    first = e.Binary("minimum", first, e.Select(e.Compare("EQ", xt, mx), itap, e.Full(NoIndex(ix), it)));
    if (is_float) last_nan = e.Binary("maximum", last_nan, e.Select(e.Compare("NE", xt, xt), itap, e.Full(-1, it)));
  }
  Val idx = is_float ? e.Select(e.Compare("NE", mx, mx), last_nan, first) : first;
  return e.Convert(idx, ElementType::kS64);
}

// max_pool2d/3d_with_indices(self, kernel_size, stride=[], padding=0, dilation=1, ceil_mode=False)
// Values: the maximum over the window taps' slices, an elementwise loop that XLA fuses with the
// ops around it and, between channels-last host convolutions, runs channels-last (layout
// assignment turns the transposes into bitcasts). A single-operand reduce_window kept its operand
// in the default layout (a transpose on either side) and ran the small CNN 30% slower than torch's
// host kernel, which in turn ran it 6% slower than the taps (docs/design.md, "Max pooling as
// taps"). Indices: per tap, the first tap equal to the max, or the last NaN tap; XLA drops them
// where nothing reads them (inference).
template <int n>
std::vector<Val> LowerMaxPool(LowerCtx& c) {
  Val x = c.tensor(0);
  PoolArgs p = ReadPoolArgs(c, n, 1, 2, 3, 4);
  const Dims& out = c.out(0).dims;
  if (NumElements(out) == 0) return {c.e.Full(0, c.out(0)), c.e.Full(0, c.out(1))};
  std::vector<Val> taps = MaxPoolTaps(c.e, x, n, p, out);
  Val mx = MaxOf(c.e, taps);
  return {mx, MaxPoolIndices(c.e, x, taps, mx, n, p, out)};
}

// Max pooling of x = chain(y), where the chain is increasing (OpLowering::increasing): the
// maximum of chain(y) over a window is chain(max of y over it), bit for bit, so y is pooled first
// and the chain runs once per window. XLA:CPU would not fuse a batch norm into the pooling's taps
// (docs/design.md, "Max pooling as taps"), so the batch norm and ReLU made a full pass of their
// own. Where the chain has a runtime condition (a batch norm's scale must be positive and
// finite), x is pooled as before and the condition selects: XLA:CPU turns a conditional with
// branches this cheap into that select anyway, computing both in one loop, which pays only where
// the windows do not overlap (each input element is then in one window): ResNet's 3x3, stride-2
// stem pooling ran 2-4% slower so. Indices come from x's taps either way; XLA drops them where
// nothing reads them. Empty where the pooling stays after the chain.
template <int n>
std::vector<Val> LowerMaxPoolThrough(LowerCtx& c, const Val& y, const IncreasingChain& chain) {
  Val x = c.tensor(0);
  PoolArgs p = ReadPoolArgs(c, n, 1, 2, 3, 4);
  const Dims& out = c.out(0).dims;
  bool overlapping = false;
  for (int d = 0; d < n; ++d) overlapping |= (p.kernel[d] - 1) * p.dilation[d] + 1 > p.stride[d];
  if (NumElements(out) == 0 || (chain.when.valid() && overlapping)) return {};
  Emitter& e = c.e;
  std::vector<Val> taps = MaxPoolTaps(e, x, n, p, out);
  Val mx = e.Convert(chain.apply(e, MaxOf(e, MaxPoolTaps(e, y, n, p, out))), x.dtype());
  if (chain.when.valid()) mx = e.Select(e.BroadcastInDim(chain.when, out, {}), mx, MaxOf(e, taps));
  return {mx, MaxPoolIndices(e, x, taps, mx, n, p, out)};
}

// Scatter-adds `src` at flat per-plane positions `idx` (both shaped like `src`) into zeros of
// `out_dims`, whose trailing n dims form each plane.
Val ScatterPlanes(Emitter& e, const Val& src, const Val& idx, const Dims& out_dims, size_t n,
                  std::string_view combine) {
  int64_t planes = 1;
  for (size_t i = 0; i + n < out_dims.size(); ++i) planes *= out_dims[i];
  int64_t size = NumElements(Trailing(out_dims, n));
  int64_t m = planes == 0 ? 0 : src.numel() / planes;
  if (planes == 0 || size == 0 || m == 0) return e.Full(0, TensorType{src.dtype(), out_dims});
  TensorType it{ElementType::kS64, {planes, m, 1}};
  Val plane_ids = e.Iota(it, 0);
  Val positions = e.Reshape(e.Convert(idx, ElementType::kS64), {planes, m, 1});
  Val indices = e.Concatenate({plane_ids, positions}, 2);
  Emitter::ScatterDims d;
  d.inserted_window_dims = {0, 1};
  d.scatter_dims_to_operand_dims = {0, 1};
  d.index_vector_dim = 2;
  Val zeros = e.Full(0, TensorType{src.dtype(), {planes, size}});
  Val r = e.Scatter(zeros, indices, e.Reshape(src, {planes, m}), d, combine);
  return e.Reshape(r, out_dims);
}

// max_pool3d_with_indices_backward(grad_output, self, kernel_size, stride, padding, dilation,
//                                  ceil_mode, indices); also the adaptive and fractional
// backward ops, with the indices at `indices_i`.
template <int n, int indices_i>
std::vector<Val> LowerIndexedPoolBackward(LowerCtx& c) {
  Val g = c.tensor(0), x = c.tensor(1), idx = c.tensor(indices_i);
  ElementType acc = Opmath(c.out().dtype);
  Val grad = ScatterPlanes(c.e, c.e.Convert(g, acc), idx, x.dims(), n, "add");
  return {c.e.Convert(grad, c.out().dtype)};
}

// max_pool2d/3d_with_indices_backward(grad_output, self, kernel_size, stride, padding, dilation,
//                                     ceil_mode, indices). The windows are static: for each kernel
// tap, the windows whose recorded index is that tap's position send their gradient there. The
// positions a tap reaches are one stride phase of the input, shifted: contributions are summed per
// phase with plain pads, and the phases interleaved by a reshape-transpose at the end. No scatter
// (serial on XLA:CPU), no gather, no interior padding (an integer division per element and tap). Indices are assumed to
// come from the forward op (each inside its window), as autograd passes them.
template <int n>
std::vector<Val> LowerMaxPoolBackward(LowerCtx& c) {
  Val g = c.tensor(0), x = c.tensor(1), idx = c.tensor(7);
  Emitter& e = c.e;
  if (x.numel() == 0 || g.numel() == 0) return {e.Full(0, c.out())};
  PoolArgs p = ReadPoolArgs(c, n, 2, 3, 4, 5);
  if (UseHostMaxPoolBackward(e, n, x) && g.dtype() == ElementType::kF32) {
    return CallHostKernel(e, "torch_pjrt_max_pool2d_backward", {{g, true}, {x, true}, {idx, true}}, {{c.out(), true}},
                          HostPoolAttrs(p, c.bool_arg(6)), /*channels_last=*/true);
  }
  ElementType acc = Opmath(c.out().dtype);
  int64_t lead = x.rank() - n;
  Val gc = e.Convert(g, acc);
  ElementType ix = IndexType(x.dims(), n);
  Val iv = e.Convert(idx, ix);
  TensorType it{ix, g.dims()};
  Val zeros = e.Full(0, gc.type);
  // Input positions split by stride phase: i = q * s + r, q < Q = ceil(in / s).
  Dims q(static_cast<size_t>(n), 0);
  int64_t num_phases = 1;
  for (int d = 0; d < n; ++d) {
    q[d] = (x.dims()[lead + d] + p.stride[d] - 1) / p.stride[d];
    num_phases *= p.stride[d];
  }
  std::vector<Val> phases(static_cast<size_t>(num_phases));
  int64_t taps = 1;
  for (int64_t k : p.kernel) taps *= k;
  for (int64_t tap = 0; tap < taps; ++tap) {
    Dims offset(static_cast<size_t>(n), 0);
    int64_t rem = tap;
    for (int d = n - 1; d >= 0; --d) {
      offset[d] = (rem % p.kernel[d]) * p.dilation[d] - p.padding[d];
      rem /= p.kernel[d];
    }
    // This tap's input position for every window, and whether it lies inside the input.
    Val pos, inside;
    int64_t stride = 1;
    for (int d = n - 1; d >= 0; --d) {
      int64_t a = lead + d, in = x.dims()[a];
      Val coord = e.Binary("add", e.Binary("multiply", e.Iota(it, a), e.Full(static_cast<double>(p.stride[d]), it)),
                           e.Full(static_cast<double>(offset[d]), it));
      Val ok = e.Binary("and", e.Compare("GE", coord, e.Full(0, it)), e.Compare("LT", coord, e.Full(static_cast<double>(in), it)));
      inside = inside.valid() ? e.Binary("and", inside, ok) : ok;
      Val term = stride == 1 ? coord : e.Binary("multiply", coord, e.Full(static_cast<double>(stride), it));
      pos = pos.valid() ? e.Binary("add", pos, term) : term;
      stride *= in;
    }
    Val hit = e.Binary("and", inside, e.Compare("EQ", iv, pos));
    Val masked = e.Select(hit, gc, zeros);
    // Window o's tap lands at o * s + off = (o + qoff) * s + r: phase r, shifted by qoff.
    Dims lo(x.rank(), 0), hi(x.rank(), 0), none(x.rank(), 0);
    int64_t phase = 0;
    for (int d = 0; d < n; ++d) {
      int64_t a = lead + d, out = g.dims()[a];
      int64_t r = ((offset[d] % p.stride[d]) + p.stride[d]) % p.stride[d];
      int64_t qoff = (offset[d] - r) / p.stride[d];
      lo[a] = qoff;
      hi[a] = q[d] - out - qoff;
      phase = phase * p.stride[d] + r;
    }
    Val shifted = e.Pad(masked, e.Scalar(0, acc), lo, hi, none);
    phases[phase] = phases[phase].valid() ? e.Binary("add", phases[phase], shifted) : shifted;
  }
  // Interleave the phases: [..., Q0, Q1, s0, s1] -> [..., Q0, s0, Q1, s1] -> [..., Q0*s0, Q1*s1].
  Dims qdims(x.dims().begin(), x.dims().begin() + lead);
  for (int d = 0; d < n; ++d) qdims.push_back(q[d]);
  Dims one = qdims;
  one.push_back(1);
  std::vector<Val> parts;
  for (Val& ph : phases) parts.push_back(e.Reshape(ph.valid() ? ph : e.Full(0, TensorType{acc, qdims}), one));
  Val stacked = e.Concatenate(parts, static_cast<int64_t>(qdims.size()));
  Dims split = qdims, perm, merged(x.dims().begin(), x.dims().begin() + lead);
  for (int d = 0; d < n; ++d) split.push_back(p.stride[d]);
  for (int64_t i = 0; i < lead; ++i) perm.push_back(i);
  for (int d = 0; d < n; ++d) {
    perm.push_back(lead + d);
    perm.push_back(lead + n + d);
    merged.push_back(q[d] * p.stride[d]);
  }
  Val grad = e.Reshape(e.Transpose(e.Reshape(stacked, split), perm), merged);
  Dims start(x.rank(), 0), strides(x.rank(), 1);
  grad = e.Slice(grad, start, x.dims(), strides);
  return {e.Convert(grad, c.out().dtype)};
}

// ------------------------------------------------------------ average pooling

std::vector<Val> AddBody(Emitter& b, const std::vector<Val>& a) { return {b.Binary("add", a[0], a[1])}; }

// Element counts each window divides by (torch's avg_pool rules): explicit padding counts when
// count_include_pad, the extra high padding of ceil_mode never does.
Val AvgPoolDivisor(Emitter& e, const Val& x, size_t n, const Window& w, const Dims& padding,
                   bool count_include_pad, ElementType t) {
  Dims plane = Trailing(x.dims(), n);
  Val ones = e.Full(1, TensorType{t, plane});
  Dims kw = Trailing(w.window, n), ks = Trailing(w.strides, n), kd(n, 1);
  Pads pads(w.padding.end() - n, w.padding.end());
  if (count_include_pad) {
    Dims p(padding.begin(), padding.end());
    ones = e.Pad(ones, e.Scalar(1, t), p, p, Dims(n, 0));
    for (size_t i = 0; i < n; ++i) pads[i] = {0, pads[i].second - padding[i]};
  }
  return e.ReduceWindow({ones}, {e.Scalar(0, t)}, kw, ks, Dims(n, 1), kd, pads, AddBody)[0];
}

// avg_pool2d / avg_pool3d(self, kernel_size, stride=[], padding=0, ceil_mode=False, count_include_pad=True,
//            divisor_override=None)
template <int n>
std::vector<Val> LowerAvgPool(LowerCtx& c) {
  Val x = c.tensor(0);
  PoolArgs p = ReadPoolArgs(c, n, 1, 2, 3, -1);
  Window w = PoolWindow(x, n, p.kernel, p.stride, p.padding, p.dilation, Trailing(c.out().dims, n));
  if (NumElements(c.out().dims) == 0) return {c.e.Full(0, c.out())};
  ElementType acc = Opmath(c.out().dtype);
  Val sum = c.e.ReduceWindow({c.e.Convert(x, acc)}, {c.e.Scalar(0, acc)}, w.window, w.strides,
                             Dims(x.rank(), 1), w.dilation, w.padding, AddBody)[0];
  Val divisor = !c.is_none(6) ? c.e.Full(static_cast<double>(c.int_arg(6)), sum.type)
                              : c.e.BroadcastTo(AvgPoolDivisor(c.e, x, n, w, p.padding, c.bool_arg(5), acc), sum.dims());
  return {c.e.Convert(c.e.Binary("divide", sum, divisor), c.out().dtype)};
}

// avg_pool2d_backward / avg_pool3d_backward(grad_output, self, kernel_size, stride, padding, ceil_mode,
//                     count_include_pad, divisor_override)
template <int n>
std::vector<Val> LowerAvgPoolBackward(LowerCtx& c) {
  Val g = c.tensor(0), x = c.tensor(1);
  PoolArgs p = ReadPoolArgs(c, n, 2, 3, 4, -1);
  Window w = PoolWindow(x, n, p.kernel, p.stride, p.padding, p.dilation, Trailing(g.dims(), n));
  if (NumElements(x.dims()) == 0 || NumElements(g.dims()) == 0) return {c.e.Full(0, c.out())};
  ElementType acc = Opmath(c.out().dtype);
  Val gc = c.e.Convert(g, acc);
  Val divisor = !c.is_none(7) ? c.e.Full(static_cast<double>(c.int_arg(7)), gc.type)
                              : c.e.BroadcastTo(AvgPoolDivisor(c.e, x, n, w, p.padding, c.bool_arg(6), acc), gc.dims());
  Val scaled = c.e.Binary("divide", gc, divisor);
  // The transposed windowed sum: dilate by the stride, pad, and sum stride-1 windows.
  Dims lo, hi, interior;
  for (size_t i = 0; i < w.window.size(); ++i) {
    int64_t k = Dilated(w.window[i], w.dilation[i]);
    int64_t before = k - w.padding[i].first - 1;
    int64_t after = x.dims()[i] + k - 1 - Dilated(g.dims()[i], w.strides[i]) - before;
    lo.push_back(before);
    hi.push_back(after);
    interior.push_back(w.strides[i] - 1);
  }
  Val padded = c.e.Pad(scaled, c.e.Scalar(0, acc), lo, hi, interior);
  Dims ones(x.rank(), 1);
  Pads none(x.rank(), {0, 0});
  Val grad = c.e.ReduceWindow({padded}, {c.e.Scalar(0, acc)}, w.window, ones, ones, ones, none, AddBody)[0];
  return {c.e.Convert(grad, c.out().dtype)};
}

// ------------------------------------------------------------ adaptive pooling

int64_t AdaptiveStart(int64_t o, int64_t in, int64_t out) { return (o * in) / out; }
int64_t AdaptiveEnd(int64_t o, int64_t in, int64_t out) { return ((o + 1) * in + out - 1) / out; }

// Taps of adaptive pooling along one dim: window o covers [start(o), end(o)).
Taps AdaptiveTaps(int64_t in, int64_t out) {
  int64_t k = 0;
  for (int64_t o = 0; o < out; ++o) k = std::max(k, AdaptiveEnd(o, in, out) - AdaptiveStart(o, in, out));
  Taps taps{in, out};
  for (int64_t j = 0; j < k; ++j) {
    std::vector<int64_t> idx(out);
    std::vector<bool> valid(out);
    bool all = true;
    for (int64_t o = 0; o < out; ++o) {
      int64_t s = AdaptiveStart(o, in, out), e = AdaptiveEnd(o, in, out);
      valid[o] = s + j < e;
      idx[o] = valid[o] ? s + j : s;
      all &= valid[o];
    }
    taps.Add(idx, {}, all ? std::vector<bool>{} : valid);
  }
  return taps;
}

// Splits dim d (size out*k) into [out, k] at d, d+1.
Val SplitDim(Emitter& e, const Val& v, int64_t d, int64_t out, int64_t k) {
  Dims dims = v.dims();
  dims[d] = out;
  dims.insert_at(d + 1, k);
  return e.Reshape(v, dims);
}

// Sum over each adaptive window along dim d.
Val AdaptiveSumDim(Emitter& e, const Val& v, int64_t d, int64_t out) {
  int64_t in = v.dims()[d];
  if (in % out == 0) return SumDims(e, SplitDim(e, v, d, out, in / out), {d + 1}, v.dtype());
  return spatial::ApplyTaps(e, v, d, AdaptiveTaps(in, out));
}

// Per-window element counts (product over the n dims), broadcast to `dims`.
Val AdaptiveCounts(Emitter& e, const Dims& in_spatial, const Dims& dims, ElementType t) {
  size_t n = in_spatial.size();
  int64_t first = static_cast<int64_t>(dims.size() - n);
  Val count;
  for (size_t i = 0; i < n; ++i) {
    int64_t in = in_spatial[i], out = dims[first + i];
    std::vector<double> k(out);
    for (int64_t o = 0; o < out; ++o) k[o] = static_cast<double>(AdaptiveEnd(o, in, out) - AdaptiveStart(o, in, out));
    Val ki = spatial::AlongDim(e, spatial::ConstFloats(e, k, t), dims, first + i);
    count = count.valid() ? e.Binary("multiply", count, ki) : ki;
  }
  return count;
}

// _adaptive_avg_pool3d(self, output_size)
template <int n>
std::vector<Val> LowerAdaptiveAvgPool(LowerCtx& c) {
  Val x = c.tensor(0);
  const Dims& out_dims = c.out().dims;
  if (NumElements(out_dims) == 0 || x.numel() == 0) return {c.e.Full(0, c.out())};
  ElementType acc = Opmath(c.out().dtype);
  Val y = c.e.Convert(x, acc);
  int64_t first = x.rank() - n;
  bool uniform = true;
  for (int i = 0; i < n; ++i) uniform &= x.dims()[first + i] % out_dims[first + i] == 0;
  if (uniform) {  // one reshape [..., o0, k0, o1, k1, ...] and one reduction
    Dims split(x.dims().begin(), x.dims().begin() + first), reduced;
    for (int i = 0; i < n; ++i) {
      split.push_back(out_dims[first + i]);
      split.push_back(x.dims()[first + i] / out_dims[first + i]);
      reduced.push_back(static_cast<int64_t>(split.size()) - 1);
    }
    y = SumDims(c.e, c.e.Reshape(y, split), reduced, acc);
  }
  for (int i = n - 1; i >= 0 && !uniform; --i) y = AdaptiveSumDim(c.e, y, first + i, out_dims[first + i]);
  Val counts = AdaptiveCounts(c.e, Trailing(x.dims(), n), out_dims, acc);
  return {c.e.Convert(c.e.Binary("divide", y, counts), c.out().dtype)};
}

// _adaptive_avg_pool3d_backward(grad_output, self)
template <int n>
std::vector<Val> LowerAdaptiveAvgPoolBackward(LowerCtx& c) {
  Val g = c.tensor(0), x = c.tensor(1);
  if (NumElements(g.dims()) == 0 || x.numel() == 0) return {c.e.Full(0, c.out())};
  ElementType acc = Opmath(c.out().dtype);
  Val y = c.e.Binary("divide", c.e.Convert(g, acc), AdaptiveCounts(c.e, Trailing(x.dims(), n), g.dims(), acc));
  int64_t first = x.rank() - n;
  for (int i = n - 1; i >= 0; --i) {
    int64_t d = first + i;
    y = spatial::ApplyTaps(c.e, y, d, spatial::Transpose(AdaptiveTaps(x.dims()[d], g.dims()[d])));
  }
  return {c.e.Convert(y, c.out().dtype)};
}

// Max (with flat index) over each adaptive window along dim d.
std::pair<Val, Val> AdaptiveMaxDim(Emitter& e, const Val& v, const Val& vi, int64_t d, int64_t out) {
  int64_t in = v.dims()[d];
  if (in % out == 0) {
    Val sv = SplitDim(e, v, d, out, in / out), si = SplitDim(e, vi, d, out, in / out);
    std::vector<Val> r = e.ReduceVariadic({sv, si}, {e.Scalar(LowestValue(v.dtype()), v.dtype()),
                                                     e.Scalar(kNoIndex, ElementType::kS64)},
                                          {d + 1}, MaxBody);
    return {r[0], r[1]};
  }
  Taps taps = AdaptiveTaps(in, out);
  Val best = spatial::TakeAlong(e, v, d, taps.idx[0]), best_i = spatial::TakeAlong(e, vi, d, taps.idx[0]);
  for (size_t t = 1; t < taps.idx.size(); ++t) {
    Val cv = spatial::TakeAlong(e, v, d, taps.idx[t]), ci = spatial::TakeAlong(e, vi, d, taps.idx[t]);
    Val take = MaxTakes(e, best, best_i, cv, ci);
    if (!taps.valid.empty()) {
      take = e.Binary("and", take, spatial::AlongDim(e, spatial::ConstBools(e, taps.valid[t]), take.dims(), d));
    }
    best = e.Select(take, cv, best);
    best_i = e.Select(take, ci, best_i);
  }
  return {best, best_i};
}

// adaptive_max_pool2d / adaptive_max_pool3d(self, output_size) -> (values, indices)
template <int n>
std::vector<Val> LowerAdaptiveMaxPool(LowerCtx& c) {
  Val x = c.tensor(0);
  const Dims& out_dims = c.out(0).dims;
  if (NumElements(out_dims) == 0 || x.numel() == 0) return {c.e.Full(0, c.out(0)), c.e.Full(0, c.out(1))};
  Val v = x, vi = FlatIndex(c.e, x.dims(), n);
  int64_t first = x.rank() - n;
  for (int i = n - 1; i >= 0; --i) std::tie(v, vi) = AdaptiveMaxDim(c.e, v, vi, first + i, out_dims[first + i]);
  return {v, vi};
}

// ------------------------------------------------------------ max unpooling

// max_unpool2d(self, indices, output_size); max_unpool3d(self, indices, output_size, stride,
// padding). Indices are flat positions within each output plane, checked against its size when
// the graph runs (the table's index_checks: a RuntimeError, as CPU's "Found an invalid max index").
template <int n>
std::vector<Val> LowerMaxUnpool(LowerCtx& c) {
  Val x = c.tensor(0), idx = c.tensor(1);
  return {ScatterPlanes(c.e, x, idx, c.out().dims, n, "")};
}


// ------------------------------------------------------------ fractional max pooling

// Window starts of fractional max pooling along one dim, per plane: generate_intervals
// (FractionalMaxPooling.h) on the plane's sample u [P]: int((o + u) * alpha) - int(u * alpha),
// the last window at in - pool. Computed in the input dtype like the CPU kernel (half types round
// after every operation). Returns s32 [P, out].
Val FractionalStarts(Emitter& e, const Val& u, ElementType t, int64_t in, int64_t out, int64_t pool) {
  int64_t planes = u.dims()[0];
  ElementType ct = Opmath(t);
  TensorType pt{ct, {planes, out}};
  auto round = [&](const Val& v) { return e.Convert(e.Convert(v, t), ct); };
  Val last = e.Full(static_cast<double>(in - pool), TensorType{ElementType::kS32, {planes, out}});
  if (out <= 1) return last;
  Val alpha = round(e.Binary("divide", round(e.Scalar(static_cast<double>(in - pool), ct)),
                             round(e.Scalar(static_cast<double>(out - 1), ct))));
  Val ab = e.BroadcastInDim(alpha, pt.dims, {});
  Val ub = e.BroadcastInDim(e.Convert(u, ct), pt.dims, {0});
  Val o = e.Convert(e.Iota(TensorType{ElementType::kS32, pt.dims}, 1), ct);
  Val a = e.Convert(round(e.Binary("multiply", round(e.Binary("add", o, ub)), ab)), ElementType::kS32);
  Val b = e.Convert(round(e.Binary("multiply", ub, ab)), ElementType::kS32);
  Val seq = e.Binary("subtract", a, b);
  Val is_last = e.Compare("EQ", e.Iota(TensorType{ElementType::kS32, pt.dims}, 1),
                          e.Full(static_cast<double>(out - 1), TensorType{ElementType::kS32, pt.dims}));
  return e.Select(is_last, last, seq);
}

// v [P, *spatial] gathered along spatial dim d at per-plane positions pos [P, out] (s32).
Val TakePerPlane(Emitter& e, const Val& v, int64_t d, const Val& pos) {
  int64_t planes = pos.dims()[0], out = pos.dims()[1];
  TensorType it{ElementType::kS32, {planes, out, 1}};
  Val indices = e.Concatenate({e.Iota(it, 0), e.Reshape(pos, {planes, out, 1})}, 2);
  Emitter::GatherDims g;
  for (int64_t i = 1; i < v.rank(); ++i) {
    if (i != 1 + d) g.offset_dims.push_back(i);
  }
  g.collapsed_slice_dims = {0, 1 + d};
  g.start_index_map = {0, 1 + d};
  g.index_vector_dim = 2;
  g.slice_sizes = v.dims();
  g.slice_sizes[0] = 1;
  g.slice_sizes[1 + d] = 1;
  TensorType ot = v.type;
  ot.dims[1 + d] = out;
  return e.Gather(v, indices, g, ot);
}

// fractional_max_pool2d / 3d(self, kernel_size, output_size, random_samples) -> (out, indices).
// Samples: [..., 0] is the width's in 2-d, the depth's in 3-d (the CPU kernels' order).
template <int n>
std::vector<Val> LowerFractionalMaxPool(LowerCtx& c) {
  Val x = c.tensor(0), samples = c.tensor(3);
  Emitter& e = c.e;
  if (NumElements(c.out(0).dims) == 0 || x.numel() == 0) return {e.Full(0, c.out(0)), e.Full(0, c.out(1))};
  Dims pool = ExpandList(c.int_list(1), n, 1);
  Dims in_sp = Trailing(x.dims(), n), out_sp = Trailing(c.out(0).dims, n);
  int64_t batch = x.rank() == n + 2 ? x.dims()[0] : 1, channels = x.dims()[x.rank() - n - 1];
  int64_t planes = batch * channels;
  Dims pdims{planes};
  for (int64_t s : in_sp) pdims.push_back(s);
  Val v = e.Reshape(x, pdims);
  Val vi = FlatIndex(e, pdims, n);
  Val u = e.Reshape(e.SliceDim(samples, 0, 0, batch), {planes, n});
  for (int d = n - 1; d >= 0; --d) {
    int slot = n == 2 ? 1 - d : d;
    Val ud = e.Reshape(e.SliceDim(u, 1, slot, slot + 1), {planes});
    Val starts = FractionalStarts(e, ud, x.dtype(), in_sp[d], out_sp[d], pool[d]);
    Val best, best_i;
    for (int64_t j = 0; j < pool[d]; ++j) {
      Val pos = j == 0 ? starts : e.Binary("add", starts, e.Full(static_cast<double>(j), starts.type));
      Val cv = TakePerPlane(e, v, d, pos), ci = TakePerPlane(e, vi, d, pos);
      if (j == 0) {
        best = cv;
        best_i = ci;
        continue;
      }
      Val take = MaxTakes(e, best, best_i, cv, ci);
      best = e.Select(take, cv, best);
      best_i = e.Select(take, ci, best_i);
    }
    v = best;
    vi = best_i;
  }
  return {e.Reshape(v, c.out(0).dims), e.Reshape(vi, c.out(1).dims)};
}

}  // namespace

void RegisterPoolingOps(Registry& r) {
  // max_pool2d_with_indices moved here from nn.cc: its window padding now loses ties to real
  // elements (an all -inf window reported index -1) and NaN ties follow the CPU scan order.
  r.Add("max_pool2d_with_indices", LowerMaxPool<2>).pool_through = LowerMaxPoolThrough<2>;
  r.Add("max_pool2d_with_indices_backward", LowerMaxPoolBackward<2>).host_kernel = true;
  r.Add("max_pool3d_with_indices", LowerMaxPool<3>).pool_through = LowerMaxPoolThrough<3>;
  r.Add("max_pool3d_with_indices_backward", LowerMaxPoolBackward<3>);
  r.Add("avg_pool2d", LowerAvgPool<2>);
  r.Add("avg_pool2d_backward", LowerAvgPoolBackward<2>);
  r.Add("avg_pool3d", LowerAvgPool<3>);
  r.Add("avg_pool3d_backward", LowerAvgPoolBackward<3>);
  // _adaptive_avg_pool2d moved here from nn.cc, where it was two matmuls with averaging
  // matrices: their zero entries turned one inf into NaNs across the whole output (0 * inf).
  r.Add("_adaptive_avg_pool2d", LowerAdaptiveAvgPool<2>);
  r.Add("_adaptive_avg_pool2d_backward", LowerAdaptiveAvgPoolBackward<2>);
  r.Add("_adaptive_avg_pool3d", LowerAdaptiveAvgPool<3>);
  r.Add("_adaptive_avg_pool3d_backward", LowerAdaptiveAvgPoolBackward<3>);
  r.Add("adaptive_max_pool2d", LowerAdaptiveMaxPool<2>);
  r.Add("adaptive_max_pool2d_backward", LowerIndexedPoolBackward<2, 2>);
  r.Add("adaptive_max_pool3d", LowerAdaptiveMaxPool<3>);
  r.Add("adaptive_max_pool3d_backward", LowerIndexedPoolBackward<3, 2>);
  // Indices into an output plane, of output_size's product elements.
  const IndexArgSpec plane = WithRuntimeError({1, 0, -1, 2, false, IndexArgSpec::Bound::kSizeListProduct});
  r.Add("max_unpool2d", LowerMaxUnpool<2>).index_checks = {plane};
  r.Add("max_unpool3d", LowerMaxUnpool<3>).index_checks = {plane};
  r.Add("fractional_max_pool2d", LowerFractionalMaxPool<2>);
  r.Add("fractional_max_pool3d", LowerFractionalMaxPool<3>);
  r.Add("fractional_max_pool2d_backward", LowerIndexedPoolBackward<2, 4>);
  // No Meta kernel in torch: aten/meta_overrides.cc gives it self's shape.
  r.Add("fractional_max_pool3d_backward", LowerIndexedPoolBackward<3, 4>);
}

}  // namespace torch_pjrt::lowering
