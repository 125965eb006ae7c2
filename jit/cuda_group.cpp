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

// What a group's launch may do: cut its columns into parts when its outputs are its
// reductions' results (terminal) in a dtype that holds partial results exactly.
codegen::CudaWork work_of(const ir::Graph& body, bool may_split) {
  bool reduces = false;
  for (const ir::Node& n : body.nodes) reduces = reduces || (n.kind == ir::NodeKind::Op && ir::fusible_reduction(n.op));
  if (!reduces) return codegen::CudaWork::Elements;
  if (!may_split || terminal_reductions(body).empty()) return codegen::CudaWork::Rows;
  for (uint32_t o : body.outputs)  // partial results in f16/bf16 would round twice
    if (body.type(o).dtype == DType::F16 || body.type(o).dtype == DType::BF16) return codegen::CudaWork::Rows;
  return codegen::CudaWork::Partials;
}

// Queues g's kernel over operand pointers `data`.
void launch_words(const CudaGroup& g, const std::vector<void*>& data) {
  if (g.launch.blocks == 0) return;  // nothing to compute
  std::vector<uint64_t> args = codegen::pack_cuda_args(g.layout, g.sizes, g.strides, data, g.launch, g.immediates);
  unsigned grid[3] = {static_cast<unsigned>(g.launch.blocks), 1, 1}, block[3] = {codegen::kCudaBlock, 1, 1};
  void* param = args.data();
  cuda::launch(g.fn, grid, block, codegen::kCudaSharedBytes, &param);
}

CudaGroup prepare(const ir::Node& fused, std::span<const Dims> shapes, std::span<const Dims> strides, bool eager,
                  bool may_split) {
  const ir::Graph& body = *fused.body;
  KernelArgs ka = kernel_args(fused, shapes, strides);
  CudaGroup g;
  g.layout = std::move(ka.layout);
  g.sizes = std::move(ka.sizes);
  g.strides = std::move(ka.strides);
  if (eager)
    for (const codegen::CudaImmediate& m : codegen::cuda_immediates(body))
      g.immediates.push_back(immediate_bits(body.nodes[m.node].attrs.imm[m.slot], m.is_float));
  int device = body.type(body.outputs[0]).device.index;
  g.launch = codegen::plan_cuda_launch(g.layout, g.sizes, sm_count(device), work_of(body, may_split));
  codegen::CudaEmitOptions options;
  options.immediates_as_args = options.generic_strides = eager;
  options.rows_by = g.launch.rows_by;
  CudaKernel k = cuda_kernel_for(codegen::emit_cuda(body, g.layout, "kiln_kernel", options), device);
  g.fn = k.fn;
  g.symbol = std::move(k.symbol);
  if (g.launch.parts > 1) {
    // The partial results [parts, output...], contiguous, each reduced over its first dim.
    std::vector<OpId> ops = terminal_reductions(body);
    for (size_t j = 0; j < body.outputs.size(); ++j) {
      TensorType out = body.type(body.outputs[j]), part = out;
      part.shape.insert(0, g.launch.parts);
      Attrs attrs;
      attrs.axes = {0};
      ir::Node c = single_op_group(ops[j], attrs, {&part, 1}, out);
      Dims part_strides = contiguous_strides(part.shape);
      g.combine.push_back(prepare(c, {&part.shape, 1}, {&part_strides, 1}, eager, /*may_split=*/false));
    }
  }
  return g;
}

}  // namespace

ir::Node single_op_group(OpId op, const Attrs& attrs, std::span<const TensorType> inputs, const TensorType& out) {
  auto body = std::make_shared<ir::Graph>();
  ir::Node n;
  n.op = op;
  n.attrs = attrs;
  for (const TensorType& t : inputs) {
    n.inputs.push_back(body->add_value(t));
    body->inputs.push_back(n.inputs.back());
  }
  n.result = body->add_value(out);
  body->nodes.push_back(n);
  body->outputs.push_back(n.result);
  ir::Node fused;
  fused.kind = ir::NodeKind::Fused;
  fused.body = body;
  fused.results = body->outputs;
  return fused;
}

CudaGroup prepare_group_cuda(const ir::Node& fused, std::span<const Tensor> inputs, bool eager) {
  std::vector<Dims> shapes, strides;
  for (const Tensor& x : inputs) {
    shapes.push_back(x.shape());
    strides.push_back(x.strides());
  }
  return prepare(fused, shapes, strides, eager, /*may_split=*/true);
}

void launch_group_cuda(const CudaGroup& g, std::span<const Tensor> inputs, std::span<const Tensor> outputs) {
  for (const Tensor& y : outputs)
    KILN_CHECK(y.is_contiguous() && y.device().index == g.fn.device && y.device().is_cuda(),
               "fused group: outputs are contiguous tensors on cuda:{}", g.fn.device);
  std::vector<void*> data;
  data.reserve(inputs.size() + outputs.size());
  for (const Tensor& x : inputs) data.push_back(x.data_ptr());
  if (g.launch.parts == 1) {
    for (const Tensor& y : outputs) data.push_back(y.data_ptr());
    launch_words(g, data);
    return;
  }
  // In parts: partial results, then each reduced into its output.
  std::vector<Tensor> partial;
  for (const Tensor& y : outputs) {
    Dims shape = y.shape();
    shape.insert(0, g.launch.parts);
    partial.push_back(Tensor::empty({y.dtype(), shape, y.device()}));
    data.push_back(partial.back().data_ptr());
  }
  launch_words(g, data);
  for (size_t j = 0; j < outputs.size(); ++j) launch_words(g.combine[j], {partial[j].data_ptr(), outputs[j].data_ptr()});
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
