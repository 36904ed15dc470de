// FFTs through stablehlo.fft: _fft_r2c, _fft_c2c, _fft_c2r (what every torch.fft function and
// their autograd reach). stablehlo.fft transforms the 1 to 3 innermost dims, so the transformed
// dims are moved innermost (in the order torch lists them: the last one is the halved one of a
// real transform) and transformed in chunks of at most 3; the result is permuted back.
//
// Scaling: XLA's inverse transforms (IFFT, IRFFT) divide by the signal size N, forward ones do not
// scale. torch's `normalization` is 0 (none), 1 (1/sqrt(N)) or 2 (1/N), applied whatever the
// direction, so inverse results are multiplied back by N (or sqrt(N)) as needed.
#include <cmath>
#include <numeric>

#include "lowering/algebra.h"

namespace torch_pjrt::lowering {

namespace {

enum class FftType { kFft, kIfft, kRfft, kIrfft };

const char* FftTypeName(FftType t) {
  switch (t) {
    case FftType::kFft: return "FFT";
    case FftType::kIfft: return "IFFT";
    case FftType::kRfft: return "RFFT";
    default: return "IRFFT";
  }
}

// One stablehlo.fft over the `lengths.size()` innermost dims of x.
Val Fft(Emitter& e, const Val& x, FftType type, const Dims& lengths) {
  TensorType out = x.type;
  int64_t r = x.rank();
  if (type == FftType::kRfft) {
    out.dtype = ComplexTypeOf(x.dtype());
    out.dims[r - 1] = lengths.back() / 2 + 1;
  } else if (type == FftType::kIrfft) {
    out.dtype = ComplexPartType(x.dtype());
    out.dims[r - 1] = lengths.back();
  }
  if (NumElements(out.dims) == 0 || NumElements(x.dims()) == 0) return e.Full(0, out);
  std::string text = "\"stablehlo.fft\"(" + e.Name(x) + ") {fft_length = " + ArrayAttr(lengths) +
                     ", fft_type = #stablehlo<fft_type " + FftTypeName(type) + ">}";
  return e.Raw(text, "(" + TypeString(x) + ") -> " + TypeString(out), out);
}

// Complex-to-complex transforms over the `k` innermost dims, in chunks of 3.
Val FftInnermost(Emitter& e, Val x, int64_t k, bool forward) {
  int64_t r = x.rank();
  int64_t done = 0;
  while (done < k) {
    int64_t chunk = std::min<int64_t>(3, k - done);
    // Dims [r-done-chunk, r-done) are transformed; bring them innermost when they are not.
    Dims perm;
    for (int64_t i = 0; i < r; ++i) {
      if (i < r - done - chunk || i >= r - done) perm.push_back(i);
    }
    for (int64_t i = r - done - chunk; i < r - done; ++i) perm.push_back(i);
    Dims inverse(r, 0);
    for (int64_t i = 0; i < r; ++i) inverse[perm[i]] = i;
    Val moved = e.Transpose(x, perm);
    Dims lengths(moved.dims().end() - chunk, moved.dims().end());
    x = e.Transpose(Fft(e, moved, forward ? FftType::kFft : FftType::kIfft, lengths), inverse);
    done += chunk;
  }
  return x;
}

// Moves `dims` (in their given order) innermost; returns the permutation used.
Dims MoveInnermost(int64_t rank, const Dims& dims) {
  Dims perm;
  for (int64_t i = 0; i < rank; ++i) {
    if (std::find(dims.begin(), dims.end(), i) == dims.end()) perm.push_back(i);
  }
  for (int64_t d : dims) perm.push_back(d);
  return perm;
}

Dims InversePerm(const Dims& perm) {
  Dims inv(perm.size(), 0);
  for (size_t i = 0; i < perm.size(); ++i) inv[perm[i]] = static_cast<int64_t>(i);
  return inv;
}

Dims FftDims(LowerCtx& c, size_t i, int64_t rank) {
  Dims out;
  for (int64_t d : c.int_list(i)) out.push_back(NormDim(d, rank));
  return out;
}

// Multiplies by the factor that turns XLA's scaling into torch's `normalization` for a signal of
// `n` points whose transform XLA did (`xla_divided`) or did not divide by n.
Val Normalize(Emitter& e, const Val& x, int64_t normalization, double n, bool xla_divided) {
  double have = xla_divided ? 1.0 / n : 1.0;
  double want = normalization == 0 ? 1.0 : normalization == 1 ? 1.0 / std::sqrt(n) : 1.0 / n;
  double factor = want / have;
  if (factor == 1.0) return x;
  return e.Binary("multiply", x, e.Full(factor, x.type));
}

// _fft_c2c(self, dim, normalization, forward)
std::vector<Val> LowerFftC2c(LowerCtx& c) {
  Emitter& e = c.e;
  ElementType t = c.out().dtype;
  Val x = ConvertTo(e, c.tensor(0), t);
  Dims dims = FftDims(c, 1, x.rank());
  if (dims.empty()) return {x};
  bool forward = c.bool_arg(3);
  double n = 1;
  for (int64_t d : dims) n *= static_cast<double>(x.dims()[d]);
  Dims perm = MoveInnermost(x.rank(), dims);
  Val y = FftInnermost(e, e.Transpose(x, perm), static_cast<int64_t>(dims.size()), forward);
  y = Normalize(e, y, c.int_arg(2), n, !forward);
  return {e.Transpose(y, InversePerm(perm))};
}

// _fft_r2c(self, dim, normalization, onesided): a forward transform of real input; onesided keeps
// the last listed dim's n/2+1 non-redundant outputs.
std::vector<Val> LowerFftR2c(LowerCtx& c) {
  Emitter& e = c.e;
  ElementType t = c.out().dtype;
  Val x = e.Convert(c.tensor(0), ComplexPartType(t));
  Dims dims = FftDims(c, 1, x.rank());
  bool onesided = c.bool_arg(3);
  double n = 1;
  for (int64_t d : dims) n *= static_cast<double>(x.dims()[d]);
  Dims perm = MoveInnermost(x.rank(), dims);
  Val moved = e.Transpose(x, perm);
  int64_t k = static_cast<int64_t>(dims.size());
  Val y;
  if (onesided) {
    y = Fft(e, moved, FftType::kRfft, {moved.dims().back()});
    if (k > 1) {
      // The other dims: complex transforms over dims [r-k, r-1), with the halved dim set aside.
      int64_t r = y.rank();
      Dims p;
      for (int64_t i = 0; i < r; ++i) {
        if (i != r - 1) p.push_back(i);
      }
      p.insert_at(static_cast<size_t>(r - k), r - 1);  // halved dim just before the other k-1 dims
      Val z = FftInnermost(e, e.Transpose(y, p), k - 1, true);
      y = e.Transpose(z, InversePerm(p));
    }
  } else {
    y = FftInnermost(e, ConvertTo(e, moved, t), k, true);
  }
  y = Normalize(e, y, c.int_arg(2), n, false);
  return {e.Transpose(y, InversePerm(perm))};
}

// _fft_c2r(self, dim, normalization, last_dim_size): the inverse of a onesided r2c; the last
// listed dim holds last_dim_size/2+1 inputs and gives last_dim_size outputs.
std::vector<Val> LowerFftC2r(LowerCtx& c) {
  Emitter& e = c.e;
  ElementType t = c.out().dtype;
  Val x = ConvertTo(e, c.tensor(0), ComplexTypeOf(t));
  Dims dims = FftDims(c, 1, x.rank());
  int64_t last = c.int_arg(3);
  int64_t k = static_cast<int64_t>(dims.size());
  double n = static_cast<double>(last);
  for (int64_t i = 0; i + 1 < k; ++i) n *= static_cast<double>(x.dims()[dims[i]]);
  Dims perm = MoveInnermost(x.rank(), dims);
  Val moved = e.Transpose(x, perm);
  int64_t r = moved.rank();
  if (k > 1) {
    // Inverse complex transforms over the other dims first (the halved dim set aside).
    Dims p;
    for (int64_t i = 0; i < r; ++i) {
      if (i != r - 1) p.push_back(i);
    }
    p.insert_at(static_cast<size_t>(r - k), r - 1);
    Val z = FftInnermost(e, e.Transpose(moved, p), k - 1, false);
    moved = e.Transpose(z, InversePerm(p));
  }
  // IRFFT reads exactly last/2+1 inputs.
  int64_t want = last / 2 + 1, have = moved.dims()[r - 1];
  if (have > want) {
    moved = e.SliceDim(moved, r - 1, 0, want);
  } else if (have < want) {
    Dims lo(r, 0), hi(r, 0), in(r, 0);
    hi[r - 1] = want - have;
    moved = e.Pad(moved, e.Scalar(0, moved.dtype()), lo, hi, in);
  }
  Val y = Fft(e, moved, FftType::kIrfft, {last});
  y = Normalize(e, y, c.int_arg(2), n, true);
  return {e.Convert(e.Transpose(y, InversePerm(perm)), t)};
}

}  // namespace

void RegisterFftOps(Registry& r) {
  r.Add("_fft_r2c", LowerFftR2c);
  r.Add("_fft_c2c", LowerFftC2c);
  r.Add("_fft_c2r", LowerFftC2r);
}

}  // namespace torch_pjrt::lowering
