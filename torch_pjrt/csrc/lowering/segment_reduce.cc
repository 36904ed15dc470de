// segment_reduce and its backward (torch.segment_reduce: "sum", "mean", "max", "min", "prod" over
// consecutive segments of one axis), as torch's CPU kernel (SegmentReduce.cpp) computes them. The
// ATen kernels (aten/segment_reduce.cc) give the segments as bounds [B, S + 1] (offsets; lengths
// are turned into them) and the data as [B, L, R] around the axis. Each position's segment is
// how many segment ends lie at or before it; positions outside every segment go to a spare
// segment S that is dropped. Reductions are scatters into [B, S + 1, R].
#include <cmath>

#include "lowering/lowering.h"
#include "lowering/pointwise_util.h"

namespace torch_pjrt::lowering {

namespace {

using namespace pw;

constexpr ElementType kS64 = ElementType::kS64;
enum Reduce : int64_t { kSum = 0, kMean = 1, kMax = 2, kMin = 3, kProd = 4 };

struct Segments {
  int64_t batch, length, rest, count;  // B, L, R, S
  Val segment;   // [B, L] s64: each position's segment, S outside every one
  Val inside;    // [B, L] pred
  Val sizes;     // [B, S] s64: each segment's length
};

Segments Locate(Emitter& e, const Val& bounds, int64_t batch, int64_t length, int64_t rest) {
  Segments g{batch, length, rest, bounds.dims()[1] - 1, {}, {}, {}};
  int64_t s = g.count;
  Dims bls{batch, length, s};
  Val ends = e.SliceDim(bounds, 1, 1, s + 1), starts = e.SliceDim(bounds, 1, 0, s);
  Val p = e.Iota(TensorType{kS64, bls}, 1);
  Val ended = e.Convert(Cmp(e, "LE", e.BroadcastInDim(ends, bls, {0, 2}), p), kS64);
  Val segment = e.Reduce(ended, e.Scalar(0, kS64), {2}, "add");
  Val pos = e.Iota(TensorType{kS64, {batch, length}}, 1);
  Val first = e.BroadcastInDim(e.Reshape(e.SliceDim(bounds, 1, 0, 1), {batch}), {batch, length}, {0});
  Val last = e.BroadcastInDim(e.Reshape(e.SliceDim(bounds, 1, s, s + 1), {batch}), {batch, length}, {0});
  g.inside = And(e, Cmp(e, "GE", pos, first), Cmp(e, "LT", pos, last));
  g.segment = Sel(e, g.inside, segment, e.Full(static_cast<double>(s), segment.type));
  g.sizes = Sub(e, ends, starts);
  return g;
}

// [B * L, 2] scatter/gather coordinates (b, segment).
Val Coordinates(Emitter& e, const Segments& g) {
  Dims bl{g.batch, g.length};
  Val b = e.Iota(TensorType{kS64, bl}, 0);
  Val both = e.Concatenate({e.Reshape(b, {g.batch, g.length, 1}), e.Reshape(g.segment, {g.batch, g.length, 1})}, 2);
  return e.Reshape(both, {g.batch * g.length, 2});
}

// Per segment, `values` [B, L, R] combined into `init` (a [B, S + 1, R] array).
Val ScatterSegments(Emitter& e, const Segments& g, const Val& values, const Val& init, std::string_view combine) {
  Emitter::ScatterDims d;
  d.update_window_dims = {1};
  d.inserted_window_dims = {0, 1};
  d.scatter_dims_to_operand_dims = {0, 1};
  d.index_vector_dim = 1;
  return e.Scatter(init, Coordinates(e, g), e.Reshape(values, {g.batch * g.length, g.rest}), d, combine);
}

// Per position, its segment's row of `per_segment` [B, S + 1, R]: [B, L, R].
Val GatherSegments(Emitter& e, const Segments& g, const Val& per_segment) {
  Emitter::GatherDims d;
  d.offset_dims = {1};
  d.collapsed_slice_dims = {0, 1};
  d.start_index_map = {0, 1};
  d.index_vector_dim = 1;
  d.slice_sizes = {1, 1, g.rest};
  Val rows = e.Gather(per_segment, Coordinates(e, g), d, TensorType{per_segment.dtype(), {g.batch * g.length, g.rest}});
  return e.Reshape(rows, {g.batch, g.length, g.rest});
}

Val IdentityOf(Emitter& e, Reduce r, const TensorType& t) {
  switch (r) {
    case kProd: return e.Full(1, t);
    case kMax: return e.Full(-INFINITY, t);
    case kMin: return e.Full(INFINITY, t);
    default: return e.Full(0, t);
  }
}

// The arguments both ops share: the data [B, L, R] (input `data_i`), the segments located by the
// bounds (input data_i + 1), the initial value (input data_i + 2) and the two attributes after it.
struct SegmentArgs {
  Val x, initial;
  Segments g;
  Reduce reduce;
  bool has_initial;
};
SegmentArgs Parse(LowerCtx& c, size_t data_i) {
  Emitter& e = c.e;
  Val x = c.tensor(data_i);
  Segments g = Locate(e, e.Convert(c.tensor(data_i + 1), kS64), x.dims()[0], x.dims()[1], x.dims()[2]);
  return {x, c.tensor(data_i + 2), g, static_cast<Reduce>(c.int_arg(data_i + 3)), c.int_arg(data_i + 4) != 0};
}

// The per-segment start value of reduction `r` [B, S + 1, R]: the initial value where given, else
// the reduction's identity.
Val Start(Emitter& e, const SegmentArgs& a, Reduce r) {
  TensorType type{a.x.dtype(), {a.g.batch, a.g.count + 1, a.g.rest}};
  return a.has_initial ? e.BroadcastTo(e.Convert(a.initial, type.dtype), type.dims) : IdentityOf(e, r, type);
}

Val AnyNan(Emitter& e, const Segments& g, const Val& x) {
  Val nan = e.Convert(IsNan(e, x), x.dtype());
  Val count = ScatterSegments(e, g, nan, e.Full(0, TensorType{x.dtype(), {g.batch, g.count + 1, g.rest}}), "add");
  return Cmp(e, "GT", count, K(e, 0, count));
}

Val SizesAsRows(Emitter& e, const Segments& g, ElementType t) {
  Val sizes = e.Pad(e.Convert(g.sizes, t), e.Scalar(0, t), {0, 0}, {0, 1}, {0, 0});  // [B, S + 1]
  return e.BroadcastInDim(sizes, {g.batch, g.count + 1, g.rest}, {0, 1});
}

// pjrt::segment_reduce(data [B, L, R], bounds [B, S + 1], initial [], reduce, has_initial)
//   -> [B, S, R]
std::vector<Val> LowerSegmentReduce(LowerCtx& c) {
  Emitter& e = c.e;
  SegmentArgs a = Parse(c, 0);
  const Val& x = a.x;
  const Segments& g = a.g;
  Reduce r = a.reduce;
  Val start = Start(e, a, r);
  const char* combine = r == kProd ? "multiply" : r == kMax ? "maximum" : r == kMin ? "minimum" : "add";
  Val out = ScatterSegments(e, g, x, start, combine);
  if (r == kMax || r == kMin) out = Sel(e, AnyNan(e, g, x), K(e, NAN, out), out);  // NaN wins, as on the CPU
  if (r == kMean) {
    Val n = SizesAsRows(e, g, x.dtype());
    Val mean = Div(e, out, n);  // 0 / 0: NaN for an empty segment without initial
    out = a.has_initial ? Sel(e, Cmp(e, "GT", n, K(e, 0, n)), mean, start) : mean;
  }
  return {e.SliceDim(out, 1, 0, g.count)};
}

// pjrt::segment_reduce_backward(grad [B, S, R], output [B, S, R], data [B, L, R], bounds,
//                               initial [], reduce, has_initial) -> [B, L, R]
std::vector<Val> LowerSegmentReduceBackward(LowerCtx& c) {
  Emitter& e = c.e;
  SegmentArgs a = Parse(c, 2);
  const Val& x = a.x;
  const Segments& g = a.g;
  Reduce r = a.reduce;
  auto padded = [&](const Val& v) { return e.Pad(e.Convert(v, x.dtype()), e.Scalar(0, x.dtype()), {0, 0, 0}, {0, 1, 0}, {0, 0, 0}); };
  Val grad = GatherSegments(e, g, padded(c.tensor(0)));
  Val out = GatherSegments(e, g, padded(c.tensor(1)));
  TensorType rows{x.dtype(), {g.batch, g.count + 1, g.rest}};
  Val zero = K(e, 0, x), one = K(e, 1, x);
  Val result = grad;
  if (r == kMean) {
    result = Div(e, grad, GatherSegments(e, g, SizesAsRows(e, g, x.dtype())));
  } else if (r == kMax || r == kMin) {
    // Every element equal to the result (or NaN) takes the gradient; with ties, the positive
    // gradients are shared among them (torch's CPU kernel divides only those).
    Val hit = Or(e, IsNan(e, x), Cmp(e, "EQ", x, out));
    Val ties = GatherSegments(e, g, ScatterSegments(e, g, Sel(e, hit, one, zero), e.Full(0, rows), "add"));
    Val taken = Sel(e, hit, grad, zero);
    Val shared = And(e, And(e, hit, Cmp(e, "GE", ties, K(e, 2, ties))), Cmp(e, "GT", taken, zero));
    result = Sel(e, shared, Div(e, taken, ties), taken);
  } else if (r == kProd) {
    // grad * output / x, except where x is 0 or NaN: grad times the product of the others.
    Val nan = IsNan(e, x), is_zero = Cmp(e, "EQ", x, zero);
    Val special = Or(e, nan, is_zero);
    auto count = [&](const Val& p) {
      return GatherSegments(e, g, ScatterSegments(e, g, Sel(e, p, one, zero), e.Full(0, rows), "add"));
    };
    Val other_nans = Sub(e, count(nan), Sel(e, nan, one, zero));
    Val other_zeros = Sub(e, count(is_zero), Sel(e, is_zero, one, zero));
    Val start = Start(e, a, kProd);
    Val rest = GatherSegments(e, g, ScatterSegments(e, g, Sel(e, special, one, x), start, "multiply"));
    Val with_zero = Sel(e, Cmp(e, "EQ", Abs(e, rest), K(e, INFINITY, rest)), K(e, NAN, rest), K(e, 0, rest));
    Val others = Sel(e, Cmp(e, "GT", other_nans, zero), K(e, NAN, rest),
                     Sel(e, Cmp(e, "GT", other_zeros, zero), with_zero, rest));
    result = Sel(e, special, Mul(e, grad, others), Div(e, Mul(e, grad, out), x));
  }
  return {Sel(e, e.BroadcastInDim(g.inside, x.dims(), {0, 1}), result, zero)};
}

}  // namespace

void RegisterSegmentReduceOps(Registry& r) {
  r.Add("pjrt::segment_reduce", LowerSegmentReduce);
  r.Add("pjrt::segment_reduce_backward", LowerSegmentReduceBackward);
}

}  // namespace torch_pjrt::lowering
