// tests/ops/reference.h -- comparing kiln results with double-precision references.
#pragma once

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "runtime/op.h"

namespace kiln::test {

/// A dtype's name, for test parameters and messages.
inline std::string dname(DType t) { return std::string(dtype_name(t)); }

/// How far a result of one dtype may be from the exact value: |got - want| <= atol + rtol *
/// (|want| + scale), where `scale` is the size of the terms that produced want (0 for
/// elementwise ops; sum |x| for a sum, whose error is relative to that, not to the result).
struct Tolerance {
  double rtol = 0, atol = 0;
};

/// f32 allows 1e-5 relative (SLEEF and libm are within a few ulps, composites add a few
/// roundings) and 1e-6 absolute for cancellation near zero (gelu of a large negative x);
/// f16 and bf16 compute in f32 and round once, so they allow about two of their ulps.
/// Integers and bool must match exactly.
inline Tolerance tolerance(DType t) {
  switch (t) {
    case DType::F64: return {1e-12, 1e-13};
    case DType::F32: return {1e-5, 1e-6};
    case DType::F16: return {1e-3, 1e-5};
    case DType::BF16: return {8e-3, 1e-5};
    default: return {0, 0};
  }
}

/// All dtypes kiln has, in ops.def order of DType.
inline const std::vector<DType> kAllDTypes = {f32, f64, f16, bf16, i32, i64, u8, boolean};
inline const std::vector<DType> kFloatDTypes = {f32, f64, f16, bf16};
inline const std::vector<DType> kIntDTypes = {i32, i64, u8};

/// The value an exact result becomes when stored in dtype t, up to rounding: integers wrap (u8
/// arithmetic is modulo 256), bool is "nonzero", floats past their largest value (plus half an
/// ulp) overflow to infinity.
inline double stored_as(DType t, double v) {
  auto overflow = [&](int mantissa_bits, int max_exp) {
    double limit = std::ldexp(2.0 - std::ldexp(1.0, -mantissa_bits - 1), max_exp);
    return std::abs(v) >= limit ? std::copysign(INFINITY, v) : v;
  };
  switch (t) {
    case DType::U8: return std::fmod(std::fmod(v, 256.0) + 256.0, 256.0);
    case DType::Bool: return v != 0 ? 1.0 : 0.0;
    case DType::F16: return overflow(10, 15);
    case DType::BF16: return overflow(7, 127);
    case DType::F32: return overflow(23, 127);
    default: return v;
  }
}

inline std::string join(const Dims& d) { return shape_str(d); }

/// Elementwise comparison of `got` with `want` (row-major), with the tolerance of got's dtype
/// unless one is given. NaN must meet NaN, infinities must match exactly.
inline ::testing::AssertionResult all_close(const Tensor& got, const std::vector<double>& want, const Dims& shape,
                                            Tolerance tol, const std::vector<double>& scale = {}) {
  if (got.shape() != shape)
    return ::testing::AssertionFailure() << "shape " << join(got.shape()) << ", expected " << join(shape);
  std::vector<double> v = got.to_vector<double>();
  if (v.size() != want.size()) return ::testing::AssertionFailure() << v.size() << " values, expected " << want.size();
  int bad = 0;
  auto fail = ::testing::AssertionFailure();
  for (size_t i = 0; i < v.size(); ++i) {
    double g = v[i], w = want[i];
    bool ok;
    if (std::isnan(w) || std::isnan(g)) ok = std::isnan(w) && std::isnan(g);
    else if (std::isinf(w) || std::isinf(g)) ok = g == w;
    else ok = std::abs(g - w) <= tol.atol + tol.rtol * (std::abs(w) + (scale.empty() ? 0 : scale[i]));
    if (!ok && ++bad <= 5) fail << "\n  [" << i << "] got " << g << ", expected " << w;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return fail << "\n  " << bad << " of " << v.size() << " elements differ (" << got.type() << ", rtol " << tol.rtol
              << ", atol " << tol.atol << ")";
}
inline ::testing::AssertionResult all_close(const Tensor& got, const std::vector<double>& want, const Dims& shape) {
  return all_close(got, want, shape, tolerance(got.dtype()));
}

/// Uniform random values in [lo, hi] of dtype t (integers: whole numbers in that range, bool:
/// 0/1). `whole` rounds floats to whole numbers too, so comparisons see ties.
inline Tensor uniform(const Dims& shape, DType t, double lo, double hi, bool whole = false) {
  if (t == DType::Bool) return randint(0, 2, shape, DType::I64).to(t);
  if (!is_float(t) || whole)
    return randint(static_cast<int64_t>(std::ceil(lo)), static_cast<int64_t>(std::floor(hi)) + 1, shape, DType::I64)
        .to(t);
  std::vector<double> u = rand(shape, DType::F64).to_vector<double>();
  for (double& x : u) x = lo + (hi - lo) * x;
  return from_vector(u, shape).to(t);
}

/// The elements of a view, read with its own shape, strides and offset out of the row-major
/// values of its (contiguous) base: a reference that does not go through kiln's copy kernels.
inline std::vector<double> view_values(const Tensor& view, const std::vector<double>& base) {
  const Dims& shape = view.shape();
  std::vector<double> out(static_cast<size_t>(view.numel()));
  Dims idx(shape.size(), 0);
  for (size_t i = 0; i < out.size(); ++i) {
    int64_t off = view.offset();
    for (size_t d = 0; d < shape.size(); ++d) off += idx[d] * view.strides()[d];
    out[i] = base[static_cast<size_t>(off)];
    for (size_t d = shape.size(); d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

/// Row-major values of `v` (shape `from`) broadcast to shape `to`, NumPy style.
inline std::vector<double> broadcast_values(const std::vector<double>& v, const Dims& from, const Dims& to) {
  size_t r = to.size(), fr = from.size();
  std::vector<double> out(static_cast<size_t>(to.product()));
  Dims idx(r, 0);
  for (size_t i = 0; i < out.size(); ++i) {
    int64_t off = 0;
    for (size_t d = 0; d < fr; ++d) {
      int64_t n = from[d];
      off = off * n + (n == 1 ? 0 : idx[r - fr + d]);
    }
    out[i] = v[static_cast<size_t>(off)];
    for (size_t d = r; d-- > 0;) {
      if (++idx[d] < to[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

/// Applies f to each element.
inline std::vector<double> map(const std::vector<double>& a, const std::function<double(double)>& f) {
  std::vector<double> out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = f(a[i]);
  return out;
}
inline std::vector<double> map(const std::vector<double>& a, const std::vector<double>& b,
                               const std::function<double(double, double)>& f) {
  std::vector<double> out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = f(a[i], b[i]);
  return out;
}

/// Checks that `fn` throws kiln::Error whose message contains every one of `parts`.
template <class F>::testing::AssertionResult throws_error(F&& fn, std::initializer_list<std::string> parts) {
  try {
    fn();
  } catch (const Error& e) {
    std::string msg = e.what();
    for (const std::string& p : parts)
      if (msg.find(p) == std::string::npos)
        return ::testing::AssertionFailure() << "message \"" << msg << "\" lacks \"" << p << "\"";
    return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw a non-kiln::Error: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw";
}

/// Sets the number of threads for one scope, so the parallel paths run even on one core.
class ThreadsGuard {
 public:
  explicit ThreadsGuard(int n) : saved_(num_threads()) { set_num_threads(n); }
  ~ThreadsGuard() { set_num_threads(saved_); }
  ThreadsGuard(const ThreadsGuard&) = delete;
  ThreadsGuard& operator=(const ThreadsGuard&) = delete;

 private:
  int saved_;
};

}  // namespace kiln::test
