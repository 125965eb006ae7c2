// runtime/dtype.h -- element types, their names, sizes and NumPy-style promotion.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string_view>

#include "runtime/half.h"

namespace kiln {

/// Element type of a tensor. Spelled f32, f64, f16, bf16, i32, i64, u8, bool everywhere.
enum class DType : uint8_t { F32, F64, F16, BF16, I32, I64, U8, Bool };
inline constexpr int kNumDTypes = 8;

inline constexpr DType f32 = DType::F32;
inline constexpr DType f64 = DType::F64;
inline constexpr DType f16 = DType::F16;
inline constexpr DType bf16 = DType::BF16;
inline constexpr DType i32 = DType::I32;
inline constexpr DType i64 = DType::I64;
inline constexpr DType u8 = DType::U8;
inline constexpr DType boolean = DType::Bool;

/// "f32", "bool", ...
std::string_view dtype_name(DType t);
/// The dtype named by `name`, or false when it names none.
bool parse_dtype(std::string_view name, DType* out);
std::ostream& operator<<(std::ostream& os, DType t);

constexpr int64_t dtype_size(DType t) {
  switch (t) {
    case DType::F64:
    case DType::I64: return 8;
    case DType::F32:
    case DType::I32: return 4;
    case DType::F16:
    case DType::BF16: return 2;
    case DType::U8:
    case DType::Bool: return 1;
  }
  return 1;
}
constexpr bool is_float(DType t) { return t == DType::F32 || t == DType::F64 || t == DType::F16 || t == DType::BF16; }
constexpr bool is_integral(DType t) { return t == DType::I32 || t == DType::I64 || t == DType::U8; }

/// How a value of one dtype becomes another: the one rule that eager copies and casts
/// (runtime/ops/loops.cpp) and every code generator (codegen/) implement, case by case.
enum class CastKind : uint8_t {
  Same,          // the bits as they are
  ToBool,        // nonzero is true (NaN is nonzero)
  FromBool,      // false is 0, true is 1
  FloatToFloat,  // rounded to nearest even; f16 and bf16 go through f32
  IntToFloat,    // rounded to nearest even (u8 read unsigned); to f16 and bf16 through f32
  FloatToInt,    // toward zero, saturating at the target's ends; NaN gives 0 (C++ leaves it undefined)
  IntToInt,      // widened with the source's sign (u8 unsigned), narrowed by dropping high bits
};
constexpr CastKind cast_kind(DType from, DType to) {
  if (from == to) return CastKind::Same;
  if (to == DType::Bool) return CastKind::ToBool;
  if (from == DType::Bool) return CastKind::FromBool;
  if (is_float(from)) return is_float(to) ? CastKind::FloatToFloat : CastKind::FloatToInt;
  return is_float(to) ? CastKind::IntToFloat : CastKind::IntToInt;
}

/// The dtype two tensors combine to (NumPy/PyTorch rules: bool < integers < floats; within a
/// kind the wider wins; f16 with bf16 gives f32; u8 with i32 gives i32).
DType promote(DType a, DType b);

/// The float dtype an op that needs floats computes in: floats stay, others become f32.
constexpr DType to_float_dtype(DType t) { return is_float(t) ? t : DType::F32; }

/// C++ type of each dtype, for kernels: CType<DType::F32> is float.
template <DType D> struct CTypeOf;
template <> struct CTypeOf<DType::F32> { using type = float; };
template <> struct CTypeOf<DType::F64> { using type = double; };
template <> struct CTypeOf<DType::F16> { using type = Half; };
template <> struct CTypeOf<DType::BF16> { using type = BFloat16; };
template <> struct CTypeOf<DType::I32> { using type = int32_t; };
template <> struct CTypeOf<DType::I64> { using type = int64_t; };
template <> struct CTypeOf<DType::U8> { using type = uint8_t; };
template <> struct CTypeOf<DType::Bool> { using type = bool; };
template <DType D> using CType = typename CTypeOf<D>::type;

/// Calls f(T{}) with T the C++ type of `t` (a value of that type, for deduction).
template <class F> decltype(auto) visit_dtype(DType t, F&& f) {
  switch (t) {
    case DType::F32: return f(float{});
    case DType::F64: return f(double{});
    case DType::F16: return f(Half{});
    case DType::BF16: return f(BFloat16{});
    case DType::I32: return f(int32_t{});
    case DType::I64: return f(int64_t{});
    case DType::U8: return f(uint8_t{});
    case DType::Bool: return f(bool{});
  }
  return f(float{});
}

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::F32; }
template <> constexpr DType dtype_of<double>() { return DType::F64; }
template <> constexpr DType dtype_of<Half>() { return DType::F16; }
template <> constexpr DType dtype_of<BFloat16>() { return DType::BF16; }
template <> constexpr DType dtype_of<int32_t>() { return DType::I32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::I64; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::U8; }
template <> constexpr DType dtype_of<bool>() { return DType::Bool; }

}  // namespace kiln
