// cuda/group.cpp -- a fused group run as a CUDA kernel (cuda/group.h): its kernel generated
// (codegen/cuda/emit.h) for the operands' layout and compiled through the kernel cache, its
// launch planned (codegen/cuda/launch.h: columns cut into parts whose partial results a second
// kernel combines, or, for a group whose outputs read its reductions, stages: cuda/stages.h),
// and queued on the current stream. Eager ops run through it as groups of one op
// (cuda/single_op.cpp); the compiled plans through the CUDA backend of jit/group_runner.h,
// which registers itself here when the library loads.
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <tuple>

#include "codegen/cuda/emit.h"
#include "cuda/group.h"
#include "cuda/kernel_cache.h"
#include "cuda/launch.h"
#include "cuda/stages.h"
#include "ir/fusion.h"
#include "ir/graph.h"
#include "ir/group_analysis.h"
#include "jit/cost.h"
#include "jit/executable.h"
#include "jit/group_runner.h"
#include "jit/plan.h"
#include "runtime/api.h"
#include "runtime/backend.h"
#include "runtime/check.h"
#include "runtime/cuda_internal.h"
#include "runtime/log.h"
#include "runtime/profiler.h"

namespace kiln::cuda {
namespace {

// The most bytes of arguments a launch takes (cuLaunchKernel's limit before Volta and CUDA 12.1).
constexpr size_t kMaxArgBytes = 4096;

// g's argument words over operand pointers `data`, with its immediates or `imm`.
std::vector<uint64_t> words_of(const PreparedGroup& g, const std::vector<void*>& data,
                               const std::vector<uint64_t>* imm = nullptr) {
  return codegen::pack_cuda_args(g.layout, g.sizes, g.strides, data, g.launch, imm ? *imm : g.immediates);
}

// The inputs' data pointers, then (with `with_outputs`) the outputs', which must be
// contiguous on g's device.
std::vector<void*> operand_pointers(const PreparedGroup& g, std::span<const Tensor> inputs,
                                    std::span<const Tensor> outputs, bool with_outputs) {
  for (const Tensor& y : outputs)
    KILN_CHECK(y.is_contiguous() && y.device().index == g.fn.device && y.device().is_cuda(),
               "fused group: outputs are contiguous tensors on cuda:{}", g.fn.device);
  std::vector<void*> data;
  data.reserve(inputs.size() + outputs.size());
  for (const Tensor& x : inputs) data.push_back(x.data_ptr());
  if (with_outputs)
    for (const Tensor& y : outputs) data.push_back(y.data_ptr());
  return data;
}

// Queues g's kernel over operand pointers `data`, with `more` words past its own (the combines
// its last block runs).
void launch_words(const PreparedGroup& g, const std::vector<void*>& data, const std::vector<uint64_t>& more = {},
                  const std::vector<uint64_t>* imm = nullptr) {
  if (g.launch.blocks == 0) return;  // nothing to compute
  std::vector<uint64_t> args = words_of(g, data, imm);
  args.insert(args.end(), more.begin(), more.end());
  unsigned grid[3] = {static_cast<unsigned>(g.launch.blocks), 1, 1}, block[3] = {codegen::kCudaBlock, 1, 1};
  void* param = args.data();
  launch(g.fn, grid, block, codegen::kCudaSharedBytes, &param);
}

std::vector<Dims> contiguous_operands(const ir::Graph& body, std::vector<Dims>& strides) {
  std::vector<Dims> shapes;
  for (uint32_t v : body.inputs) {
    shapes.push_back(body.type(v).shape);
    strides.push_back(contiguous_strides(shapes.back()));
  }
  return shapes;
}

// The group that combines the partial results [parts, output...] of `body`'s outputs `which`
// (of one shape): each reduced over its first dim by the reduction that made it.
ir::Node combine_group(const ir::Graph& body, const std::vector<std::optional<OpId>>& cut,
                       const std::vector<size_t>& which, int64_t parts) {
  auto g = std::make_shared<ir::Graph>();
  std::vector<ir::Node> nodes;
  for (size_t j : which) {
    TensorType out = body.type(body.outputs[j]), part = out;
    part.shape.insert(0, parts);
    ir::Node n;
    n.op = *cut[j];
    n.attrs.axes = {0};
    n.inputs.push_back(g->add_value(part));
    g->inputs.push_back(n.inputs.back());
    n.result = g->add_value(out);
    nodes.push_back(n);
  }
  for (ir::Node& n : nodes) {
    g->outputs.push_back(n.result);
    g->nodes.push_back(std::move(n));
  }
  ir::Node fused;
  fused.kind = ir::NodeKind::Fused;
  fused.results = g->outputs;
  fused.body = std::move(g);
  return fused;
}

// Whether kernels that fit index in 32 bits (KILN_CUDA_INDEX32=0 keeps every kernel in 64, to
// compare them).
bool index32_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("KILN_CUDA_INDEX32");
    return !(e && std::string(e) == "0");
  }();
  return on;
}

// Whether `l` is elementwise over one dim that every operand steps through contiguously or
// broadcasts along.
bool contiguous_elementwise(const codegen::KernelLayout& l) {
  if (l.rank != 1 || l.reduced != 0) return false;
  for (const codegen::OperandLayout& o : l.inputs)
    if (!(o.broadcast & 1) && !o.unit_inner) return false;
  for (const codegen::OperandLayout& o : l.outputs)
    if (!o.unit_inner) return false;
  return true;
}

// How far prepare() goes: the launch plan, its kernels' text too, or compiled kernels as well.
enum class Prepare { Plan, Emit, Compile };

struct PrepareOptions {
  int sms = 1;  // the device's multiprocessors
  Prepare mode = Prepare::Compile;
  bool eager = false;     // numbers and strides as kernel arguments (cuda/group.h)
  bool may_split = true;  // columns may be cut into parts (not a combine of parts)
  bool may_stage = true;  // may run as stages (not a stage itself)
};

// Prepares `fused` for operands of `shapes` and `strides`, as `o` says.
PreparedGroup prepare(const ir::Node& fused, std::span<const Dims> shapes, std::span<const Dims> strides,
                      const PrepareOptions& o) {
  const int sms = o.sms;
  const bool eager = o.eager, may_split = o.may_split, may_stage = o.may_stage;
  const Prepare mode = o.mode;
  const bool compile = mode == Prepare::Compile;
  const ir::Graph& body = *fused.body;
  jit::KernelArgs ka = jit::kernel_args(fused, shapes, strides);
  PreparedGroup g;
  g.layout = std::move(ka.layout);
  g.sizes = std::move(ka.sizes);
  g.strides = std::move(ka.strides);
  if (eager)
    for (const codegen::CudaImmediate& m : codegen::cuda_immediates(body))
      g.immediates.push_back(immediate_bits(body.nodes[m.node].attrs.imm[m.slot], m.is_float));
  std::vector<std::optional<OpId>> cut;
  if (may_split) cut = stages::cut_outputs(body);
  using codegen::CudaWork;
  CudaWork work = ir::GroupAnalysis(body).reductions.empty() ? CudaWork::Elements
                  : cut.empty()                              ? CudaWork::Rows
                                                             : CudaWork::Partials;
  g.launch = codegen::plan_cuda_launch(g.layout, g.sizes, sms, work);
  g.launch.index32 = index32_enabled() && codegen::index32_fits(g.sizes, g.strides, g.launch);
  // Too few rows to fill the device, columns that could be cut, outputs that read the
  // reductions: the group runs as stages, each cut into parts.
  if (work == CudaWork::Rows && may_split && may_stage && g.launch.blocks < 2 * int64_t{sms} &&
      codegen::plan_cuda_launch(g.layout, g.sizes, sms, CudaWork::Partials).parts > 1) {
    stages::Stages st = stages::by_level(body);
    if (st.stages.size() < 2) st.stages.clear();  // one stage is the group itself (an f16 sum)
    for (stages::Stage& stage : st.stages) {
      std::vector<Dims> in_shapes, in_strides;
      for (size_t k = 0; k < stage.reads.size(); ++k) {
        const stages::Place& p = stage.reads[k];
        if (p.kind == stages::Place::Input) {
          in_shapes.push_back(shapes[p.index]);
          in_strides.push_back(strides[p.index]);
        } else {  // a result of an earlier stage: contiguous
          in_shapes.push_back(stage.group.body->type(stage.group.body->inputs[k]).shape);
          in_strides.push_back(contiguous_strides(in_shapes.back()));
        }
      }
      PrepareOptions so = o;
      so.may_stage = false;
      auto sg = std::make_shared<const PreparedGroup>(prepare(stage.group, in_shapes, in_strides, so));
      g.symbol += (g.symbol.empty() ? "" : "+") + sg->symbol;
      g.stages.push_back({std::move(sg), std::move(stage.reads), std::move(stage.writes)});
    }
    g.temps = std::move(st.temps);
    if (!g.stages.empty()) {
      if (compile && log_enabled(LogTopic::Cuda))
        log(LogTopic::Cuda, fmt::format("a fused group of {} ops: {} rows x {} columns leave {} multiprocessors idle "
                                        "in one kernel; it runs as {} stages",
                                        body.nodes.size(), g.launch.rows, g.launch.cols, sms, g.stages.size()));
      return g;
    }
  }
  if (g.launch.parts > 1) {  // the reduced outputs' partial results [parts, output...], reduced over their first dim
    size_t words = words_of(g, std::vector<void*>(body.inputs.size() + body.outputs.size())).size();
    g.partial.assign(body.outputs.size(), 0);
    std::vector<char> done(body.outputs.size(), 0);
    for (size_t j = 0; j < body.outputs.size(); ++j) {
      if (!cut[j] || done[j]) continue;
      PreparedGroup::Combine c;
      const Dims& shape = body.type(body.outputs[j]).shape;
      for (size_t k = j; k < body.outputs.size(); ++k)
        if (cut[k] && !done[k] && body.type(body.outputs[k]).shape == shape) c.outputs.push_back(k), done[k] = 1;
      ir::Node group = combine_group(body, cut, c.outputs, g.launch.parts);
      std::vector<Dims> part_shapes, part_strides;
      for (uint32_t v : group.body->inputs) {
        part_shapes.push_back(group.body->type(v).shape);
        part_strides.push_back(contiguous_strides(part_shapes.back()));
      }
      // A combine of one block runs in the last block of this kernel, if the arguments of
      // both (and the counter) still fit a launch's 4 KiB.
      PrepareOptions co = o;
      co.may_split = false;
      PrepareOptions plan_only = co;
      plan_only.mode = Prepare::Plan;
      PreparedGroup planned = prepare(group, part_shapes, part_strides, plan_only);
      size_t more =
          words_of(planned, std::vector<void*>(group.body->inputs.size() + group.body->outputs.size())).size();
      c.in_last_block = planned.launch.blocks == 1 && (words + more + 1) * 8 <= kMaxArgBytes;
      if (c.in_last_block) words += more;
      c.body = group.body;
      c.group = std::make_shared<const PreparedGroup>(c.in_last_block || mode == Prepare::Plan
                                                          ? std::move(planned)
                                                          : prepare(group, part_shapes, part_strides, co));
      for (size_t k : c.outputs) g.partial[k] = 1;
      g.combines.push_back(std::move(c));
    }
  }
  if (mode == Prepare::Plan) return g;
  codegen::CudaEmitOptions& options = g.options;
  options.immediates_as_args = eager;
  // An eager kernel's text serves every layout of its rank (its strides are arguments), but
  // for elementwise work over one dim of contiguous or broadcast operands, the commonest eager
  // op: a text of its own, which moves four elements at a time (codegen/cuda/emit.cpp).
  options.generic_strides = eager && !contiguous_elementwise(g.layout);
  options.rows_by = g.launch.rows_by;
  options.index32 = g.launch.index32;
  for (const PreparedGroup::Combine& c : g.combines)
    if (c.in_last_block)
      options.combines.push_back({c.body.get(), c.group->layout, c.group->launch.rows_by, c.group->launch.index32});
  std::string source = codegen::emit_cuda(body, g.layout, "kiln_kernel", options);
  if (mode == Prepare::Emit) {
    g.source = std::move(source);
    return g;
  }
  // The profiler's name of the kernel: its op's, or its group's.
  const bool one_op = body.nodes.size() == 1 && body.nodes[0].kind == ir::NodeKind::Op;
  g.label = one_op ? std::string(op_name(body.nodes[0].op)) : jit::group_label(body);
  CompiledKernel k = kernel_for(source, body.type(body.outputs[0]).device.index, g.label);
  g.fn = k.fn;
  g.symbol = std::move(k.symbol);
  g.body = fused.body;
  return g;
}

}  // namespace

std::vector<codegen::CudaLaunch> plan_group_launches(const ir::Node& fused, int sms) {
  std::vector<Dims> strides, shapes = contiguous_operands(*fused.body, strides);
  PreparedGroup g = prepare(fused, shapes, strides, {.sms = sms, .mode = Prepare::Plan});
  std::vector<codegen::CudaLaunch> out;
  for (const PreparedGroup::Stage& st : g.stages) out.push_back(st.group->launch);
  if (out.empty()) out.push_back(g.launch);
  return out;
}

int64_t count_group_launches(const ir::Node& fused, int sms) {
  std::vector<Dims> strides, shapes = contiguous_operands(*fused.body, strides);
  PreparedGroup g = prepare(fused, shapes, strides, {.sms = sms, .mode = Prepare::Plan});
  auto kernels = [](const PreparedGroup& k) {
    int64_t n = k.launch.blocks > 0 ? 1 : 0;
    for (const PreparedGroup::Combine& c : k.combines) n += !c.in_last_block && c.group->launch.blocks > 0;
    return n;
  };
  if (g.stages.empty()) return kernels(g);
  int64_t n = 0;
  for (const PreparedGroup::Stage& st : g.stages) n += kernels(*st.group);
  return n;
}

int group_batch_capacity(const ir::Node& fused, int sms) {
  std::vector<Dims> strides, shapes = contiguous_operands(*fused.body, strides);
  PreparedGroup g = prepare(fused, shapes, strides, {.sms = sms, .mode = Prepare::Plan});
  if (!g.stages.empty() || !g.combines.empty() || g.launch.parts != 1) return 1;
  size_t operands = fused.body->inputs.size() + fused.body->outputs.size();
  return std::max(1, codegen::cuda_batch_capacity(words_of(g, std::vector<void*>(operands)).size()));
}

std::vector<std::string> group_kernel_sources(const ir::Node& fused, int sms) {
  std::vector<Dims> strides, shapes = contiguous_operands(*fused.body, strides);
  PreparedGroup g = prepare(fused, shapes, strides, {.sms = sms, .mode = Prepare::Emit});
  std::vector<std::string> out;
  auto add = [&](const PreparedGroup& k) {
    out.push_back(k.source);
    for (const PreparedGroup::Combine& c : k.combines)
      if (!c.in_last_block) out.push_back(c.group->source);
  };
  for (const PreparedGroup::Stage& st : g.stages) add(*st.group);
  if (g.stages.empty()) add(g);
  return out;
}

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

PreparedGroup prepare_group(const ir::Node& fused, std::span<const Tensor> inputs, bool eager) {
  std::vector<Dims> shapes, strides;
  for (const Tensor& x : inputs) {
    shapes.push_back(x.shape());
    strides.push_back(x.strides());
  }
  int device = fused.body->type(fused.body->outputs[0]).device.index;
  return prepare(fused, shapes, strides, {.sms = sm_count(device), .mode = Prepare::Compile, .eager = eager});
}

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

void launch_group(const PreparedGroup& g, std::span<const Tensor> inputs, std::span<const Tensor> outputs,
                  const std::vector<uint64_t>* imm) {
  if (!g.stages.empty()) {
    KILN_CHECK(!imm, "fused group: a group run as stages takes its own immediates");
    std::vector<Tensor> temps;
    for (const TensorType& t : g.temps) temps.push_back(Tensor::empty(t));
    auto at = [&](const stages::Place& p) -> const Tensor& {
      return p.kind == stages::Place::Input    ? inputs[p.index]
             : p.kind == stages::Place::Output ? outputs[p.index]
                                               : temps[p.index];
    };
    for (const PreparedGroup::Stage& st : g.stages) {
      std::vector<Tensor> ins, outs;
      for (const stages::Place& p : st.reads) ins.push_back(at(p));
      for (const stages::Place& p : st.writes) outs.push_back(at(p));
      launch_group(*st.group, ins, outs);
    }
    return;
  }
  std::vector<void*> data = operand_pointers(g, inputs, outputs, g.launch.parts == 1);
  if (g.launch.parts == 1) {
    launch_words(g, data, {}, imm);
    return;
  }
  // In parts: each reduced output's partial results, then their reduction into it; each part
  // writes its columns of a full output.
  std::vector<Tensor> partial(outputs.size());
  for (size_t j = 0; j < outputs.size(); ++j) {
    const Tensor& y = outputs[j];
    if (g.partial[j]) {
      Dims shape = y.shape();
      shape.insert(0, g.launch.parts);
      partial[j] = Tensor::empty({y.dtype(), shape, y.device()});
    }
    data.push_back((g.partial[j] ? partial[j] : y).data_ptr());
  }
  auto operands = [&](const PreparedGroup::Combine& c) {
    std::vector<void*> p;
    for (size_t j : c.outputs) p.push_back(partial[j].data_ptr());
    for (size_t j : c.outputs) p.push_back(outputs[j].data_ptr());
    return p;
  };
  std::vector<uint64_t> more;  // the combines the last block runs, then the blocks' counter
  for (const PreparedGroup::Combine& c : g.combines)
    if (c.in_last_block) {
      std::vector<uint64_t> w = words_of(*c.group, operands(c));
      more.insert(more.end(), w.begin(), w.end());
    }
  Tensor done;
  if (!more.empty()) {
    done = zeros({1}, DType::I32, outputs[0].device());  // a memset, which a graph capture keeps
    more.push_back(reinterpret_cast<uint64_t>(done.data_ptr()));
  }
  launch_words(g, data, more, imm);
  for (const PreparedGroup::Combine& c : g.combines)
    if (!c.in_last_block) launch_words(*c.group, operands(c));
}

bool batchable(const PreparedGroup& g) {
  return g.body && g.stages.empty() && g.combines.empty() && g.launch.parts == 1;
}

namespace {

// The batch kernel of g's text with `capacity` segments, compiled for g's device once per
// process (its text is written and hashed on the first use only).
DeviceFunction batch_function(const PreparedGroup& g, int capacity) {
  static std::mutex mu;
  static std::map<std::tuple<std::string, int, int>, DeviceFunction> compiled;
  std::tuple<std::string, int, int> key{g.symbol, g.fn.device, capacity};
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = compiled.find(key); it != compiled.end()) return it->second;
  }
  codegen::CudaEmitOptions options = g.options;
  options.segments = capacity;
  std::string source = codegen::emit_cuda(*g.body, g.layout, "kiln_kernel", options);
  CompiledKernel k = kernel_for(source, g.fn.device, g.label + " (batch)");
  profiler::name_kernel(k.symbol, g.label + " (batch)", -1, -1);
  DeviceFunction fn = k.fn;
  std::lock_guard<std::mutex> lock(mu);
  return compiled.emplace(std::move(key), fn).first->second;
}

}  // namespace

void launch_group_batch(std::span<const BatchMember> members) {
  std::vector<const BatchMember*> live;  // members with something to compute
  for (const BatchMember& m : members) {
    KILN_CHECK(batchable(*m.group) && m.group->symbol == members[0].group->symbol &&
                   m.group->fn.device == members[0].group->fn.device,
               "fused group: a batch's members are groups of one kernel on one device");
    if (m.group->launch.blocks > 0) live.push_back(&m);
  }
  if (live.size() == 1) return launch_group(*live[0]->group, live[0]->inputs, live[0]->outputs);
  if (live.empty()) return;
  std::vector<std::vector<uint64_t>> segments;
  std::vector<int64_t> blocks;
  for (const BatchMember* m : live) {
    segments.push_back(words_of(*m->group, operand_pointers(*m->group, m->inputs, m->outputs, true)));
    blocks.push_back(m->group->launch.blocks);
  }
  const PreparedGroup& g = *live[0]->group;
  const int most = codegen::cuda_batch_capacity(segments[0].size());
  KILN_CHECK(most >= 2, "fused group: a batch of {}-word arguments does not fit a launch", segments[0].size());
  for (size_t first = 0; first < segments.size(); first += static_cast<size_t>(most)) {
    size_t n = std::min(segments.size() - first, static_cast<size_t>(most));
    if (n == 1) {
      launch_group(*live[first]->group, live[first]->inputs, live[first]->outputs);
      continue;
    }
    // A power of two at least n: a few kernel texts serve every batch size.
    const int capacity = std::min(most, static_cast<int>(std::bit_ceil(n)));
    std::vector<std::vector<uint64_t>> part(segments.begin() + static_cast<std::ptrdiff_t>(first),
                                            segments.begin() + static_cast<std::ptrdiff_t>(first + n));
    std::vector<int64_t> part_blocks(blocks.begin() + static_cast<std::ptrdiff_t>(first),
                                     blocks.begin() + static_cast<std::ptrdiff_t>(first + n));
    int64_t grid = 0;
    for (int64_t b : part_blocks) grid += b;
    std::vector<uint64_t> args = codegen::pack_cuda_batch(part, part_blocks, capacity);
    unsigned grid3[3] = {static_cast<unsigned>(grid), 1, 1}, block[3] = {codegen::kCudaBlock, 1, 1};
    void* param = args.data();
    launch(batch_function(g, capacity), grid3, block, codegen::kCudaSharedBytes, &param);
  }
}

void run_group(const ir::Node& fused, std::span<const Tensor> inputs, std::span<const Tensor> outputs, bool eager) {
  launch_group(prepare_group(fused, inputs, eager), inputs, outputs);
}

namespace {

// The CUDA backend of the compiled plans' fused groups (jit/group_runner.h): the group's
// kernel compiled for the operands' layout, its numbers baked in, queued on the current stream.
class CudaRunner final : public jit::GroupRunner {
 public:
  CudaRunner(const ir::Node& fused, std::span<const Tensor> inputs)
      : group_(prepare_group(fused, inputs, /*eager=*/false)) {
    // The profiler's names for its kernels (a CUDA graph replays them without this runner),
    // with one launch's bytes and FLOPs on the kernel that computes the group.
    std::vector<TensorType> types;
    for (const Tensor& t : inputs) types.push_back(t.type());
    jit::KernelCost c = jit::fused_cost(fused, types, sm_count(group_.fn.device));
    label_ = c.name;
    bytes_ = c.bytes();
    flops_ = c.flops;
    auto name = [&](const PreparedGroup& g, const std::string& label, int64_t bytes, double flops) {
      profiler::name_kernel(g.symbol, label, bytes, flops);
      for (const PreparedGroup::Combine& k : g.combines)
        if (!k.in_last_block) profiler::name_kernel(k.group->symbol, label + " (combine)", -1, -1);
    };
    if (batchable(group_)) batch_key_ = fmt::format("{}@{}", group_.symbol, group_.fn.device);
    if (group_.stages.empty()) name(group_, label_, bytes_, flops_);
    for (size_t k = 0; k < group_.stages.size(); ++k)
      name(*group_.stages[k].group, fmt::format("{} (stage {} of {})", label_, k + 1, group_.stages.size()), -1, -1);
  }
  const std::string& symbol() const override { return group_.symbol; }
  void launch(std::span<const Tensor> inputs, std::span<const Tensor> outputs) const override {
    profiler::DeviceWork work(label_, bytes_, flops_);
    launch_group(group_, inputs, outputs);
  }
  // Runners of one kernel text on one device share launches (launch_group_batch).
  const std::string& batch_key() const override { return batch_key_; }
  void launch_batch(std::span<const jit::BatchLaunch> launches) const override {
    std::vector<BatchMember> members;
    int64_t bytes = 0;
    double flops = 0;
    for (const jit::BatchLaunch& l : launches) {
      const auto& r = static_cast<const CudaRunner&>(*l.runner);
      members.push_back({&r.group_, l.inputs, l.outputs});
      bytes += r.bytes_;
      flops += r.flops_;
    }
    profiler::DeviceWork work(fmt::format("{} (x{})", label_, launches.size()), bytes, flops);
    launch_group_batch(members);
  }

 private:
  PreparedGroup group_;
  std::string label_, batch_key_;
  int64_t bytes_ = 0;
  double flops_ = 0;
};

const bool g_group_backend = [] {
  jit::register_group_backend(DeviceType::CUDA, [](const ir::Node& fused, std::span<const Tensor> inputs) {
    return std::unique_ptr<jit::GroupRunner>(std::make_unique<CudaRunner>(fused, inputs));
  });
  jit::register_group_launches(DeviceType::CUDA, count_group_launches);
  jit::register_group_batch(DeviceType::CUDA, group_batch_capacity);
  return true;
}();

}  // namespace
}  // namespace kiln::cuda
