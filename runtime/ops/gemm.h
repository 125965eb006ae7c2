// runtime/ops/gemm.h -- matrix products of strided views through BLAS: the one place kiln calls
// sgemm/dgemm (matmul and conv2d use it).
#pragma once

#include <cstdint>

namespace kiln::gemm {

/// A rows x cols matrix whose element (i, j) is data[i * rs + j * cs] (strides in elements).
template <class T> struct Mat {
  T* data;
  int64_t rows, cols, rs, cs;
  Mat<const T> as_const() const { return {data, rows, cols, rs, cs}; }
  Mat transposed() const { return {data, cols, rows, cs, rs}; }
  /// The block of rows [r0, r0 + nr) and columns [c0, c0 + nc).
  Mat block(int64_t r0, int64_t nr, int64_t c0, int64_t nc) const { return {data + r0 * rs + c0 * cs, nr, nc, rs, cs}; }
};

/// How BLAS reads an operand: row-major (`trans` false) or column-major, with leading dim `ld`.
/// The strides of a size-1 dim never matter: they are normalized away first, so a [1,K] slice of
/// a transposed tensor is read as the row it is.
struct Layout {
  bool trans;
  int64_t ld;
};
/// The layout BLAS can read `m` in, if any (false: the matrix must be copied first).
template <class T> bool blas_layout(const Mat<T>& m, Layout* out);

/// c = a @ b, or c += a @ b when `accumulate`, on the calling thread. Any strides: operands BLAS
/// cannot read are copied, and a result it cannot write goes through a temporary. Any sizes:
/// dims and leading dims past BLAS's int limit are split into blocks (K blocks accumulate).
/// T is float or double.
template <class T> void gemm(Mat<const T> a, Mat<const T> b, Mat<T> c, bool accumulate = false);

/// As gemm, with the rows (or, for a short wide result, the columns) of c split over kiln's
/// threads. Each element is computed by one BLAS call either way.
template <class T> void gemm_parallel(Mat<const T> a, Mat<const T> b, Mat<T> c, bool accumulate = false);

/// The largest dim or leading dim one BLAS call takes (INT32_MAX). Tests lower it to run the
/// splitting logic on small matrices; 0 restores the default.
int64_t blas_int_limit();
void set_blas_int_limit_for_testing(int64_t limit);

/// Multiply-adds below which a product (or a block of one) runs on one thread: about 10 us,
/// less than waking a sleeping worker can cost.
inline constexpr int64_t kGemmParallelWork = int64_t{1} << 18;

}  // namespace kiln::gemm
