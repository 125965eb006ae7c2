// jit/cuda_eager.cpp -- the CUDA backend's generated kernels for eager ops: each pointwise op,
// cast and reduction runs as the fused kernel of a group of one op (codegen/cuda, the same
// formulas as every other kernel), compiled by NVRTC through the kernel cache and launched on
// the current stream; and the strided copy every device-side copy uses. Installed into the
// runtime's CUDA op table when the library loads (runtime/cuda_kernels.h): the runtime sits
// below the code generators. Immediates are kernel arguments, so `x * lr` compiles one kernel
// for every learning rate; a 0-d CPU operand (PyTorch's CPU-scalar rule) becomes one too.
// The ops with kernels of their own come from jit/cuda_indexed.cpp, cuda_matmul.cpp,
// cuda_pool.cpp and cuda_attention.cpp (declared in jit/cuda_eager.h); groups run through jit/cuda_group.h.
#include <memory>
#include <string>
#include <vector>

#include "codegen/cuda/emit.h"
#include "codegen/cuda/random.h"
#include "ir/fusion.h"
#include "ir/graph.h"
#include "jit/cuda_eager.h"
#include "jit/cuda_group.h"
#include "runtime/check.h"
#include "runtime/cuda_kernels.h"
#include "runtime/loop_layout.h"
#include "runtime/ops/loops.h"

namespace kiln::jit::cuda_eager {
namespace {

// One op on CUDA tensors as a group of one: a 0-d CPU operand of a pointwise op becomes an
// immediate; any other operand must be on the output's device (apply() checked).
void run_single_op(OpId id, std::span<const Tensor> in, const Attrs& attrs, const Tensor& out) {
  Attrs a = attrs;
  std::vector<Tensor> operands;
  bool pointwise = op_family(id) == OpFamily::Pointwise;
  for (size_t t = 0; t < in.size(); ++t) {
    const Tensor& x = in[t];
    if (pointwise && x.device().is_cpu()) {
      int slot = slot_of_input(attrs.imm_mask, static_cast<int>(t));
      a.imm[slot] = is_float(x.dtype()) ? Scalar(x.item<double>()) : Scalar(x.item<int64_t>());
      a.imm_mask |= static_cast<uint8_t>(1u << slot);
      continue;
    }
    operands.push_back(x.device().is_cpu() ? x.to(out.device()) : x);
  }
  std::vector<TensorType> types;
  for (const Tensor& x : operands) types.push_back(x.type());
  ir::Node fused = single_op_group(id, a, types, out.type());
  run_group_cuda(fused, operands, {&out, 1}, true);
}

}  // namespace

// dst = src on one device: broadcast, converted, any strides on either side.
void copy_on_device(const Tensor& src, const Tensor& dst) {
  Dims shape = dst.shape();
  std::vector<Dims> st = {broadcast_strides(src.shape(), src.strides(), shape, "copy"), dst.strides()};
  merge_dims(shape, st);
  if (shape.empty()) {
    shape.push_back(1);
    for (Dims& s : st) s.push_back(0);
  }
  codegen::KernelLayout L;
  L.rank = static_cast<int>(shape.size());
  std::vector<int64_t> strides;
  for (size_t k = 0; k < 2; ++k) {
    codegen::OperandLayout o;
    o.dtype = k == 0 ? src.dtype() : dst.dtype();
    for (int d = 0; d < L.rank; ++d) {
      strides.push_back(st[k][d]);
      if (st[k][d] == 0) o.broadcast |= 1u << d;
    }
    o.unit_inner = st[k].back() == 1;
    (k == 0 ? L.inputs : L.outputs).push_back(o);
  }
  ir::Graph body;
  uint32_t x = body.add_value({src.dtype(), src.shape(), dst.device()});
  body.inputs.push_back(x);
  ir::Node n;
  n.op = OpId::Cast;
  n.attrs.dtype = dst.dtype();
  n.inputs = {x};
  n.result = body.add_value({dst.dtype(), dst.shape(), dst.device()});
  body.nodes.push_back(n);
  body.outputs.push_back(n.result);
  std::vector<int64_t> sizes(shape.begin(), shape.end());
  int device = dst.device().index;
  codegen::CudaLaunch grid = codegen::plan_cuda_launch(L, sizes, sm_count(device), codegen::CudaWork::Elements);
  if (grid.blocks == 0) return;
  std::string source = codegen::emit_cuda(body, L, "kiln_kernel");
  launch_source(source, codegen::pack_cuda_args(L, sizes, strides, {src.data_ptr(), dst.data_ptr()}, grid),
                grid.blocks, device);
}

namespace {

// rand and randn from the state on the device: codegen/cuda/random.h.
void draw(OpId id, const Tensor& state, const Tensor& out) {
  if (out.numel() == 0) return;
  std::vector<uint64_t> w;
  put(w, out.numel());
  put(w, state.contiguous().data_ptr());
  put(w, out.data_ptr());
  std::string source = id == OpId::Rand ? codegen::cuda_rand_kernel(out.dtype()) : codegen::cuda_randn_kernel(out.dtype());
  launch_source(source, w, blocks_for(out.numel()), out.device().index);
}

void run_op(OpId id, std::span<const Tensor> in, const Attrs& attrs, const Tensor& out) {
  switch (id) {
    case OpId::Matmul: return matmul(in, out);
    case OpId::Addmm:
    case OpId::AddmmRelu:
    case OpId::AddmmGeluTanh: return addmm(id, in, out);
    case OpId::Rand:
    case OpId::Randn: return draw(id, in[0], out);
    case OpId::MaxPool2d:
    case OpId::AvgPool2d:
    case OpId::MaxPool2dIndices: return pool(id, in[0], attrs, out);
    case OpId::MaxPool2dBackward: return pool_backward(id, in[0], in[1], attrs, out);
    case OpId::AvgPool2dBackward: return pool_backward(id, in[0], in[0], attrs, out);
    case OpId::Attention:
    case OpId::AttentionBackward: return attention_op(id, in, attrs, out);
    case OpId::Copy: return copy_on_device(in[0], out);
    case OpId::Cat: return cat_into(in, attrs.dim, out);
    case OpId::Pad: return pad_into(in[0], attrs.pads, attrs.value, out);
    case OpId::Argmax:
    case OpId::Argmin: return arg(id, in[0], attrs, out);
    case OpId::Cumsum: return cumsum_rows(in[0], attrs, out);
    case OpId::Argsort:
    case OpId::TopkIndices: return order_rows(in[0], attrs, out);
    case OpId::Iota: return iota(out);
    case OpId::Gather: {
      const Tensor& idx = in[1];
      Dims st(static_cast<size_t>(idx.dim()), 0);
      for (int64_t d = 0; d < idx.dim(); ++d) st[d] = idx.shape()[d] == 1 ? 0 : idx.strides()[d];
      return pick(in[0], attrs.dim, idx, st, out, "gather");
    }
    case OpId::IndexSelect: {
      Dims st(static_cast<size_t>(out.dim()), 0);
      st[attrs.dim] = in[1].dim() == 0 ? 0 : in[1].strides()[0];
      return pick(in[0], attrs.dim, in[1], st, out, "index_select");
    }
    case OpId::ScatterAdd: return scatter(in[0], attrs.dim, in[1], in[1].strides(), in[2], out, "scatter_add");
    case OpId::IndexAdd: return index_add_sorted(in[0], attrs.dim, in[1], in[2], out);
    default: break;
  }
  KILN_CHECK(op_family(id) != OpFamily::Reduce || ir::fusible_reduction(id), "{}: no CUDA kernel for {} yet",
             op_name(id), out.type().str());
  run_single_op(id, in, attrs, out);
}

// By family, which ops.def gives as constant data: the OpDefs themselves are made during static
// initialization too, in another order.
const bool g_installed = [] {
  for (int i = 0; i < kNumOps; ++i) {
    auto id = static_cast<OpId>(i);
    OpFamily f = op_family(id);
    if (f == OpFamily::Pointwise || f == OpFamily::Cast || f == OpFamily::Reduce ||
        (f == OpFamily::Copy && id != OpId::ToDevice) || id == OpId::Matmul || id == OpId::Addmm ||
        id == OpId::AddmmRelu || id == OpId::AddmmGeluTanh || id == OpId::MaxPool2d ||
        id == OpId::AvgPool2d || id == OpId::MaxPool2dIndices || id == OpId::MaxPool2dBackward ||
        id == OpId::AvgPool2dBackward || id == OpId::Rand || id == OpId::Randn || id == OpId::Cumsum ||
        id == OpId::Argsort || id == OpId::TopkIndices || id == OpId::Iota || id == OpId::Attention ||
        id == OpId::AttentionBackward)
      cuda::set_op_kernel(id, run_op);
  }
  cuda::set_copy_kernel(copy_on_device);
  return true;
}();

}  // namespace
}  // namespace kiln::jit::cuda_eager
