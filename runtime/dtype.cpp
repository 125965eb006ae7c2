// runtime/dtype.cpp -- dtype names and promotion.
#include "runtime/dtype.h"

#include <ostream>

namespace kiln {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F64: return "f64";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
    case DType::U8: return "u8";
    case DType::Bool: return "bool";
  }
  return "?";
}

bool parse_dtype(std::string_view name, DType* out) {
  for (int i = 0; i < kNumDTypes; ++i) {
    if (dtype_name(static_cast<DType>(i)) == name) {
      *out = static_cast<DType>(i);
      return true;
    }
  }
  return false;
}

std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

DType promote(DType a, DType b) {
  if (a == b) return a;
  if (a == DType::Bool) return b;
  if (b == DType::Bool) return a;
  bool fa = is_float(a), fb = is_float(b);
  if (fa != fb) return fa ? a : b;
  if (fa) {  // both float
    if (a == DType::F64 || b == DType::F64) return DType::F64;
    return DType::F32;  // f32 with f16/bf16, or f16 with bf16
  }
  if (a == DType::I64 || b == DType::I64) return DType::I64;
  return DType::I32;  // i32 with u8
}

}  // namespace kiln
