#include "lowering/algebra.h"

namespace torch_pjrt::lowering {

ElementType ComplexPartType(ElementType t) {
  if (t == ElementType::kC64) return ElementType::kF32;
  if (t == ElementType::kC128) return ElementType::kF64;
  return t;
}

ElementType ComplexTypeOf(ElementType t) {
  return t == ElementType::kF64 || t == ElementType::kC128 ? ElementType::kC128 : ElementType::kC64;
}

namespace {
Val Part(Emitter& e, const Val& x, const char* op) {
  TensorType pt{ComplexPartType(x.dtype()), x.dims()};
  return e.Raw(std::string("\"stablehlo.") + op + "\"(" + e.Name(x) + ")",
               "(" + TypeString(x) + ") -> " + TypeString(pt), pt);
}
}  // namespace

Val RealPart(Emitter& e, const Val& x) {
  if (!IsComplex(x.dtype())) return x;
  return Part(e, x, "real");
}

Val ImagPart(Emitter& e, const Val& x) {
  if (!IsComplex(x.dtype())) return e.Full(0, x.type);
  return Part(e, x, "imag");
}

Val MakeComplex(Emitter& e, const Val& re, const Val& im) {
  TensorType t{ComplexTypeOf(re.dtype()), re.dims()};
  return e.Raw("\"stablehlo.complex\"(" + e.Name(re) + ", " + e.Name(im) + ")",
               "(" + TypeString(re) + ", " + TypeString(im) + ") -> " + TypeString(t), t);
}

Val Conj(Emitter& e, const Val& x) {
  if (!IsComplex(x.dtype())) return x;
  return MakeComplex(e, RealPart(e, x), e.Unary("negate", ImagPart(e, x)));
}

Val ConvertTo(Emitter& e, const Val& x, ElementType t) {
  if (x.dtype() == t) return x;
  if (IsComplex(x.dtype()) && !IsComplex(t)) return e.Convert(RealPart(e, x), t);
  if (!IsComplex(x.dtype()) && IsComplex(t)) {
    Val re = e.Convert(x, ComplexPartType(t));
    return MakeComplex(e, re, e.Full(0, re.type));
  }
  return e.Convert(x, t);
}

Dims BatchDims(const Val& x) { return Dims(x.dims().begin(), x.dims().end() - 2); }

Val MatrixTranspose(Emitter& e, const Val& x) {
  Dims perm;
  for (int64_t i = 0; i < x.rank(); ++i) perm.push_back(i);
  std::swap(perm[x.rank() - 1], perm[x.rank() - 2]);
  return e.Transpose(x, perm);
}

Val Adjoint(Emitter& e, const Val& x) { return Conj(e, MatrixTranspose(e, x)); }

Val BatchMatmul(Emitter& e, const Val& a, const Val& b) {
  int64_t r = a.rank();
  Dims batch;
  for (int64_t i = 0; i + 2 < r; ++i) batch.push_back(i);
  return e.DotGeneral(a, b, batch, batch, {r - 1}, {r - 2}, a.dtype(), "HIGHEST");
}

Val Identity(Emitter& e, const TensorType& t) {
  int64_t r = static_cast<int64_t>(t.dims.size());
  TensorType it{ElementType::kS32, t.dims};
  Val eq = e.Compare("EQ", e.Iota(it, r - 2), e.Iota(it, r - 1));
  return e.Select(eq, e.Full(1, t), e.Full(0, t));
}

Val Diagonal(Emitter& e, const Val& x) {
  int64_t r = x.rank();
  int64_t n = std::min(x.dims()[r - 2], x.dims()[r - 1]);
  Dims limit = x.dims();
  limit[r - 2] = n;
  limit[r - 1] = n;
  Val sq = e.Slice(x, Dims(r, 0), limit, Dims(r, 1));
  // Row-major [n, n] flattened: the diagonal is every (n+1)-th element.
  Dims flat = BatchDims(x);
  flat.push_back(n * n);
  Val f = e.Reshape(sq, flat);
  if (n == 0) return e.Reshape(f, [&] { Dims d = BatchDims(x); d.push_back(0); return d; }());
  return e.SliceDim(f, r - 2, 0, n * n, n + 1);
}

Val Triangle(Emitter& e, const Val& x, bool lower, int64_t k) {
  int64_t r = x.rank();
  TensorType it{ElementType::kS64, x.dims()};
  Val row = e.Iota(it, r - 2), col = e.Iota(it, r - 1);
  Val shifted = e.Binary("add", row, e.Full(static_cast<double>(k), it));
  Val keep = e.Compare(lower ? "LE" : "GE", col, shifted);
  return e.Select(keep, x, e.Full(0, x.type));
}

Val IndexScalar(Emitter& e, int64_t v) { return e.Scalar(static_cast<double>(v), ElementType::kS64); }

}  // namespace torch_pjrt::lowering
