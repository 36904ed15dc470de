// Our own ops, never seen by the dispatcher: reading and writing strided views of a storage's
// flat contents, dtype reinterpretation, layout changes and storage resizes. A storage's value is
// an array whose row-major order is the storage's memory order, so every torch view is some
// combination of slice/reshape/transpose/broadcast of it (a gather for overlapping strides).
#include <algorithm>
#include <limits>
#include <numeric>
#include <stdexcept>

#include "lowering/algebra.h"
#include "lowering/helpers.h"

namespace torch_pjrt::lowering {

namespace {

// Reinterprets the flat array `flat` (rank 1) as elements of type `to`.
Val BitcastFlat(Emitter& e, const Val& flat, ElementType to) {
  ElementType from = flat.dtype();
  if (from == to) return flat;
  if (IsComplex(from)) {
    // A complex element is its (real, imaginary) pair in memory: view_as_real, x.view(float).
    int64_t n = flat.dims()[0];
    Val re = e.Reshape(RealPart(e, flat), {n, 1}), im = e.Reshape(ImagPart(e, flat), {n, 1});
    return BitcastFlat(e, e.Reshape(e.Concatenate({re, im}, 1), {2 * n}), to);
  }
  if (IsComplex(to)) {
    Val parts = BitcastFlat(e, flat, ComplexPartType(to));
    int64_t n = parts.dims()[0];
    if (n % 2 != 0) {
      throw std::invalid_argument("pjrt: storage size is not a multiple of the new element size");
    }
    Val pairs = e.Reshape(parts, {n / 2, 2});
    Val re = e.Reshape(e.SliceDim(pairs, 1, 0, 1), {n / 2}), im = e.Reshape(e.SliceDim(pairs, 1, 1, 2), {n / 2});
    return MakeComplex(e, re, im);
  }
  // PRED has no bit width in StableHLO's bitcast; torch stores bools as bytes holding 0 or 1.
  if (from == ElementType::kBool) return BitcastFlat(e, e.Convert(flat, ElementType::kU8), to);
  if (to == ElementType::kBool) return e.Convert(BitcastFlat(e, flat, ElementType::kU8), ElementType::kBool);
  size_t a = ItemSize(from), b = ItemSize(to);
  int64_t n = flat.dims()[0];
  if (a == b) return e.BitcastConvert(flat, TensorType{to, {n}});
  if (a > b) {
    int64_t k = static_cast<int64_t>(a / b);
    Val wide = e.BitcastConvert(flat, TensorType{to, {n, k}});
    return e.Reshape(wide, {n * k});
  }
  int64_t k = static_cast<int64_t>(b / a);
  if (n % k != 0) {
    throw std::invalid_argument("pjrt: storage size is not a multiple of the new element size");
  }
  Val grouped = e.Reshape(flat, {n / k, k});
  return e.BitcastConvert(grouped, TensorType{to, {n / k}});
}

Val Flatten(Emitter& e, const Val& v) { return e.Reshape(v, {v.numel()}); }

// How a strided view maps onto the flat storage when no two elements overlap: the non-trivial
// dims sorted by decreasing stride, each stride a multiple of the next.
struct StridedPlan {
  bool regular = false;
  std::vector<int64_t> order;  // original dim indices with size > 1 and stride > 0, outer first
  Dims block;                  // dims of the reshaped window of the storage
  int64_t span = 0;            // elements of storage covered from the offset
};

StridedPlan PlanView(const Dims& sizes, const Dims& strides) {
  StridedPlan p;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] > 1 && strides[i] > 0) p.order.push_back(static_cast<int64_t>(i));
  }
  std::stable_sort(p.order.begin(), p.order.end(),
                   [&](int64_t x, int64_t y) { return strides[x] > strides[y]; });
  if (p.order.empty()) {
    p.regular = true;
    p.span = 1;
    p.block = {1};
    return p;
  }
  for (size_t j = 0; j + 1 < p.order.size(); ++j) {
    int64_t s = strides[p.order[j]], next = strides[p.order[j + 1]];
    if (s % next != 0 || s < next * sizes[p.order[j + 1]]) return p;  // overlapping: not regular
  }
  p.regular = true;
  p.span = strides[p.order[0]] * sizes[p.order[0]];
  p.block.push_back(sizes[p.order[0]]);
  for (size_t j = 0; j + 1 < p.order.size(); ++j) {
    p.block.push_back(strides[p.order[j]] / strides[p.order[j + 1]]);
  }
  p.block.push_back(strides[p.order.back()]);
  return p;
}

// Flat indices (int64, shape `sizes`) of every element of a strided view.
Val ViewIndices(Emitter& e, const Dims& sizes, const Dims& strides, int64_t offset) {
  TensorType t{ElementType::kS64, sizes};
  Val index = e.Full(static_cast<double>(offset), t);
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] <= 1 || strides[i] == 0) continue;
    Val iota = e.Iota(t, static_cast<int64_t>(i));
    index = e.Binary("add", index, e.Binary("multiply", iota, e.Full(static_cast<double>(strides[i]), t)));
  }
  return index;
}

// Pads or truncates `flat` to `n` elements.
Val FitLength(Emitter& e, const Val& flat, int64_t n) {
  int64_t have = flat.dims()[0];
  if (have == n) return flat;
  if (have > n) return e.SliceDim(flat, 0, 0, n);
  return e.Pad(flat, e.Scalar(0, flat.dtype()), {0}, {n - have}, {0});
}

// Reads the view (sizes, strides, offset) of the flat storage array `flat`.
Val ReadView(Emitter& e, const Val& flat, const Dims& sizes, const Dims& strides, int64_t offset) {
  TensorType out{flat.dtype(), sizes};
  if (NumElements(sizes) == 0) return e.Full(0, out);
  // The whole array in row-major order (a contiguous tensor's read of its storage): a reshape, so
  // that the emitter knows the result's flat form.
  if (offset == 0 && flat.dims()[0] == NumElements(sizes) && IsContiguous(sizes, strides)) return e.Reshape(flat, sizes);
  StridedPlan p = PlanView(sizes, strides);
  if (!p.regular) {
    Val idx = ViewIndices(e, sizes, strides, offset);
    Dims idx_dims = sizes;
    idx_dims.push_back(1);
    Emitter::GatherDims g;
    g.collapsed_slice_dims = {0};
    g.start_index_map = {0};
    g.index_vector_dim = static_cast<int64_t>(sizes.size());
    g.slice_sizes = {1};
    return e.Gather(flat, e.Reshape(idx, idx_dims), g, out);
  }
  Val window = FitLength(e, flat, std::max(flat.dims()[0], offset + p.span));
  window = e.SliceDim(window, 0, offset, offset + p.span);
  Val block = e.Reshape(window, p.block);
  // Keep index 0..size-1 of every view dim and index 0 of the innermost stride dim.
  Dims limit;
  for (int64_t d : p.order) limit.push_back(sizes[d]);
  limit.push_back(1);
  Val picked = e.Slice(block, Dims(limit.size(), 0), limit, Dims(limit.size(), 1));
  Dims sorted_sizes(limit.begin(), limit.end() - 1);
  picked = e.Reshape(picked, sorted_sizes);
  // Back to the view's own dim order, then broadcast over size-1 and stride-0 dims.
  Dims perm(p.order.size(), 0);
  std::vector<int64_t> by_dim(p.order.begin(), p.order.end());
  std::vector<size_t> rank(p.order.size());
  std::iota(rank.begin(), rank.end(), 0);
  std::sort(rank.begin(), rank.end(), [&](size_t x, size_t y) { return by_dim[x] < by_dim[y]; });
  Dims mapping;
  for (size_t j = 0; j < rank.size(); ++j) {
    perm[j] = static_cast<int64_t>(rank[j]);
    mapping.push_back(by_dim[rank[j]]);
  }
  Val ordered = e.Transpose(picked, perm);
  return e.BroadcastInDim(ordered, sizes, mapping);
}

// Bits of `v` as an unsigned integer (bool as is): NaNs compare equal to themselves.
Val Bits(Emitter& e, const Val& v) {
  if (!IsFloating(v.dtype()) && !IsComplex(v.dtype())) return v;
  ElementType t = ItemSize(v.dtype()) == 2 ? ElementType::kU16 : ItemSize(v.dtype()) == 4 ? ElementType::kU32
                                                                                          : ElementType::kU64;
  if (IsComplex(v.dtype())) return v;  // complex values compare as values
  return e.BitcastConvert(v, TensorType{t, v.dims()});
}

// Collapses dim `dim` of `update` to size 1, keeping the last element that differs from `old`
// (same shape as update), or the first element if none does.
Val LastChanged(Emitter& e, const Val& update, const Val& old, int64_t dim) {
  Val changed = e.Compare("NE", Bits(e, update), Bits(e, old));
  TensorType key_type{ElementType::kS64, update.dims()};
  Val key = e.Select(changed, e.Iota(key_type, dim), e.Full(-1, key_type));
  auto body = [](Emitter& b, const std::vector<Val>& a) -> std::vector<Val> {
    // (acc value, acc key, x value, x key): the larger key wins.
    Val take = b.Compare("GT", a[3], a[1]);
    return {b.Select(take, a[2], a[0]), b.Select(take, a[3], a[1])};
  };
  Val first = e.SliceDim(update, dim, 0, 1);
  Dims reduced_dims = update.dims();
  reduced_dims[dim] = 1;
  std::vector<Val> r = e.ReduceVariadic({update, key}, {e.Scalar(0, update.dtype()), e.Scalar(-1, ElementType::kS64)},
                                        {dim}, body);
  Val value = e.Reshape(r[0], reduced_dims), best = e.Reshape(r[1], reduced_dims);
  return e.Select(e.Compare("GE", best, e.Full(0, best.type)), value, first);
}

// Writes `update` (shape `sizes`) into the view (sizes, strides, offset) of the flat array `flat`.
Val WriteView(Emitter& e, const Val& flat, const Val& update, const Dims& sizes, const Dims& strides,
              int64_t offset) {
  if (NumElements(sizes) == 0) return flat;
  StridedPlan p = PlanView(sizes, strides);
  int64_t n = flat.dims()[0];
  if (!p.regular) {
    Val idx = ViewIndices(e, sizes, strides, offset);
    Dims idx_dims = sizes;
    idx_dims.push_back(1);
    Emitter::ScatterDims s;
    s.inserted_window_dims = {0};
    s.scatter_dims_to_operand_dims = {0};
    s.index_vector_dim = static_cast<int64_t>(sizes.size());
    return e.Scatter(flat, e.Reshape(idx, idx_dims), update, s, "");
  }
  // Where several view elements alias one storage element (stride 0), the element the op changed
  // is written (the last one, if several did): an index_put_ into an expanded tensor writes the
  // shared element on CPU whichever of its aliases was indexed.
  Val u = update;
  bool aliased = false;
  for (size_t i = 0; i < sizes.size(); ++i) aliased |= sizes[i] > 1 && strides[i] == 0;
  if (aliased) {
    Val old = ReadView(e, flat, sizes, strides, offset);
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (sizes[i] > 1 && strides[i] == 0) {
        u = LastChanged(e, u, old, static_cast<int64_t>(i));
        old = e.SliceDim(old, static_cast<int64_t>(i), 0, 1);  // its elements are all the same one
      }
    }
  }
  Dims kept;  // the update's non-trivial dims in original order
  std::vector<int64_t> kept_dims;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] > 1 && strides[i] > 0) {
      kept.push_back(sizes[i]);
      kept_dims.push_back(static_cast<int64_t>(i));
    }
  }
  u = e.Reshape(u, kept);
  Dims perm;  // original order -> stride order
  for (int64_t d : p.order) {
    perm.push_back(std::find(kept_dims.begin(), kept_dims.end(), d) - kept_dims.begin());
  }
  u = e.Transpose(u, perm);
  Dims block_update;
  for (int64_t d : p.order) block_update.push_back(sizes[d]);
  block_update.push_back(1);
  u = e.Reshape(u, block_update);
  int64_t total = std::max(n, offset + p.span);
  Val padded = FitLength(e, flat, total);
  Val window = e.SliceDim(padded, 0, offset, offset + p.span);
  Val block = e.Reshape(window, p.block);
  bool covers_block = block_update == p.block;
  Val new_block;
  if (covers_block) {
    new_block = u;
  } else {
    std::vector<Val> zeros(p.block.size(), e.Scalar(0, ElementType::kS64));
    new_block = e.DynamicUpdateSlice(block, u, zeros);
  }
  Val new_window = e.Reshape(new_block, {p.span});
  Val result;
  if (offset == 0 && p.span == total) {
    result = new_window;
  } else {
    result = e.DynamicUpdateSlice(padded, new_window, {e.Scalar(static_cast<double>(offset), ElementType::kS64)});
  }
  return FitLength(e, result, n);
}

// pjrt::view_read(Tensor src, int[] sizes, int[] strides, int offset, ScalarType dtype)
std::vector<Val> LowerViewRead(LowerCtx& c) {
  Val src = c.tensor(0);
  ElementType dtype = c.dtype_arg(4);
  Val flat = BitcastFlat(c.e, Flatten(c.e, src), dtype);
  return {ReadView(c.e, flat, c.int_list(1), c.int_list(2), c.int_arg(3))};
}

// pjrt::view_write(Tensor base, Tensor update, int[] sizes, int[] strides, int offset)
std::vector<Val> LowerViewWrite(LowerCtx& c) {
  Val base = c.tensor(0);
  Val update = c.tensor(1);
  Val flat = BitcastFlat(c.e, Flatten(c.e, base), update.dtype());
  Val written = WriteView(c.e, flat, update, c.int_list(2), c.int_list(3), c.int_arg(4));
  Val back = BitcastFlat(c.e, written, base.dtype());
  return {c.e.Reshape(back, base.dims())};
}

// pjrt::convert(Tensor x, ScalarType dtype)
std::vector<Val> LowerConvert(LowerCtx& c) { return {ConvertTo(c.e, c.tensor(0), c.dtype_arg(1))}; }

// pjrt::zeros() -> out: the contents of never-written storage.
std::vector<Val> LowerZeros(LowerCtx& c) { return {c.e.Full(0, c.out())}; }

// pjrt::resize_storage(Tensor base, int new_numel): keeps the old contents, zero-fills the rest.
std::vector<Val> LowerResizeStorage(LowerCtx& c) {
  Val base = c.tensor(0);
  return {FitLength(c.e, Flatten(c.e, base), c.int_arg(1))};
}

// pjrt::permute(Tensor x, int[] perm): a logical result laid out in a non-contiguous memory order.
std::vector<Val> LowerPermute(LowerCtx& c) { return {c.e.Transpose(c.tensor(0), c.int_list(1))}; }

// pjrt::expand(Tensor x, int[] sizes)
std::vector<Val> LowerExpand(LowerCtx& c) { return {c.e.BroadcastTo(c.tensor(0), c.int_list(1))}; }

// pjrt::conj(Tensor x): complex conjugate (identity for real types). Used to apply torch's lazy
// conjugate bit when copying.
std::vector<Val> LowerConj(LowerCtx& c) {
  Val x = c.tensor(0);
  if (!IsComplex(x.dtype())) return {x};
  ElementType part = x.dtype() == ElementType::kC64 ? ElementType::kF32 : ElementType::kF64;
  TensorType pt{part, x.dims()};
  std::string xt = TypeString(x);
  Val re = c.e.Raw("\"stablehlo.real\"(" + c.e.Name(x) + ")", "(" + xt + ") -> " + TypeString(pt), pt);
  Val im = c.e.Raw("\"stablehlo.imag\"(" + c.e.Name(x) + ")", "(" + xt + ") -> " + TypeString(pt), pt);
  Val neg_im = c.e.Unary("negate", im);
  std::string parts = "(" + TypeString(pt) + ", " + TypeString(pt) + ") -> " + xt;
  return {c.e.Raw("\"stablehlo.complex\"(" + c.e.Name(re) + ", " + c.e.Name(neg_im) + ")", parts, x.type)};
}

// pjrt::neg(Tensor x): applies torch's lazy negative bit when copying.
std::vector<Val> LowerNeg(LowerCtx& c) { return {c.e.Unary("negate", c.tensor(0))}; }

}  // namespace

namespace {

// Whether each value passes a value rule (CheckRule: not kRange, not kPositiveRowSums). Floating
// comparisons are false for NaN, so NaN fails.
Val PassesValueRule(Emitter& e, const Val& v, CheckRule rule) {
  Val zero = e.Full(0, v.type);
  switch (rule) {
    case CheckRule::kUnitInterval:
      return e.Binary("and", e.Compare("GE", v, zero), e.Compare("LE", v, e.Full(1, v.type)));
    case CheckRule::kNonzero:
      return e.Compare("NE", v, zero);
    case CheckRule::kNonNegative:
      return e.Compare("GE", v, zero);
    case CheckRule::kFiniteNonNegative:
      return e.Binary("and", e.Compare("GE", v, zero),
                      e.Compare("LT", v, e.Full(std::numeric_limits<double>::infinity(), v.type)));
    case CheckRule::kFinite:
      return e.Binary("and", e.Compare("GT", v, e.Full(-std::numeric_limits<double>::infinity(), v.type)),
                      e.Compare("LT", v, e.Full(std::numeric_limits<double>::infinity(), v.type)));
    default:
      throw std::logic_error("not a per-value check rule");
  }
}

// One row of a value check: (1 if every value (every row's sum, for kPositiveRowSums; the count
// of nonzero values, for kCountAtMost) passes the rule else 0, 0). Floating values are compared in
// float64, integers as they are.
Val ValueCheckRow(Emitter& e, const Val& values, CheckRule rule, int64_t hi) {
  Val v = IsFloating(values.dtype()) ? e.Convert(values, ElementType::kF64) : values;
  Val passes;
  if (rule == CheckRule::kCountAtMost) {
    Val flat = e.Reshape(v, {v.numel()});
    Val ones = e.Convert(e.Compare("NE", flat, e.Full(0, flat.type)), ElementType::kS64);
    Val count = e.Reduce(ones, e.Scalar(0, ElementType::kS64), {0}, "add");
    passes = e.Compare("LE", count, e.Full(static_cast<double>(hi), count.type));
  } else if (rule == CheckRule::kPositiveRowSums) {
    Val rows = v.rank() == 0 ? v : e.Reduce(v, e.Scalar(0, v.dtype()), {v.rank() - 1}, "add");
    passes = e.Compare("GT", rows, e.Full(0, rows.type));
  } else {
    passes = PassesValueRule(e, v, rule);
  }
  passes = e.Reshape(passes, {passes.numel()});
  Val ok = e.Convert(e.Reduce(passes, e.Scalar(1, ElementType::kBool), {0}, "and"), ElementType::kS64);
  return e.Concatenate({e.Reshape(ok, {1, 1}), e.Full(0, TensorType{ElementType::kS64, {1, 1}})}, 1);
}

}  // namespace

// index_checks(idx_0, consumer_0, idx_1, consumer_1, ...,
//              checks=[lo_0, hi_0, rule_0, has_exempt_0, exempt_0, lo_1, ...])
// -> s64[N, 2]: per check (1 if every index is in [lo, hi) or equals the exempt value else 0, an
// offending index), or for a value rule (CheckRule other than kRange: 1 if every value passes else
// 0, 0). The consumers are inputs only so that the graph's identity covers which op each check
// guards.
std::vector<Val> LowerIndexChecks(LowerCtx& c) {
  constexpr size_t kSpec = 5;
  Dims specs = c.int_list(c.num_args() - 1);
  size_t n = specs.size() / kSpec;
  std::vector<Val> rows;
  for (size_t k = 0; k < n; ++k) {
    const int64_t* spec = &specs[kSpec * k];
    if (auto rule = static_cast<CheckRule>(spec[2]); rule != CheckRule::kRange) {
      rows.push_back(ValueCheckRow(c.e, c.tensor(2 * k), rule, spec[1]));
      continue;
    }
    Dims bounds{spec[0], spec[1]};
    Val idx = c.e.Convert(c.tensor(2 * k), ElementType::kS64);
    idx = c.e.Reshape(idx, {idx.numel()});
    Val lo = c.e.Full(static_cast<double>(bounds[0]), idx.type);
    Val hi = c.e.Full(static_cast<double>(bounds[1]), idx.type);
    Val inside = c.e.Binary("and", c.e.Compare("GE", idx, lo), c.e.Compare("LT", idx, hi));
    Val lowest = c.e.Full(static_cast<double>(LowestValue(ElementType::kS64)), idx.type);
    Val highest = c.e.Full(static_cast<double>(HighestValue(ElementType::kS64)), idx.type);
    Val for_largest = idx, for_smallest = idx;
    if (spec[3] != 0) {  // the exempt value is in range and never the offending one
      Val exempt = c.e.Compare("EQ", idx, c.e.Full(static_cast<double>(spec[4]), idx.type));
      inside = c.e.Binary("or", inside, exempt);
      for_largest = c.e.Select(exempt, lowest, idx);
      for_smallest = c.e.Select(exempt, highest, idx);
    }
    Val ok = c.e.Reduce(inside, c.e.Scalar(1, ElementType::kBool), {0}, "and");
    Val largest = c.e.Reduce(for_largest, c.e.Scalar(LowestValue(ElementType::kS64), ElementType::kS64), {0}, "maximum");
    Val smallest = c.e.Reduce(for_smallest, c.e.Scalar(HighestValue(ElementType::kS64), ElementType::kS64), {0}, "minimum");
    Val too_large = c.e.Compare("GE", largest, c.e.Scalar(static_cast<double>(bounds[1]), ElementType::kS64));
    Val offending = c.e.Select(too_large, largest, smallest);
    Val row = c.e.Concatenate({c.e.Reshape(c.e.Convert(ok, ElementType::kS64), {1, 1}), c.e.Reshape(offending, {1, 1})}, 1);
    rows.push_back(row);
  }
  return {c.e.Concatenate(rows, 0)};
}

// same_bits(Tensor a, Tensor b) -> s64[]: 1 if a and b hold the same bytes (NaN payloads and the
// sign of zero included), else 0. A device-graph read guard (graph::AddReadGuard).
std::vector<Val> LowerSameBits(LowerCtx& c) {
  Val a = BitcastFlat(c.e, Flatten(c.e, c.tensor(0)), ElementType::kU8);
  Val b = BitcastFlat(c.e, Flatten(c.e, c.tensor(1)), ElementType::kU8);
  if (a.numel() != b.numel()) throw std::logic_error("pjrt::same_bits of values of different sizes");
  Val equal = c.e.Compare("EQ", a, b);
  return {c.e.Convert(c.e.Reduce(equal, c.e.Scalar(1, ElementType::kBool), {0}, "and"), ElementType::kS64)};
}

void RegisterInternalOps(Registry& r) {
  r.Add("pjrt::index_checks", LowerIndexChecks);
  r.Add("pjrt::same_bits", LowerSameBits);
  r.Add("pjrt::conj", LowerConj);
  r.Add("pjrt::neg", LowerNeg);
  r.Add("pjrt::view_read", LowerViewRead);
  r.Add("pjrt::view_write", LowerViewWrite);
  r.Add("pjrt::convert", LowerConvert);
  r.Add("pjrt::zeros", LowerZeros);
  r.Add("pjrt::resize_storage", LowerResizeStorage);
  r.Add("pjrt::permute", LowerPermute);
  r.Add("pjrt::expand", LowerExpand);
}

}  // namespace torch_pjrt::lowering
