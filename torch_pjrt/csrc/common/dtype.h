// Element types shared by every layer. Deliberately free of torch and PJRT headers so that the
// lowering, graph and runtime translation units stay fast to compile.
#pragma once

#include <cstddef>
#include <cstdint>

namespace torch_pjrt {

enum class ElementType : uint8_t {
  kInvalid = 0,
  kBool,
  kS8,
  kS16,
  kS32,
  kS64,
  kU8,
  kU16,
  kU32,
  kU64,
  kF16,
  kBF16,
  kF32,
  kF64,
  kC64,
  kC128,
  kF8E5M2,
  kF8E4M3FN,
  kNumTypes,
};

inline size_t ItemSize(ElementType t) {
  switch (t) {
    case ElementType::kBool:
    case ElementType::kS8:
    case ElementType::kU8:
    case ElementType::kF8E5M2:
    case ElementType::kF8E4M3FN:
      return 1;
    case ElementType::kS16:
    case ElementType::kU16:
    case ElementType::kF16:
    case ElementType::kBF16:
      return 2;
    case ElementType::kS32:
    case ElementType::kU32:
    case ElementType::kF32:
      return 4;
    case ElementType::kS64:
    case ElementType::kU64:
    case ElementType::kF64:
    case ElementType::kC64:
      return 8;
    case ElementType::kC128:
      return 16;
    default:
      return 0;
  }
}

inline bool IsFloating(ElementType t) {
  return t == ElementType::kF16 || t == ElementType::kBF16 || t == ElementType::kF32 ||
         t == ElementType::kF64 || t == ElementType::kF8E5M2 || t == ElementType::kF8E4M3FN;
}
inline bool IsComplex(ElementType t) { return t == ElementType::kC64 || t == ElementType::kC128; }
inline bool IsUnsigned(ElementType t) {
  return t == ElementType::kU8 || t == ElementType::kU16 || t == ElementType::kU32 ||
         t == ElementType::kU64;
}
inline bool IsIntegral(ElementType t) {  // bool excluded
  return t == ElementType::kS8 || t == ElementType::kS16 || t == ElementType::kS32 ||
         t == ElementType::kS64 || IsUnsigned(t);
}

// MLIR spelling of an element type ("f32", "i1", "ui8", "complex<f32>").
const char* MlirTypeName(ElementType t);
// Human-readable name matching torch ("float32", "bfloat16", ...), for error messages.
const char* TypeName(ElementType t);

}  // namespace torch_pjrt
