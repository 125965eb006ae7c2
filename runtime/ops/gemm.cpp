// runtime/ops/gemm.cpp -- strided matrix products through OpenBLAS: layouts from normalized
// strides, 64-bit sizes split at BLAS's int limit, and a split over kiln's threads.
#include "runtime/ops/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <type_traits>
#include <vector>

#include "runtime/api.h"
#include "runtime/check.h"
#include "runtime/parallel.h"

namespace kiln::gemm {
namespace {

std::atomic<int64_t> g_int_limit{INT_MAX};

// Copies m into a fresh row-major buffer.
template <class T> std::vector<T> packed(const Mat<const T>& m) {
  std::vector<T> out(static_cast<size_t>(m.rows * m.cols));
  for (int64_t i = 0; i < m.rows; ++i)
    for (int64_t j = 0; j < m.cols; ++j) out[i * m.cols + j] = m.data[i * m.rs + j * m.cs];
  return out;
}

// One BLAS call; every size already fits an int.
template <class T> void blas_call(Layout la, Layout lb, int64_t m, int64_t n, int64_t k, const T* a, const T* b, T* c,
                                  int64_t ldc, bool accumulate) {
  // BLAS's own checks, made here: a rejected call prints a message and leaves c as it was.
  KILN_ASSERT(la.ld >= std::max<int64_t>(1, la.trans ? m : k) && lb.ld >= std::max<int64_t>(1, lb.trans ? k : n) &&
              ldc >= std::max<int64_t>(1, n));
  auto ta = la.trans ? CblasTrans : CblasNoTrans, tb = lb.trans ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, ta, tb, int(m), int(n), int(k), 1.0f, a, int(la.ld), b, int(lb.ld),
                accumulate ? 1.0f : 0.0f, c, int(ldc));
  else
    cblas_dgemm(CblasRowMajor, ta, tb, int(m), int(n), int(k), 1.0, a, int(la.ld), b, int(lb.ld),
                accumulate ? 1.0 : 0.0, c, int(ldc));
}

// An operand block as BLAS reads it: in place, or packed when its layout (or leading dim) is
// one BLAS cannot take.
template <class T> struct Operand {
  const T* data;
  Layout layout;
  std::vector<T> copy;
  explicit Operand(const Mat<const T>& m) {
    if (blas_layout(m, &layout) && layout.ld <= blas_int_limit()) {
      data = m.data;
      return;
    }
    copy = packed(m);
    data = copy.data();
    layout = {false, std::max<int64_t>(m.cols, 1)};
  }
};

// c = a @ b (+= when accumulate) for a row-major c whose sizes and ldc fit BLAS's int.
template <class T> void gemm_row_major(Mat<const T> a, Mat<const T> b, Mat<T> c, bool accumulate) {
  int64_t lim = blas_int_limit(), m = c.rows, n = c.cols, k = a.cols;
  for (int64_t i0 = 0; i0 < m; i0 += lim)
    for (int64_t j0 = 0; j0 < n; j0 += lim) {
      int64_t mi = std::min(lim, m - i0), nj = std::min(lim, n - j0);
      for (int64_t p0 = 0; p0 < k; p0 += lim) {
        int64_t kp = std::min(lim, k - p0);
        Operand<T> ab(a.block(i0, mi, p0, kp)), bb(b.block(p0, kp, j0, nj));
        blas_call<T>(ab.layout, bb.layout, mi, nj, kp, ab.data, bb.data, c.data + i0 * c.rs + j0, c.rs,
                     accumulate || p0 > 0);
      }
    }
}

}  // namespace

template <class T> bool blas_layout(const Mat<T>& m, Layout* out) {
  // Row-major: columns adjacent, rows ld apart (ld >= cols). A single column or row has no
  // meaningful stride along its size-1 dim, so that stride is not consulted.
  if ((m.cols == 1 || m.cs == 1) && (m.rows == 1 || m.rs >= std::max<int64_t>(m.cols, 1))) {
    *out = {false, m.rows == 1 ? std::max<int64_t>(m.cols, 1) : m.rs};
    return true;
  }
  if ((m.rows == 1 || m.rs == 1) && (m.cols == 1 || m.cs >= std::max<int64_t>(m.rows, 1))) {
    *out = {true, m.cols == 1 ? std::max<int64_t>(m.rows, 1) : m.cs};
    return true;
  }
  return false;
}

template <class T> void gemm(Mat<const T> a, Mat<const T> b, Mat<T> c, bool accumulate) {
  KILN_ASSERT(a.rows == c.rows && b.cols == c.cols && a.cols == b.rows);
  BlasThreadsScope one_blas_thread;  // kiln's own threads split the work, never BLAS's
  if (c.rows == 0 || c.cols == 0) return;
  if (a.cols == 0) {
    if (!accumulate)
      for (int64_t i = 0; i < c.rows; ++i)
        for (int64_t j = 0; j < c.cols; ++j) c.data[i * c.rs + j * c.cs] = T(0);
    return;
  }
  Layout lc;
  bool writable = blas_layout(c, &lc) && lc.ld <= blas_int_limit();
  if (writable && lc.trans) {
    // A column-major result is the row-major result of the transposed product.
    return gemm_row_major(b.transposed(), a.transposed(), Mat<T>{c.data, c.cols, c.rows, lc.ld, 1}, accumulate);
  }
  if (writable) return gemm_row_major(a, b, Mat<T>{c.data, c.rows, c.cols, lc.ld, 1}, accumulate);
  // BLAS cannot write c in place: compute into a packed block and add it in.
  std::vector<T> tmp(static_cast<size_t>(c.rows * c.cols));
  int64_t ld = std::min(c.cols, blas_int_limit());
  for (int64_t j0 = 0; j0 < c.cols; j0 += ld) {
    int64_t nj = std::min(ld, c.cols - j0);
    gemm_row_major(a, b.block(0, b.rows, j0, nj), Mat<T>{tmp.data(), c.rows, nj, nj, 1}, false);
    for (int64_t i = 0; i < c.rows; ++i)
      for (int64_t j = 0; j < nj; ++j) {
        T& dst = c.data[i * c.rs + (j0 + j) * c.cs];
        dst = accumulate ? dst + tmp[i * nj + j] : tmp[i * nj + j];
      }
  }
}

template <class T> void gemm_parallel(Mat<const T> a, Mat<const T> b, Mat<T> c, bool accumulate) {
  int64_t m = c.rows, n = c.cols, k = a.cols;
  int threads = num_threads();
  if (threads == 1 || in_parallel_region() || m * n * k < kGemmParallelWork) {
    return gemm(a, b, c, accumulate);
  }
  // Blocks of whole rows keep B's panel shared; a short wide result splits its columns.
  bool by_rows = m >= n || m >= 64 * threads;
  parallel_for(0, by_rows ? m : n, 16, [&](int64_t r0, int64_t r1) {
    if (by_rows) gemm(a.block(r0, r1 - r0, 0, k), b, c.block(r0, r1 - r0, 0, n), accumulate);
    else gemm(a, b.block(0, k, r0, r1 - r0), c.block(0, m, r0, r1 - r0), accumulate);
  });
}

int64_t blas_int_limit() { return g_int_limit.load(std::memory_order_relaxed); }
void set_blas_int_limit_for_testing(int64_t limit) {
  g_int_limit.store(limit > 0 ? std::min<int64_t>(limit, INT_MAX) : INT_MAX);
}

template bool blas_layout(const Mat<const float>&, Layout*);
template bool blas_layout(const Mat<const double>&, Layout*);
template bool blas_layout(const Mat<float>&, Layout*);
template bool blas_layout(const Mat<double>&, Layout*);
template void gemm(Mat<const float>, Mat<const float>, Mat<float>, bool);
template void gemm(Mat<const double>, Mat<const double>, Mat<double>, bool);
template void gemm_parallel(Mat<const float>, Mat<const float>, Mat<float>, bool);
template void gemm_parallel(Mat<const double>, Mat<const double>, Mat<double>, bool);

}  // namespace kiln::gemm
