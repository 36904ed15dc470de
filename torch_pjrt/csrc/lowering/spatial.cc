#include "lowering/spatial.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace torch_pjrt::lowering::spatial {

namespace {

Val Literal(Emitter& e, const std::string& body, const TensorType& t) {
  return e.Raw("stablehlo.constant dense<" + body + ">", TypeString(t), t);
}

}  // namespace

Val ConstInts(Emitter& e, const std::vector<int64_t>& v, ElementType t) {
  TensorType type{t, {static_cast<int64_t>(v.size())}};
  if (v.empty()) return e.Full(0, type);
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(v[i]);
  }
  return Literal(e, s + "]", type);
}

Val ConstFloats(Emitter& e, const std::vector<double>& v, ElementType t) {
  ElementType literal_type = (t == ElementType::kF64) ? ElementType::kF64 : ElementType::kF32;
  TensorType type{literal_type, {static_cast<int64_t>(v.size())}};
  Val r;
  if (v.empty()) {
    r = e.Full(0, type);
  } else {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) {
      if (i) s += ", ";
      s += ConstantLiteral(v[i], literal_type);
    }
    r = Literal(e, s + "]", type);
  }
  return e.Convert(r, t);
}

Val ConstBools(Emitter& e, const std::vector<bool>& v) {
  TensorType type{ElementType::kBool, {static_cast<int64_t>(v.size())}};
  if (v.empty()) return e.Full(0, type);
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += std::string(i ? ", " : "") + (v[i] ? "true" : "false");
  return Literal(e, s + "]", type);
}

Val AlongDim(Emitter& e, const Val& v, const Dims& dims, int64_t dim) {
  return e.BroadcastInDim(v, dims, {dim});
}

Val TakeAlong(Emitter& e, const Val& x, int64_t dim, const std::vector<int64_t>& idx) {
  int64_t n = static_cast<int64_t>(idx.size());
  TensorType out = x.type;
  out.dims[dim] = n;
  if (NumElements(out.dims) == 0) return e.Full(0, out);
  // A run of k equal indices, then the next index, ...: a slice repeated k times.
  int64_t k = 1;
  while (k < n && idx[k] == idx[0]) ++k;
  bool repeated = n % k == 0;
  for (int64_t o = 0; o < n && repeated; ++o) repeated = idx[o] == idx[0] + o / k;
  if (repeated) {
    Val s = e.SliceDim(x, dim, idx[0], idx[0] + n / k);
    if (k == 1) return s;
    Dims expanded = s.dims();
    expanded.insert_at(dim + 1, k);
    Dims mapping;
    for (int64_t i = 0; i < s.rank(); ++i) mapping.push_back(i <= dim ? i : i + 1);
    return e.Reshape(e.BroadcastInDim(s, expanded, mapping), out.dims);
  }
  // An arithmetic progression: a strided slice.
  if (n > 1 && idx[1] > idx[0]) {
    int64_t step = idx[1] - idx[0];
    bool arithmetic = true;
    for (int64_t o = 0; o < n && arithmetic; ++o) arithmetic = idx[o] == idx[0] + o * step;
    if (arithmetic) return e.SliceDim(x, dim, idx[0], idx[0] + (n - 1) * step + 1, step);
  }
  Val indices = e.Reshape(ConstInts(e, idx, ElementType::kS32), {n, 1});
  Emitter::GatherDims d;
  for (int64_t i = 0; i < x.rank(); ++i) {
    if (i != dim) d.offset_dims.push_back(i);
  }
  d.collapsed_slice_dims = {dim};
  d.start_index_map = {dim};
  d.index_vector_dim = 1;
  d.slice_sizes = x.dims();
  d.slice_sizes[dim] = 1;
  return e.Gather(x, indices, d, out);
}

void Taps::Add(const std::vector<int64_t>& i, const std::vector<double>& wt, const std::vector<bool>& v) {
  size_t t = idx.size();
  idx.push_back(i);
  if (!wt.empty() || !w.empty()) {
    w.resize(t, std::vector<double>(i.size(), 1.0));
    w.push_back(wt.empty() ? std::vector<double>(i.size(), 1.0) : wt);
  }
  if (!v.empty() || !valid.empty()) {
    valid.resize(t, std::vector<bool>(i.size(), true));
    valid.push_back(v.empty() ? std::vector<bool>(i.size(), true) : v);
  }
}

Val ApplyTaps(Emitter& e, const Val& x, int64_t dim, const Taps& taps) {
  TensorType out = x.type;
  out.dims[dim] = taps.out;
  if (NumElements(out.dims) == 0 || taps.idx.empty()) return e.Full(0, out);
  Val sum;
  for (size_t t = 0; t < taps.idx.size(); ++t) {
    bool any_valid = true, all_valid = true;
    if (!taps.valid.empty()) {
      any_valid = std::find(taps.valid[t].begin(), taps.valid[t].end(), true) != taps.valid[t].end();
      all_valid = std::find(taps.valid[t].begin(), taps.valid[t].end(), false) == taps.valid[t].end();
    }
    if (!any_valid) continue;
    Val g = TakeAlong(e, x, dim, taps.idx[t]);
    if (!taps.w.empty()) {
      const std::vector<double>& w = taps.w[t];
      bool ones = std::all_of(w.begin(), w.end(), [](double v) { return v == 1.0; });
      if (!ones) g = e.Binary("multiply", g, AlongDim(e, ConstFloats(e, w, x.dtype()), out.dims, dim));
    }
    if (!all_valid) {
      g = e.Select(AlongDim(e, ConstBools(e, taps.valid[t]), out.dims, dim), g, e.Full(0, out));
    }
    sum = sum.valid() ? e.Binary("add", sum, g) : g;
  }
  return sum.valid() ? sum : e.Full(0, out);
}

Taps Transpose(const Taps& taps) {
  std::vector<std::vector<std::pair<int64_t, double>>> readers(static_cast<size_t>(taps.in));
  for (int64_t o = 0; o < taps.out; ++o) {
    for (size_t t = 0; t < taps.idx.size(); ++t) {
      if (!taps.valid.empty() && !taps.valid[t][o]) continue;
      double w = taps.w.empty() ? 1.0 : taps.w[t][o];
      readers[taps.idx[t][o]].push_back({o, w});
    }
  }
  size_t k = 0;
  for (const auto& r : readers) k = std::max(k, r.size());
  Taps tr;
  tr.in = taps.out;
  tr.out = taps.in;
  for (size_t j = 0; j < k; ++j) {
    std::vector<int64_t> idx(taps.in, 0);
    std::vector<double> w(taps.in, 0.0);
    std::vector<bool> valid(taps.in, false);
    bool all_valid = true;
    for (int64_t i = 0; i < taps.in; ++i) {
      if (j < readers[i].size()) {
        idx[i] = readers[i][j].first;
        w[i] = readers[i][j].second;
        valid[i] = true;
      } else {
        all_valid = false;
      }
    }
    tr.Add(idx, taps.w.empty() ? std::vector<double>{} : w, all_valid ? std::vector<bool>{} : valid);
  }
  return tr;
}

Dims ExpandList(const Dims& d, size_t n, int64_t fill) {
  if (d.empty()) return Dims(n, fill);
  if (d.size() == 1 && n > 1) return Dims(n, d[0]);
  return d;
}

}  // namespace torch_pjrt::lowering::spatial
