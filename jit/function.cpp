// jit/function.cpp -- jit::Function: a plan cache keyed by input signature, and the
// interpreter that runs a plan's optimized graph with the eager kernels.
#include <fmt/format.h>

#include <algorithm>
#include <list>
#include <mutex>
#include <ostream>
#include <unordered_map>

#include "autograd/autograd.h"
#include "ir/graph.h"
#include "ir/passes.h"
#include "jit/run.h"
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

// Binds the arguments and the gradients the function reads, runs the graph, writes the
// gradients it leaves back into the params' grad().
std::vector<Tensor> run(const Plan& plan, std::span<const Tensor> inputs) {
  const ir::Graph& g = plan.graph;
  KILN_CHECK(inputs.size() == plan.num_args, "jit::Function: expected {} arguments, got {}", plan.num_args, inputs.size());
  std::vector<Tensor> bound(g.inputs.size());
  std::copy(inputs.begin(), inputs.end(), bound.begin());
  for (auto [p, pos] : plan.grad_inputs) bound[pos] = plan.params[p].grad();
  std::vector<Tensor> outs = run_graph(g, bound, plan.params);
  for (auto [p, pos] : plan.grad_outputs) {
    Tensor gp = outs[pos], target = plan.params[p];
    target.set_grad(gp.requires_grad() ? gp : gp.detach());
  }
  for (size_t p : plan.grad_cleared) Tensor(plan.params[p]).zero_grad();
  outs.resize(plan.num_results);
  return outs;
}

bool guards_hold(const Plan& plan) {
  for (size_t i = 0; i < plan.params.size(); ++i)
    if (plan.grad_guard[i] >= 0 && plan.params[i].grad().defined() != (plan.grad_guard[i] == 1))
      return false;
  return true;
}

}  // namespace

struct Function::State {
  TensorFn fn;
  std::string name;
  ParamNames names;
  std::mutex mu;
  std::list<std::pair<std::string, std::shared_ptr<Plan>>> lru;  // most recent first
  std::unordered_map<std::string, decltype(lru)::iterator> index;
  size_t limit = 64;
  Stats stats;
  std::shared_ptr<Plan> last;

  std::shared_ptr<Plan> compile(std::span<const Tensor> inputs, const std::string& key, const char* why) {
    log(LogTopic::Cache, fmt::format("jit @{}: miss ({}): tracing for {}", name, why, key));
    auto plan = std::make_shared<Plan>(trace_function(fn, inputs, name, names));
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

Function::Function(TensorFn fn, std::string name, ParamNames names) : state_(std::make_shared<State>()) {
  state_->fn = std::move(fn);
  state_->name = std::move(name);
  state_->names = std::move(names);
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
  while (state_->lru.size() > plans) {
    state_->index.erase(state_->lru.back().first);
    state_->lru.pop_back();
  }
}

Function trace_tensors(TensorFn fn, std::span<const Tensor> example_inputs, std::string name) {
  Function f(std::move(fn), std::move(name));
  f.call(example_inputs);
  return f;
}

}  // namespace kiln::jit
