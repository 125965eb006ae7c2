// runtime/ops/matmul.cpp -- matmul: NumPy's rules, batches folded or looped over gemm.h's BLAS calls.
#include <algorithm>
#include <cstring>

#include "runtime/api.h"
#include "runtime/autocast.h"
#include "runtime/check.h"
#include "runtime/ops/defs.h"
#include "runtime/ops/gemm.h"
#include "runtime/ops/loops.h"
#include "runtime/parallel.h"

namespace kiln {
namespace {

// Result type of NumPy matmul: 1-d operands get a dim added and then removed.
TensorType matmul_rule(OpId, std::span<const Tensor> in, const Attrs&) {
  const Tensor &a = in[0], &b = in[1];
  KILN_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: both operands need at least one dim, got {} @ {}", a.type().str(),
             b.type().str());
  KILN_CHECK(a.dtype() == b.dtype(), "matmul: dtypes differ: {} @ {}", a.type().str(), b.type().str());
  KILN_CHECK(a.dtype() != DType::Bool, "matmul: bool operands are not supported: {} @ {}", a.type().str(),
             b.type().str());
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

// The strides of `t` (whose last two dims are the matrix) over the broadcast batch dims:
// 0 where t is broadcast.
Dims batch_strides(const Tensor& t, const Dims& batch) {
  Dims st(batch.size(), 0);
  int64_t lead = static_cast<int64_t>(batch.size()) - (t.dim() - 2);
  for (int64_t d = std::max<int64_t>(lead, 0); d < static_cast<int64_t>(batch.size()); ++d)
    if (t.shape()[d - lead] != 1) st[d] = t.strides()[d - lead];
  return st;
}

// Offset (elements) of batch entry i over `batch` with strides `st`.
int64_t batch_offset(int64_t i, const Dims& batch, const Dims& st) {
  int64_t off = 0;
  for (size_t d = batch.size(); d-- > 0;) {
    off += (i % batch[d]) * st[d];
    i /= batch[d];
  }
  return off;
}

// Whether a's batch dims and its row dim merge into one run of rows; sets their stride. Size-1
// dims are skipped: their strides are never read.
bool rows_fold(const Tensor& a, const Dims& batch, const Dims& st, int64_t* row_stride) {
  Dims sizes = batch, strides = st;
  sizes.push_back(a.shape()[a.dim() - 2]);
  strides.push_back(a.strides()[a.dim() - 2]);
  *row_stride = a.shape().back();            // a single row: any stride will do
  int64_t inner_stride = 0, inner_size = 0;  // the next dim inward with more than one entry
  for (size_t d = sizes.size(); d-- > 0;) {
    if (sizes[d] == 1) continue;
    if (inner_size == 0) *row_stride = strides[d];
    else if (strides[d] != inner_stride * inner_size) return false;
    inner_stride = strides[d];
    inner_size = sizes[d];
  }
  return true;
}

template <class T> gemm::Mat<const T> matrix_of(const Tensor& t, int64_t offset) {
  return {static_cast<const T*>(t.data_ptr()) + offset, t.shape()[t.dim() - 2], t.shape().back(),
          t.strides()[t.dim() - 2], t.strides().back()};
}

// An operand whose matrices BLAS can read in place (transposed or not); else a contiguous copy
// of it, made once for all batches.
template <class T> Tensor blas_readable(const Tensor& t) {
  gemm::Layout l;
  return gemm::blas_layout(matrix_of<T>(t, 0), &l) ? t : t.contiguous();
}

// c[batch..., M, N] = a[..., M, K] @ b[..., K, N] for float and double; c is contiguous.
template <class T> void matmul_blas(const Tensor& a_in, const Tensor& b_in, const Dims& batch, const Tensor& c) {
  Tensor a = blas_readable<T>(a_in), b = blas_readable<T>(b_in);
  Dims sa = batch_strides(a, batch), sb = batch_strides(b, batch);
  int64_t nb = batch.product(), m = a.shape()[a.dim() - 2], n = b.shape().back(), k = a.shape().back();
  T* pc = static_cast<T*>(c.data_ptr());
  gemm::Mat<const T> ma = matrix_of<T>(a, 0), mb = matrix_of<T>(b, 0);
  // One weight for every batch entry (x[B,M,K] @ w[K,N]): the batch folds into the rows, one
  // product.
  int64_t rs;
  bool b_shared = std::all_of(sb.begin(), sb.end(), [](int64_t s) { return s == 0; });
  if (b_shared && rows_fold(a, batch, sa, &rs)) {
    return gemm::gemm_parallel<T>({ma.data, nb * m, k, rs, ma.cs}, mb, {pc, nb * m, n, n, 1});
  }
  auto product = [&](int64_t i, bool parallel) {
    gemm::Mat<const T> ai = ma, bi = mb;
    ai.data += batch_offset(i, batch, sa);
    bi.data += batch_offset(i, batch, sb);
    gemm::Mat<T> ci{pc + i * m * n, m, n, n, 1};
    if (parallel) gemm::gemm_parallel<T>(ai, bi, ci);
    else gemm::gemm<T>(ai, bi, ci);
  };
  // Many products: one loop over the batch, each entry one BLAS call; few: split each one.
  if (nb >= num_threads() || m * n * k < gemm::kGemmParallelWork) {
    int64_t grain = std::max<int64_t>(1, gemm::kGemmParallelWork / std::max<int64_t>(m * n * k, 1));
    parallel_for(0, nb, grain, [&](int64_t b0, int64_t b1) {
      for (int64_t i = b0; i < b1; ++i) product(i, false);
    });
  } else {
    for (int64_t i = 0; i < nb; ++i) product(i, true);
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
  parallel_for(0, batch * m, std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(n * k, 1)),
               [&](int64_t r0, int64_t r1) {
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
  Dims ba(std::span<const int64_t>(a.shape().begin(), a.shape().size() - 2));
  Dims bb(std::span<const int64_t>(b.shape().begin(), b.shape().size() - 2));
  Dims batch = broadcast_shapes(ba, bb, "matmul");
  if (out.numel() == 0) return;
  if (a.shape().back() == 0) {
    copy_into(zeros({}, out.dtype()), out);
    return;
  }
  switch (out.dtype()) {
    case DType::F32: matmul_blas<float>(a, b, batch, out); break;
    case DType::F64: matmul_blas<double>(a, b, batch, out); break;
    case DType::F16:
    case DType::BF16: {
      Tensor c32 = empty(out.shape(), DType::F32);
      matmul_blas<float>(a.to(DType::F32), b.to(DType::F32), batch, c32);
      copy_into(c32, out);
      break;
    }
    default: {
      // Expand to the common batch and fold it into one dim (a copy where strides require).
      int64_t nb = batch.product(), m = a.shape()[a.dim() - 2], k = a.shape().back(), n = b.shape().back();
      auto fold = [&](const Tensor& t, int64_t r, int64_t c) {
        Dims full = batch;
        full.push_back(r);
        full.push_back(c);
        return t.expand(full).reshape({nb, r, c});
      };
      matmul_int(fold(a, m, k), fold(b, k, n), out.reshape({nb, m, n}));
      break;
    }
  }
}

// Each output element is a dot product over the inner dim.
double matmul_flops(std::span<const TensorType> in, const TensorType& out, const Attrs&) {
  return 2.0 * static_cast<double>(out.shape.product()) * static_cast<double>(in[0].shape.back());
}

}  // namespace

// matmul(a, b): NumPy matrix product; batch dims broadcast. BLAS reads transposed operands
// in place (no copy).
const OpDef defs::Matmul{
    .infer = matmul_rule,
    .cpu = matmul_cpu,
    .vjp =
        [](const VjpArgs& a) {
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
            // One weight shared by every batch entry: fold the batch into K, one product instead of
            // a [B,K,N] gradient summed afterwards.
            if (y.dim() == 2 && x.dim() > 2) {
              int64_t k = x.shape().back(), n = g.shape().back();
              gy = matmul(x.reshape({-1, k}).transpose(0, 1), g.reshape({-1, n}));
            } else {
              gy = matmul(x.transpose(-1, -2), g);
            }
            if (yv) gy = gy.squeeze(-1);
          }
          return Grads{gx, gy};
        },
    .flops = matmul_flops,
};

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  KILN_CHECK(a_in.defined() && b_in.defined(), "matmul: an operand is an undefined tensor");
  Tensor a = autocast_low(a_in), b = autocast_low(b_in);  // runtime/autocast.h
  DType t = promote(a.dtype(), b.dtype());
  return apply(OpId::Matmul, {a.to(t), b.to(t)});
}

}  // namespace kiln
