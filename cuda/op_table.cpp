// cuda/op_table.cpp -- the CUDA device's op table: every op with a CUDA kernel, and the kernel
// that runs it, handed to the runtime's CUDA backend once when the library loads
// (runtime/cuda_internal.h: install_kernels). The runtime sits below the code generators, so
// the kernels come from here, as the collective engine comes from distributed/. An op without
// an entry is refused with its name when it meets a CUDA tensor.
#include <array>
#include <vector>

#include "cuda/launch.h"
#include "cuda/op_kernels.h"
#include "runtime/cuda_internal.h"

namespace kiln::cuda {
namespace {

// all_reduce's kernel is the CPU's: a copy that the installed engine (NCCL, on CUDA tensors)
// reduces in place, ordered on the current stream.
void all_reduce(OpId id, std::span<const Tensor> in, const Attrs& a, const Tensor& out) {
  op_def(id).cpu(id, in, a, out);
}

// Every other op with a CUDA kernel, one entry an op.
constexpr OpKernelEntry kKernels[] = {
    {OpId::Sum, single_op},  // the fusible reductions: groups of one op too
    {OpId::Prod, single_op},
    {OpId::MaxReduce, single_op},
    {OpId::MinReduce, single_op},
    {OpId::Copy, copy},
    {OpId::Cat, cat},
    {OpId::Pad, pad},
    {OpId::Gather, gather},
    {OpId::IndexSelect, index_select},
    {OpId::ScatterAdd, scatter_add},
    {OpId::IndexAdd, index_add},
    {OpId::Argmax, argmax},
    {OpId::Argmin, argmax},
    {OpId::Matmul, matmul},
    {OpId::Addmm, addmm},
    {OpId::AddmmRelu, addmm},
    {OpId::AddmmGeluTanh, addmm},
    {OpId::Conv2d, conv2d},
    {OpId::Conv2dInputGrad, conv2d_input_grad},
    {OpId::Conv2dWeightGrad, conv2d_weight_grad},
    {OpId::MaxPool2d, pool},
    {OpId::MaxPool2dIndices, pool},
    {OpId::AvgPool2d, pool},
    {OpId::MaxPool2dBackward, pool_backward},
    {OpId::AvgPool2dBackward, pool_backward},
    {OpId::Attention, attention_op},
    {OpId::AttentionBackward, attention_op},
    {OpId::Rnn, rnn},
    {OpId::RnnBackward, rnn},
    {OpId::Cumsum, cumsum},
    {OpId::Argsort, order},
    {OpId::TopkIndices, order},
    {OpId::Iota, iota},
    {OpId::Rand, draw},
    {OpId::Randn, draw},
    {OpId::AllReduce, all_reduce},
};

// Every op's kernel, by id.
std::array<OpKernel, kNumOps> g_kernels{};

// Runs op `id`'s kernel, its name the current op of the thread (cuda/launch.h: it names the
// hand-written kernels for the profiler).
void dispatch(OpId id, std::span<const Tensor> in, const Attrs& a, const Tensor& out) {
  CurrentOp op(op_name(id));
  g_kernels[static_cast<size_t>(id)](id, in, a, out);
}

// Every pointwise op and cast runs as a group of one op (single_op.cpp); by family, which
// ops.def gives as constant data (no OpDef is read while the library loads: they are made
// then too, in another order).
const bool g_op_table = [] {
  for (int i = 0; i < kNumOps; ++i) {
    auto id = static_cast<OpId>(i);
    if (op_family(id) == OpFamily::Pointwise || op_family(id) == OpFamily::Cast) g_kernels[i] = single_op;
  }
  for (const OpKernelEntry& e : kKernels) g_kernels[static_cast<size_t>(e.op)] = e.kernel;
  std::vector<OpKernelEntry> table;
  for (int i = 0; i < kNumOps; ++i)
    if (g_kernels[i]) table.push_back({static_cast<OpId>(i), dispatch});
  install_kernels(table, copy_on_device);
  return true;
}();

}  // namespace
}  // namespace kiln::cuda
