// jit/function.cpp -- jit::Function: a plan cache keyed by input signature; a plan is the
// trace, optimized and fused, as an Executable.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <list>
#include <mutex>
#include <optional>
#include <ostream>
#include <unordered_map>

#include "autograd/autograd.h"
#include "ir/graph.h"
#include "ir/partition.h"
#include "ir/passes.h"
#include "jit/executable.h"
#include "jit/group_runner.h"
#include "jit/tracer.h"
#include "runtime/api.h"
#include "runtime/autograd_meta.h"
#include "runtime/check.h"
#include "runtime/composite_fusion.h"
#include "runtime/cuda.h"
#include "runtime/log.h"
#include "runtime/profiler.h"

namespace kiln::jit {

namespace {

std::atomic<int> g_fusion{-1};  // -1: not read from KILN_FUSION yet

// What a plan depends on, as words: grad mode and fusion, then per argument its dtype, device,
// requires-grad, rank and sizes (and strides when it is not contiguous).
using Signature = std::vector<int64_t>;
struct SignatureHash {
  size_t operator()(const Signature& s) const {
    uint64_t h = 1469598103934665603ull;
    for (int64_t w : s) h = (h ^ static_cast<uint64_t>(w)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

void signature(std::span<const Tensor> inputs, Signature& s) {
  s.clear();
  s.push_back(int64_t{grad_enabled()} | int64_t{fusion_enabled()} << 1);
  for (const Tensor& x : inputs) {
    KILN_CHECK(x.defined(), "jit::Function: argument {} is undefined", &x - inputs.data());
    bool contiguous = x.is_contiguous();
    Device d = x.device();
    s.push_back(int64_t(x.dtype()) | int64_t(d.type) << 8 | int64_t(d.index & 0xffff) << 16 |
                int64_t{x.requires_grad()} << 32 | int64_t{contiguous} << 33 | x.dim() << 40);
    for (int64_t n : x.shape()) s.push_back(n);
    if (!contiguous)
      for (int64_t n : x.strides()) s.push_back(n);
  }
}

// The signature in words a person reads: "grad; f32[8,16]+g; f32[8]".
std::vector<std::string> describe(std::span<const Tensor> inputs) {
  std::vector<std::string> d{
      fmt::format("{}{}", grad_enabled() ? "grad mode" : "no grad mode", fusion_enabled() ? "" : ", fusion off")};
  for (const Tensor& x : inputs)
    d.push_back(fmt::format("{}{}{}", x.type().str(), x.requires_grad() ? " requiring grad" : "",
                            x.is_contiguous() ? "" : fmt::format(" with strides {}", shape_str(x.strides()))));
  return d;
}

// Why a call missed, against the signature of the plan used last.
std::string miss_reason(const std::vector<std::string>& before, const std::vector<std::string>& now) {
  if (before.empty()) return "first call";
  if (before.size() != now.size()) return fmt::format("{} arguments, was {}", now.size() - 1, before.size() - 1);
  std::vector<std::string> changes;
  for (size_t i = 0; i < now.size(); ++i) {
    if (before[i] == now[i]) continue;
    changes.push_back(i == 0 ? fmt::format("{} (was {})", now[0], before[0])
                             : fmt::format("argument {} is {} (was {})", i - 1, now[i], before[i]));
  }
  return changes.empty() ? "signature seen before but evicted" : fmt::format("{}", fmt::join(changes, "; "));
}

// What an eager composite's plan (FunctionAccess::composite) does under create_graph: its
// function run again op by op, unfused, on the call's arguments (each node keeps them after
// the plan's saved values), and differentiated with autograd::grad, recorded.
struct Fallback {
  TensorFn fn;
  size_t kept_from = 0;              // where the arguments start among the node's saved
  std::vector<size_t> diff_results;  // the function's results that take a gradient
  std::vector<size_t> wrt_args;      // per Trace::wrt: its argument
};

// A differentiable plan's backward: the backward graph, compiled, behind one autograd node.
class CompiledBackward final : public NodeBackward {
 public:
  CompiledBackward(std::string name, std::unique_ptr<Executable> exec, std::vector<TensorType> result_types,
                   std::vector<int> wrt_output, std::optional<Fallback> fallback)
      : name_(std::move(name)),
        exec_(std::move(exec)),
        result_types_(std::move(result_types)),
        wrt_output_(std::move(wrt_output)),
        fallback_(std::move(fallback)) {}

  const std::string& name() const override { return name_; }
  // Differentiable: an eager composite's, whose node keeps its arguments for that.
  bool differentiable() const override { return fallback_.has_value(); }
  size_t always_read(size_t saved) const override { return fallback_ ? fallback_->kept_from : saved; }

  std::vector<Tensor> backward(std::span<const Tensor> saved, std::span<const Tensor> grads,
                               std::span<const char> needs, const GradReady* ready) const override {
    if (fallback_ && grad_enabled()) return recorded_backward(saved, grads, needs);
    std::vector<Tensor> in(saved.begin(),
                           saved.begin() + static_cast<ptrdiff_t>(fallback_ ? fallback_->kept_from : saved.size()));
    NoGradGuard no_grad;
    for (size_t k = 0; k < result_types_.size(); ++k) {
      const TensorType& type = result_types_[k];
      Tensor g = grads[k];
      // A result no gradient reached (the loss was taken of another one) contributes zeros.
      if (!g.defined()) g = zeros(type.shape, type.dtype, type.device);
      else if (g.dtype() != type.dtype) g = g.to(type.dtype);
      in.push_back(g);
    }
    // Each gradient goes to `ready` as soon as its kernel or op wrote it (a leaf's hooks then
    // start its all-reduce while the rest of the backward runs).
    Executable::OutputReady on_output = [&](size_t o, const Tensor& g) {
      for (size_t i = 0; i < wrt_output_.size(); ++i)
        if (wrt_output_[i] == static_cast<int>(o) && needs[i]) (*ready)(i, g);
    };
    std::vector<Tensor> outs = exec_->run(in, {}, ready ? &on_output : nullptr);
    std::vector<Tensor> r(wrt_output_.size());
    for (size_t i = 0; i < r.size(); ++i)
      if (wrt_output_[i] >= 0 && needs[i]) r[i] = outs[static_cast<size_t>(wrt_output_[i])];
    return r;
  }

  const Executable& executable() const { return *exec_; }

 private:
  std::vector<Tensor> recorded_backward(std::span<const Tensor> saved, std::span<const Tensor> grads,
                                        std::span<const char> needs) const {
    const Fallback& f = *fallback_;
    std::vector<Tensor> args(saved.begin() + static_cast<ptrdiff_t>(f.kept_from), saved.end());
    std::vector<Tensor> outs;
    {
      CompositeFusionOff unfused;  // composites inside run op by op too
      outs = f.fn(args);
    }
    std::vector<Tensor> ys, gys, xs;
    for (size_t k = 0; k < f.diff_results.size(); ++k) {
      const Tensor& y = outs[f.diff_results[k]];
      if (grads[k].defined() && y.requires_grad()) ys.push_back(y), gys.push_back(grads[k]);
    }
    std::vector<size_t> which;
    for (size_t i = 0; i < f.wrt_args.size(); ++i)
      if (needs[i] && args[f.wrt_args[i]].requires_grad()) xs.push_back(args[f.wrt_args[i]]), which.push_back(i);
    std::vector<Tensor> r(f.wrt_args.size());
    if (ys.empty() || xs.empty()) return r;
    std::vector<Tensor> g = autograd::grad(ys, xs, gys, /*retain_graph=*/true, /*create_graph=*/true,
                                           /*allow_unused=*/true);
    for (size_t j = 0; j < which.size(); ++j) r[which[j]] = g[j];
    return r;
  }

  std::string name_;
  std::unique_ptr<Executable> exec_;
  std::vector<TensorType> result_types_;  // per result that needs a gradient
  std::vector<int> wrt_output_;           // per Trace::wrt: its gradient's output, or -1
  std::optional<Fallback> fallback_;      // set for an eager composite's plan
};

struct Plan {
  Trace trace;
  std::unique_ptr<Executable> exec;
  std::vector<std::string> described;
  std::vector<char> param_requires_grad;  // as planned: which ops are taped depends on it
  // Differentiable plans (trace.joint): what the backward reads, and the backward itself.
  std::vector<ir::SavedValue> saved;
  std::shared_ptr<const CompiledBackward> backward;
  size_t saved_bytes = 0;  // per call: the computed values kept for the backward
  EagerFloor eager;        // what the function's eager run must move (read from the trace)
  // What jit::save writes: the graph after the optimization passes, before taping and fusion
  // (inference and whole-step plans only), and the signature it was traced for.
  ir::Graph optimized;
  std::vector<Tensor> example_types;  // placeholders of the arguments' types
  bool grad_mode = false;
};

// Which op nodes must be taped when the graph runs: recorded with grad mode on, in a call with
// grad mode on, with an operand that requires grad. Rewrites each node's `grad` to that, so the
// executor tapes exactly these and fusion leaves them out.
void mark_taped(ir::Graph& g, const Trace& t, std::span<const Tensor> bound) {
  std::vector<char> rg(g.types.size(), 0);
  bool on = grad_enabled() && !t.ran_backward;
  for (size_t i = 0; i < g.inputs.size() && i < bound.size(); ++i)
    rg[g.inputs[i]] = bound[i].defined() && bound[i].requires_grad();
  for (size_t i = 0; i < g.params.size(); ++i) rg[g.params[i]] = t.params[i].requires_grad();
  for (ir::Node& n : g.nodes) {
    if (n.kind != ir::NodeKind::Op) continue;
    bool any = false;
    for (uint32_t v : n.inputs) any = any || rg[v];
    n.grad = on && n.grad && any;
    rg[n.result] = n.grad && op_def(n.op).differentiable;
  }
}

// The graph's inputs for a call: the arguments, then the params' gradients the function reads
// and the generator's state (`rng`, for a call; undefined while planning).
std::vector<Tensor> bind_inputs(const Trace& t, size_t graph_inputs, std::span<const Tensor> args,
                                const Tensor& rng = {}) {
  std::vector<Tensor> bound(graph_inputs);
  std::copy(args.begin(), args.end(), bound.begin());
  for (auto [p, pos] : t.grad_inputs) bound[pos] = t.params[p].grad();
  if (t.rng_input >= 0) bound[static_cast<size_t>(t.rng_input)] = rng;
  return bound;
}

// A call's generator state: the draws it makes, reserved now.
Tensor rng_for(const Trace& t) { return t.rng_input >= 0 ? random_state(t.rng_draws) : Tensor(); }

// Binds the arguments and the gradients the function reads, runs the plan, writes the
// gradients it leaves back into the params' grad().
std::vector<Tensor> run(const Plan& plan, std::span<const Tensor> inputs) {
  const Trace& t = plan.trace;
  std::vector<Tensor> outs =
      t.grad_inputs.empty() && t.rng_input < 0
          ? plan.exec->run(inputs, t.params)
          : plan.exec->run(bind_inputs(t, plan.exec->graph().inputs.size(), inputs, rng_for(t)), t.params);
  for (auto [p, pos] : t.grad_outputs) {
    Tensor gp = outs[pos], target = t.params[p];
    target.set_grad(gp.requires_grad() ? gp : gp.detach());
  }
  for (size_t p : t.grad_cleared) Tensor(t.params[p]).zero_grad();
  outs.resize(t.num_results);
  return outs;
}

// A differentiable plan's call: the forward, untaped, then one autograd node for its results.
std::vector<Tensor> run_differentiable(const Plan& plan, std::span<const Tensor> inputs) {
  const Trace& t = plan.trace;
  // The arguments, then the generator's state when the function draws.
  std::vector<Tensor> bound(inputs.begin(), inputs.end());
  if (t.rng_input >= 0) bound.push_back(rng_for(t));
  std::vector<Tensor> outs;
  {
    NoGradGuard no_grad;
    outs = plan.exec->run(bound, t.params);
  }
  auto node = make_ref<Node>();
  node->custom = plan.backward;
  node->sequence = next_node_sequence();
  node->num_outputs = static_cast<uint32_t>(t.diff_results.size());
  if (!t.diff_results.empty()) {  // its backward runs where the forward ran, as an op's does
    node->device = outs[t.diff_results[0]].device();
    if (node->device.is_cuda()) node->stream = cuda::current_stream(node->device.index).handle();
  }
  for (const Trace::Wrt& w : t.wrt) {
    const Tensor& x = w.param ? t.params[w.index] : inputs[w.index];
    node->next.push_back(edge_to(x));
    node->in_types.push_back(x.type());
  }
  for (const ir::SavedValue& s : plan.saved) {
    const Tensor& x = s.kind == ir::SavedValue::Arg     ? bound[s.index]
                      : s.kind == ir::SavedValue::Param ? t.params[s.index]
                                                        : outs[s.index];
    // Without history: a saved result would otherwise hold its own node alive.
    save_for_node(*node, x.detach());
  }
  // A composite's arguments, with their history, for a backward with create_graph.
  if (plan.backward->differentiable())
    for (const Tensor& x : inputs) save_for_node(*node, x);
  for (size_t k = 0; k < t.diff_results.size(); ++k)
    set_history(outs[t.diff_results[k]], node, static_cast<uint32_t>(k));
  outs.resize(t.num_results);
  return outs;
}

bool guards_hold(const Plan& plan) {
  const Trace& t = plan.trace;
  for (size_t i = 0; i < t.params.size(); ++i) {
    if (t.grad_guard[i] >= 0 && t.params[i].grad().defined() != (t.grad_guard[i] == 1)) return false;
    if (t.params[i].requires_grad() != static_cast<bool>(plan.param_requires_grad[i])) return false;
  }
  return true;
}

}  // namespace

bool fusion_enabled() {
  int f = g_fusion.load(std::memory_order_relaxed);
  if (f < 0) {
    const char* e = std::getenv("KILN_FUSION");
    f = e && std::string(e) == "0" ? 0 : 1;
    g_fusion.store(f, std::memory_order_relaxed);
  }
  return f == 1;
}

void set_fusion_enabled(bool on) { g_fusion.store(on ? 1 : 0, std::memory_order_relaxed); }

namespace {

// The graph as it runs: fused (unless fusion is off) and verified. A group holds values of one
// device that has a group backend (jit/group_runner.h: LLVM's on the CPU, the CUDA layer's
// NVRTC kernels on a CUDA device) and runs as a kernel there (jit/executable.cpp).
ir::Graph fused(ir::Graph g) {
  if (!fusion_enabled()) return g;
  // Through the pass pipeline (verified after each pass, logged under KILN_LOG=jit, a failure
  // written to a reproducer): rewrites within rounding, as fused results are, then fuse.
  ir::PipelineOptions options;
  options.fuse.keep_out = [](const ir::Node& n) { return n.grad; };
  options.fuse.has_kernels = [](Device d) { return has_group_backend(d.type); };
  return ir::run_passes(std::move(g), ir::lowering_pipeline(), options);
}

// Splits an optimized joint graph into the forward a call runs (returned) and the backward
// its autograd node runs (plan.backward); nothing in either is taped.
ir::Graph make_differentiable(Plan& plan, ir::Graph joint, const TensorFn* composite) {
  const Trace& t = plan.trace;
  for (ir::Node& n : joint.nodes) n.grad = false;
  // The joint's inputs: the arguments, the generator's state (if the function draws), then
  // the results' gradients.
  size_t leading = t.num_args + (t.rng_input >= 0);
  KILN_ASSERT(t.rng_input < 0 || static_cast<size_t>(t.rng_input) == t.num_args);
  ir::Partition part = ir::partition(joint, leading, t.num_results, /*args_kept=*/composite != nullptr);
  plan.saved = part.saved;
  for (const ir::SavedValue& s : part.saved)
    if (s.kind == ir::SavedValue::Computed) {
      const TensorType& type = part.forward.type(part.forward.outputs[s.index]);
      plan.saved_bytes += static_cast<size_t>(type.shape.product()) * dtype_size(type.dtype);
    }
  std::vector<TensorType> result_types;
  for (size_t k = 0; k < t.diff_results.size(); ++k) result_types.push_back(joint.type(joint.inputs[leading + k]));
  std::vector<int> wrt_output;
  for (const Trace::Wrt& w : t.wrt)
    wrt_output.push_back(w.output < 0 ? -1 : w.output - static_cast<int>(t.num_results));
  if (log_enabled(LogTopic::Jit))
    log(LogTopic::Jit, fmt::format("@{} partitioned: {} values saved ({} bytes), {} recomputed in backward", joint.name,
                                   part.saved.size(), plan.saved_bytes, part.recomputed.size()));
  ir::verify(part.forward);
  ir::verify(part.backward);
  std::optional<Fallback> fallback;
  if (composite) {
    fallback = Fallback{*composite, part.saved.size(), t.diff_results, {}};
    for (const Trace::Wrt& w : t.wrt) {
      KILN_ASSERT(!w.param);  // a composite reads only its arguments
      fallback->wrt_args.push_back(w.index);
    }
  }
  bool graphs = composite == nullptr;
  plan.backward = std::make_shared<CompiledBackward>(
      "jit @" + joint.name, std::make_unique<Executable>(fused(std::move(part.backward)), true, graphs),
      std::move(result_types), std::move(wrt_output), std::move(fallback));
  return fused(std::move(part.forward));
}

}  // namespace

struct Function::State {
  TensorFn fn;
  std::string name;
  ParamNames names;
  std::mutex mu;
  // Per signature, its plans, most recent first: more than one where the captured tensors'
  // state the guards check differs between calls (gradients accumulated across calls are
  // undefined on the first call of each step and defined on the next).
  using Plans = std::vector<std::shared_ptr<Plan>>;
  static constexpr size_t kVariants = 4;
  std::list<std::pair<Signature, Plans>> lru;  // most recent first
  std::unordered_map<Signature, decltype(lru)::iterator, SignatureHash> index;
  size_t limit = 64;
  bool composite = false;  // FunctionAccess::composite
  Stats stats;
  std::shared_ptr<Plan> last;

  std::shared_ptr<Plan> compile(std::span<const Tensor> inputs, const Signature& key, const std::string& why) {
    std::vector<std::string> now = describe(inputs);
    if (log_enabled(LogTopic::Cache)) {
      std::vector<std::string> before;
      {
        std::lock_guard<std::mutex> lock(mu);
        if (last) before = last->described;
      }
      log(LogTopic::Cache, fmt::format("jit @{}: miss ({}): tracing for {}", name,
                                       why.empty() ? miss_reason(before, now) : why, fmt::join(now, ", ")));
    }
    auto plan = std::make_shared<Plan>();
    {
      profiler::Scope event(profiler::Kind::Jit, "trace");
      plan->trace = trace_function(fn, inputs, name, names, /*differentiate=*/true);
    }
    plan->described = std::move(now);
    for (const Tensor& x : inputs) {
      Tensor p = Tensor::placeholder(x.type());
      if (x.requires_grad()) p.requires_grad_();
      plan->example_types.push_back(p);
    }
    plan->grad_mode = grad_enabled();
    profiler::Scope event(profiler::Kind::Jit, "optimize, partition, fuse");
    for (const Tensor& p : plan->trace.params) plan->param_requires_grad.push_back(p.requires_grad());
    std::vector<char> args_need_grad;
    for (const Tensor& x : inputs) args_need_grad.push_back(x.defined() && x.requires_grad());
    plan->eager = jit::eager_floor(plan->trace.graph, args_need_grad, plan->param_requires_grad);
    ir::Graph g = ir::run_passes(std::move(plan->trace.graph), ir::default_pipeline());
    if (plan->trace.joint) {
      g = make_differentiable(*plan, std::move(g), composite ? &fn : nullptr);
    } else {
      plan->optimized = g;
      mark_taped(g, plan->trace, bind_inputs(plan->trace, g.inputs.size(), inputs));
      g = fused(std::move(g));
    }
    plan->exec = std::make_unique<Executable>(std::move(g), true, /*graphs=*/!composite);
    std::lock_guard<std::mutex> lock(mu);
    ++stats.traces;
    if (auto it = index.find(key); it != index.end()) {
      Plans& plans = it->second->second;
      plans.insert(plans.begin(), plan);
      if (plans.size() > kVariants) plans.pop_back();
      lru.splice(lru.begin(), lru, it->second);
    } else {
      lru.emplace_front(key, Plans{plan});
      index[key] = lru.begin();
    }
    while (lru.size() > limit) {
      index.erase(lru.back().first);
      lru.pop_back();
    }
    last = plan;
    return plan;
  }
};

Function::Function(TensorFn fn, std::string name, ParamNames names) : state_(std::make_shared<State>()) {
  state_->fn = std::move(fn);
  state_->name = std::move(name);
  state_->names = std::move(names);
}

namespace {
// The plan for the signature of `inputs`: cached, else traced and compiled now.
std::shared_ptr<Plan> plan_for(Function::State& s, std::span<const Tensor> inputs, bool* traced = nullptr) {
  thread_local Signature key;
  signature(inputs, key);
  std::shared_ptr<Plan> plan;
  std::string why;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    const Function::State::Plans* plans = nullptr;
    if (!s.lru.empty() && s.lru.front().first == key) {
      plans = &s.lru.front().second;  // the common case: the same signature as the call before
    } else if (auto it = s.index.find(key); it != s.index.end()) {
      plans = &it->second->second;
      s.lru.splice(s.lru.begin(), s.lru, it->second);
    }
    if (plans) {
      for (const auto& p : *plans)
        if (guards_hold(*p)) {
          plan = p;
          break;
        }
      if (!plan) why = "a captured tensor's grad() or requires_grad changed";
    }
    if (plan) {
      ++s.stats.hits;
      s.last = plan;
    } else {
      ++s.stats.misses;
    }
  }
  if (traced) *traced = !plan;
  if (!plan) {
    Signature copy = key;  // compile may trace a function that calls this one
    plan = s.compile(inputs, copy, why);
  }
  return plan;
}
}  // namespace

std::vector<Tensor> Function::call(std::span<const Tensor> inputs) const {
  profiler::Scope event(profiler::Kind::Jit, profiler::enabled() ? "@" + state_->name : std::string());
  bool traced = false;
  std::shared_ptr<Plan> plan = plan_for(*state_, inputs, &traced);
  if (event) {
    event.arg("call", traced ? "miss: traced and compiled" : "hit");
    event.arg("signature", fmt::format("{}", fmt::join(describe(inputs), ", ")));
    event.arg("plan", plan->backward ? "forward + compiled backward" : "inference or whole step");
  }
  size_t arity = plan->trace.num_args;
  KILN_CHECK(inputs.size() == arity, "jit::Function: expected {} arguments, got {}", arity, inputs.size());
  return plan->backward ? run_differentiable(*plan, inputs) : run(*plan, inputs);
}

void Function::compile(std::span<const Tensor> inputs) const { plan_for(*state_, inputs); }

PlanCost Function::cost(int multiprocessors) const { return plan_cost(graph(), multiprocessors); }

EagerFloor Function::eager_floor() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  KILN_CHECK(state_->last != nullptr, "jit::Function::eager_floor: the function has not been called yet");
  return state_->last->eager;
}

ir::Graph Function::graph() const {
  std::shared_ptr<Plan> last;  // keeps the plan alive if another thread evicts it meanwhile
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    KILN_CHECK(state_->last != nullptr, "jit::Function::graph: the function has not been called yet");
    last = state_->last;
  }
  ir::Graph g = last->exec->graph();  // a copy: the plan others run is never written
  resolve_locations(g);
  return g;
}

Stats Function::stats() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  Stats st = state_->stats;
  st.saved_bytes = state_->last ? static_cast<int64_t>(state_->last->saved_bytes) : 0;
  if (const Plan* p = state_->last.get()) {
    ExecutableStats forward = p->exec->stats();
    st.kernels = static_cast<int64_t>(forward.kernels);
    st.graph_replays = static_cast<int64_t>(forward.graph_replays);
    st.graph_refusal = forward.graph_refusal;
    st.graph_captures = static_cast<int64_t>(forward.graph_captures);
    if (p->backward) {
      ExecutableStats backward = p->backward->executable().stats();
      st.graph_replays += static_cast<int64_t>(backward.graph_replays);
      st.graph_captures += static_cast<int64_t>(backward.graph_captures);
    }
  }
  return st;
}

void Function::set_cache_limit(size_t plans) {
  KILN_CHECK(plans > 0, "jit::Function: the cache must hold at least one plan");
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->limit = plans;
  while (state_->lru.size() > plans) {
    state_->index.erase(state_->lru.back().first);
    state_->lru.pop_back();
  }
}

SavedPlan FunctionAccess::last_plan(const Function& f) {
  std::shared_ptr<Plan> last;
  {
    std::lock_guard<std::mutex> lock(f.state_->mu);
    KILN_CHECK(f.state_->last != nullptr, "jit::save: @{} has not been traced yet", f.state_->name);
    last = f.state_->last;
  }
  KILN_CHECK(!last->backward,
             "jit::save: @{} was last called with grad mode on and inputs or parameters requiring grad, as a "
             "differentiable forward; save a forward traced under NoGradGuard, or a whole training step",
             f.state_->name);
  SavedPlan s;
  s.graph = last->optimized;
  s.trace = last->trace;
  s.example_inputs = last->example_types;
  s.grad_mode = last->grad_mode;
  s.fn = f.state_->fn;
  s.names = f.state_->names;
  s.name = f.state_->name;
  return s;
}

Function FunctionAccess::composite(TensorFn fn, std::string name) {
  Function f(std::move(fn), std::move(name));
  f.state_->composite = true;
  f.state_->limit = 256;  // a model's layers call a composite with many shapes
  return f;
}

Function trace_tensors(TensorFn fn, std::span<const Tensor> example_inputs, std::string name) {
  Function f(std::move(fn), std::move(name));
  f.compile(example_inputs);
  return f;
}

}  // namespace kiln::jit
