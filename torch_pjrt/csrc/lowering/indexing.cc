// Indexing and data movement: cat, index_select, gather/scatter, advanced indexing (index,
// index_put), embedding backward, flip/roll/pad/repeat/tril/triu, clone and fill.
// XLA clamps out-of-range gathers; the graph layer checks indices instead (each op's index_checks,
// raised at the next sync point). Negative indices wrap like torch's where torch allows them.
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "lowering/helpers.h"

namespace torch_pjrt::lowering {

namespace {

std::vector<Val> LowerClone(LowerCtx& c) { return {c.tensor(0)}; }  // clone(self, *, memory_format)

std::vector<Val> LowerFill(LowerCtx& c) {  // fill.Scalar / fill.Tensor(self, value)
  return {Coerce(c.e, c.scalar(1, c.out().dtype), c.out())};
}
std::vector<Val> LowerZero(LowerCtx& c) { return {c.e.Full(0, c.out())}; }  // zero(self)

// cat(tensors, dim=0): legacy 1-D empty tensors are skipped, as torch does.
std::vector<Val> LowerCat(LowerCtx& c) {
  std::vector<Val> parts;
  const TensorType& out = c.out();
  int64_t dim = NormDim(c.int_arg(1, 0), static_cast<int64_t>(out.dims.size()));
  for (const Val& v : c.tensors(0)) {
    if (v.rank() == 1 && v.dims()[0] == 0 && out.dims.size() != 1) continue;
    if (v.numel() == 0) continue;
    parts.push_back(c.e.Convert(v, out.dtype));
  }
  if (parts.empty()) return {c.e.Full(0, out)};
  return {c.e.Concatenate(parts, dim)};
}

// one_hot[i, j] = (index[i] == j) as `t`, for k indices into a dimension of size n.
Val OneHot(Emitter& e, const Val& index, int64_t n, ElementType t) {
  int64_t k = index.numel();
  Val wrapped = e.BroadcastInDim(e.Reshape(WrapNegative(e, index, n), {k}), {k, n}, {0});
  Val hit = e.Compare("EQ", wrapped, e.Iota(TensorType{ElementType::kS64, {k, n}}, 1));
  return e.Convert(hit, t);
}

// Hardware without fast gathers (TargetOptions::dense_gather false) selects rows with a one-hot
// matmul. Only for real floating types, where the matmul is exact at HIGHEST precision.
bool UseOneHot(const Emitter& e, ElementType t) { return !e.target().dense_gather && IsFloating(t); }

// One-hot matmuls multiply every unselected row by 0, and 0 * inf = NaN: a non-finite value
// anywhere in a column would spoil that column of every result row. So the matmul runs over the
// finite part (non-finite entries zeroed), and the non-finite entries travel separately as 0/1
// indicator columns (exact in any float type), which say afterwards what each result really is.
struct NonFinite {
  Val finite;      // x with +inf, -inf and NaN replaced by 0
  Val indicators;  // x's dims with the last one tripled: (is +inf, is -inf, is NaN) blocks
};

NonFinite SplitNonFinite(Emitter& e, const Val& x) {
  Val inf = e.Full(INFINITY, x.type);
  Val pos = e.Compare("EQ", x, inf), neg = e.Compare("EQ", x, e.Full(-INFINITY, x.type));
  Val nan = e.Compare("NE", x, x);
  Val bad = e.Binary("or", e.Binary("or", pos, neg), nan);
  NonFinite n;
  n.finite = e.Select(bad, e.Full(0, x.type), x);
  n.indicators = e.Concatenate({e.Convert(pos, x.dtype()), e.Convert(neg, x.dtype()), e.Convert(nan, x.dtype())},
                               x.rank() - 1);
  return n;
}

// The true result of a one-hot matmul from its finite part and its indicator counts (how many
// +inf, -inf and NaN entries went into each sum): NaN if any NaN or both infinities, else the
// infinity present, else the finite sum.
Val RestoreNonFinite(Emitter& e, const Val& finite, const Val& counts) {
  int64_t last = finite.rank() - 1, d = finite.dims()[last];
  Val pos = e.SliceDim(counts, last, 0, d), neg = e.SliceDim(counts, last, d, 2 * d);
  Val nan = e.SliceDim(counts, last, 2 * d, 3 * d);
  Val zero = e.Full(0, finite.type);
  Val has_pos = e.Compare("GT", pos, zero), has_neg = e.Compare("GT", neg, zero);
  Val is_nan = e.Binary("or", e.Compare("GT", nan, zero), e.Binary("and", has_pos, has_neg));
  Val r = e.Select(has_pos, e.Full(INFINITY, finite.type), finite);
  r = e.Select(has_neg, e.Full(-INFINITY, finite.type), r);
  return e.Select(is_nan, e.Full(NAN, finite.type), r);
}

// one_hot [k, n] contracted with x along `dim` (size n), non-finite values kept exact:
// [k, ..., without dim ...].
Val OneHotRows(Emitter& e, const Val& hot, const Val& x, int64_t dim) {
  // Move `dim` to the front and flatten the rest: [n, m].
  Dims perm{dim};
  for (int64_t i = 0; i < x.rank(); ++i) {
    if (i != dim) perm.push_back(i);
  }
  Val moved = e.Transpose(x, perm);
  int64_t n = x.dims()[dim], m = x.numel() / std::max<int64_t>(n, 1);
  NonFinite parts = SplitNonFinite(e, e.Reshape(moved, {n, m}));
  Val finite = e.DotGeneral(hot, parts.finite, {}, {}, {1}, {0}, x.dtype(), "HIGHEST");
  Val counts = e.DotGeneral(hot, parts.indicators, {}, {}, {1}, {0}, x.dtype(), "HIGHEST");
  Dims out{hot.dims()[0]};
  for (size_t j = 1; j < perm.size(); ++j) out.push_back(x.dims()[perm[j]]);
  return e.Reshape(RestoreNonFinite(e, finite, counts), out);
}

// index_select(self, dim, index)
std::vector<Val> LowerIndexSelect(LowerCtx& c) {
  Val x = c.tensor(0);
  if (x.rank() == 0) return {c.e.Reshape(x, c.out().dims)};
  int64_t dim = NormDim(c.int_arg(1), x.rank());
  Val idx = c.tensor(2);
  int64_t k = idx.numel();
  if (UseOneHot(c.e, x.dtype())) {
    // [k, n] x [..., n, ...] contracting n gives [k, ...]; move k back to position `dim`.
    Val hot = OneHot(c.e, idx, x.dims()[dim], x.dtype());
    Val rows = OneHotRows(c.e, hot, x, dim);
    Dims perm;
    for (int64_t i = 1; i <= dim; ++i) perm.push_back(i);
    perm.push_back(0);
    for (int64_t i = dim + 1; i < x.rank(); ++i) perm.push_back(i);
    return {c.e.Reshape(c.e.Transpose(rows, perm), c.out().dims)};
  }
  Val indices = c.e.Reshape(WrapNegative(c.e, idx, x.dims()[dim]), {k, 1});
  Emitter::GatherDims g;
  for (int64_t i = 0; i < x.rank(); ++i) {
    if (i != dim) g.offset_dims.push_back(i);
  }
  g.collapsed_slice_dims = {dim};
  g.start_index_map = {dim};
  g.index_vector_dim = 1;
  g.slice_sizes = x.dims();
  g.slice_sizes[dim] = 1;
  Dims out_dims = x.dims();
  out_dims[dim] = k;
  Val r = c.e.Gather(x, indices, g, TensorType{x.dtype(), out_dims});
  return {c.e.Reshape(r, c.out().dims)};
}

// gather(self, dim, index, *, sparse_grad=False)
std::vector<Val> LowerGather(LowerCtx& c) {
  Val x = c.tensor(0), index = c.tensor(2);
  if (x.rank() == 0) return {c.e.Reshape(x, c.out().dims)};
  return {GatherAlong(c.e, x, index, NormDim(c.int_arg(1), x.rank()))};
}

// Scatter along `dim` at `index` of `updates` (shape of index) into x.
Val ScatterDim(Emitter& e, const Val& x, int64_t dim, const Val& index, const Val& updates,
               std::string_view combine) {
  if (index.numel() == 0) return x;
  Val coords = DimIndices(e, index, dim, x.rank(), x.dims()[dim]);
  Emitter::ScatterDims s;
  for (int64_t i = 0; i < x.rank(); ++i) {
    s.inserted_window_dims.push_back(i);
    s.scatter_dims_to_operand_dims.push_back(i);
  }
  s.index_vector_dim = index.rank();
  return e.Scatter(x, coords, updates, s, combine);
}

// The part of `src` covered by `index` (scatter only reads src where index has entries).
Val SrcForIndex(Emitter& e, const Val& src, const Val& index, ElementType t) {
  Val s = e.Convert(src, t);
  if (s.dims() == index.dims()) return s;
  return e.Slice(s, Dims(s.rank(), 0), index.dims(), Dims(s.rank(), 1));
}

std::vector<Val> ScatterOp(LowerCtx& c, std::string_view combine, bool value_arg) {
  Val x = c.tensor(0), index = c.tensor(2);
  if (x.rank() == 0) {
    Val u = value_arg ? c.scalar(3, x.dtype()) : c.e.Reshape(c.e.Convert(c.tensor(3), x.dtype()), {});
    return {combine.empty() ? u : c.e.Binary(combine, x, u)};
  }
  int64_t dim = NormDim(c.int_arg(1), x.rank());
  Val updates = value_arg ? c.e.BroadcastTo(c.scalar(3, x.dtype()), index.dims())
                          : SrcForIndex(c.e, c.tensor(3), index, x.dtype());
  return {ScatterDim(c.e, x, dim, index, updates, combine)};
}
std::vector<Val> LowerScatterSrc(LowerCtx& c) { return ScatterOp(c, "", false); }
std::vector<Val> LowerScatterValue(LowerCtx& c) { return ScatterOp(c, "", true); }
std::vector<Val> LowerScatterAdd(LowerCtx& c) { return ScatterOp(c, "add", false); }
std::string_view ReduceOp(const std::string& reduce) {
  if (reduce == "add" || reduce == "sum") return "add";
  if (reduce == "multiply" || reduce == "prod") return "multiply";
  if (reduce == "amax") return "maximum";
  if (reduce == "amin") return "minimum";
  throw std::invalid_argument("unsupported scatter reduce '" + reduce + "'");
}
std::vector<Val> LowerScatterReduce(LowerCtx& c) {  // scatter.reduce(self, dim, index, src, *, reduce)
  return ScatterOp(c, ReduceOp(c.string_arg(4)), false);
}
std::vector<Val> LowerScatterValueReduce(LowerCtx& c) {
  return ScatterOp(c, ReduceOp(c.string_arg(4)), true);
}

// ------------------------------------------------------------ advanced indexing

struct AdvancedIndex {
  Val coords;               // [B..., k] int64 coordinates into the indexed dims
  Dims indexed;             // which dims of self are indexed
  Dims broadcast;           // B
  Emitter::GatherDims g;    // for gather; scatter uses the matching fields
  Dims result_dims;
};

AdvancedIndex PlanIndex(LowerCtx& c, const Val& x, const std::vector<Val>& indices) {
  Emitter& e = c.e;
  AdvancedIndex a;
  std::vector<Val> present;
  for (size_t d = 0; d < indices.size(); ++d) {
    if (indices[d].valid()) {
      a.indexed.push_back(static_cast<int64_t>(d));
      present.push_back(indices[d]);
    }
  }
  // Broadcast shape of every index tensor (numpy rules, aligned from the right).
  for (const Val& v : present) {
    Dims d = v.dims();
    while (a.broadcast.size() < d.size()) a.broadcast.insert_at(0, 1);
    size_t off = a.broadcast.size() - d.size();
    for (size_t i = 0; i < d.size(); ++i) {
      if (a.broadcast[off + i] == 1) a.broadcast[off + i] = d[i];
    }
  }
  Dims with_vec = a.broadcast;
  with_vec.push_back(1);
  std::vector<Val> parts;
  for (size_t k = 0; k < present.size(); ++k) {
    Val wrapped = WrapNegative(e, present[k], x.dims()[a.indexed[k]]);
    parts.push_back(e.Reshape(e.BroadcastTo(wrapped, a.broadcast), with_vec));
  }
  int64_t nb = static_cast<int64_t>(a.broadcast.size());
  a.coords = e.Concatenate(parts, nb);
  bool consecutive = true;
  for (size_t k = 1; k < a.indexed.size(); ++k) consecutive &= a.indexed[k] == a.indexed[k - 1] + 1;
  // Output: with consecutive indexed dims the broadcast dims replace them in place; otherwise
  // they go first (torch/numpy rule).
  int64_t first = consecutive ? a.indexed[0] : 0;
  int64_t pos = 0;
  for (int64_t d = 0; d < x.rank(); ++d) {
    bool is_indexed = std::find(a.indexed.begin(), a.indexed.end(), d) != a.indexed.end();
    if (is_indexed) continue;
    int64_t out_pos = (consecutive && d < first) ? pos : pos + nb;
    a.g.offset_dims.push_back(out_pos);
    ++pos;
  }
  for (int64_t d : a.indexed) {
    a.g.collapsed_slice_dims.push_back(d);
    a.g.start_index_map.push_back(d);
  }
  a.g.index_vector_dim = nb;
  a.g.slice_sizes = x.dims();
  for (int64_t d : a.indexed) a.g.slice_sizes[d] = 1;
  // Result dims in order.
  size_t total = a.g.offset_dims.size() + a.broadcast.size();
  a.result_dims.resize(total, 0);
  std::vector<bool> is_offset(total, false);
  size_t k = 0;
  for (int64_t d = 0; d < x.rank(); ++d) {
    if (std::find(a.indexed.begin(), a.indexed.end(), d) != a.indexed.end()) continue;
    a.result_dims[a.g.offset_dims[k]] = x.dims()[d];
    is_offset[a.g.offset_dims[k]] = true;
    ++k;
  }
  size_t b = 0;
  for (size_t i = 0; i < total; ++i) {
    if (!is_offset[i]) a.result_dims[i] = a.broadcast[b++];
  }
  return a;
}

// index.Tensor(self, indices): integer index tensors (bool masks take the CPU path: their result
// shape depends on data).
std::vector<Val> LowerIndex(LowerCtx& c) {
  Val x = c.tensor(0);
  std::vector<Val> indices = c.opt_tensors(1);
  for (const Val& v : indices) {
    if (v.valid() && (v.dtype() == ElementType::kBool || v.dtype() == ElementType::kU8)) {
      throw std::invalid_argument("boolean mask indices have data-dependent shapes");
    }
  }
  AdvancedIndex a = PlanIndex(c, x, indices);
  Val r = c.e.Gather(x, a.coords, a.g, TensorType{x.dtype(), a.result_dims});
  return {c.e.Reshape(r, c.out().dims)};
}

// index_put(self, indices, values, accumulate=False) and _index_put_impl (+ unsafe)
std::vector<Val> LowerIndexPut(LowerCtx& c) {
  Val x = c.tensor(0);
  if (c.tensor(2).dtype() != x.dtype()) {  // torch's check, which the Meta kernel skips
    throw std::invalid_argument(std::string("Index put requires the source and destination dtypes match, got ") +
                                TypeName(x.dtype()) + " for the destination and " + TypeName(c.tensor(2).dtype()) +
                                " for the source.");
  }
  std::vector<Val> indices = c.opt_tensors(1);
  AdvancedIndex a = PlanIndex(c, x, indices);
  const Dims& vd = c.tensor(2).dims();
  bool broadcasts = vd.size() <= a.result_dims.size();
  for (size_t i = 0; broadcasts && i < vd.size(); ++i) {
    int64_t r = a.result_dims[a.result_dims.size() - vd.size() + i];
    broadcasts = vd[i] == 1 || vd[i] == r;
  }
  if (!broadcasts) {  // torch's check (the Meta kernel skips it): raised when the graph runs
    auto str = [](const Dims& d) {
      std::string s = "[";
      for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
      return s + "]";
    };
    throw std::invalid_argument("shape mismatch: value tensor of shape " + str(vd) +
                                " cannot be broadcast to indexing result of shape " + str(a.result_dims));
  }
  Val values = c.e.BroadcastTo(c.e.Convert(c.tensor(2), x.dtype()), a.result_dims);
  Emitter::ScatterDims s;
  s.update_window_dims = a.g.offset_dims;
  s.inserted_window_dims = a.g.collapsed_slice_dims;
  s.scatter_dims_to_operand_dims = a.g.start_index_map;
  s.index_vector_dim = a.g.index_vector_dim;
  bool accumulate = c.bool_arg(3, false);
  return {c.e.Scatter(x, a.coords, values, s, accumulate ? "add" : "")};
}

// embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq)
std::vector<Val> LowerEmbeddingBackward(LowerCtx& c) {
  Val g = c.tensor(0), idx = c.tensor(1);
  Emitter& e = c.e;
  int64_t num_weights = c.int_arg(2), padding_idx = c.int_arg(3);
  int64_t n = idx.numel();
  int64_t d = c.out().dims[1];
  ElementType acc = Opmath(c.out().dtype);
  Val rows = e.Reshape(e.Convert(g, acc), {n, d});
  Val flat_idx = e.Convert(e.Reshape(idx, {n}), ElementType::kS64);
  Val keep = e.Compare("NE", flat_idx, e.Full(static_cast<double>(padding_idx), flat_idx.type));
  rows = e.Select(e.BroadcastInDim(keep, rows.dims(), {0}), rows, e.Full(0, rows.type));
  if (UseOneHot(e, acc)) {
    // grad_weight = one_hot^T @ rows; scaling by frequency divides each summed row by its count.
    Val hot = OneHot(e, flat_idx, num_weights, acc);
    Val hot_t = e.Transpose(hot, {1, 0});  // [num_weights, n]
    Val out = OneHotRows(e, hot_t, rows, 0);
    if (c.bool_arg(4)) {
      Val counts = e.Reduce(hot, e.Scalar(0, acc), {0}, "add");
      Val safe = e.Binary("maximum", counts, e.Full(1, counts.type));
      out = e.Binary("divide", out, e.BroadcastInDim(safe, out.dims(), {0}));
    }
    return {e.Convert(out, c.out().dtype)};
  }
  if (c.bool_arg(4)) {
    // Divide each row by how often its index occurs.
    Emitter::ScatterDims s1;
    s1.inserted_window_dims = {0};
    s1.scatter_dims_to_operand_dims = {0};
    s1.index_vector_dim = 1;
    Val counts = e.Scatter(e.Full(0, TensorType{acc, {num_weights}}), e.Reshape(flat_idx, {n, 1}),
                           e.Full(1, TensorType{acc, {n}}), s1, "add");
    Emitter::GatherDims g1;
    g1.collapsed_slice_dims = {0};
    g1.start_index_map = {0};
    g1.index_vector_dim = 1;
    g1.slice_sizes = {1};
    Val per_row = e.Gather(counts, e.Reshape(flat_idx, {n, 1}), g1, TensorType{acc, {n}});
    rows = e.Binary("divide", rows, e.BroadcastInDim(per_row, rows.dims(), {0}));
  }
  Emitter::ScatterDims s;
  s.update_window_dims = {1};
  s.inserted_window_dims = {0};
  s.scatter_dims_to_operand_dims = {0};
  s.index_vector_dim = 1;
  Val out = e.Scatter(e.Full(0, TensorType{acc, {num_weights, d}}), e.Reshape(flat_idx, {n, 1}), rows, s, "add");
  return {e.Convert(out, c.out().dtype)};
}

// ------------------------------------------------------------ reshaping data

std::vector<Val> LowerFlip(LowerCtx& c) {  // flip(self, dims)
  Val x = c.tensor(0);
  return {c.e.Reverse(x, NormDims(c.int_list(1), x.rank(), false))};
}

// narrow_copy(self, dim, start, length): the Meta kernel has checked the range; a negative start
// counts from the end.
std::vector<Val> LowerNarrowCopy(LowerCtx& c) {
  Val x = c.tensor(0);
  int64_t dim = NormDims({c.int_arg(1)}, x.rank())[0];
  int64_t start = c.int_arg(2), length = c.int_arg(3);
  if (start < 0) start += x.dims()[dim];
  return {c.e.SliceDim(x, dim, start, start + length)};
}

// unfold_backward(grad_in, input_sizes, dim, size, step): the gradient of x.unfold(dim, size,
// step). Element k of every window goes back to position w * step + k: for each k, the windows'
// k-th elements padded into place (interior padding step - 1), summed over k.
std::vector<Val> LowerUnfoldBackward(LowerCtx& c) {
  Emitter& e = c.e;
  const TensorType& out = c.out();
  ElementType acc = Opmath(out.dtype);
  Val g = e.Convert(c.tensor(0), acc);
  int64_t rank = static_cast<int64_t>(out.dims.size());
  int64_t dim = rank == 0 ? 0 : NormDims({c.int_arg(2)}, rank)[0];
  int64_t size = c.int_arg(3), step = c.int_arg(4);
  int64_t windows = rank == 0 ? 1 : g.dims()[dim];
  Val sum = e.Full(0, TensorType{acc, out.dims});
  if (windows == 0 || rank == 0) {
    if (rank == 0) sum = e.Reshape(g, {});  // unfold of a 0-d tensor is [x]
    return {e.Convert(sum, out.dtype)};
  }
  int64_t length = out.dims[dim];
  Val zero = e.Scalar(0, acc);
  Dims window_dims;  // grad_in without its trailing window dim
  for (int64_t i = 0; i < rank; ++i) window_dims.push_back(g.dims()[i]);
  for (int64_t k = 0; k < size; ++k) {
    Val piece = e.Reshape(e.SliceDim(g, rank, k, k + 1), window_dims);
    Dims lo(rank, 0), hi(rank, 0), interior(rank, 0);
    lo[dim] = k;
    interior[dim] = step - 1;
    hi[dim] = length - (k + (windows - 1) * step + 1);
    sum = e.Binary("add", sum, e.Pad(piece, zero, lo, hi, interior));
  }
  return {e.Convert(sum, out.dtype)};
}

Val RollDim(Emitter& e, const Val& x, int64_t dim, int64_t shift) {
  int64_t n = x.dims()[dim];
  if (n == 0) return x;
  shift = ((shift % n) + n) % n;
  if (shift == 0) return x;
  Val tail = e.SliceDim(x, dim, n - shift, n);
  Val head = e.SliceDim(x, dim, 0, n - shift);
  return e.Concatenate({tail, head}, dim);
}
std::vector<Val> LowerRoll(LowerCtx& c) {  // roll(self, shifts, dims=[])
  Val x = c.tensor(0);
  Dims shifts = c.int_list(1), dims = c.int_list(2);
  if (dims.empty()) {
    Val flat = c.e.Reshape(x, {x.numel()});
    return {c.e.Reshape(RollDim(c.e, flat, 0, shifts[0]), x.dims())};
  }
  for (size_t i = 0; i < dims.size(); ++i) x = RollDim(c.e, x, NormDim(dims[i], x.rank()), shifts[i]);
  return {x};
}

std::vector<Val> LowerConstantPad(LowerCtx& c) {  // constant_pad_nd(self, pad, value=0)
  Val x = c.tensor(0);
  Dims pad = c.int_list(1);
  Dims lo(x.rank(), 0), hi(x.rank(), 0);
  for (size_t i = 0; i + 1 < pad.size() + 1 && i / 2 < static_cast<size_t>(x.rank()); i += 2) {
    int64_t d = x.rank() - 1 - static_cast<int64_t>(i / 2);
    lo[d] = pad[i];
    hi[d] = pad[i + 1];
  }
  Val value = c.is_none(2) ? c.e.Scalar(0, x.dtype()) : c.scalar(2, x.dtype());
  return {c.e.Pad(x, value, lo, hi, Dims(x.rank(), 0))};
}

std::vector<Val> LowerRepeat(LowerCtx& c) {  // repeat(self, repeats)
  Val x = c.tensor(0);
  Dims reps = c.int_list(1);
  int64_t extra = static_cast<int64_t>(reps.size()) - x.rank();
  Dims padded(extra, 1);
  for (int64_t d : x.dims()) padded.push_back(d);
  Val xr = c.e.Reshape(x, padded);
  // [r0, d0, r1, d1, ...] broadcast, then merged pairwise.
  Dims expanded, mapping;
  for (size_t i = 0; i < reps.size(); ++i) {
    expanded.push_back(reps[i]);
    expanded.push_back(padded[i]);
    mapping.push_back(static_cast<int64_t>(2 * i + 1));
  }
  Val b = c.e.BroadcastInDim(xr, expanded, mapping);
  return {c.e.Reshape(b, c.out().dims)};
}

std::vector<Val> Triangle(LowerCtx& c, bool lower) {  // tril/triu(self, diagonal=0)
  Val x = c.tensor(0);
  int64_t k = c.int_arg(1, 0);
  TensorType it{ElementType::kS64, x.dims()};
  Val row = c.e.Iota(it, x.rank() - 2), col = c.e.Iota(it, x.rank() - 1);
  Val diff = c.e.Binary("subtract", col, row);
  Val keep = c.e.Compare(lower ? "LE" : "GE", diff, c.e.Full(static_cast<double>(k), it));
  return {c.e.Select(keep, x, c.e.Full(0, x.type))};
}
std::vector<Val> LowerTril(LowerCtx& c) { return Triangle(c, true); }
std::vector<Val> LowerTriu(LowerCtx& c) { return Triangle(c, false); }

}  // namespace

void RegisterIndexingOps(Registry& r) {
  r.Add("clone", LowerClone);
  r.Add("fill.Scalar", LowerFill);
  r.Add("fill.Tensor", LowerFill);
  r.Add("zero", LowerZero);
  r.Add("cat", LowerCat);
  // Index bounds: (indices, source, dim argument); advanced indexing accepts -size <= i < 0.
  const IndexArgSpec along_dim{2, 0, 1};             // index_select/gather/scatter(self, dim, index)
  const IndexArgSpec advanced{1, 0, -1, -1, true};   // index/index_put(self, indices[], ...)
  const IndexArgSpec along_dim_runtime_error = WithRuntimeError(along_dim);  // CPU's gather and scatter
  r.Add("index_select", LowerIndexSelect).index_checks = {along_dim};
  r.Add("gather", LowerGather).index_checks = {along_dim_runtime_error};
  r.Add("scatter.src", LowerScatterSrc).index_checks = {along_dim_runtime_error};
  r.Add("scatter.value", LowerScatterValue).index_checks = {along_dim_runtime_error};
  r.Add("scatter.reduce", LowerScatterReduce).index_checks = {along_dim_runtime_error};
  r.Add("scatter.value_reduce", LowerScatterValueReduce).index_checks = {along_dim_runtime_error};
  r.Add("scatter_add", LowerScatterAdd).index_checks = {along_dim_runtime_error};
  auto advanced_indexing = [&](const char* name, LowerFn fn) {
    OpLowering& op = r.Add(name, fn);
    op.integer_indices_only = true;
    op.index_checks = {advanced};
  };
  advanced_indexing("index.Tensor", LowerIndex);
  advanced_indexing("index_put", LowerIndexPut);
  advanced_indexing("_index_put_impl", LowerIndexPut);
  // "unsafe": torch's own decompositions (upsampling) compute these indices in range.
  r.Add("_unsafe_index.Tensor", LowerIndex).integer_indices_only = true;
  // embedding_dense_backward(grad_output, indices, num_weights, ...)
  r.Add("embedding_dense_backward", LowerEmbeddingBackward).index_checks = {IndexArgSpec{1, -1, -1, 2}};
  r.Add("flip", LowerFlip);
  r.Add("narrow_copy", LowerNarrowCopy);
  r.Add("unfold_backward", LowerUnfoldBackward);
  r.Add("roll", LowerRoll);
  r.Add("constant_pad_nd", LowerConstantPad);
  r.Add("repeat", LowerRepeat);
  r.Add("tril", LowerTril);
  r.Add("triu", LowerTriu);
}

}  // namespace torch_pjrt::lowering
