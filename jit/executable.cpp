// jit/executable.cpp -- runs a fused graph: kernels for groups, eager apply() for the rest.
//
// A group's kernel is prepared on the first call that reaches it, from the strides its operands
// really have (views included): the domain's dims are merged where every operand allows it and
// size-1 dims dropped, which gives the kernel's structure (and so the kernel cache's key); the
// sizes and strides are passed as arguments. Later calls check the strides are the same; when
// they are not (a parameter replaced by a differently laid-out tensor) the group runs op by op.
// What to run, and where its values go, is decided once by jit/plan.cpp.
#include "jit/executable.h"

#include <fmt/format.h>

#include <algorithm>
#include <mutex>
#include <optional>
#include <unordered_set>

#include "jit/graph_replay.h"
#include "jit/group_runner.h"
#include "jit/run.h"
#include "runtime/autograd_meta.h"
#include "runtime/backend.h"
#include "runtime/check.h"
#include "runtime/log.h"
#include "runtime/profiler.h"
#include "runtime/recorder.h"

namespace kiln::jit {
namespace {

struct KernelStep {
  std::once_flag once;
  std::string refused;                  // why codegen could not take the group: it runs op by op
  std::unique_ptr<GroupRunner> runner;  // its kernel on the group's device (jit/group_runner.h)
  std::vector<Dims> input_strides;      // as prepared
  std::string label;                    // for the profiler: "fused amax+sub+exp+sum+div"
};

// Fused groups held back to share a launch with others of their kernel text (a multi-tensor
// apply: an optimizer's update of each parameter is one group, alike but for its sizes;
// jit/group_runner.h batch_key). A held group launches when a node reads one of its results or
// what it writes in place, or writes in place what it reads, and at the end of the run:
// launching it later is then the same as launching it in order.
class HeldLaunches {
 public:
  explicit HeldLaunches(size_t values) : values_(values) {}
  bool empty() const { return held_.empty(); }
  void hold(const KernelStep& k, std::vector<Tensor> ins, std::vector<Tensor> outs, const ir::Node& n,
            std::span<const int> in_place) {
    if (held_value_.empty()) held_value_.assign(values_, 0);  // (a plan that never holds makes none)
    for (const Tensor& t : ins)
      if (t.has_storage()) reads_.insert(t.impl()->storage.get());
    for (size_t j = 0; j < n.results.size(); ++j) {
      held_value_[n.results[j]] = 1;
      if (in_place[n.results[j]] >= 0) writes_.insert(outs[j].impl()->storage.get());
    }
    held_.push_back({&k, std::move(ins), std::move(outs), n.results});
  }
  // Whether node `n` (its inputs' tensors `vals`, its in-place outputs' `targets`) must wait
  // for the held launches.
  bool conflicts(const ir::Node& n, const std::vector<Tensor>& vals, std::span<const Tensor> targets) const {
    for (uint32_t v : n.inputs)
      if (held_value_[v] || (vals[v].has_storage() && writes_.count(vals[v].impl()->storage.get()))) return true;
    for (const Tensor& t : targets)
      if (reads_.count(t.impl()->storage.get())) return true;
    return false;
  }
  void launch() {
    std::vector<char> done(held_.size(), 0);
    for (size_t i = 0; i < held_.size(); ++i) {
      if (done[i]) continue;
      const GroupRunner& r = *held_[i].step->runner;
      std::vector<BatchLaunch> batch;
      int64_t bytes = 0;
      for (size_t j = i; j < held_.size(); ++j) {
        if (done[j] || held_[j].step->runner->batch_key() != r.batch_key()) continue;
        done[j] = 1;
        batch.push_back({held_[j].step->runner.get(), held_[j].ins, held_[j].outs});
        for (const auto* ts : {&held_[j].ins, &held_[j].outs})
          for (const Tensor& t : *ts) bytes += t.numel() * static_cast<int64_t>(dtype_size(t.dtype()));
      }
      profiler::Scope event(profiler::Kind::Kernel, fmt::format("{} (x{})", held_[i].step->label, batch.size()));
      if (event) {
        event.arg("kernel", r.symbol());
        event.arg("bytes", bytes);
      }
      if (batch.size() == 1) r.launch(batch[0].inputs, batch[0].outputs);
      else r.launch_batch(batch);
    }
    for (const Held& h : held_)
      for (uint32_t v : h.results) held_value_[v] = 0;
    held_.clear();
    reads_.clear();
    writes_.clear();
  }

 private:
  struct Held {
    const KernelStep* step;
    std::vector<Tensor> ins, outs;
    std::vector<uint32_t> results;
  };
  size_t values_;
  std::vector<Held> held_;
  std::vector<char> held_value_;                       // per value: a held group's result
  std::unordered_set<const Storage*> reads_, writes_;  // what the held groups read, and write in place
};

}  // namespace

std::string group_label(const ir::Graph& body) {
  std::string ops;
  for (const ir::Node& n : body.nodes) {
    if (n.kind != ir::NodeKind::Op) continue;
    if (ops.size() > 48) {
      ops += "+...";
      break;
    }
    ops += (ops.empty() ? "" : "+") + std::string(op_name(n.op));
  }
  return "fused " + ops;
}

// The plan (jit/plan.h) and the state of running it: each group's kernel, the workspace pool,
// the CUDA graph.
struct Executable::Impl : RunPlan {
  ir::Graph g;
  bool compiled = true;                            // false: fused groups run their bodies op by op (jit::run_graph)
  std::vector<std::unique_ptr<KernelStep>> steps;  // per node; set for fused nodes
  std::vector<char> may_hold;                      // per node: another fused node runs next (HeldLaunches)
  mutable std::mutex pool_mu;
  mutable std::vector<Ref<Storage>> pool;
  // Set for a plan on a device that may replay as a device graph (jit/graph_replay.h).
  std::unique_ptr<PlanReplay> replay;
  std::string replay_refusal;

  // Which nodes a run runs: all (a plain call), or for a CUDA graph the host part or the
  // device part (ReplayLayout). The host part returns every value by id; the device part
  // starts from `preset` values (by id) and leaves host outputs and assigns alone.
  enum class Part { All, Host, Device };
  ReplayLayout layout;
  std::vector<Tensor> run_plan(std::span<const Tensor> inputs, std::span<const Tensor> params, const OutputReady* ready,
                               Part part = Part::All, std::vector<Tensor> preset = {}) const;

  Ref<Storage> acquire() const {
    {
      std::lock_guard<std::mutex> lock(pool_mu);
      if (!pool.empty()) {
        Ref<Storage> s = std::move(pool.back());
        pool.pop_back();
        return s;
      }
    }
    return make_ref<Storage>(workspace, cpu);
  }
  void release(Ref<Storage> s) const {
    std::lock_guard<std::mutex> lock(pool_mu);
    if (pool.size() < 4) pool.push_back(std::move(s));
  }

  Tensor output_tensor(uint32_t v, const Ref<Storage>& ws) const {
    const TensorType& t = g.type(v);
    if (offset[v] < 0) return Tensor::empty(t);
    auto impl = make_ref<TensorImpl>();
    impl->storage = ws;
    impl->offset = offset[v] / static_cast<int64_t>(dtype_size(t.dtype));
    impl->shape = t.shape;
    impl->strides = contiguous_strides(t.shape);
    impl->dtype = t.dtype;
    return Tensor(std::move(impl));
  }

  // The tensors fused node n writes in place (its outputs assigned to params it may update).
  std::vector<Tensor> in_place_targets(const ir::Node& n, std::span<const Tensor> params) const {
    std::vector<Tensor> out;
    for (uint32_t v : n.results)
      if (int p = in_place[v]; p >= 0 && params[static_cast<size_t>(p)].is_contiguous())
        out.push_back(params[static_cast<size_t>(p)]);
    return out;
  }

  void run_fused(size_t i, std::vector<Tensor>& vals, const Ref<Storage>& ws, std::span<const Tensor> params,
                 HeldLaunches& held) const {
    const ir::Node& n = g.nodes[i];
    KernelStep& k = *steps[i];
    std::vector<Tensor> ins;
    ins.reserve(n.inputs.size());
    for (uint32_t v : n.inputs) ins.push_back(vals[v]);
    if (compiled) {
      std::call_once(k.once, [&] {
        try {
          k.runner = prepare_group(n, g.type(n.results[0]).device, ins);
          for (const Tensor& t : ins) k.input_strides.push_back(t.strides());
        } catch (const Error& e) {
          k.refused = e.what();
          log(LogTopic::Codegen, fmt::format("@{}: a fused group runs op by op: {}", g.name, k.refused));
        }
      });
    }
    // Without a kernel for these strides (or without kernels at all): the group's reference
    // semantics, its body op by op.
    bool same = k.runner != nullptr;
    for (size_t j = 0; same && j < ins.size(); ++j) same = ins[j].strides() == k.input_strides[j];
    if (!same) {
      std::vector<Tensor> outs = run_graph(*n.body, ins, {});
      for (size_t j = 0; j < n.results.size(); ++j) vals[n.results[j]] = outs[j];
      return;
    }
    std::vector<Tensor> outs;
    outs.reserve(n.results.size());
    for (uint32_t v : n.results) {
      int p = in_place[v];
      Tensor out = p >= 0 && params[static_cast<size_t>(p)].is_contiguous() ? params[static_cast<size_t>(p)]
                                                                            : output_tensor(v, ws);
      vals[v] = out;
      outs.push_back(std::move(out));
    }
    if ((may_hold[i] || !held.empty()) && !k.runner->batch_key().empty())
      return held.hold(k, std::move(ins), std::move(outs), n, in_place);
    profiler::Scope event(profiler::Kind::Kernel, k.label);
    if (event) {
      event.arg("kernel", k.runner->symbol());
      int64_t bytes = 0;
      for (const Tensor& t : ins) bytes += t.numel() * dtype_size(t.dtype());
      for (const Tensor& t : outs) bytes += t.numel() * dtype_size(t.dtype());
      event.arg("ops", static_cast<int64_t>(n.body->nodes.size()));
      event.arg("bytes", bytes);
      event.arg("graph", "@" + g.name);
    }
    k.runner->launch(ins, outs);
  }
};

Executable::Executable(ir::Graph g, bool kernels, bool graphs) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.g = std::move(g);
  m.compiled = kernels;
  static_cast<RunPlan&>(m) = plan_run(m.g, kernels);
  m.steps.resize(m.g.nodes.size());
  m.may_hold.assign(m.g.nodes.size(), 0);
  bool next_fused = false;  // the next node but assigns is a fused one
  for (size_t i = m.g.nodes.size(); i-- > 0;) {
    m.may_hold[i] = next_fused;
    if (m.g.nodes[i].kind != ir::NodeKind::Assign) next_fused = m.g.nodes[i].kind == ir::NodeKind::Fused;
  }
  for (size_t i = 0; i < m.g.nodes.size(); ++i) {
    const ir::Node& n = m.g.nodes[i];
    if (n.kind != ir::NodeKind::Fused) continue;
    m.steps[i] = std::make_unique<KernelStep>();
    m.steps[i]->label = group_label(*n.body);
  }
  if (!m.compiled) {
    m.replay_refusal = "a reference plan (fused groups run op by op)";
    return;
  }
  if (!graphs) {
    m.replay_refusal = "an eager composite (its inputs and outputs would be copied)";
    return;
  }
  m.layout = replay_layout(m.g);
  m.replay_refusal = m.layout.refusal;
  if (m.replay_refusal.empty()) m.replay = make_replay(m.g, m.layout, &m.replay_refusal);
  if (!m.replay && uses_cuda(m.g)) {
    log(LogTopic::Cache, fmt::format("jit @{}: no CUDA graph: {}", m.g.name, m.replay_refusal));
  }
}

Executable::~Executable() = default;

const ir::Graph& Executable::graph() const { return impl_->g; }

ExecutableStats Executable::stats() const {
  const Impl& m = *impl_;
  ExecutableStats st;
  for (int p : m.in_place) st.in_place += p >= 0;
  st.kernels = m.kernels;
  st.ops = m.ops;
  st.planned_bytes = m.workspace;
  if (m.replay) {
    st.graph_captures = m.replay->captures();
    st.graph_replays = m.replay->replays();
    st.graph_refusal = m.replay->refusal();
  } else {
    st.graph_refusal = m.replay_refusal;
  }
  return st;
}

std::vector<Tensor> Executable::run(std::span<const Tensor> inputs, std::span<const Tensor> params,
                                    const OutputReady* ready) const {
  const Impl& m = *impl_;
  const ir::Graph& g = m.g;
  // Called while tracing (a compiled function inside a traced one): the ops are recorded, inline.
  if (active_recorder() && m.compiled) {
    std::vector<Tensor> out = run_graph(g, inputs, params);
    if (ready)
      for (size_t i = 0; i < out.size(); ++i) (*ready)(i, out[i]);
    return out;
  }
  KILN_CHECK(inputs.size() == g.inputs.size() && params.size() == g.params.size(),
             "jit: @{} takes {} inputs and {} params, got {} and {}", g.name, g.inputs.size(), g.params.size(),
             inputs.size(), params.size());
  if (m.replay) {
    PlanReplay::Plan plan;
    plan.host = [&m](std::span<const Tensor> in, std::span<const Tensor> ps) {
      return m.run_plan(in, ps, nullptr, Impl::Part::Host);
    };
    plan.device = [&m](std::span<const Tensor> in, std::span<const Tensor> ps, std::vector<Tensor> values) {
      return m.run_plan(in, ps, nullptr, Impl::Part::Device, std::move(values));
    };
    if (std::optional<std::vector<Tensor>> out = m.replay->run(inputs, params, plan)) {
      if (ready)
        for (size_t i = 0; i < out->size(); ++i) (*ready)(i, (*out)[i]);
      return std::move(*out);
    }
  }
  return m.run_plan(inputs, params, ready);
}

std::vector<Tensor> Executable::Impl::run_plan(std::span<const Tensor> inputs, std::span<const Tensor> params,
                                               const OutputReady* ready, Part part, std::vector<Tensor> preset) const {
  const Impl& m = *this;
  std::vector<Tensor> vals(g.types.size());
  for (size_t i = 0; i < inputs.size(); ++i) vals[g.inputs[i]] = inputs[i];
  for (size_t i = 0; i < params.size(); ++i) vals[g.params[i]] = params[i];
  for (size_t v = 0; v < preset.size(); ++v)
    if (preset[v].defined()) vals[v] = std::move(preset[v]);
  Ref<Storage> ws = m.workspace ? m.acquire() : Ref<Storage>();
  bool caller_grad = grad_enabled();
  HeldLaunches held(g.types.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::Node& n = g.nodes[i];
    if (part != Part::All && m.layout.host[i] != ReplayLayout::kBoth &&
        (m.layout.host[i] == ReplayLayout::kHost) != (part == Part::Host))
      continue;
    if (!held.empty() && n.kind != ir::NodeKind::Assign &&
        held.conflicts(n, vals, n.kind == ir::NodeKind::Fused ? m.in_place_targets(n, params) : std::vector<Tensor>{}))
      held.launch();
    switch (n.kind) {
      case ir::NodeKind::Const:  // (unless preset: a device part reads its copy there)
        if (!vals[n.result].defined()) vals[n.result] = n.constant;
        break;
      case ir::NodeKind::Assign: break;  // applied after every node ran
      case ir::NodeKind::Fused: m.run_fused(i, vals, ws, params, held); break;
      case ir::NodeKind::Op: {
        Tensor in[4];
        std::vector<Tensor> many;
        std::span<const Tensor> args;
        if (n.inputs.size() <= 4) {
          for (size_t k = 0; k < n.inputs.size(); ++k) in[k] = vals[n.inputs[k]];
          args = std::span<const Tensor>(in, n.inputs.size());
        } else {
          for (uint32_t v : n.inputs) many.push_back(vals[v]);
          args = many;
        }
        GradModeGuard mode(caller_grad && n.grad);
        vals[n.result] = apply(n.op, args, n.attrs);
        break;
      }
    }
    if (ready && !m.ready_after[i].empty()) {
      if (!held.empty()) held.launch();  // (a caller may queue work on what it is handed)
      for (size_t o : m.ready_after[i]) (*ready)(o, vals[g.outputs[o]]);
    }
    if (part != Part::Host)  // (the host part hands every value over)
      for (uint32_t v : m.drop_after[i]) vals[v] = Tensor();
  }
  if (!held.empty()) held.launch();
  if (part == Part::Host) return vals;  // the assigns to CPU params and the outputs are the caller's
  // Outputs that are arguments or params themselves hold the value from before the assigns.
  std::vector<Tensor> out(g.outputs.size());
  auto skipped = [&](uint32_t v) { return part == Part::Device && g.type(v).device.is_cpu(); };
  for (size_t i = 0; i < g.outputs.size(); ++i)
    if (m.bound_output[i] && !skipped(g.outputs[i])) out[i] = vals[g.outputs[i]].detach().clone();
  if (!m.assigns.empty()) {
    GradModeGuard no_grad(false);
    for (auto [p, v] : m.assigns) {
      if (skipped(v)) continue;
      Tensor target = params[p];
      if (vals[v].impl() == target.impl()) {  // the kernel wrote it in place
        target.impl()->storage->bump_version();
        continue;
      }
      target.copy_(vals[v]);
    }
  }
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    if (m.bound_output[i] || skipped(g.outputs[i])) continue;
    const Tensor& t = vals[g.outputs[i]];
    // A constant (or a view of one): the caller may write into what it gets.
    bool constant = false;
    for (const ir::Node* c : m.consts)
      constant = constant || (t.has_storage() && t.impl()->storage.get() == c->constant.impl()->storage.get());
    out[i] = constant ? t.clone() : t;
  }
  if (ready)
    for (size_t i = 0; i < out.size(); ++i)
      if (m.ready_at_end[i]) (*ready)(i, out[i]);
  if (ws) m.release(std::move(ws));
  return out;
}

}  // namespace kiln::jit
