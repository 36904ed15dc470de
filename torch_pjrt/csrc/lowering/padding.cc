// Reflection and replication padding (1-d to 3-d) and their gradients, as slices, reversals and
// concatenations: exact for every dtype. Negative padding crops. torch's CPU kernels reflect about
// the uncropped input's edges, so positive padding is applied first and cropping second (this also
// covers (3, -2) on a size-4 input, where the left reflection reaches past the cropped end).
#include <algorithm>

#include "lowering/spatial.h"

namespace torch_pjrt::lowering {

namespace {

using spatial::ExpandList;

enum class PadMode { kReflect, kReplicate };

// One dim of the forward pad.
Val PadDim(Emitter& e, const Val& x, int64_t d, int64_t pl, int64_t pr, PadMode mode) {
  int64_t s = x.dims()[d];
  int64_t lo = std::max<int64_t>(pl, 0), hi = std::max<int64_t>(pr, 0);
  std::vector<Val> parts;
  if (lo > 0) {
    if (mode == PadMode::kReflect) {
      parts.push_back(e.Reverse(e.SliceDim(x, d, 1, lo + 1), {d}));
    } else {
      Dims dims = x.dims();
      dims[d] = lo;
      parts.push_back(e.BroadcastTo(e.SliceDim(x, d, 0, 1), dims));
    }
  }
  parts.push_back(x);
  if (hi > 0) {
    if (mode == PadMode::kReflect) {
      parts.push_back(e.Reverse(e.SliceDim(x, d, s - 1 - hi, s - 1), {d}));
    } else {
      Dims dims = x.dims();
      dims[d] = hi;
      parts.push_back(e.BroadcastTo(e.SliceDim(x, d, s - 1, s), dims));
    }
  }
  Val y = e.Concatenate(parts, d);
  int64_t total = y.dims()[d];
  return e.SliceDim(y, d, pl < 0 ? -pl : 0, total - (pr < 0 ? -pr : 0));
}

// One dim of the backward pass: g has the padded size along d, the result the input size `in`.
Val PadDimBackward(Emitter& e, const Val& g, int64_t d, int64_t in, int64_t pl, int64_t pr, PadMode mode) {
  int64_t lo = std::max<int64_t>(pl, 0), hi = std::max<int64_t>(pr, 0);
  Val zero = e.Scalar(0, g.dtype());
  Dims none(g.rank(), 0);
  // Undo the cropping: cropped positions got no gradient.
  Dims plo = none, phi = none;
  plo[d] = pl < 0 ? -pl : 0;
  phi[d] = pr < 0 ? -pr : 0;
  Val full = e.Pad(g, zero, plo, phi, none);
  Val grad = e.SliceDim(full, d, lo, lo + in);
  auto place = [&](const Val& v, int64_t before, int64_t after) {
    Dims a = none, b = none;
    a[d] = before;
    b[d] = after;
    return e.Pad(v, zero, a, b, none);
  };
  if (lo > 0) {
    Val left = e.SliceDim(full, d, 0, lo);
    if (mode == PadMode::kReflect) {
      grad = e.Binary("add", grad, place(e.Reverse(left, {d}), 1, in - 1 - lo));
    } else {
      Dims keep = left.dims();
      keep[d] = 1;
      grad = e.Binary("add", grad, place(e.Reshape(SumDims(e, left, {d}, g.dtype()), keep), 0, in - 1));
    }
  }
  if (hi > 0) {
    Val right = e.SliceDim(full, d, lo + in, lo + in + hi);
    if (mode == PadMode::kReflect) {
      grad = e.Binary("add", grad, place(e.Reverse(right, {d}), in - 1 - hi, 1));
    } else {
      Dims keep = right.dims();
      keep[d] = 1;
      grad = e.Binary("add", grad, place(e.Reshape(SumDims(e, right, {d}, g.dtype()), keep), in - 1, 0));
    }
  }
  return grad;
}

// padding = [left, right] for the last dim, then the second-to-last, ...
template <PadMode mode>
std::vector<Val> LowerPad(LowerCtx& c) {
  Val x = c.tensor(0);
  Dims pad = c.int_list(1);
  int64_t n = static_cast<int64_t>(pad.size()) / 2;
  Val y = x;
  for (int64_t i = 0; i < n; ++i) y = PadDim(c.e, y, x.rank() - 1 - i, pad[2 * i], pad[2 * i + 1], mode);
  return {y};
}

// *_backward(grad_output, self, padding)
template <PadMode mode>
std::vector<Val> LowerPadBackward(LowerCtx& c) {
  Val g = c.tensor(0), x = c.tensor(1);
  Dims pad = c.int_list(2);
  int64_t n = static_cast<int64_t>(pad.size()) / 2;
  ElementType acc = Opmath(c.out().dtype);
  Val grad = c.e.Convert(g, acc);
  if (NumElements(x.dims()) == 0) return {c.e.Full(0, c.out())};
  for (int64_t i = 0; i < n; ++i) {
    int64_t d = x.rank() - 1 - i;
    grad = PadDimBackward(c.e, grad, d, x.dims()[d], pad[2 * i], pad[2 * i + 1], mode);
  }
  return {c.e.Convert(grad, c.out().dtype)};
}

}  // namespace

void RegisterPaddingOps(Registry& r) {
  for (const char* n : {"1d", "2d", "3d"}) {
    r.Add(std::string("reflection_pad") + n, LowerPad<PadMode::kReflect>);
    r.Add(std::string("reflection_pad") + n + "_backward", LowerPadBackward<PadMode::kReflect>);
    r.Add(std::string("replication_pad") + n, LowerPad<PadMode::kReplicate>);
    r.Add(std::string("replication_pad") + n + "_backward", LowerPadBackward<PadMode::kReplicate>);
  }
}

}  // namespace torch_pjrt::lowering
