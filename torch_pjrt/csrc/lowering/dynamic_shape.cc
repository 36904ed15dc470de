// Ops whose result shape depends on the data (nonzero, masked_select, unique). XLA needs static
// shapes, so the ATen layer first reads one number from the device (how many elements the result
// has: `pjrt::count_*`, a small sync), then traces the op with that size as an attribute. The
// lowerings here produce the result at that static size with a stable sort that moves the
// selected elements to the front, in their original order.
#include "lowering/helpers.h"

namespace torch_pjrt::lowering {

namespace {

// Flat positions [0, n) of `selected` (a rank-1 pred of n elements), selected ones first in
// their original order: a stable sort by "not selected".
Val SelectedFirst(Emitter& e, const Val& selected) {
  int64_t n = selected.numel();
  Val rejected = e.Convert(e.Unary("not", selected), ElementType::kS32);
  Val positions = e.Iota(TensorType{ElementType::kS64, {n}}, 0);
  auto by_key = [](Emitter& b, const std::vector<Val>& a) -> std::vector<Val> {
    return {b.Compare("LT", a[0], a[1])};
  };
  return e.Sort({rejected, positions}, 0, /*stable=*/true, by_key)[1];
}

Val IsNonzero(Emitter& e, const Val& x) {
  if (x.dtype() == ElementType::kBool) return x;
  return e.Compare("NE", x, e.Full(0, x.type));
}

Val Flat(Emitter& e, const Val& x) { return e.Reshape(x, {x.numel()}); }

// Inclusive prefix sum of a rank-1 s64 array.
Val PrefixSum(Emitter& e, const Val& x) {
  int64_t n = x.numel();
  auto add = [](Emitter& b, const std::vector<Val>& a) -> std::vector<Val> { return {b.Binary("add", a[0], a[1])}; };
  return e.ReduceWindow({x}, {e.Scalar(0, x.dtype())}, {n}, {1}, {1}, {1}, {{n - 1, 0}}, add)[0];
}

// count_nonzero_all(self) -> s64[]: how many elements are not zero (NaN counts, as in torch).
std::vector<Val> LowerCountNonzero(LowerCtx& c) {
  Val nz = c.e.Convert(IsNonzero(c.e, c.tensor(0)), ElementType::kS64);
  return {c.e.Reduce(Flat(c.e, nz), c.e.Scalar(0, ElementType::kS64), {0}, "add")};
}

// The coordinates in `dims` of `count` flat positions: s64[count, rank].
Val Coordinates(Emitter& e, const Val& flat, const Dims& dims, int64_t count) {
  std::vector<Val> columns;
  int64_t numel = 1;
  for (int64_t d : dims) numel *= d;
  int64_t stride = numel;
  for (int64_t size : dims) {
    stride = size == 0 ? 0 : stride / size;
    Val coord = e.Binary("divide", flat, e.Full(static_cast<double>(std::max<int64_t>(stride, 1)), flat.type));
    coord = e.Binary("remainder", coord, e.Full(static_cast<double>(std::max<int64_t>(size, 1)), flat.type));
    columns.push_back(e.Reshape(coord, {count, 1}));
  }
  if (columns.empty()) return e.Full(0, TensorType{ElementType::kS64, {count, 0}});
  return e.Concatenate(columns, 1);
}

// nonzero_static(self, *, size, fill_value=-1) -> s64[size, rank]: the first `size` nonzero
// coordinates in row-major order; rows past the nonzero count hold fill_value.
std::vector<Val> LowerNonzeroStatic(LowerCtx& c) {
  Emitter& e = c.e;
  Val x = c.tensor(0);
  int64_t size = c.out().dims[0], n = x.numel();
  if (size == 0) return {e.Full(0, c.out())};
  Val selected = Flat(e, IsNonzero(e, x));
  Val flat = n == 0 ? e.Full(0, TensorType{ElementType::kS64, {0}}) : SelectedFirst(e, selected);
  if (n < size) flat = e.Pad(flat, e.Scalar(0, ElementType::kS64), {0}, {size - n}, {0});
  flat = e.SliceDim(flat, 0, 0, size);
  Val coords = Coordinates(e, flat, x.dims(), size);
  Val count = n == 0 ? e.Scalar(0, ElementType::kS64)
                     : e.Reduce(e.Convert(selected, ElementType::kS64), e.Scalar(0, ElementType::kS64), {0}, "add");
  Val row = e.Iota(TensorType{ElementType::kS64, coords.dims()}, 0);
  Val filled = e.Compare("GE", row, e.BroadcastInDim(count, coords.dims(), {}));
  return {e.Select(filled, e.Full(static_cast<double>(c.int_arg(2, -1)), coords.type), coords)};
}

// nonzero(self, count) -> s64[rank, count]: coordinates of the nonzero elements, row-major order,
// one row per dim (torch's kernels fill that layout and return its transpose).
std::vector<Val> LowerNonzero(LowerCtx& c) {
  Emitter& e = c.e;
  Val x = c.tensor(0);
  int64_t count = c.out().dims[1];
  Val flat = SelectedFirst(e, Flat(e, IsNonzero(e, x)));
  flat = e.SliceDim(flat, 0, 0, count);
  return {e.Transpose(Coordinates(e, flat, x.dims(), count), {1, 0})};
}

// masked_select(self, mask, count) -> [count], both already broadcast to one shape.
std::vector<Val> LowerMaskedSelect(LowerCtx& c) {
  Emitter& e = c.e;
  Val x = Flat(e, c.tensor(0));
  int64_t count = c.out().dims[0];
  Val order = e.SliceDim(SelectedFirst(e, Flat(e, c.tensor(1))), 0, 0, count);
  Emitter::GatherDims g;
  g.collapsed_slice_dims = {0};
  g.start_index_map = {0};
  g.index_vector_dim = 1;
  g.slice_sizes = {1};
  return {e.Gather(x, e.Reshape(order, {count, 1}), g, TensorType{x.dtype(), {count}})};
}

// The flat input, sorted (unique) or as it is (unique_consecutive), its original positions, and
// per position whether it starts a new run of equal values.
struct Runs {
  Val sorted, order, starts;
};

// Marks where runs of equal values start in r.sorted (NaN != NaN: every NaN starts a run).
Runs RunStarts(Emitter& e, Runs r, const Val& positions) {
  int64_t n = r.sorted.numel();
  if (n == 0) {
    r.starts = e.Full(0, TensorType{ElementType::kBool, {0}});
    return r;
  }
  Val prev = e.Concatenate({e.SliceDim(r.sorted, 0, 0, 1), e.SliceDim(r.sorted, 0, 0, n - 1)}, 0);
  Val differs = e.Compare("NE", r.sorted, prev);  // NaN != NaN: every NaN starts a run
  Val first = e.Compare("EQ", positions, e.Full(0, positions.type));
  r.starts = e.Binary("or", differs, first);
  return r;
}

Runs FindRuns(Emitter& e, const Val& x, bool sort) {
  int64_t n = x.numel();
  Val positions = e.Iota(TensorType{ElementType::kS64, {n}}, 0);
  if (!sort) return RunStarts(e, Runs{Flat(e, x), positions, {}}, positions);
  bool floating = IsFloating(x.dtype());
  auto ascending = [floating](Emitter& b, const std::vector<Val>& a) -> std::vector<Val> {
    // torch sorts NaN last; NaN values are all distinct in unique (as on the CPU).
    Val lt = b.Compare("LT", a[0], a[1]);
    if (!floating) return {lt};
    Val lhs_nan = b.Compare("NE", a[0], a[0]), rhs_nan = b.Compare("NE", a[1], a[1]);
    return {b.Binary("or", lt, b.Binary("and", b.Unary("not", lhs_nan), rhs_nan))};
  };
  std::vector<Val> sorted = e.Sort({Flat(e, x), positions}, 0, /*stable=*/true, ascending);
  return RunStarts(e, Runs{sorted[0], sorted[1], {}}, positions);
}

// count_unique(self) / count_unique_consecutive(self) -> s64[]: the number of runs (every NaN
// is its own).
template <bool kSort>
std::vector<Val> LowerCountRuns(LowerCtx& c) {
  Runs r = FindRuns(c.e, c.tensor(0), kSort);
  return {c.e.Reduce(c.e.Convert(r.starts, ElementType::kS64), c.e.Scalar(0, ElementType::kS64), {0}, "add")};
}

// unique / unique_consecutive(self, count) -> (values [count], inverse [self's shape],
// counts [count]); unique's values ascend, unique_consecutive's keep their order.
template <bool kSort>
std::vector<Val> LowerRuns(LowerCtx& c) {
  Emitter& e = c.e;
  Val x = c.tensor(0);
  int64_t n = x.numel(), count = c.out(0).dims[0];
  Runs r = FindRuns(e, x, kSort);
  Val run_index = e.Binary("subtract", PrefixSum(e, e.Convert(r.starts, ElementType::kS64)),
                           e.Full(1, TensorType{ElementType::kS64, {n}}));
  // Values: the first element of each run, moved to the front.
  Val first_of_run = e.SliceDim(SelectedFirst(e, r.starts), 0, 0, count);
  Emitter::GatherDims g;
  g.collapsed_slice_dims = {0};
  g.start_index_map = {0};
  g.index_vector_dim = 1;
  g.slice_sizes = {1};
  Val values = e.Gather(r.sorted, e.Reshape(first_of_run, {count, 1}), g, TensorType{x.dtype(), {count}});
  // Inverse: each element's run index, scattered back to its original position.
  Emitter::ScatterDims s;
  s.inserted_window_dims = {0};
  s.scatter_dims_to_operand_dims = {0};
  s.index_vector_dim = 1;
  Val inverse = e.Scatter(e.Full(0, TensorType{ElementType::kS64, {n}}), e.Reshape(r.order, {n, 1}), run_index, s, "");
  // Counts: how many sorted elements fall in each run.
  Val counts = e.Scatter(e.Full(0, TensorType{ElementType::kS64, {count}}), e.Reshape(run_index, {n, 1}),
                         e.Full(1, TensorType{ElementType::kS64, {n}}), s, "add");
  return {values, e.Reshape(inverse, c.out(1).dims), counts};
}

}  // namespace

// Per row of x [n, r], whether it starts a run of equal rows: the first row does, and any row
// with an element unlike the row before (a row holding NaN differs from every row, as the CPU
// compares rows element by element).
Val RowRunStarts(Emitter& e, const Val& x) {
  int64_t n = x.dims()[0];
  if (n == 0) return e.Full(0, TensorType{ElementType::kBool, {0}});
  Val prev = e.Concatenate({e.SliceDim(x, 0, 0, 1), e.SliceDim(x, 0, 0, n - 1)}, 0);
  Val differs = e.Reduce(e.Compare("NE", x, prev), e.Scalar(0, ElementType::kBool), {1}, "or");
  TensorType positions{ElementType::kS64, {n}};
  return e.Binary("or", differs, e.Compare("EQ", e.Iota(positions, 0), e.Full(0, positions)));
}

// count_row_runs(x [n, r]) -> s64[]: how many runs of equal rows.
std::vector<Val> LowerCountRowRuns(LowerCtx& c) {
  Val starts = c.e.Convert(RowRunStarts(c.e, c.tensor(0)), ElementType::kS64);
  return {c.e.Reduce(starts, c.e.Scalar(0, ElementType::kS64), {0}, "add")};
}

// row_runs(x [n, r], count) -> (values [count, r], inverse [n], counts [count]):
// unique_consecutive along a dim, moved first and the rest flattened.
std::vector<Val> LowerRowRuns(LowerCtx& c) {
  Emitter& e = c.e;
  Val x = c.tensor(0);
  int64_t n = x.dims()[0], count = c.out(0).dims[0];
  Val starts = RowRunStarts(e, x);
  Val run_index = e.Binary("subtract", PrefixSum(e, e.Convert(starts, ElementType::kS64)),
                           e.Full(1, TensorType{ElementType::kS64, {n}}));
  Val values = TakeRows(e, x, e.SliceDim(SelectedFirst(e, starts), 0, 0, count));
  Emitter::ScatterDims s;
  s.inserted_window_dims = {0};
  s.scatter_dims_to_operand_dims = {0};
  s.index_vector_dim = 1;
  Val counts = e.Scatter(e.Full(0, TensorType{ElementType::kS64, {count}}), e.Reshape(run_index, {n, 1}),
                         e.Full(1, TensorType{ElementType::kS64, {n}}), s, "add");
  return {values, run_index, counts};
}

void RegisterDynamicShapeOps(Registry& r) {
  r.Add("pjrt::count_nonzero", LowerCountNonzero);
  r.Add("pjrt::nonzero", LowerNonzero);
  r.Add("nonzero_static", LowerNonzeroStatic);
  r.Add("pjrt::masked_select", LowerMaskedSelect);
  r.Add("pjrt::count_unique", LowerCountRuns<true>);
  r.Add("pjrt::unique", LowerRuns<true>);
  r.Add("pjrt::count_unique_consecutive", LowerCountRuns<false>);
  r.Add("pjrt::unique_consecutive", LowerRuns<false>);
  r.Add("pjrt::count_row_runs", LowerCountRowRuns);
  r.Add("pjrt::row_runs", LowerRowRuns);
}

}  // namespace torch_pjrt::lowering
