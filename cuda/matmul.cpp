// cuda/matmul.cpp -- the op kernels of matmul and addmm: cuBLAS for floats,
// codegen/cuda/matmul.h for integers; the addmm ops as one cuBLASLt GEMM with an epilogue, or
// where it declines, the GEMM and one generated kernel for the bias and activation.
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "codegen/cuda/matmul.h"
#include "cuda/group.h"
#include "cuda/launch.h"
#include "cuda/libraries.h"
#include "cuda/op_kernels.h"
#include "ir/builder.h"
#include "ir/graph.h"
#include "runtime/api.h"
#include "runtime/backend.h"
#include "runtime/cuda_internal.h"
#include "runtime/log.h"

namespace kiln::cuda {
namespace {

// A stack of matrices as a strided-batched GEMM reads it: one stride between matrices, and
// each matrix either row-major (unit column stride) or transposed (unit row stride), with its
// leading dimension. Anything else is copied into a contiguous stack first.
struct Matrices {
  Tensor t;              // [batch..., rows, cols] (broadcast batch dims have stride 0)
  int64_t batch_stride;  // elements between consecutive matrices of the flattened batch
  bool transposed;       // stored column by column
  int64_t ld;            // elements between rows (row-major) or columns (transposed)
};

Matrices matrices(Tensor t, int64_t rows, int64_t cols) {
  const Dims& shape = t.shape();
  const Dims& st = t.strides();
  size_t nb = shape.size() - 2;
  // The batch dims as one: strides that step as one run (size-1 dims ignored), or all zero.
  bool flat = true;
  int64_t stride = 0, expect = -1;
  for (size_t d = nb; d-- > 0;) {
    if (shape[d] == 1) continue;
    if (expect < 0) {
      stride = st[d];
      expect = st[d] * shape[d];
    } else if (st[d] == expect || (st[d] == 0 && stride == 0)) {
      expect = st[d] * shape[d];
    } else {
      flat = false;
    }
  }
  int64_t rs = st[nb], cs = st[nb + 1];
  bool row_major = cs == 1 && (rows <= 1 || rs >= std::max<int64_t>(cols, 1));
  bool col_major = rs == 1 && (cols <= 1 || cs >= std::max<int64_t>(rows, 1));
  if (!flat || !(row_major || col_major)) {
    t = t.contiguous();
    return {t, rows * cols, false, std::max<int64_t>(cols, 1)};
  }
  if (row_major) return {t, stride, false, rows <= 1 ? std::max<int64_t>(cols, 1) : rs};
  return {t, stride, true, cols <= 1 ? std::max<int64_t>(rows, 1) : cs};
}

}  // namespace

void matmul(OpId, std::span<const Tensor> in, const Attrs&, const Tensor& out) {
  Tensor a = in[0], b = in[1];
  if (a.dim() == 1) a = a.unsqueeze(0);
  if (b.dim() == 1) b = b.unsqueeze(-1);
  int64_t m = a.shape()[a.dim() - 2], k = a.shape().back(), n = b.shape().back();
  // out is [batch..., m, n] with m (n) left out where a (b) was a vector.
  int64_t nb = out.dim() - (in[0].dim() >= 2 ? 1 : 0) - (in[1].dim() >= 2 ? 1 : 0);
  Dims batch;
  for (int64_t i = 0; i < nb; ++i) batch.push_back(out.shape()[i]);
  Dims ea = batch, eb = batch;
  ea.push_back(m), ea.push_back(k), eb.push_back(k), eb.push_back(n);
  Matrices A = matrices(a.expand(ea), m, k), B = matrices(b.expand(eb), k, n);
  int64_t count = batch.product();
  if (out.numel() == 0) return;
  if (k == 0) return copy_between(zeros({}, out.dtype()), out);
  int device = out.device().index;
  if (is_float(out.dtype())) {
    // Row-major C = A B is column-major C^T = B^T A^T: B's stack first.
    gemm(device, out.dtype(), B.transposed, A.transposed, n, m, k, B.t.data_ptr(), B.ld, B.batch_stride, A.t.data_ptr(),
         A.ld, A.batch_stride, out.data_ptr(), n, m * n, count);
    return;
  }
  std::vector<uint64_t> w;
  for (int64_t v : {count, m, n, k}) put(w, v);
  for (const Matrices* x : {&A, &B}) {
    put(w, x->batch_stride);
    put(w, x->transposed ? 1 : x->ld);
    put(w, x->transposed ? x->ld : 1);
  }
  for (const void* p : {A.t.data_ptr(), B.t.data_ptr(), out.data_ptr()}) put(w, p);
  launch_generated(codegen::cuda_int_matmul_kernel, std::tuple(out.dtype()), w, blocks_for(count * m * n), device);
}

namespace {

// The cuBLASLt epilogue of an addmm op: the one its activation names.
Epilogue epilogue_of(OpId id) {
  switch (id) {
    case OpId::AddmmRelu: return Epilogue::ReluBias;
    case OpId::AddmmGeluTanh: return Epilogue::GeluBias;
    default: return Epilogue::Bias;
  }
}

}  // namespace

// addmm, addmm_relu, addmm_gelu_tanh (runtime/ops/addmm.cpp): one cuBLASLt GEMM with the bias
// and activation as its epilogue; where cuBLASLt declines, the GEMM, then the bias and the
// activation as one generated kernel over its result, in place.
void addmm(OpId id, std::span<const Tensor> in, const Attrs& attrs, const Tensor& out) {
  const Tensor &bias = in[0], &a = in[1], &b = in[2];
  int64_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  if (out.numel() > 0 && k > 0) {
    // Row-major out = a b + bias is column-major out^T = b^T a^T + bias (a bias per row).
    Matrices A = matrices(a, m, k), B = matrices(b, k, n);
    Tensor bias_values = bias.contiguous();
    std::string why;
    if (gemm_epilogue(out.device().index, out.dtype(), epilogue_of(id), B.transposed, A.transposed, n, m, k,
                      B.t.data_ptr(), B.ld, A.t.data_ptr(), A.ld, bias_values.data_ptr(), out.data_ptr(), n, &why))
      return;
    if (log_enabled(LogTopic::Cuda))
      log(LogTopic::Cuda, fmt::format("{}: {}; the GEMM, then a kernel for the bias and activation", op_name(id), why));
  }
  Tensor ab[] = {a, b};
  matmul(OpId::Matmul, ab, attrs, out);
  ir::Builder group("addmm epilogue");
  uint32_t z = group.op(OpId::Add, {group.input(out.type()), group.input(bias.type())});
  if (id == OpId::AddmmRelu) z = group.op(OpId::Relu, {z});
  if (id == OpId::AddmmGeluTanh) z = group.op(OpId::GeluTanh, {z});
  group.output(z);
  ir::Node fused;
  fused.kind = ir::NodeKind::Fused;
  fused.body = std::make_shared<ir::Graph>(group.finish());
  Tensor operands[] = {out, bias};
  run_group(fused, operands, {&out, 1}, /*eager=*/true);
}

}  // namespace kiln::cuda
