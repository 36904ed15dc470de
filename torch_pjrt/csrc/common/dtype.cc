#include "common/dtype.h"

namespace torch_pjrt {

const char* MlirTypeName(ElementType t) {
  switch (t) {
    case ElementType::kBool: return "i1";
    case ElementType::kS8: return "i8";
    case ElementType::kS16: return "i16";
    case ElementType::kS32: return "i32";
    case ElementType::kS64: return "i64";
    case ElementType::kU8: return "ui8";
    case ElementType::kU16: return "ui16";
    case ElementType::kU32: return "ui32";
    case ElementType::kU64: return "ui64";
    case ElementType::kF16: return "f16";
    case ElementType::kBF16: return "bf16";
    case ElementType::kF32: return "f32";
    case ElementType::kF64: return "f64";
    case ElementType::kC64: return "complex<f32>";
    case ElementType::kC128: return "complex<f64>";
    case ElementType::kF8E5M2: return "f8E5M2";
    case ElementType::kF8E4M3FN: return "f8E4M3FN";
    default: return "<invalid>";
  }
}

const char* TypeName(ElementType t) {
  switch (t) {
    case ElementType::kBool: return "bool";
    case ElementType::kS8: return "int8";
    case ElementType::kS16: return "int16";
    case ElementType::kS32: return "int32";
    case ElementType::kS64: return "int64";
    case ElementType::kU8: return "uint8";
    case ElementType::kU16: return "uint16";
    case ElementType::kU32: return "uint32";
    case ElementType::kU64: return "uint64";
    case ElementType::kF16: return "float16";
    case ElementType::kBF16: return "bfloat16";
    case ElementType::kF32: return "float32";
    case ElementType::kF64: return "float64";
    case ElementType::kC64: return "complex64";
    case ElementType::kC128: return "complex128";
    case ElementType::kF8E5M2: return "float8_e5m2";
    case ElementType::kF8E4M3FN: return "float8_e4m3fn";
    default: return "<invalid>";
  }
}

}  // namespace torch_pjrt
