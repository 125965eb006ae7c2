// runtime/ops/index.cpp -- gather and index_select: reads at positions held in a tensor.
#include <cstring>

#include "runtime/api.h"
#include "runtime/check.h"
#include "runtime/ops/defs.h"
#include "runtime/ops/loops.h"

namespace kiln {
namespace {

TensorType gather_rule(OpId, std::span<const Tensor> in, const Attrs& a) {
  const Tensor &x = in[0], &idx = in[1];
  KILN_CHECK(is_integral(idx.dtype()), "gather: index must be an integer tensor, got {}", idx.type().str());
  KILN_CHECK(idx.dim() == x.dim(), "gather: index {} must have the rank of input {}",
             idx.type().str(), x.type().str());
  KILN_CHECK(a.dim >= 0 && a.dim < std::max<int64_t>(x.dim(), 1), "gather: dim {} is out of range for {}",
             a.dim, x.type().str());
  for (int64_t d = 0; d < x.dim(); ++d)
    KILN_CHECK(d == a.dim || idx.shape()[d] <= x.shape()[d],
               "gather: index {} is larger than input {} in dim {}", idx.type().str(), x.type().str(), d);
  return {x.dtype(), idx.shape(), x.device()};
}

TensorType scatter_add_rule(OpId, std::span<const Tensor> in, const Attrs& a) {
  const Tensor &x = in[0], &idx = in[1], &src = in[2];
  KILN_CHECK(is_integral(idx.dtype()), "scatter_add: index must be an integer tensor, got {}", idx.type().str());
  KILN_CHECK(src.dtype() == x.dtype(), "scatter_add: src {} must have the dtype of input {}",
             src.type().str(), x.type().str());
  KILN_CHECK(idx.shape() == src.shape() && idx.dim() == x.dim(),
             "scatter_add: index {} and src {} must have one shape, of the rank of input {}",
             idx.type().str(), src.type().str(), x.type().str());
  KILN_CHECK(a.dim >= 0 && a.dim < std::max<int64_t>(x.dim(), 1), "scatter_add: dim {} is out of range for {}",
             a.dim, x.type().str());
  for (int64_t d = 0; d < x.dim(); ++d)
    KILN_CHECK(d == a.dim || idx.shape()[d] <= x.shape()[d],
               "scatter_add: index {} is larger than input {} in dim {}", idx.type().str(), x.type().str(), d);
  return x.type();
}

TensorType index_select_rule(OpId, std::span<const Tensor> in, const Attrs& a) {
  const Tensor &x = in[0], &idx = in[1];
  KILN_CHECK(is_integral(idx.dtype()) && idx.dim() <= 1,
             "index_select: index must be a 1-d integer tensor, got {}", idx.type().str());
  KILN_CHECK(x.dim() > 0 && a.dim >= 0 && a.dim < x.dim(),
             "index_select: dim {} is out of range for {}", a.dim, x.type().str());
  Dims shape = x.shape();
  shape[a.dim] = idx.numel();
  return {x.dtype(), shape, x.device()};
}

// Reads index element k at `p` as an int64 (checked against the dim size).
int64_t read_index(const char* p, DType t, int64_t size, const char* op) {
  int64_t k;
  if (t == DType::I64) { int64_t v; std::memcpy(&v, p, 8); k = v; }
  else if (t == DType::I32) { int32_t v; std::memcpy(&v, p, 4); k = v; }
  else { k = *reinterpret_cast<const uint8_t*>(p); }
  KILN_CHECK(k >= -size && k < size, "{}: index {} is out of range for a dim of size {}", op, k, size);
  return k < 0 ? k + size : k;
}

struct PickCtx {
  int64_t elem;        // bytes per element
  int64_t dim_stride;  // bytes between entries of x along dim
  int64_t dim_size;
  DType index_type;
  const char* op;
};

// Operands: 0 = out, 1 = x with stride 0 along dim, 2 = index.
void pick_row(void* c, char* const* p, const int64_t* st, int64_t n) {
  const auto& x = *static_cast<const PickCtx*>(c);
  for (int64_t i = 0; i < n; ++i) {
    int64_t k = read_index(p[2] + i * st[2], x.index_type, x.dim_size, x.op);
    std::memcpy(p[0] + i * st[0], p[1] + i * st[1] + k * x.dim_stride, static_cast<size_t>(x.elem));
  }
}

void pick(const Tensor& x, int64_t dim, const Tensor& idx, Dims idx_strides, const Tensor& out, const char* op) {
  const Dims& shape = out.shape();
  StridedOperands ops;
  ops.count = 3;
  ops.base[0] = static_cast<char*>(out.data_ptr());
  ops.strides[0] = broadcast_byte_strides(out, shape);
  ops.base[1] = static_cast<char*>(x.data_ptr());
  ops.strides[1] = Dims(shape.size(), 0);
  int64_t es = dtype_size(x.dtype());
  for (int64_t d = 0; d < x.dim(); ++d)
    if (d != dim) ops.strides[1][d] = x.strides()[d] * es;
  ops.base[2] = static_cast<char*>(idx.data_ptr());
  ops.strides[2] = std::move(idx_strides);
  PickCtx ctx{es, x.dim() == 0 ? 0 : x.strides()[dim] * es, x.dim() == 0 ? 1 : x.shape()[dim], idx.dtype(), op};
  for_each_row(shape, ops, kParallelGrain, pick_row, &ctx);
}

void scatter_add_cpu(OpId, std::span<const Tensor> in, const Attrs& a, const Tensor& out) {
  copy_into(in[0], out);
  const Tensor &idx = in[1], &src = in[2];
  if (src.numel() == 0) return;
  // Sums in double, one element at a time: scattered positions may repeat, so no threads.
  Tensor s = src.to(DType::F64).contiguous(), ix = idx.contiguous();
  Tensor acc = out.to(DType::F64).contiguous();
  double* pa = acc.data<double>();
  const double* ps = s.data<double>();
  const char* pi = static_cast<const char*>(ix.data_ptr());
  int64_t ies = dtype_size(ix.dtype()), r = out.dim();
  Dims pos(static_cast<size_t>(r), 0);
  int64_t n = s.numel();
  for (int64_t e = 0; e < n; ++e) {
    int64_t rem = e, off = 0;
    for (int64_t d = r - 1; d >= 0; --d) {
      pos[d] = rem % s.shape()[d];
      rem /= s.shape()[d];
    }
    for (int64_t d = 0; d < r; ++d) {
      int64_t p = d == a.dim ? read_index(pi + e * ies, ix.dtype(), out.shape()[d], "scatter_add") : pos[d];
      off += p * acc.strides()[d];
    }
    if (r == 0) off = 0;
    pa[off] += ps[e];
  }
  copy_into(acc, out);
}

}  // namespace

// scatter_add(x, index, src): x with src[i][j] added at [index[i][j]][j] along attrs.dim.
const OpDef defs::ScatterAdd{
    .infer = scatter_add_rule,
    .cpu = scatter_add_cpu,
    .vjp = [](const VjpArgs& a) { return Grads{a.grad, Tensor(), gather(a.grad, a.attrs.dim, a.in[1])}; },
    .attrs = kAttrDim,
};

// gather(x, index): out[i][j] = x[index[i][j]][j] along attrs.dim (torch.gather); negative
// indices count from the end; out-of-range ones throw.
const OpDef defs::Gather{
    .infer = gather_rule,
    .cpu = [](OpId, std::span<const Tensor> in, const Attrs& a, const Tensor& out) {
      const Tensor& idx = in[1];
      Dims st(out.shape().size());
      for (int64_t d = 0; d < idx.dim(); ++d) st[d] = idx.shape()[d] == 1 ? 0 : idx.strides()[d] * dtype_size(idx.dtype());
      pick(in[0], a.dim, idx, st, out, "gather");
    },
    .vjp = [](const VjpArgs& a) {
      Tensor z = zeros(a.in_types[0].shape, a.grad.dtype());
      return Grads{scatter_add(z, a.attrs.dim, a.in[1], a.grad), Tensor()};
    },
    .attrs = kAttrDim,
};

// index_select(x, index): the entries of x along attrs.dim at the positions in 1-d index.
const OpDef defs::IndexSelect{
    .infer = index_select_rule,
    .cpu = [](OpId, std::span<const Tensor> in, const Attrs& a, const Tensor& out) {
      const Tensor& idx = in[1];
      Dims st(out.shape().size(), 0);
      st[a.dim] = idx.dim() == 0 ? 0 : idx.strides()[0] * dtype_size(idx.dtype());
      pick(in[0], a.dim, idx, st, out, "index_select");
    },
    .vjp = [](const VjpArgs& a) {  // index_select is a gather with the index broadcast
      const Tensor& idx = a.in[1];
      Dims shape(a.grad.shape().size(), 1);
      shape[a.attrs.dim] = idx.numel();
      Tensor full_index = idx.reshape(shape).expand(a.grad.shape());
      Tensor z = zeros(a.in_types[0].shape, a.grad.dtype());
      return Grads{scatter_add(z, a.attrs.dim, full_index, a.grad), Tensor()};
    },
    .attrs = kAttrDim,
};

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  Attrs a;
  a.dim = wrap_dim(dim, x, "gather");
  return apply(OpId::Gather, {x, index}, a);
}

Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  Attrs a;
  a.dim = wrap_dim(dim, x, "scatter_add");
  return apply(OpId::ScatterAdd, {x, index, src.to(x.dtype())}, a);
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  Attrs a;
  a.dim = wrap_dim(dim, x, "index_select");
  return apply(OpId::IndexSelect, {x, index}, a);
}

}  // namespace kiln
