// cuda/pool.cpp -- the op kernels of the 2-d pools and their backward ops, the kernels of
// codegen/cuda/pool.h, over rank-3 or rank-4 tensors of any strides.
#include <algorithm>
#include <vector>

#include "codegen/cuda/pool.h"
#include "cuda/launch.h"
#include "cuda/op_kernels.h"
#include "runtime/tensor.h"

namespace kiln::cuda {
namespace {

// The geometry words: planes, h, w, oh, ow, kernel, stride, padding, count_include_pad.
void put_geometry(std::vector<uint64_t>& w, const Dims& in, const Dims& pooled, const Attrs& a) {
  size_t r = in.size();
  int64_t h = in[r - 2], wd = in[r - 1];
  put(w, h * wd == 0 ? 0 : in.product() / (h * wd));
  for (int64_t v : {h, wd, pooled[r - 2], pooled[r - 1], a.kernel[0], a.kernel[1], a.stride[0], a.stride[1],
                    a.padding[0], a.padding[1], int64_t{a.count_include_pad}})
    put(w, v);
}
// A rank-3 or rank-4 tensor's planes: inner count, outer and inner strides, row and column.
void put_planes(std::vector<uint64_t>& w, const Tensor& t) {
  const Dims& st = t.strides();
  int64_t r = t.dim();
  for (int64_t v : {std::max<int64_t>(t.shape()[r - 3], 1), r == 4 ? st[0] : 0, st[r - 3], st[r - 2], st[r - 1]})
    put(w, v);
}

}  // namespace

void pool(OpId id, std::span<const Tensor> in, const Attrs& a, const Tensor& out) {
  if (out.numel() == 0) return;
  const Tensor& x = in[0];
  codegen::CudaPool kind = id == OpId::AvgPool2d   ? codegen::CudaPool::Avg
                           : id == OpId::MaxPool2d ? codegen::CudaPool::Max
                                                   : codegen::CudaPool::Indices;
  std::vector<uint64_t> w;
  put_geometry(w, x.shape(), out.shape(), a);
  put_planes(w, x);
  put(w, x.data_ptr());
  put(w, out.data_ptr());
  launch_generated(codegen::cuda_pool_kernel, std::tuple(kind, x.dtype()), w, blocks_for(out.numel()),
                   out.device().index);
}

// max_pool2d_backward(x, grad) and avg_pool2d_backward(grad) into out (the input's shape).
void pool_backward(OpId id, std::span<const Tensor> in, const Attrs& a, const Tensor& out) {
  if (out.numel() == 0) return;
  bool max = id == OpId::MaxPool2dBackward;
  const Tensor &x = in[0], &grad = max ? in[1] : in[0];
  std::vector<uint64_t> w;
  put_geometry(w, out.shape(), grad.shape(), a);
  put_planes(w, grad);
  put_planes(w, max ? x : grad);
  for (const void* p : {grad.data_ptr(), max ? x.data_ptr() : grad.data_ptr(), out.data_ptr()}) put(w, p);
  launch_generated(codegen::cuda_pool_backward_kernel,
                   std::tuple(max ? codegen::CudaPool::Max : codegen::CudaPool::Avg, out.dtype()), w,
                   blocks_for(out.numel()), out.device().index);
}

}  // namespace kiln::cuda
