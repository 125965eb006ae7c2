// jit/cuda_group.cpp -- a fused group run as a CUDA kernel (jit/cuda_group.h): its kernel
// generated (codegen/cuda/emit.h) for the operands' layout and compiled through the kernel
// cache, a reduction of many elements into few outputs split into parts that fill the device,
// and its launch on the current stream. Eager ops run through it as groups of one op
// (jit/cuda_eager.cpp); the compiled plans through the CUDA backend of jit/group_runner.h,
// which registers itself here when the library loads.
#include <algorithm>
#include <cstring>
#include <memory>

#include "codegen/cuda/emit.h"
#include "ir/fusion.h"
#include "ir/graph.h"
#include "jit/cuda_eager.h"
#include "jit/cuda_group.h"
#include "jit/executable.h"
#include "jit/group_runner.h"
#include "jit/kernels.h"
#include "runtime/api.h"
#include "runtime/backend.h"
#include "runtime/check.h"
#include "runtime/cuda_kernels.h"

namespace kiln::jit {
namespace {

using cuda_eager::grid_for;
using cuda_eager::sm_count;

// The bits an immediate travels in: a double's for a float compute dtype, else an int64.
uint64_t immediate_bits(const Scalar& v, bool is_float_op) {
  uint64_t bits;
  if (is_float_op) {
    double d = v.to<double>();
    std::memcpy(&bits, &d, 8);
  } else {
    bits = static_cast<uint64_t>(v.to<int64_t>());
  }
  return bits;
}

// Reductions of more elements per output than kSplitMin, into fewer kept indices than a grid of
// kSplitRows blocks per multiprocessor, run in parts (CudaGroup::Split) of at least kSplitMin
// elements: enough blocks to fill the device, then a second, small reduction.
constexpr int64_t kSplitMin = 4096;
constexpr int64_t kSplitRows = 4;

void split_reduction(CudaGroup& g, const ir::Graph& body, int device) {
  codegen::KernelLayout& L = g.layout;
  if (L.reduced == 0) return;
  int64_t rows = 1, cols = 1;
  for (int d = 0; d < L.rank; ++d) (L.reduced >> d & 1 ? cols : rows) *= g.sizes[static_cast<size_t>(d)];
  int64_t want = int64_t{sm_count(device)} * kSplitRows;
  if (rows == 0 || rows >= want || cols < 2 * kSplitMin || L.rank >= 16) return;
  std::vector<OpId> combine = terminal_reductions(body);
  if (combine.empty()) return;
  for (uint32_t o : body.outputs)  // partial results in f16/bf16 would round twice
    if (body.type(o).dtype == DType::F16 || body.type(o).dtype == DType::BF16) return;
  int d = 0;
  while (!(L.reduced >> d & 1)) ++d;  // the outermost reduced dim
  int64_t size = g.sizes[static_cast<size_t>(d)];
  int64_t inner = cols / size;  // the other reduced dims' elements
  int64_t runs = std::min({(want + rows - 1) / rows, size * inner / kSplitMin, size});
  if (runs < 2) return;
  int64_t run = size / runs;
  CudaGroup::Split& sp = g.split;
  sp.dim = d;
  sp.runs = runs;
  sp.run = run;
  sp.rest = size - runs * run;
  sp.combine = std::move(combine);
  // Dim d becomes (runs: kept, run: reduced). Inputs step run * stride through the parts; the
  // partial outputs step one output's elements (they are [parts, output...], contiguous).
  size_t n_in = L.inputs.size(), n_ops = n_in + L.outputs.size(), rank = static_cast<size_t>(L.rank);
  std::vector<int64_t> strides;
  for (size_t k = 0; k < n_ops; ++k) {
    for (size_t e = 0; e < rank; ++e) {
      int64_t s = g.strides[k * rank + e];
      if (e == static_cast<size_t>(d)) {
        int64_t per_part = k < n_in ? s * run : body.type(body.outputs[k - n_in]).shape.product();
        if (k < n_in) sp.input_step.push_back(s * run);
        strides.push_back(per_part);
      }
      strides.push_back(s);
    }
  }
  g.strides = std::move(strides);
  g.sizes[static_cast<size_t>(d)] = run;
  g.sizes.insert(g.sizes.begin() + d, runs);
  // The layout: one more dim; d kept, the dims from d on move one up.
  uint32_t low = L.reduced & ((1u << d) - 1), high = L.reduced >> d;
  L.reduced = low | (high << (d + 1));
  ++L.rank;
  for (size_t k = 0; k < n_ops; ++k) {
    codegen::OperandLayout& o = k < n_in ? L.inputs[k] : L.outputs[k - n_in];
    o.broadcast = 0;
    for (int e = 0; e < L.rank; ++e)
      if (g.strides[k * static_cast<size_t>(L.rank) + static_cast<size_t>(e)] == 0) o.broadcast |= 1u << e;
  }
  L.parallel_dim = -1;
}

// The sizes of a split group's last, shorter part: one part of `rest` elements.
std::vector<int64_t> rest_sizes(const CudaGroup& g) {
  std::vector<int64_t> sizes = g.sizes;
  sizes[static_cast<size_t>(g.split.dim)] = 1;
  sizes[static_cast<size_t>(g.split.dim) + 1] = g.split.rest;
  return sizes;
}

// Queues g's kernel over `sizes` with operand pointers `data`.
void launch_words(const CudaGroup& g, const std::vector<int64_t>& sizes, const std::vector<void*>& data,
                  int64_t blocks) {
  if (blocks == 0) return;  // nothing to compute
  std::vector<uint64_t> args = codegen::pack_cuda_args(g.layout, sizes, g.strides, data, g.immediates);
  unsigned grid[3] = {static_cast<unsigned>(blocks), 1, 1}, block[3] = {codegen::kCudaBlock, 1, 1};
  void* param = args.data();
  cuda::launch(g.fn, grid, block, codegen::kCudaSharedBytes, &param);
}

}  // namespace

CudaGroup prepare_group_cuda(const ir::Node& fused, std::span<const Tensor> inputs, bool eager) {
  const ir::Graph& body = *fused.body;
  std::vector<Dims> shapes, strides;
  for (const Tensor& x : inputs) {
    shapes.push_back(x.shape());
    strides.push_back(x.strides());
  }
  KernelArgs ka = kernel_args(fused, shapes, strides);
  codegen::CudaEmitOptions options;
  options.immediates_as_args = options.generic_strides = eager;
  CudaGroup g;
  g.layout = std::move(ka.layout);
  g.sizes = std::move(ka.sizes);
  g.strides = std::move(ka.strides);
  if (eager)
    for (const codegen::CudaImmediate& m : codegen::cuda_immediates(body))
      g.immediates.push_back(immediate_bits(body.nodes[m.node].attrs.imm[m.slot], m.is_float));
  int device = body.type(body.outputs[0]).device.index;
  split_reduction(g, body, device);
  CudaKernel k = cuda_kernel_for(codegen::emit_cuda(body, g.layout, "kiln_kernel", options), device);
  g.fn = k.fn;
  g.symbol = std::move(k.symbol);
  g.blocks = grid_for(g.layout, g.sizes, device);
  if (g.split.rest > 0) g.split.rest_blocks = grid_for(g.layout, rest_sizes(g), device);
  return g;
}

void launch_group_cuda(const CudaGroup& g, std::span<const Tensor> inputs, std::span<const Tensor> outputs) {
  for (const Tensor& y : outputs)
    KILN_CHECK(y.is_contiguous() && y.device().index == g.fn.device && y.device().is_cuda(),
               "fused group: outputs are contiguous tensors on cuda:{}", g.fn.device);
  std::vector<void*> data;
  data.reserve(inputs.size() + outputs.size());
  for (const Tensor& x : inputs) data.push_back(x.data_ptr());
  const CudaGroup::Split& sp = g.split;
  if (sp.dim < 0) {
    for (const Tensor& y : outputs) data.push_back(y.data_ptr());
    launch_words(g, g.sizes, data, g.blocks);
    return;
  }
  // In parts: partial results, then their reduction into the outputs.
  int64_t parts = sp.runs + (sp.rest > 0);
  std::vector<Tensor> partial;
  for (const Tensor& y : outputs) {
    Dims shape = y.shape();
    shape.insert(0, parts);
    partial.push_back(Tensor::empty({y.dtype(), shape, y.device()}));
    data.push_back(partial.back().data_ptr());
  }
  launch_words(g, g.sizes, data, g.blocks);
  if (sp.rest > 0) {  // the shorter last part: one more part of `rest` elements
    for (size_t k = 0; k < inputs.size(); ++k)
      data[k] = static_cast<char*>(data[k]) + sp.runs * sp.input_step[k] * dtype_size(inputs[k].dtype());
    for (size_t j = 0; j < outputs.size(); ++j) data[inputs.size() + j] = partial[j][sp.runs].data_ptr();
    launch_words(g, rest_sizes(g), data, sp.rest_blocks);
  }
  for (size_t j = 0; j < outputs.size(); ++j) {
    Attrs attrs;
    attrs.axes = {0};
    copy_between(apply(sp.combine[j], {partial[j]}, attrs), outputs[j]);
  }
}

void run_group_cuda(const ir::Node& fused, std::span<const Tensor> inputs, std::span<const Tensor> outputs,
                    bool eager) {
  launch_group_cuda(prepare_group_cuda(fused, inputs, eager), inputs, outputs);
}

namespace {

// The CUDA backend of the compiled plans' fused groups (jit/group_runner.h): the group's
// kernel compiled for the operands' layout, its numbers baked in, queued on the current stream.
class CudaRunner final : public GroupRunner {
 public:
  CudaRunner(const ir::Node& fused, std::span<const Tensor> inputs)
      : group_(prepare_group_cuda(fused, inputs, /*eager=*/false)) {}
  const std::string& symbol() const override { return group_.symbol; }
  void launch(std::span<const Tensor> inputs, std::span<const Tensor> outputs) const override {
    launch_group_cuda(group_, inputs, outputs);
  }

 private:
  CudaGroup group_;
};

const bool g_installed = [] {
  register_group_backend(DeviceType::CUDA, [](const ir::Node& fused, std::span<const Tensor> inputs) {
    return std::unique_ptr<GroupRunner>(std::make_unique<CudaRunner>(fused, inputs));
  });
  return true;
}();

}  // namespace
}  // namespace kiln::jit
