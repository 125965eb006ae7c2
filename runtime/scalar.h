// runtime/scalar.h -- a number that is not a tensor: a literal operand, a fill value.
#pragma once

#include <cstdint>
#include <type_traits>

#include "runtime/dtype.h"

namespace kiln {

/// A C++ number kept with its kind (bool, integer or float) so type promotion can treat it the
/// way NumPy and PyTorch treat a Python scalar: `i32_tensor * 2` stays i32, `* 2.5` gives f32.
class Scalar {
 public:
  enum class Kind : uint8_t { Bool, Int, Float };

  Scalar() = default;
  Scalar(bool v) : kind_(Kind::Bool), i_(v) {}
  template <class T>
  requires(std::is_integral_v<T> && !std::is_same_v<T, bool>) Scalar(T v)
      : kind_(Kind::Int), i_(static_cast<int64_t>(v)) {}
  template <class T>
  requires std::is_floating_point_v<T> Scalar(T v) : kind_(Kind::Float), d_(static_cast<double>(v)) {}
  Scalar(Half v) : kind_(Kind::Float), d_(static_cast<float>(v)) {}
  Scalar(BFloat16 v) : kind_(Kind::Float), d_(static_cast<float>(v)) {}

  Kind kind() const { return kind_; }
  bool is_float() const { return kind_ == Kind::Float; }
  double to_double() const { return kind_ == Kind::Float ? d_ : static_cast<double>(i_); }
  int64_t to_int() const { return kind_ == Kind::Float ? static_cast<int64_t>(d_) : i_; }
  template <class T> T to() const {
    if constexpr (std::is_same_v<T, bool>) return kind_ == Kind::Float ? d_ != 0 : i_ != 0;
    else if constexpr (std::is_integral_v<T>) return static_cast<T>(to_int());
    else return static_cast<T>(static_cast<float>(to_double()));
  }

  /// The dtype a tensor of dtype `t` combined with this scalar computes in.
  DType promote_with(DType t) const {
    if (kind_ == Kind::Float && !kiln::is_float(t)) return DType::F32;
    if (kind_ == Kind::Int && t == DType::Bool) return DType::I64;
    return t;
  }
  /// The dtype of a tensor made from this scalar alone.
  DType default_dtype() const {
    return kind_ == Kind::Float ? DType::F32 : kind_ == Kind::Int ? DType::I64 : DType::Bool;
  }

 private:
  Kind kind_ = Kind::Int;
  union {
    int64_t i_ = 0;
    double d_;
  };
};

template <> inline double Scalar::to<double>() const { return to_double(); }

}  // namespace kiln
