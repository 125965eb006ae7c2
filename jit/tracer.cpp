// jit/tracer.cpp -- the Recorder that turns ops on placeholders into an ir::Graph.
#include "jit/tracer.h"

#include <dlfcn.h>
#include <execinfo.h>
#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "autograd/autograd.h"
#include "runtime/api.h"
#include "runtime/autograd_meta.h"
#include "runtime/check.h"
#include "runtime/files.h"
#include "runtime/recorder.h"

namespace kiln::jit {
namespace {

// The first return address on the stack outside libkiln: the user's call.
ir::SourceLoc call_site() {
  static const std::string self = [] {
    Dl_info info;
    return dladdr(reinterpret_cast<void*>(&trace_function), &info) && info.dli_fname ? std::string(info.dli_fname)
                                                                                     : std::string();
  }();
  void* frames[24];
  int n = backtrace(frames, 24);
  ir::SourceLoc loc;
  for (int i = 1; i < n; ++i) {
    Dl_info info;
    if (!dladdr(frames[i], &info) || !info.dli_fname) continue;
    std::string_view mod = info.dli_fname;
    if (mod == self || mod.find("libstdc++") != std::string_view::npos || mod.find("libc.so") != std::string_view::npos)
      continue;
    loc.module = info.dli_fname;
    // A return address points after the call; step back into it for the line.
    loc.offset = reinterpret_cast<uintptr_t>(frames[i]) - reinterpret_cast<uintptr_t>(info.dli_fbase) - 1;
    break;
  }
  return loc;
}

class Tracer final : public Recorder {
 public:
  Tracer(std::string name, const ParamNames& names) {
    t_.graph.name = std::move(name);
    for (const auto& [n, t] : names)
      if (t.defined()) names_[t.impl()] = n;
  }

  Trace finish(std::vector<Tensor> results) {
    ir::Graph& g = t_.graph;
    for (const Tensor& r : results) {
      KILN_CHECK(r.defined(), "jit::trace: the function returned an undefined tensor");
      g.outputs.push_back(value_for(r));
    }
    t_.num_results = results.size();
    for (size_t k = 0; k < joint_grads_.size(); ++k) {
      if (!joint_grads_[k].defined()) continue;
      t_.wrt[k].output = static_cast<int>(g.outputs.size());
      g.outputs.push_back(value_for(joint_grads_[k]));
    }
    // A tensor whose gradient the function set or dropped without using the tensor: captured,
    // so that every call does it.
    for (const auto& [t, start] : grad_at_start_)
      if (!param_value_.count(t.impl())) value_for(t);
    // Gradients the function left on captured tensors are outputs, written back per call (or
    // cleared, when the function dropped them); the tensors get their pre-trace gradients back.
    for (size_t i = 0; i < t_.params.size(); ++i) {
      Tensor p = t_.params[i];
      Tensor now = p.grad();
      if (now.impl() == grad_before_[i].impl() && !grad_written_.count(p.impl())) continue;
      if (now.defined()) {
        uint32_t v = value_for(now);
        t_.grad_outputs.emplace_back(i, g.outputs.size());
        g.outputs.push_back(v);
      } else {
        t_.grad_cleared.push_back(i);
      }
      p.set_grad(grad_before_[i]);
    }
    return std::move(t_);
  }

  void on_backward() override { t_.ran_backward = true; }
  void on_custom_function(const std::string& name) override { custom_functions_.push_back(name); }

  // After the function returned `results` with this tracer active: when it only computed
  // and some results need gradients, traces the gradients of the arguments and captured
  // tensors that require grad with respect to them. A call of a function that could not be
  // traced so runs its ops taped, which would lose a custom function's backward: refused.
  void differentiate(const std::vector<Tensor>& results) {
    if (!grad_enabled() || t_.ran_backward) return;
    joint(results);
    if (t_.joint || custom_functions_.empty()) return;
    bool needs_grad = false;
    for (const Tensor& r : results) needs_grad = needs_grad || (r.defined() && r.requires_grad());
    KILN_CHECK(!needs_grad,
               "jit::trace: @{} calls the custom autograd function {} and its results need gradients, but it "
               "cannot be traced together with its backward: it writes captured tensors in place, reads or sets "
               "gradients, or calls an op without a derivative. Call the custom function outside the traced "
               "function, or trace the whole training step (backward and update inside)",
               t_.graph.name, custom_functions_[0]);
  }

  // differentiate()'s joint trace, when the function allows one.
  void joint(const std::vector<Tensor>& results) {
    if (!grad_written_.empty()) return;
    ir::Graph& g = t_.graph;
    // Captured tensors' gradients are inputs in case the function reads them; it must not.
    std::unordered_set<uint32_t> grads;
    for (auto [p, pos] : t_.grad_inputs) grads.insert(g.inputs[pos]);
    for (const ir::Node& n : g.nodes) {
      if (n.kind == ir::NodeKind::Assign) return;
      for (uint32_t v : n.inputs)
        if (grads.count(v)) return;
    }
    for (const Tensor& r : results)
      if (auto it = value_.find(r.impl()); it != value_.end() && grads.count(it->second)) return;
    std::vector<Tensor> outs, wrt;
    std::vector<size_t> diff;
    for (size_t i = 0; i < results.size(); ++i)
      if (results[i].defined() && results[i].requires_grad()) diff.push_back(i), outs.push_back(results[i]);
    std::vector<Trace::Wrt> where;
    for (size_t i = 0; i < args_.size(); ++i)
      if (args_[i].requires_grad()) where.push_back({false, i, -1}), wrt.push_back(args_[i]);
    for (size_t i = 0; i < t_.params.size(); ++i)
      if (t_.params[i].requires_grad()) where.push_back({true, i, -1}), wrt.push_back(t_.params[i]);
    if (outs.empty() || wrt.empty()) return;
    size_t nodes = g.nodes.size(), inputs = g.inputs.size();
    std::vector<Tensor> seeds;
    for (const Tensor& o : outs) seeds.push_back(new_input(o.type()));
    try {
      joint_grads_ = autograd::grad(outs, wrt, seeds, /*retain_graph=*/true, false, /*allow_unused=*/true);
    } catch (const Error&) {
      // An op without a derivative: calls run taped, and backward() reports it as eagerly.
      joint_grads_.clear();
      g.nodes.resize(nodes);
      g.inputs.resize(inputs);
      for (auto it = producer_.begin(); it != producer_.end();)
        it = it->second >= nodes ? producer_.erase(it) : std::next(it);
      return;
    }
    // Unread, the gradients are no inputs, and whether they are defined does not matter.
    std::vector<uint32_t> kept;
    for (uint32_t v : g.inputs)
      if (!grads.count(v)) kept.push_back(v);
    g.inputs = std::move(kept);
    if (rng_.defined())
      t_.rng_input =
          static_cast<int>(std::find(g.inputs.begin(), g.inputs.end(), value_[rng_.impl()]) - g.inputs.begin());
    t_.grad_inputs.clear();
    std::fill(t_.grad_guard.begin(), t_.grad_guard.end(), int8_t{-1});
    t_.joint = true;
    t_.diff_results = std::move(diff);
    t_.wrt = std::move(where);
  }

  void on_grad_change(const Tensor& t) override {
    const TensorImpl* s = t.impl();
    if (!t.has_storage() || literal_.count(s->storage.get())) return;
    if (!grad_written_.insert(s).second || param_value_.count(s)) return;
    grad_at_start_.emplace_back(t, t.grad());
  }

  Tensor record(OpId id, std::span<const Tensor> in, const Attrs& attrs, const TensorType& type) override {
    ir::Node n;
    n.op = id;
    n.attrs = attrs;
    for (const Tensor& t : in) n.inputs.push_back(value_for(t));
    n.result = t_.graph.add_value(type);
    n.loc = call_site();
    n.grad = grad_enabled();
    return define(std::move(n), type);
  }

  void record_assign(const Tensor& self, const Tensor& value) override {
    uint32_t v = value_for(value);
    const TensorImpl* s = self.impl();
    if (self.has_storage() && !literal_.count(s->storage.get())) {
      value_for(self);  // captures it as a parameter if it is new
      auto it = param_value_.find(s);
      KILN_ASSERT(it != param_value_.end());
      ir::Node n;
      n.kind = ir::NodeKind::Assign;
      n.inputs = {it->second, v};
      n.loc = call_site();
      t_.graph.nodes.push_back(std::move(n));
    } else if (!self.has_storage()) {
      bool argument = std::any_of(args_.begin(), args_.end(), [&](const Tensor& a) { return a.impl() == s; });
      KILN_CHECK(!argument,
                 "jit::trace: an in-place write into an argument ({}) of the traced "
                 "function is not supported; return the new value instead",
                 self.type().str());
      auto it = value_.find(s);
      KILN_CHECK(it != value_.end(), "jit::trace: in-place write into a tensor from another trace");
      const ir::Node* def = producer(it->second);
      KILN_CHECK(!def || def->kind != ir::NodeKind::Op || op_family(def->op) != OpFamily::View,
                 "jit::trace: in-place write through a view {} inside a traced function is not "
                 "supported; compute the new value out of place",
                 describe(s));
    }
    if (auto it = value_.find(s); it != value_.end()) mark_stale(it->second);
    stale_.erase(v);
    value_[s] = v;  // later reads see the new value
  }

  void alias(const Tensor& from, const Tensor& to) override {
    value_[to.impl()] = value_for(from);
    keep_.push_back(to);
  }

  void on_new_storage(const Storage* s) override { literal_.insert(s); }

  // The first draw makes the generator's state an input; each draw reads it at the counter
  // where the draws before it in the function end.
  Tensor random_state(int64_t n) override {
    ir::Graph& g = t_.graph;
    if (!rng_.defined()) {
      t_.rng_input = static_cast<int>(g.inputs.size());
      rng_ = new_input(TensorType{DType::I64, {2}});
    }
    Tensor s = t_.rng_draws == 0 ? rng_ : rng_ + from_vector<int64_t>({0, t_.rng_draws});
    t_.rng_draws += n;
    return s;
  }

  std::string describe(const TensorImpl* t) override {
    auto it = value_.find(t);
    if (it == value_.end()) return "(not part of this trace)";
    uint32_t v = it->second;
    for (size_t i = 0; i < t_.graph.inputs.size(); ++i)
      if (t_.graph.inputs[i] == v) return fmt::format("(argument {} of the traced function)", i);
    if (const ir::Node* n = producer(v)) {
      ir::SourceLoc loc = n->loc;
      ir::Graph one;
      one.nodes.push_back(*n);
      resolve_locations(one);
      std::string where =
          one.nodes[0].loc.known() ? fmt::format(" at {}:{}", one.nodes[0].loc.file, one.nodes[0].loc.line) : "";
      return fmt::format("(the result of {}{})", n->kind == ir::NodeKind::Op ? op_name(n->op) : "const", where);
    }
    return "(a captured tensor)";
  }

  // Placeholders for the arguments: same types and requires-grad as the real inputs.
  std::vector<Tensor> arguments(std::span<const Tensor> inputs) {
    std::vector<Tensor> args;
    for (const Tensor& x : inputs) {
      KILN_CHECK(x.defined(), "jit::trace: argument {} is undefined", args.size());
      Tensor p = new_input(x.type());
      if (x.requires_grad()) p.requires_grad_();
      args_.push_back(p);
      args.push_back(p);
    }
    t_.num_args = args.size();
    return args;
  }

 private:
  // A placeholder for a new input of the graph (an argument, a result's gradient, the
  // generator's state).
  Tensor new_input(const TensorType& type) {
    Tensor p = Tensor::placeholder(type);
    uint32_t v = t_.graph.add_value(type);
    t_.graph.inputs.push_back(v);
    value_[p.impl()] = v;
    keep_.push_back(p);
    return p;
  }

  Tensor define(ir::Node n, const TensorType& type) {
    Tensor out = Tensor::placeholder(type);
    value_[out.impl()] = n.result;
    producer_[n.result] = t_.graph.nodes.size();
    t_.graph.nodes.push_back(std::move(n));
    keep_.push_back(out);
    return out;
  }

  // Eagerly, views and aliases (detach) of a tensor written in place see the new values; in
  // the graph they still hold the old value. So they may not be read after the write.
  void mark_stale(uint32_t old) {
    stale_.insert(old);
    for (const ir::Node& n : t_.graph.nodes) {
      bool view = n.kind == ir::NodeKind::Op && op_family(n.op) == OpFamily::View;
      if (view && stale_.count(n.inputs[0])) stale_.insert(n.result);
    }
  }

  const ir::Node* producer(uint32_t v) const {
    auto it = producer_.find(v);
    return it == producer_.end() ? nullptr : &t_.graph.nodes[it->second];
  }

  // The value of a tensor the function used: a known one, a literal (constant), or a captured
  // tensor (parameter, live).
  uint32_t value_for(const Tensor& t) {
    if (auto it = value_.find(t.impl()); it != value_.end()) {
      KILN_CHECK(!stale_.count(it->second),
                 "jit::trace: {} {} is read after an in-place write to "
                 "the tensor it views or aliases; in a trace it would not see the write: take the "
                 "view (or detach) again after the write",
                 t.type().str(), describe(t.impl()));
      return it->second;
    }
    KILN_CHECK(t.has_storage(), "jit::trace: a traced tensor {} from outside this trace was used", t.type().str());
    ir::Graph& g = t_.graph;
    uint32_t v = g.add_value(t.type());
    if (literal_.count(t.impl()->storage.get())) {
      ir::Node n;
      n.kind = ir::NodeKind::Const;
      {
        RecorderGuard off(nullptr);  // a snapshot, made eagerly: the literal may change later
        n.constant = t.detach().clone();
      }
      n.result = v;
      n.loc = call_site();
      producer_[v] = g.nodes.size();
      g.nodes.push_back(std::move(n));
    } else {
      g.params.push_back(v);
      auto named = names_.find(t.impl());
      g.param_names.push_back(named == names_.end() ? std::string() : named->second);
      t_.params.push_back(t);
      param_value_[t.impl()] = v;
      Tensor grad = t.grad();
      auto replaced = std::find_if(grad_at_start_.begin(), grad_at_start_.end(),
                                   [&](const auto& e) { return e.first.impl() == t.impl(); });
      if (replaced != grad_at_start_.end()) {
        // The function replaced the gradient before using the tensor: it never reads the
        // gradient a call starts with, whatever that is.
        grad_before_.push_back(replaced->second);
        t_.grad_guard.push_back(-1);
      } else {
        grad_before_.push_back(grad);
        t_.grad_guard.push_back(grad.defined() ? 1 : 0);
      }
      if (replaced == grad_at_start_.end() && grad.defined() && grad.has_storage()) {
        // The gradient is state the function may read.
        uint32_t gv = g.add_value(grad.type());
        t_.grad_inputs.emplace_back(t_.params.size() - 1, g.inputs.size());
        g.inputs.push_back(gv);
        value_[grad.impl()] = gv;
      }
    }
    value_[t.impl()] = v;
    keep_.push_back(t);
    return v;
  }

  Trace t_;
  std::unordered_map<const TensorImpl*, uint32_t> value_;        // handle -> current value
  std::unordered_map<const TensorImpl*, uint32_t> param_value_;  // captured tensor -> its param
  std::unordered_map<uint32_t, size_t> producer_;                // value -> defining node
  std::unordered_set<const Storage*> literal_;                   // storage made during the trace
  std::vector<Tensor> grad_before_;                              // per param
  // Tensors whose grad() the function replaced before it used them, with their gradient then.
  std::vector<std::pair<Tensor, Tensor>> grad_at_start_;
  std::unordered_set<const TensorImpl*> grad_written_;        // tensors whose grad() the function set
  std::vector<Tensor> args_;                                  // the arguments' placeholders
  std::vector<Tensor> joint_grads_;                           // differentiate(): per Trace::wrt, its traced gradient
  std::vector<std::string> custom_functions_;                 // the custom functions whose nodes were recorded
  Tensor rng_;                                                // the generator's state, once the function draws
  std::unordered_set<uint32_t> stale_;                        // views and aliases of values since written in place
  std::unordered_map<const TensorImpl*, std::string> names_;  // names for captured tensors
  std::vector<Tensor> keep_;  // every handle seen, so no TensorImpl address is reused meanwhile
};

}  // namespace

std::string detail::fmt_arity_error(size_t arity) {
  return fmt::format("jit::trace: the function cannot be called with {} tensors (0 to 8 are supported)", arity);
}

void detail::check_call_arity(size_t arity, size_t given) {
  KILN_CHECK(arity == given, "jit::Function: the function takes {} arguments, got {}", arity, given);
}

Trace trace_function(const TensorFn& fn, std::span<const Tensor> inputs, const std::string& name,
                     const ParamNames& names, bool differentiate) {
  Tracer tracer(name, names);
  std::vector<Tensor> results;
  {
    std::vector<Tensor> args = tracer.arguments(inputs);
    RecorderGuard guard(&tracer);
    results = fn(args);
    if (differentiate) tracer.differentiate(results);
  }
  return tracer.finish(std::move(results));
}

void resolve_locations(ir::Graph& g) {
  // One addr2line run per module resolves every pending address.
  std::unordered_map<std::string, std::vector<ir::SourceLoc*>> pending;
  for (ir::Node& n : g.nodes)
    if (!n.loc.known() && !n.loc.module.empty()) pending[n.loc.module].push_back(&n.loc);
  for (auto& [module, locs] : pending) {
    // No shell: the module path is one argv entry, whatever characters it holds.
    std::vector<std::string> argv = {"addr2line", "-e", module};
    for (ir::SourceLoc* l : locs) argv.push_back(fmt::format("{:#x}", l->offset));
    std::optional<std::string> out = files::run_program(argv);
    if (!out) continue;
    size_t at = 0;
    for (ir::SourceLoc* l : locs) {
      if (at >= out->size()) break;
      size_t eol = out->find('\n', at);
      std::string s = out->substr(at, eol == std::string::npos ? std::string::npos : eol - at);
      at = eol == std::string::npos ? out->size() : eol + 1;
      while (!s.empty() && s.back() == '\r') s.pop_back();
      size_t colon = s.rfind(':');
      if (colon == std::string::npos || s.compare(0, 2, "??") == 0) continue;
      std::string file = s.substr(0, colon);
      int ln = std::atoi(s.c_str() + colon + 1);
      if (ln <= 0) continue;
      size_t slash = file.rfind('/');
      l->file = slash == std::string::npos ? file : file.substr(slash + 1);
      l->line = ln;
    }
  }
}

}  // namespace kiln::jit
