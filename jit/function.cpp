// jit/function.cpp -- jit::Function: a plan cache keyed by input signature, and the
// interpreter that runs a plan's optimized graph with the eager kernels.
#include <fmt/format.h>

#include <list>
#include <mutex>
#include <ostream>
#include <unordered_map>

#include "autograd/autograd.h"
#include "ir/graph.h"
#include "ir/passes.h"
#include "jit/tracer.h"
#include "runtime/autograd_meta.h"
#include "runtime/check.h"
#include "runtime/log.h"

namespace kiln::jit {

namespace {

// dtypes, shapes, devices and requires-grad of the arguments, and grad mode.
std::string signature(std::span<const Tensor> inputs) {
  std::string s = grad_enabled() ? "grad" : "nograd";
  for (const Tensor& x : inputs) {
    KILN_CHECK(x.defined(), "jit::Function: argument {} is undefined", &x - inputs.data());
    s += fmt::format(";{}{}", x.type().str(), x.requires_grad() ? "+g" : "");
  }
  return s;
}

using Plan = Trace;

std::vector<Tensor> run(const Plan& plan, std::span<const Tensor> inputs) {
  const ir::Graph& g = plan.graph;
  KILN_CHECK(inputs.size() == plan.num_args, "jit::Function: expected {} arguments, got {}", plan.num_args, inputs.size());
  std::vector<Tensor> vals(g.types.size());
  for (size_t i = 0; i < plan.num_args; ++i) vals[g.inputs[i]] = inputs[i];
  for (auto [p, pos] : plan.grad_inputs) vals[g.inputs[pos]] = plan.params[p].grad();
  for (size_t i = 0; i < g.params.size(); ++i) vals[g.params[i]] = plan.params[i];
  std::vector<std::pair<size_t, uint32_t>> assigns;  // (param index, value), applied at the end
  bool caller_grad = grad_enabled();
  for (const ir::Node& n : g.nodes) {
    switch (n.kind) {
      case ir::NodeKind::Const: vals[n.result] = n.constant; break;
      case ir::NodeKind::Assign: {
        size_t p = 0;
        while (g.params[p] != n.inputs[0]) ++p;
        assigns.emplace_back(p, n.inputs[1]);
        break;
      }
      case ir::NodeKind::Op: {
        std::vector<Tensor> in;
        in.reserve(n.inputs.size());
        for (uint32_t v : n.inputs) in.push_back(vals[v]);
        GradModeGuard mode(caller_grad && n.grad);
        vals[n.result] = apply(n.op, in, n.attrs);
        break;
      }
    }
  }
  {
    NoGradGuard no_grad;
    for (auto [p, v] : assigns) {
      Tensor target = plan.params[p];
      target.copy_(vals[v]);
    }
  }
  for (auto [p, pos] : plan.grad_outputs) {
    Tensor gp = vals[g.outputs[pos]], target = plan.params[p];
    target.set_grad(gp.requires_grad() ? gp : gp.detach());
  }
  std::vector<Tensor> out;
  for (size_t i = 0; i < plan.num_results; ++i) out.push_back(vals[g.outputs[i]]);
  return out;
}

bool guards_hold(const Plan& plan) {
  for (size_t i = 0; i < plan.params.size(); ++i)
    if (plan.params[i].grad().defined() != plan.grad_defined[i]) return false;
  return true;
}

}  // namespace

struct Function::State {
  TensorFn fn;
  std::string name;
  std::mutex mu;
  std::list<std::pair<std::string, std::shared_ptr<Plan>>> lru;  // most recent first
  std::unordered_map<std::string, decltype(lru)::iterator> index;
  size_t limit = 64;
  Stats stats;
  std::shared_ptr<Plan> last;

  std::shared_ptr<Plan> compile(std::span<const Tensor> inputs, const std::string& key, const char* why) {
    log(LogTopic::Cache, fmt::format("jit @{}: miss ({}): tracing for {}", name, why, key));
    auto plan = std::make_shared<Plan>(trace_function(fn, inputs, name));
    plan->graph = ir::run_passes(std::move(plan->graph), ir::default_pipeline());
    std::lock_guard<std::mutex> lock(mu);
    ++stats.traces;
    if (auto it = index.find(key); it != index.end()) lru.erase(it->second);
    lru.emplace_front(key, plan);
    index[key] = lru.begin();
    while (lru.size() > limit) {
      index.erase(lru.back().first);
      lru.pop_back();
    }
    last = plan;
    return plan;
  }
};

Function::Function(TensorFn fn, std::string name) : state_(std::make_shared<State>()) {
  state_->fn = std::move(fn);
  state_->name = std::move(name);
}

std::vector<Tensor> Function::call(std::span<const Tensor> inputs) const {
  State& s = *state_;
  std::string key = signature(inputs);
  std::shared_ptr<Plan> plan;
  const char* why = "new signature";
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (auto it = s.index.find(key); it != s.index.end()) {
      plan = it->second->second;
      s.lru.splice(s.lru.begin(), s.lru, it->second);
      if (guards_hold(*plan)) {
        ++s.stats.hits;
        s.last = plan;
      } else {
        plan.reset();
        why = "a captured tensor's grad() changed between defined and undefined";
      }
    }
    if (!plan) ++s.stats.misses;
  }
  if (!plan) plan = s.compile(inputs, key, why);
  return run(*plan, inputs);
}

const ir::Graph& Function::graph() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  KILN_CHECK(state_->last != nullptr, "jit::Function::graph: the function has not been called yet");
  resolve_locations(state_->last->graph);
  return state_->last->graph;
}

Stats Function::stats() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->stats;
}

void Function::set_cache_limit(size_t plans) {
  KILN_CHECK(plans > 0, "jit::Function: the cache must hold at least one plan");
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->limit = plans;
}

Function trace_tensors(TensorFn fn, std::span<const Tensor> example_inputs, std::string name) {
  Function f(std::move(fn), std::move(name));
  f.call(example_inputs);
  return f;
}

}  // namespace kiln::jit
