// Sorting and selection (sort, topk, kthvalue, median/nanmedian, mode), membership and search
// (isin, bucketize/searchsorted), histc, aminmax and count_nonzero.
//
// Order: torch sorts NaN as the largest value and -0.0 equal to 0.0. Every sort here is stable
// (ties keep their input order), which reproduces torch's documented results (stable sorts,
// median's smallest-index tie rule) and picks one valid answer where torch leaves ties
// unspecified (topk, kthvalue).
#include <cmath>
#include <limits>

#include "lowering/scan_sort.h"

namespace torch_pjrt::lowering {

Val IsNan(Emitter& e, const Val& x) {
  if (!IsFloating(x.dtype()) && !IsComplex(x.dtype())) return e.Full(0, TensorType{ElementType::kBool, x.dims()});
  return e.Compare("NE", x, x);
}

Val SortsBefore(Emitter& e, const Val& a, const Val& b, bool descending) {
  if (!IsFloating(a.dtype())) return e.Compare(descending ? "GT" : "LT", a, b);
  Val a_nan = IsNan(e, a), b_nan = IsNan(e, b);
  if (descending) {
    // a > b, or a is NaN and b is not.
    return e.Binary("or", e.Compare("GT", a, b), e.Binary("and", a_nan, e.Unary("not", b_nan)));
  }
  return e.Binary("or", e.Compare("LT", a, b), e.Binary("and", e.Unary("not", a_nan), b_nan));
}

std::pair<Val, Val> SortWithIndices(Emitter& e, const Val& x, int64_t dim, bool descending) {
  Val idx = e.Iota(TensorType{ElementType::kS64, x.dims()}, dim);
  if (x.numel() == 0) return {x, idx};
  std::vector<Val> r = e.Sort({x, idx}, dim, /*stable=*/true,
                              [descending](Emitter& b, const std::vector<Val>& a) -> std::vector<Val> {
                                return {SortsBefore(b, a[0], a[1], descending)};
                              });
  return {r[0], r[1]};
}

Val GatherFlat(Emitter& e, const Val& table, const Val& index) {
  if (index.numel() == 0) return e.Full(0, TensorType{table.dtype(), index.dims()});
  Emitter::GatherDims g;
  g.collapsed_slice_dims = {0};
  g.start_index_map = {0};
  g.index_vector_dim = index.rank();
  g.slice_sizes = {1};
  return e.Gather(table, e.Convert(index, ElementType::kS64), g, TensorType{table.dtype(), index.dims()});
}

namespace {

// Shape of a reduction over `dim` kept as size 1.
Dims KeptDims(const Dims& dims, int64_t dim) {
  Dims d = dims;
  d[dim] = 1;
  return d;
}

// The value torch's CPU kernels return for the median of nothing: NaN, converted like a C++
// static_cast (INT_MIN patterns for 32/64-bit integers, 0 for narrower ones, true for bool).
double EmptyMedian(ElementType t) {
  switch (t) {
    case ElementType::kS64: return static_cast<double>(std::numeric_limits<int64_t>::min());
    case ElementType::kS32: return -2147483648.0;
    case ElementType::kBool: return 1;
    default: return IsFloating(t) ? NAN : 0;
  }
}

// sort.stable(self, *, stable, dim=-1, descending=False) -> (values, indices)
std::vector<Val> LowerSort(LowerCtx& c) {
  Val x = c.tensor(0);
  if (x.rank() == 0) return {x, c.e.Full(0, c.out(1))};
  int64_t dim = NormDim(c.int_arg(2, -1), x.rank());
  auto [v, i] = SortWithIndices(c.e, x, dim, c.bool_arg(3, false));
  return {v, i};
}

// topk(self, k, dim=-1, largest=True, sorted=True) -> (values, indices). Unsorted results come
// sorted too (a valid order).
std::vector<Val> LowerTopk(LowerCtx& c) {
  Val x = c.tensor(0);
  int64_t k = c.int_arg(1);
  if (c.out(0).dims.empty() || x.rank() == 0) {
    return {c.e.Reshape(x, c.out(0).dims), c.e.Full(0, c.out(1))};
  }
  int64_t dim = NormDim(c.int_arg(2, -1), x.rank());
  if (k == 0 || x.numel() == 0) return {c.e.Full(0, c.out(0)), c.e.Full(0, c.out(1))};
  auto [v, i] = SortWithIndices(c.e, x, dim, c.bool_arg(3, true));
  return {c.e.SliceDim(v, dim, 0, k), c.e.SliceDim(i, dim, 0, k)};
}

// Element `pos` (a [.., 1, ..] int64 tensor or a constant) of the sorted values and indices.
std::vector<Val> PickSorted(LowerCtx& c, const Val& v, const Val& i, int64_t dim, const Val& pos) {
  Val pv = GatherAlong(c.e, v, pos, dim), pi = GatherAlong(c.e, i, pos, dim);
  return {c.e.Reshape(pv, c.out(0).dims), c.e.Reshape(pi, c.out(1).dims)};
}
std::vector<Val> PickSorted(LowerCtx& c, const Val& v, const Val& i, int64_t dim, int64_t pos) {
  return {c.e.Reshape(c.e.SliceDim(v, dim, pos, pos + 1), c.out(0).dims),
          c.e.Reshape(c.e.SliceDim(i, dim, pos, pos + 1), c.out(1).dims)};
}

// kthvalue(self, k, dim=-1, keepdim=False) -> (values, indices): the k-th smallest.
std::vector<Val> LowerKthvalue(LowerCtx& c) {
  Val x = c.tensor(0);
  if (x.rank() == 0) return {c.e.Reshape(x, c.out(0).dims), c.e.Full(0, c.out(1))};
  int64_t dim = NormDim(c.int_arg(2, -1), x.rank());
  int64_t k = c.int_arg(1);
  if (x.numel() == 0) return {c.e.Full(0, c.out(0)), c.e.Full(0, c.out(1))};
  auto [v, i] = SortWithIndices(c.e, x, dim, false);
  return PickSorted(c, v, i, dim, k - 1);
}

// Number of NaNs along `dim`, kept as size 1, int64.
Val NanCount(Emitter& e, const Val& x, int64_t dim) {
  Val n = SumDims(e, e.Convert(IsNan(e, x), ElementType::kS64), {dim}, ElementType::kS64);
  return e.Reshape(n, KeptDims(x.dims(), dim));
}

// median.dim / nanmedian.dim(self, dim, keepdim=False) -> (values, indices): the lower median,
// index the smallest among equal values (a stable sort by value). median returns the first NaN
// of a slice that has one; nanmedian the lower median of the non-NaN values (NaN, index 0 when
// all are NaN).
std::vector<Val> MedianDim(LowerCtx& c, bool ignore_nan) {
  Emitter& e = c.e;
  Val x = c.tensor(0);
  if (x.rank() == 0) return {c.e.Reshape(x, c.out(0).dims), c.e.Full(0, c.out(1))};
  int64_t dim = NormDim(c.int_arg(1), x.rank());
  int64_t n = x.dims()[dim];
  if (x.numel() == 0) return {e.Full(0, c.out(0)), e.Full(0, c.out(1))};
  auto [v, i] = SortWithIndices(e, x, dim, false);
  if (!IsFloating(x.dtype())) return PickSorted(c, v, i, dim, (n - 1) / 2);
  Val nans = NanCount(e, x, dim);
  TensorType kt = nans.type;
  Val pos;
  if (ignore_nan) {
    // (non_nan - 1) / 2, and 0 when every value is NaN.
    Val m1 = e.Binary("subtract", e.Full(static_cast<double>(n - 1), kt), nans);
    pos = e.Binary("divide", e.Binary("maximum", m1, e.Full(0, kt)), e.Full(2, kt));
  } else {
    // The first NaN sits right after the non-NaN values (NaN sorts last, stably).
    Val first_nan = e.Binary("subtract", e.Full(static_cast<double>(n), kt), nans);
    pos = e.Select(e.Compare("GT", nans, e.Full(0, kt)), first_nan, e.Full(static_cast<double>((n - 1) / 2), kt));
  }
  return PickSorted(c, v, i, dim, pos);
}
std::vector<Val> LowerMedianDim(LowerCtx& c) { return MedianDim(c, false); }
std::vector<Val> LowerNanmedianDim(LowerCtx& c) { return MedianDim(c, true); }

// median(self) / nanmedian(self): over every element.
std::vector<Val> MedianAll(LowerCtx& c, bool ignore_nan) {
  Emitter& e = c.e;
  Val x = c.tensor(0);
  int64_t n = x.numel();
  ElementType t = x.dtype();
  if (n == 0) return {e.Full(EmptyMedian(t), c.out())};
  Val flat = e.Reshape(x, {n});
  Val v = SortWithIndices(e, flat, 0, false).first;
  if (!IsFloating(t)) return {e.Reshape(e.SliceDim(v, 0, (n - 1) / 2, (n - 1) / 2 + 1), {})};
  if (!ignore_nan) {
    // Any NaN sorts last, and the median is then NaN.
    Val last = e.Reshape(e.SliceDim(v, 0, n - 1, n), {});
    Val mid = e.Reshape(e.SliceDim(v, 0, (n - 1) / 2, (n - 1) / 2 + 1), {});
    return {e.Select(IsNan(e, last), last, mid)};
  }
  Val nans = e.Reshape(NanCount(e, flat, 0), {});
  TensorType kt = nans.type;
  Val m1 = e.Binary("subtract", e.Full(static_cast<double>(n - 1), kt), nans);
  Val pos = e.Binary("divide", e.Binary("maximum", m1, e.Full(0, kt)), e.Full(2, kt));
  return {e.Reshape(e.DynamicSlice(v, {pos}, {1}), {})};
}
std::vector<Val> LowerMedian(LowerCtx& c) { return MedianAll(c, false); }
std::vector<Val> LowerNanmedian(LowerCtx& c) { return MedianAll(c, true); }

// mode(self, dim=-1, keepdim=False) -> (values, indices): the most frequent value, the smallest
// on ties, with the largest index where it occurs (torch's CPU kernel takes the last element of
// the run of equal values after sorting). Each NaN counts as its own value.
std::vector<Val> LowerMode(LowerCtx& c) {
  Emitter& e = c.e;
  Val x = c.tensor(0);
  if (x.rank() == 0) return {c.e.Reshape(x, c.out(0).dims), c.e.Full(0, c.out(1))};
  int64_t dim = NormDim(c.int_arg(1, -1), x.rank());
  int64_t n = x.dims()[dim];
  if (x.numel() == 0) return {e.Full(0, c.out(0)), e.Full(0, c.out(1))};
  auto [v, i] = SortWithIndices(e, x, dim, false);
  Val pos = e.Iota(TensorType{ElementType::kS64, x.dims()}, dim);
  TensorType edge{ElementType::kBool, KeptDims(x.dims(), dim)};
  Val new_run = e.Full(1, edge), run_end = e.Full(1, edge);
  if (n > 1) {
    Val differs = e.Compare("NE", e.SliceDim(v, dim, 1, n), e.SliceDim(v, dim, 0, n - 1));
    new_run = e.Concatenate({e.Full(1, edge), differs}, dim);
    run_end = e.Concatenate({differs, e.Full(1, edge)}, dim);
  }
  // Start of each element's run: a running max of the run-start positions.
  Val starts = e.Select(new_run, pos, e.Full(0, pos.type));
  ScanCombine maxf = [](Emitter& b, const std::vector<Val>& p, const std::vector<Val>& q) {
    return std::vector<Val>{b.Binary("maximum", p[0], q[0])};
  };
  Val start = AssociativeScan(e, {starts}, dim, maxf)[0];
  Val freq = e.Binary("add", e.Binary("subtract", pos, start), e.Full(1, pos.type));
  Val score = e.Select(run_end, freq, e.Full(0, pos.type));
  Val best = e.Reshape(FirstExtremeIndex(e, score, dim, true), KeptDims(x.dims(), dim));  // the first on ties
  return PickSorted(c, v, i, dim, best);
}

// ------------------------------------------------------------ search

int64_t BitLength(int64_t m) {
  int64_t bits = 0;
  while (m > 0) {
    ++bits;
    m >>= 1;
  }
  return bits;
}

// torch's CPU binary search, lane by lane: for each value, the first position p in its row of
// `table` (flat, rows of m elements starting at `row_start`) with table[p] >= value (> for
// `right`), written exactly like the CPU loop (`!(mid >= v)` moves right), so NaNs and unsorted
// rows give torch's answers. Unrolled: each step halves every interval. `nan_last` treats a NaN
// in the table as larger than every value (a table sorted in torch's order, as isin needs).
Val BinarySearch(Emitter& e, const Val& table, const Val& row_start, const Val& values, int64_t m,
                 bool right, bool nan_last = false) {
  TensorType it{ElementType::kS64, values.dims()};
  Val start = e.Full(0, it), end = e.Full(static_cast<double>(m), it);
  Val one = e.Full(1, it), two = e.Full(2, it), last = e.Full(static_cast<double>(m - 1), it);
  for (int64_t step = 0, steps = BitLength(m); step < steps; ++step) {
    Val active = e.Compare("LT", start, end);
    Val mid = e.Binary("add", start, e.Binary("divide", e.Binary("subtract", end, start), two));
    Val at = e.Binary("minimum", mid, last);
    if (row_start.valid()) at = e.Binary("add", at, row_start);
    Val probe = GatherFlat(e, table, at);
    Val stop = e.Compare(right ? "GT" : "GE", probe, values);
    if (nan_last && IsFloating(probe.dtype())) stop = e.Binary("or", stop, IsNan(e, probe));
    Val go_right = e.Unary("not", stop);
    start = e.Select(e.Binary("and", active, go_right), e.Binary("add", mid, one), start);
    end = e.Select(e.Binary("and", active, e.Unary("not", go_right)), mid, end);
  }
  return start;
}

// Insertion points of `values` into the last dim of `sorted` (1-D: shared by every value; N-D:
// row r of sorted for the values in row r of `values`), both already in a common dtype.
Val SearchSorted(Emitter& e, const Val& sorted, const Val& values, bool right) {
  int64_t m = sorted.dims()[sorted.rank() - 1];
  TensorType it{ElementType::kS64, values.dims()};
  if (m == 0 || values.numel() == 0) return e.Full(0, it);
  if (sorted.rank() == 1) return BinarySearch(e, sorted, Val(), values, m, right);
  int64_t rows = sorted.numel() / m;
  int64_t k = values.dims()[values.rank() - 1];
  Val v2 = e.Reshape(values, {rows, k});
  Val row_start = e.Binary("multiply", e.Iota(TensorType{ElementType::kS64, {rows, k}}, 0),
                           e.Full(static_cast<double>(m), TensorType{ElementType::kS64, {rows, k}}));
  Val r = BinarySearch(e, e.Reshape(sorted, {sorted.numel()}), row_start, v2, m, right);
  return e.Reshape(r, values.dims());
}

// searchsorted.Tensor(sorted_sequence, self, *, out_int32=False, right=False, side=None,
// sorter=None) and searchsorted.Scalar (self a Scalar).
std::vector<Val> LowerSearchsorted(LowerCtx& c) {
  Emitter& e = c.e;
  Val seq = c.tensor(0), values = c.tensor(1);
  bool right = c.bool_arg(3, false);
  if (!c.is_none(4)) right = c.string_arg(4) == "right";
  ElementType t = ResultType(c, {0, 1});
  Val sorted = e.Convert(seq, t);
  if (c.is_tensor(5)) {
    Val sorter = c.tensor(5);
    sorted = GatherAlong(e, sorted, sorter, sorted.rank() - 1);
  }
  Val r = SearchSorted(e, sorted, e.Convert(values, t), right);
  return {e.Convert(r, c.out().dtype)};
}

// bucketize.Tensor(self, boundaries, *, out_int32=False, right=False) and bucketize.Scalar.
std::vector<Val> LowerBucketize(LowerCtx& c) {
  Emitter& e = c.e;
  Val values = c.tensor(0), boundaries = c.tensor(1);
  ElementType t = ResultType(c, {0, 1});
  Val r = SearchSorted(e, e.Convert(boundaries, t), e.Convert(values, t), c.bool_arg(3, false));
  return {e.Convert(r, c.out().dtype)};
}

// Whether each of `elements` equals one of `tests` (flattened), both in a common dtype. Few test
// values: compare against each; many: sort them and binary-search (NaN never matches).
Val IsIn(Emitter& e, const Val& elements, const Val& tests) {
  int64_t m = tests.numel(), n = elements.numel();
  TensorType bt{ElementType::kBool, elements.dims()};
  if (m == 0 || n == 0) return e.Full(0, bt);
  Val flat = e.Reshape(tests, {m});
  if (m <= 32) {
    Val x = e.Reshape(elements, {n});
    Val eq = e.Compare("EQ", e.BroadcastInDim(x, {n, m}, {0}), e.BroadcastInDim(flat, {n, m}, {1}));
    return e.Reshape(e.Reduce(eq, e.Scalar(0, ElementType::kBool), {1}, "or"), elements.dims());
  }
  Val sorted = SortWithIndices(e, flat, 0, false).first;
  Val p = BinarySearch(e, sorted, Val(), elements, m, false, /*nan_last=*/true);
  Val at = e.Binary("minimum", p, e.Full(static_cast<double>(m - 1), p.type));
  return e.Compare("EQ", GatherFlat(e, sorted, at), elements);
}

// isin.Tensor_Tensor / Tensor_Scalar / Scalar_Tensor(elements, test_elements, *,
// assume_unique=False, invert=False)
std::vector<Val> LowerIsin(LowerCtx& c) {
  Emitter& e = c.e;
  ElementType t = ResultType(c, {0, 1});
  Val r = IsIn(e, e.Convert(c.tensor(0), t), e.Convert(c.tensor(1), t));
  if (c.bool_arg(3, false)) r = e.Unary("not", r);
  return {e.Reshape(r, c.out().dims)};
}

// histc(self, bins=100, min=0, max=0): torch's CPU arithmetic. Edges are min and max (the data's
// range when they are equal, widened by 1 each way if that is a single value), converted to the
// input type; an element x in [lo, hi] falls into bin (x - lo) * bins / (hi - lo) computed in the
// input type, the last bin closed on the right; NaN and out-of-range values count nowhere.
std::vector<Val> LowerHistc(LowerCtx& c) {
  Emitter& e = c.e;
  Val x = c.tensor(0);
  ElementType t = x.dtype();
  int64_t bins = c.int_arg(1, 100);
  int64_t n = x.numel();
  Val lo = c.is_none(2) ? e.Scalar(0, ElementType::kF64) : c.scalar(2, ElementType::kF64);
  Val hi = c.is_none(3) ? e.Scalar(0, ElementType::kF64) : c.scalar(3, ElementType::kF64);
  if (n > 0) {
    Val flat = e.Reshape(x, {n});
    Val dmin = e.Convert(e.Reduce(flat, e.Scalar(INFINITY, t), {0}, "minimum"), ElementType::kF64);
    Val dmax = e.Convert(e.Reduce(flat, e.Scalar(-INFINITY, t), {0}, "maximum"), ElementType::kF64);
    Val same = e.Compare("EQ", lo, hi);
    lo = e.Select(same, dmin, lo);
    hi = e.Select(same, dmax, hi);
  }
  Val same = e.Compare("EQ", lo, hi);
  Val one = e.Scalar(1, ElementType::kF64);
  lo = e.Select(same, e.Binary("subtract", lo, one), lo);
  hi = e.Select(same, e.Binary("add", hi, one), hi);
  TensorType out_t = c.out();
  if (n == 0) return {e.Full(0, out_t)};
  Val flat = e.Reshape(x, {n});
  Val lo_t = e.BroadcastTo(e.Convert(lo, t), {n}), hi_t = e.BroadcastTo(e.Convert(hi, t), {n});
  Val scaled = e.Binary("multiply", e.Binary("subtract", flat, lo_t), e.Full(static_cast<double>(bins), flat.type));
  Val pos = e.Convert(e.Binary("divide", scaled, e.Binary("subtract", hi_t, lo_t)), ElementType::kS64);
  TensorType it{ElementType::kS64, {n}};
  pos = e.Clamp(e.Scalar(0, ElementType::kS64), pos, e.Scalar(static_cast<double>(bins - 1), ElementType::kS64));
  Val inside = e.Binary("and", e.Compare("GE", flat, lo_t), e.Compare("LE", flat, hi_t));
  Val target = e.Select(inside, pos, e.Full(static_cast<double>(bins), it));
  Emitter::ScatterDims s;
  s.inserted_window_dims = {0};
  s.scatter_dims_to_operand_dims = {0};
  s.index_vector_dim = 1;
  Val counts = e.Scatter(e.Full(0, TensorType{out_t.dtype, {bins + 1}}), e.Reshape(target, {n, 1}),
                         e.Full(1, TensorType{out_t.dtype, {n}}), s, "add");
  return {e.SliceDim(counts, 0, 0, bins)};
}

// aminmax(self, *, dim=None, keepdim=False) -> (min, max); NaN propagates.
std::vector<Val> LowerAminmax(LowerCtx& c) {
  Emitter& e = c.e;
  Val x = c.tensor(0);
  Dims dims = c.is_none(1) ? NormDims({}, x.rank()) : NormDims({c.int_arg(1)}, x.rank(), false);
  ElementType t = x.dtype();
  if (dims.empty()) return {e.Reshape(x, c.out(0).dims), e.Reshape(x, c.out(1).dims)};
  Val mn, mx;
  if (t == ElementType::kBool) {
    mn = e.Reduce(x, e.Scalar(1, t), dims, "and");
    mx = e.Reduce(x, e.Scalar(0, t), dims, "or");
  } else {
    mn = e.Reduce(x, e.Scalar(HighestValue(t), t), dims, "minimum");
    mx = e.Reduce(x, e.Scalar(LowestValue(t), t), dims, "maximum");
  }
  return {e.Reshape(mn, c.out(0).dims), e.Reshape(mx, c.out(1).dims)};
}

// count_nonzero.dim_IntList(self, dim)
std::vector<Val> LowerCountNonzero(LowerCtx& c) {
  Emitter& e = c.e;
  Val x = c.tensor(0);
  Dims dims = NormDims(c.int_list(1), x.rank());
  Val nz = e.Convert(e.Compare("NE", x, e.Full(0, x.type)), ElementType::kS64);
  return {e.Reshape(SumDims(e, nz, dims, ElementType::kS64), c.out().dims)};
}

}  // namespace

void RegisterSortingOps(Registry& r) {
  r.Add("sort.stable", LowerSort);
  r.Add("topk", LowerTopk);
  r.Add("kthvalue", LowerKthvalue);
  r.Add("median", LowerMedian);
  r.Add("nanmedian", LowerNanmedian);
  r.Add("median.dim", LowerMedianDim);
  r.Add("nanmedian.dim", LowerNanmedianDim);
  r.Add("mode", LowerMode);
  // searchsorted's sorter holds indices into the last dim of sorted_sequence (1-D here: the
  // Meta guard sends N-D sequences with a sorter to the CPU, see aten/meta_guards.cc); CPU's message.
  IndexArgSpec sorter{5, 0, -1, -1, false, IndexArgSpec::Bound::kLastDim, 0,
                      "torch.searchsorted(): sorter index out of range"};
  r.Add("searchsorted.Tensor", LowerSearchsorted).index_checks = {sorter};
  r.Add("searchsorted.Scalar", LowerSearchsorted).index_checks = {sorter};
  r.Add("bucketize.Tensor", LowerBucketize);
  r.Add("bucketize.Scalar", LowerBucketize);
  r.Add("isin.Tensor_Tensor", LowerIsin);
  r.Add("isin.Tensor_Scalar", LowerIsin);
  r.Add("isin.Scalar_Tensor", LowerIsin);
  OpLowering& histc = r.Add("histc", LowerHistc);
  histc.checked_scalars = {2, 3};  // min <= max, both finite
  histc.value_checks = {{0, CheckRule::kFinite, "torch.histc: range of the input's values is not finite (NaN or "
                         "infinity) and min == max asks for that range", -1, std::make_pair(2, 3)}};
  r.Add("aminmax", LowerAminmax);
  r.Add("count_nonzero.dim_IntList", LowerCountNonzero);
}

}  // namespace torch_pjrt::lowering
