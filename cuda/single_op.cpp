// cuda/single_op.cpp -- the ops that run as the fused kernel of a group of one op: each
// pointwise op, cast and fusible reduction (codegen/cuda, the same formulas as every other
// kernel, through cuda/group.h). Immediates are kernel arguments, so `x * lr` compiles one
// kernel for every learning rate; a 0-d CPU operand (PyTorch's CPU-scalar rule) becomes one
// too. Here also the strided copy every device-side copy uses (a cast of a group of one), the
// movement ops built on it, and rand and randn (codegen/cuda/random.h).
#include <string>
#include <vector>

#include "codegen/cuda/emit.h"
#include "codegen/cuda/random.h"
#include "cuda/group.h"
#include "cuda/launch.h"
#include "cuda/op_kernels.h"
#include "ir/graph.h"
#include "runtime/check.h"
#include "runtime/loop_layout.h"
#include "runtime/ops/loops.h"

namespace kiln::cuda {

// A 0-d CPU operand of a pointwise op becomes an immediate; any other operand must be on the
// output's device (apply() checked).
void single_op(OpId id, std::span<const Tensor> in, const Attrs& attrs, const Tensor& out) {
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
  run_group(fused, operands, {&out, 1}, /*eager=*/true);
}

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
  launch_source(source, codegen::pack_cuda_args(L, sizes, strides, {src.data_ptr(), dst.data_ptr()}, grid), grid.blocks,
                device);
}

void copy(OpId, std::span<const Tensor> in, const Attrs&, const Tensor& out) { copy_on_device(in[0], out); }
void cat(OpId, std::span<const Tensor> in, const Attrs& a, const Tensor& out) { cat_into(in, a.dim, out); }
void pad(OpId, std::span<const Tensor> in, const Attrs& a, const Tensor& out) { pad_into(in[0], a.pads, a.value, out); }

// rand and randn from the state on the device: codegen/cuda/random.h.
void draw(OpId id, std::span<const Tensor> in, const Attrs&, const Tensor& out) {
  const Tensor& state = in[0];
  if (out.numel() == 0) return;
  std::vector<uint64_t> w;
  put(w, out.numel());
  put(w, state.contiguous().data_ptr());
  put(w, out.data_ptr());
  std::string source =
      id == OpId::Rand ? codegen::cuda_rand_kernel(out.dtype()) : codegen::cuda_randn_kernel(out.dtype());
  launch_source(source, w, blocks_for(out.numel()), out.device().index);
}

}  // namespace kiln::cuda
