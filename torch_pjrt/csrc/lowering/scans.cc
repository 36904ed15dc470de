// Scans along a dimension: cumsum, cumprod and its backward, cummax/cummin (values and indices),
// logcumsumexp. A reduce_window over the prefix costs O(n^2) on XLA:CPU, so every scan is an
// associative scan (log2(n) levels of strided slices and one combine per level, as in JAX's
// associative_scan), which also keeps integer wrapping and NaN propagation elementwise-exact.
#include <cmath>

#include "lowering/scan_sort.h"

namespace torch_pjrt::lowering {

namespace {

// a (ceil(n/2) elements along dim) and b (floor(n/2)) interleaved: a0 b0 a1 b1 ...
Val Interleave(Emitter& e, const Val& a, const Val& b, int64_t dim, int64_t n) {
  Val bb = b;
  int64_t m = a.dims()[dim];
  if (b.dims()[dim] < m) {
    Dims lo(b.rank(), 0), hi(b.rank(), 0), interior(b.rank(), 0);
    hi[dim] = 1;
    bb = e.Pad(b, e.Scalar(0, b.dtype()), lo, hi, interior);
  }
  Dims pair_dims = a.dims();
  pair_dims.insert_at(static_cast<size_t>(dim) + 1, 1);
  Val stacked = e.Concatenate({e.Reshape(a, pair_dims), e.Reshape(bb, pair_dims)}, dim + 1);
  Dims merged = a.dims();
  merged[dim] = 2 * m;
  return e.SliceDim(e.Reshape(stacked, merged), dim, 0, n);
}

std::vector<Val> Scan(Emitter& e, const std::vector<Val>& xs, int64_t dim, const ScanCombine& f) {
  int64_t n = xs[0].dims()[dim];
  if (n < 2) return xs;
  // Pairs (x0 x1) (x2 x3) ...: their scan gives the prefixes ending at the odd positions.
  std::vector<Val> first, second;
  for (const Val& x : xs) {
    first.push_back(e.SliceDim(x, dim, 0, n - 1, 2));
    second.push_back(e.SliceDim(x, dim, 1, n, 2));
  }
  std::vector<Val> odd = Scan(e, f(e, first, second), dim, f);
  // The prefix ending at even position 2j+2 is the one ending at 2j+1 combined with x[2j+2].
  int64_t rest = (n - 1) / 2;
  std::vector<Val> even_rest;
  if (rest > 0) {
    std::vector<Val> prev, cur;
    for (size_t k = 0; k < xs.size(); ++k) {
      prev.push_back(e.SliceDim(odd[k], dim, 0, rest));
      cur.push_back(e.SliceDim(xs[k], dim, 2, n, 2));
    }
    even_rest = f(e, prev, cur);
  }
  std::vector<Val> out;
  for (size_t k = 0; k < xs.size(); ++k) {
    Val head = e.SliceDim(xs[k], dim, 0, 1);
    Val even = rest > 0 ? e.Concatenate({head, even_rest[k]}, dim) : head;
    out.push_back(Interleave(e, even, odd[k], dim, n));
  }
  return out;
}

}  // namespace

std::vector<Val> AssociativeScan(Emitter& e, std::vector<Val> xs, int64_t dim,
                                 const ScanCombine& combine, bool reverse) {
  if (xs.empty() || xs[0].numel() == 0) return xs;
  if (!reverse) return Scan(e, xs, dim, combine);
  for (Val& x : xs) x = e.Reverse(x, {dim});
  // Reversed, the earlier element of each pair is the later one of the input.
  ScanCombine swapped = [&combine](Emitter& b, const std::vector<Val>& earlier,
                                   const std::vector<Val>& later) { return combine(b, later, earlier); };
  std::vector<Val> r = Scan(e, xs, dim, swapped);
  for (Val& x : r) x = e.Reverse(x, {dim});
  return r;
}

Val CumulativeSum(Emitter& e, const Val& x, int64_t dim, bool reverse) {
  ScanCombine add = [](Emitter& b, const std::vector<Val>& p, const std::vector<Val>& q) {
    return std::vector<Val>{b.Binary("add", p[0], q[0])};
  };
  return AssociativeScan(e, {x}, dim, add, reverse)[0];
}

namespace {

ScanCombine BinaryCombine(std::string op) {
  return [op](Emitter& b, const std::vector<Val>& p, const std::vector<Val>& q) {
    return std::vector<Val>{b.Binary(op, p[0], q[0])};
  };
}

// torch's CPU loops start a sum from +0.0, so a sum of -0.0 terms is +0.0; the scan starts
// from the first element, which keeps -0.0. (select, not `+ 0.0`: XLA folds x + 0 into x.)
Val PositiveZero(Emitter& e, const Val& r, std::string_view op) {
  if (op != "add" || !IsFloating(r.dtype())) return r;
  Val zero = e.Full(0, r.type);
  return e.Select(e.Compare("EQ", r, zero), zero, r);
}

// cumsum / cumprod (self, dim, *, dtype=None): in the output type, half types in float.
std::vector<Val> CumulativeOp(LowerCtx& c, const char* op) {
  Val x = InResultDtype(c.e, c.tensor(0), c.out().dtype);
  ElementType acc = Opmath(c.out().dtype);
  Val xc = c.e.Convert(x, acc);
  if (x.rank() == 0 || x.numel() == 0) return {c.e.Convert(xc, c.out().dtype)};
  int64_t dim = NormDim(c.int_arg(1), x.rank());
  Val r = AssociativeScan(c.e, {xc}, dim, BinaryCombine(op))[0];
  return {c.e.Convert(PositiveZero(c.e, r, op), c.out().dtype)};
}
std::vector<Val> LowerCumsum(LowerCtx& c) { return CumulativeOp(c, "add"); }
std::vector<Val> LowerCumprod(LowerCtx& c) { return CumulativeOp(c, "multiply"); }

TensorType PartType(const Val& x) {
  return TensorType{x.dtype() == ElementType::kC64 ? ElementType::kF32 : ElementType::kF64, x.dims()};
}
Val RealPart(Emitter& e, const Val& x) {
  TensorType pt = PartType(x);
  return e.Raw("\"stablehlo.real\"(" + e.Name(x) + ")", "(" + TypeString(x) + ") -> " + TypeString(pt), pt);
}
Val ImagPart(Emitter& e, const Val& x) {
  TensorType pt = PartType(x);
  return e.Raw("\"stablehlo.imag\"(" + e.Name(x) + ")", "(" + TypeString(x) + ") -> " + TypeString(pt), pt);
}
Val MakeComplex(Emitter& e, const Val& re, const Val& im, const TensorType& t) {
  return e.Raw("\"stablehlo.complex\"(" + e.Name(re) + ", " + e.Name(im) + ")",
               "(" + TypeString(re) + ", " + TypeString(im) + ") -> " + TypeString(t), t);
}
Val Conj(Emitter& e, const Val& x) {
  if (!IsComplex(x.dtype())) return x;
  return MakeComplex(e, RealPart(e, x), e.Unary("negate", ImagPart(e, x)), x.type);
}

// cumprod_backward(grad, input, dim, output), torch's formula without its host sync on "any
// zero?". With z the first zero of a slice and w = g * y: before z, dx_k = sum_{k<=j<z} w_j / x_k;
// at z, dx_z = y_{z-1} * sum_{z<=j<z2} g_j prod_{z<i<=j} x_i (z2 the next zero); after z, 0. The
// sums stop where torch's masks do, so an infinity before a zero gives what torch gives (inf, not
// inf * 0). Complex inputs use conjugates (the map is holomorphic).
std::vector<Val> LowerCumprodBackward(LowerCtx& c) {
  Emitter& e = c.e;
  Val g = c.tensor(0), x = c.tensor(1), y = c.tensor(3);
  const TensorType& out = c.out();
  if (x.numel() <= 1) return {Coerce(e, g, out)};
  int64_t dim = NormDim(c.int_arg(2), x.rank());
  int64_t n = x.dims()[dim];
  if (n == 1) return {Coerce(e, g, out)};
  ElementType acc = Opmath(out.dtype);
  Val gc = Coerce(e, g, x.dims(), acc);
  Val xc = Conj(e, e.Convert(x, acc));
  Val yc = Conj(e, Coerce(e, y, x.dims(), acc));
  Val zero = e.Full(0, xc.type), one = e.Full(1, xc.type);
  Val is_zero = e.Compare("EQ", xc, zero);
  Val zeros_so_far = CumulativeSum(e, e.Convert(is_zero, ElementType::kS32), dim);
  TensorType st{ElementType::kS32, x.dims()};
  Val before = e.Compare("EQ", zeros_so_far, e.Full(0, st));
  Val between = e.Compare("EQ", zeros_so_far, e.Full(1, st));  // from the first zero to the next
  Val first_zero = e.Binary("and", is_zero, between);
  // Before the first zero.
  Val w = e.Select(before, e.Binary("multiply", yc, gc), zero);
  Val head = e.Binary("divide", CumulativeSum(e, w, dim, true), e.Select(before, xc, one));
  // At the first zero.
  Val after_zero = e.Binary("and", between, e.Unary("not", first_zero));
  Val products = AssociativeScan(e, {e.Select(after_zero, xc, one)}, dim, BinaryCombine("multiply"))[0];
  Val terms = e.Binary("multiply", products, e.Select(between, gc, zero));
  Val total = e.BroadcastTo(KeepDims(e, SumDims(e, terms, {dim}, acc), x.dims(), {dim}), x.dims());
  Val prefix = e.Concatenate({e.SliceDim(one, dim, 0, 1), e.SliceDim(yc, dim, 0, n - 1)}, dim);
  Val at_zero = e.Binary("multiply", total, prefix);
  Val r = e.Select(before, head, e.Select(first_zero, at_zero, zero));
  return {e.Convert(r, out.dtype)};
}

// cummax / cummin(self, dim) -> (values, indices): the running extreme and the index where it
// was last taken. Like torch's CPU loop, a later element wins ties (x >= max) and NaN wins
// everything, a later NaN over an earlier one.
std::vector<Val> CumExtreme(LowerCtx& c, bool max) {
  Emitter& e = c.e;
  Val x = c.tensor(0);
  if (x.rank() == 0) return {x, e.Full(0, c.out(1))};
  if (x.numel() == 0) return {x, e.Full(0, c.out(1))};
  int64_t dim = NormDim(c.int_arg(1), x.rank());
  Val idx = e.Iota(TensorType{ElementType::kS64, x.dims()}, dim);
  bool is_float = IsFloating(x.dtype());
  ScanCombine f = [max, is_float](Emitter& b, const std::vector<Val>& p, const std::vector<Val>& q) {
    Val take = b.Compare(max ? "GE" : "LE", q[0], p[0]);
    if (is_float) {
      Val p_nan = b.Compare("NE", p[0], p[0]), q_nan = b.Compare("NE", q[0], q[0]);
      take = b.Binary("or", q_nan, b.Binary("and", b.Unary("not", p_nan), take));
    }
    return std::vector<Val>{b.Select(take, q[0], p[0]), b.Select(take, q[1], p[1])};
  };
  std::vector<Val> r = AssociativeScan(e, {x, idx}, dim, f);
  return {r[0], r[1]};
}
std::vector<Val> LowerCummax(LowerCtx& c) { return CumExtreme(c, true); }
std::vector<Val> LowerCummin(LowerCtx& c) { return CumExtreme(c, false); }

// log(exp(a) + exp(b)) as torch's CPU kernel computes it: NaN propagates, equal infinities
// stay (no inf - inf), otherwise max + log1p(exp(min - max)).
Val LogAddExpReal(Emitter& b, const Val& a, const Val& x) {
  Val mn = b.Binary("minimum", a, x), mx = b.Binary("maximum", a, x);
  Val inf = b.Full(INFINITY, mn.type);
  Val same_inf = b.Binary("and", b.Compare("EQ", mn, mx), b.Compare("EQ", b.Unary("abs", mn), inf));
  Val r = b.Binary("add", mx, b.Unary("log_plus_one", b.Unary("exponential", b.Binary("subtract", mn, mx))));
  return b.Select(same_inf, a, r);
}

// The complex version of torch's helper: min/max by real part, NaN (in either part) infectious,
// equal real infinities handled apart.
Val LogAddExpComplex(Emitter& b, const Val& a, const Val& x) {
  Val ar = RealPart(b, a), ai = ImagPart(b, a), xr = RealPart(b, x), xi = ImagPart(b, x);
  auto nan_of = [&](const Val& re, const Val& im) {
    return b.Binary("or", b.Compare("NE", re, re), b.Compare("NE", im, im));
  };
  Val a_nan = nan_of(ar, ai), x_nan = nan_of(xr, xi);
  Val a_smaller = b.Compare("LT", ar, xr);
  Val mn = b.Select(a_smaller, a, x), mx = b.Select(a_smaller, x, a);
  Val mnr = RealPart(b, mn), mxr = RealPart(b, mx);
  Val inf = b.Full(INFINITY, mnr.type);
  Val same_inf = b.Binary("and", b.Compare("EQ", b.Unary("abs", mnr), inf), b.Compare("EQ", mnr, mxr));
  Val neg = b.Compare("LT", mnr, b.Full(0, mnr.type));
  Val general = b.Binary("add", mx, b.Unary("log_plus_one", b.Unary("exponential", b.Binary("subtract", mn, mx))));
  Val pos_inf = b.Unary("log", b.Binary("add", b.Unary("exponential", mn), b.Unary("exponential", mx)));
  Val r = b.Select(same_inf, b.Select(neg, mn, pos_inf), general);
  Val nan = b.Full(NAN, mnr.type);
  return b.Select(b.Binary("or", a_nan, x_nan), MakeComplex(b, nan, nan, a.type), r);
}

// logcumsumexp(self, dim)
std::vector<Val> LowerLogcumsumexp(LowerCtx& c) {
  Emitter& e = c.e;
  Val x = c.tensor(0);
  ElementType acc = Opmath(c.out().dtype);
  Val xc = e.Convert(x, acc);
  if (x.rank() == 0 || x.numel() == 0) return {e.Convert(xc, c.out().dtype)};
  int64_t dim = NormDim(c.int_arg(1), x.rank());
  bool complex = IsComplex(acc);
  ScanCombine f = [complex](Emitter& b, const std::vector<Val>& p, const std::vector<Val>& q) {
    return std::vector<Val>{complex ? LogAddExpComplex(b, p[0], q[0]) : LogAddExpReal(b, p[0], q[0])};
  };
  // log(exp(-inf) + exp(x)) = log1p(0) + x turns a leading -0.0 into +0.0 on the CPU too.
  return {e.Convert(PositiveZero(e, AssociativeScan(e, {xc}, dim, f)[0], "add"), c.out().dtype)};
}

}  // namespace

void RegisterScanOps(Registry& r) {
  r.Add("cumsum", LowerCumsum);
  r.Add("cumprod", LowerCumprod);
  r.Add("cumprod_backward", LowerCumprodBackward);
  r.Add("cummax", LowerCummax);
  r.Add("cummin", LowerCummin);
  r.Add("logcumsumexp", LowerLogcumsumexp);
}

}  // namespace torch_pjrt::lowering
