// runtime/ops/matmul.cpp -- matrix products through OpenBLAS, split across kiln's threads.
#include <cblas.h>

#include <cstring>

#include "runtime/api.h"
#include "runtime/check.h"
#include "runtime/ops/defs.h"
#include "runtime/ops/loops.h"
#include "runtime/parallel.h"

namespace kiln {
namespace {

// Result type of NumPy matmul: 1-d operands get a dim added and then removed.
TensorType matmul_rule(OpId, std::span<const Tensor> in, const Attrs&) {
  const Tensor &a = in[0], &b = in[1];
  KILN_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: both operands need at least one dim, got {} @ {}",
             a.type().str(), b.type().str());
  KILN_CHECK(a.dtype() == b.dtype(), "matmul: dtypes differ: {} @ {}", a.type().str(), b.type().str());
  KILN_CHECK(a.dtype() != DType::Bool, "matmul: bool operands are not supported: {} @ {}",
             a.type().str(), b.type().str());
  int64_t ka = a.shape().back(), kb = b.dim() == 1 ? b.shape()[0] : b.shape()[b.dim() - 2];
  KILN_CHECK(ka == kb, "matmul: inner dimensions differ: {} @ {}", a.type().str(), b.type().str());
  Dims ba, bb;
  for (int64_t i = 0; i + 2 < a.dim(); ++i) ba.push_back(a.shape()[i]);
  for (int64_t i = 0; i + 2 < b.dim(); ++i) bb.push_back(b.shape()[i]);
  Dims shape = broadcast_shapes(ba, bb, "matmul");
  if (a.dim() >= 2) shape.push_back(a.shape()[a.dim() - 2]);
  if (b.dim() >= 2) shape.push_back(b.shape().back());
  return {a.dtype(), shape, a.device()};
}

// One matrix operand as BLAS sees it: row-major, maybe transposed, with a leading dimension.
struct BlasView {
  bool trans;
  int64_t ld;
  int64_t row_stride, col_stride;  // elements, of the logical matrix
};
bool blas_view(int64_t rs, int64_t cs, int64_t rows, int64_t cols, BlasView* v) {
  if (cs == 1 && rs >= std::max<int64_t>(cols, 1)) { *v = {false, rs, rs, cs}; return true; }
  if (rs == 1 && cs >= std::max<int64_t>(rows, 1)) { *v = {true, cs, rs, cs}; return true; }
  if (rows == 1 && cs == 1) { *v = {false, std::max<int64_t>(cols, 1), rs, cs}; return true; }
  if (cols == 1 && rs == 1) { *v = {true, std::max<int64_t>(rows, 1), rs, cs}; return true; }
  return false;
}

template <class T>
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b,
          int64_t ldb, T* c, int64_t ldc) {
  auto TA = ta ? CblasTrans : CblasNoTrans, TB = tb ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, TA, TB, int(m), int(n), int(k), 1.0f, a, int(lda), b, int(ldb), 0.0f, c, int(ldc));
  else
    cblas_dgemm(CblasRowMajor, TA, TB, int(m), int(n), int(k), 1.0, a, int(lda), b, int(ldb), 0.0, c, int(ldc));
}

// c[M,N] = a[M,K] @ b[K,N] for float and double, splitting rows or columns over threads.
template <class T>
void matmul_blas(const Tensor& a3, const Tensor& b3, const Tensor& c3) {
  int64_t batch = c3.shape()[0], m = c3.shape()[1], n = c3.shape()[2], k = a3.shape()[2];
  Tensor a = a3, b = b3;
  BlasView va, vb;
  if (!blas_view(a.strides()[1], a.strides()[2], m, k, &va)) {
    a = a.contiguous();
    blas_view(a.strides()[1], a.strides()[2], m, k, &va);
  }
  if (!blas_view(b.strides()[1], b.strides()[2], k, n, &vb)) {
    b = b.contiguous();
    blas_view(b.strides()[1], b.strides()[2], k, n, &vb);
  }
  const T* pa = static_cast<const T*>(a.data_ptr());
  const T* pb = static_cast<const T*>(b.data_ptr());
  T* pc = static_cast<T*>(c3.data_ptr());
  int64_t sa = a.strides()[0], sb = b.strides()[0];
  BlasThreadsScope one_blas_thread;  // BLAS runs inside our chunks, never beside them
  int threads = num_threads();
  if (batch >= threads || m * n * k < (1 << 15)) {
    parallel_for(0, batch, m * n * k >= (1 << 15) ? 1 : batch, [&](int64_t b0, int64_t b1) {
      for (int64_t i = b0; i < b1; ++i)
        gemm<T>(va.trans, vb.trans, m, n, k, pa + i * sa, va.ld, pb + i * sb, vb.ld, pc + i * m * n, n);
    });
    return;
  }
  // Few large products: give each thread a block of rows (or of columns when m is small).
  bool by_rows = m >= n || m >= 64 * threads;
  for (int64_t i = 0; i < batch; ++i) {
    const T* ai = pa + i * sa;
    const T* bi = pb + i * sb;
    T* ci = pc + i * m * n;
    parallel_for(0, by_rows ? m : n, 16, [&](int64_t r0, int64_t r1) {
      if (by_rows)
        gemm<T>(va.trans, vb.trans, r1 - r0, n, k, ai + r0 * va.row_stride, va.ld, bi, vb.ld, ci + r0 * n, n);
      else
        gemm<T>(va.trans, vb.trans, m, r1 - r0, k, ai, va.ld, bi + r0 * vb.col_stride, vb.ld, ci + r0, n);
    });
  }
}

// Integer products accumulate in i64, a plain loop (BLAS has no integer gemm).
void matmul_int(const Tensor& a, const Tensor& b, const Tensor& c) {
  int64_t batch = c.shape()[0], m = c.shape()[1], n = c.shape()[2], k = a.shape()[2];
  Tensor a64 = a.to(DType::I64).contiguous(), b64 = b.to(DType::I64).contiguous();
  const int64_t* pa = a64.data<int64_t>();
  const int64_t* pb = b64.data<int64_t>();
  Tensor acc = zeros({batch, m, n}, DType::I64);
  int64_t* pc = acc.data<int64_t>();
  int64_t sa = a64.strides()[0], sb = b64.strides()[0];
  parallel_for(0, batch * m, std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(n * k, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      int64_t bi = r / m, i = r % m;
      for (int64_t p = 0; p < k; ++p) {
        int64_t av = pa[bi * sa + i * k + p];
        const int64_t* brow = pb + bi * sb + p * n;
        int64_t* crow = pc + r * n;
        for (int64_t j = 0; j < n; ++j) crow[j] += av * brow[j];
      }
    }
  });
  copy_into(acc, c);
}

void matmul_cpu(OpId, std::span<const Tensor> in, const Attrs&, const Tensor& out) {
  Tensor a = in[0], b = in[1];
  if (a.dim() == 1) a = a.unsqueeze(0);
  if (b.dim() == 1) b = b.unsqueeze(1);
  int64_t m = a.shape()[a.dim() - 2], k = a.shape().back(), n = b.shape().back();
  // Broadcast the batch dims and fold them into one.
  Dims ba(std::span<const int64_t>(a.shape().begin(), a.shape().size() - 2));
  Dims bb(std::span<const int64_t>(b.shape().begin(), b.shape().size() - 2));
  Dims batch = broadcast_shapes(ba, bb, "matmul");
  int64_t nb = batch.product();
  // Expand to the common batch, fold it into one dim (a view when strides allow, else a copy).
  auto fold = [&](const Tensor& t, int64_t r, int64_t c) {
    Dims full = batch;
    full.push_back(r);
    full.push_back(c);
    return t.expand(full).reshape({nb, r, c});
  };
  Tensor a3 = fold(a, m, k), b3 = fold(b, k, n);
  Tensor c3 = out.reshape({nb, m, n});
  if (m * n == 0 || nb == 0) return;
  if (k == 0) {
    copy_into(zeros({}, out.dtype()), c3);
    return;
  }
  switch (out.dtype()) {
    case DType::F32: matmul_blas<float>(a3, b3, c3); break;
    case DType::F64: matmul_blas<double>(a3, b3, c3); break;
    case DType::F16: case DType::BF16: {
      Tensor c32 = empty({nb, m, n}, DType::F32);
      matmul_blas<float>(a3.to(DType::F32), b3.to(DType::F32), c32);
      copy_into(c32, c3);
      break;
    }
    default: matmul_int(a3, b3, c3); break;
  }
}

}  // namespace

// matmul(a, b): NumPy matrix product; batch dims broadcast. BLAS reads transposed operands
// in place (no copy).
const OpDef defs::Matmul{
    .infer = matmul_rule,
    .cpu = matmul_cpu,
    .vjp = [](const VjpArgs& a) {
      // Treat 1-d operands as matrices, as the forward did; the engine sums broadcast batches.
      Tensor x = a.in[0], y = a.in[1], g = a.grad;
      bool xv = x.dim() == 1, yv = y.dim() == 1;
      if (xv) x = x.unsqueeze(0), g = g.unsqueeze(std::max<int64_t>(g.dim() - 1, 0));
      if (yv) y = y.unsqueeze(-1), g = g.unsqueeze(g.dim());
      Tensor gx, gy;
      if (a.needs_grad(0)) {
        gx = matmul(g, y.transpose(-1, -2));
        if (xv) gx = gx.squeeze(-2);
      }
      if (a.needs_grad(1)) {
        gy = matmul(x.transpose(-1, -2), g);
        if (yv) gy = gy.squeeze(-1);
      }
      return Grads{gx, gy};
    },
};

Tensor matmul(const Tensor& a, const Tensor& b) {
  KILN_CHECK(a.defined() && b.defined(), "matmul: an operand is an undefined tensor");
  DType t = promote(a.dtype(), b.dtype());
  return apply(OpId::Matmul, {a.to(t), b.to(t)});
}

}  // namespace kiln
