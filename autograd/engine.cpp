// autograd/engine.cpp -- the backward pass over the tape recorded by apply().
#include <algorithm>
#include <atomic>
#include <map>
#include <optional>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "autograd/autograd.h"
#include "runtime/api.h"
#include "runtime/autocast.h"
#include "runtime/autograd_meta.h"
#include "runtime/check.h"
#include "runtime/cuda.h"
#include "runtime/profiler.h"
#include "runtime/recorder.h"

namespace kiln {

bool is_grad_enabled() { return grad_enabled(); }

Tensor sum_to(const Tensor& g, const Dims& shape) {
  if (g.shape() == shape) return g;
  int64_t lead = g.dim() - static_cast<int64_t>(shape.size());
  KILN_ASSERT(lead >= 0);
  Dims axes;
  for (int64_t i = 0; i < g.dim(); ++i)
    if (i < lead || (shape[i - lead] == 1 && g.shape()[i] != 1)) axes.push_back(i);
  Tensor s = axes.empty() ? g : sum(g, axes, true);
  return s.reshape(shape);
}

namespace autograd {
namespace {

struct ByLatest {
  bool operator()(const Node* a, const Node* b) const { return a->sequence < b->sequence; }
};

Tensor accumulate(const Tensor& a, const Tensor& b) { return a.defined() ? a + b : b; }

// Fits a rule's gradient to the input it belongs to: shape (un-broadcast) and dtype.
Tensor fit(const Tensor& g, const TensorType& t) {
  Tensor r = sum_to(g, t.shape);
  return r.dtype() == t.dtype ? r : r.to(t.dtype);
}

void check_saved(const Node& n, bool create_graph) {
  KILN_CHECK(!n.released,
             "backward: trying to run {} backward a second time after its saved tensors were "
             "freed; pass retain_graph=true to the first backward",
             node_name(n));
  size_t k = 0;
  auto check = [&](const Tensor& t, const char* what) {
    if (!t.defined() || !t.has_storage()) return;
    uint32_t now = t.impl()->storage->version();
    KILN_CHECK(now == n.versions[k],
               "backward: a tensor {} saved by {} ({}) was modified by an in-place op since it "
               "was saved (version {}, expected {}); use an out-of-place op or clone() it first",
               t.type().str(), node_name(n), what, now, n.versions[k]);
  };
  size_t checked = n.custom && !create_graph ? n.custom->always_read(n.saved_in.size()) : n.saved_in.size();
  for (; k < checked; ++k) check(n.saved_in[k], "an input");
  k = n.saved_in.size();
  if (n.saved_out.defined()) check(n.saved_out, "its output");
}

// The gradients of n's inputs (one per operand slot) from those of its outputs.
// (A custom node's inputs are all tensors, in `next` order.)
Grads run_node(Node& n, const Ref<Node>& self, std::vector<Tensor>& grads, bool create_graph,
               const NodeBackward::GradReady* ready) {
  profiler::Scope event(profiler::Kind::Autograd, profiler::enabled() ? node_name(n) : std::string());
  if (n.custom) {
    KILN_CHECK(!create_graph || n.custom->differentiable(),
               "backward: create_graph=true reached {}, a compiled function, whose "
               "backward graph is not itself differentiable; to differentiate twice, call the "
               "function outside jit (eagerly)",
               node_name(n));
    std::vector<char> needs;
    for (const Edge& e : n.next) needs.push_back(e.node || e.leaf);
    return n.custom->backward(n.saved_in, grads, needs, ready);
  }
  uint32_t needs = 0;
  for (size_t t = 0; t < n.next.size(); ++t)  // bits by operand slot (numbers take slots too)
    if (n.next[t].node || n.next[t].leaf)
      needs |= VjpArgs::need_bit(slot_of_input(n.attrs.imm_mask, static_cast<int>(t)));
  if (!needs) return {};
  const OpDef& op = op_def(n.op);
  KILN_CHECK(op.vjp, "backward: {} has no derivative", op_name(n.op));
  Tensor out = n.saved_out;
  if (create_graph && out.defined()) {
    // The saved output was stored without history (it would hold its own node alive);
    // a differentiable backward needs it, so give a temporary alias that history back.
    out = out.detach();
    out.impl()->autograd = std::make_unique<AutogradMeta>();
    out.impl()->autograd->grad_fn = self;
  }
  VjpArgs args{n.op, n.saved_in, n.in_types, out, grads[0], n.attrs, needs};
  return op.vjp(args);
}

// The callbacks queued during each backward pass in progress on this thread, innermost last.
thread_local std::vector<std::vector<std::function<void()>>*> t_callbacks;

// Makes a pass's callback list the innermost for its lifetime.
struct CallbackScope {
  std::vector<std::function<void()>> list;
  CallbackScope() { t_callbacks.push_back(&list); }
  ~CallbackScope() { t_callbacks.pop_back(); }
  CallbackScope(const CallbackScope&) = delete;
  CallbackScope& operator=(const CallbackScope&) = delete;
  // Callbacks may queue more; they run too.
  void run() {
    for (size_t i = 0; i < list.size(); ++i) {
      std::function<void()> f = std::move(list[i]);
      f();
    }
    list.clear();
  }
};

bool has_hooks(const TensorImpl* leaf) { return leaf->autograd && !leaf->autograd->post_accumulate_hooks.empty(); }

void run_hooks(TensorImpl* leaf) {
  std::vector<AutogradMeta::Hook> hooks = leaf->autograd->post_accumulate_hooks;  // may change
  Tensor t{Ref<TensorImpl>(leaf)};
  for (const AutogradMeta::Hook& h : hooks) h.fn(t);
}

// Runs the backward pass. When `inputs` is non-empty, gradients reaching them are captured
// into `captured` instead of accumulating into leaves.
// The backward of a CUDA op runs on the stream its forward ran on, as in PyTorch's engine. The
// engine runs nodes one at a time, so each switch of stream (the first node's from the
// caller's) waits (an event, not the host) for everything queued on the stream before it; at the end, the caller's
// stream waits for the last one, so the gradients are ready for whatever it queues next.
class StreamOrder {
 public:
  // Makes n's stream current for the scope of the returned guard (none for a CPU node).
  std::optional<cuda::StreamGuard> enter(const Node& n) {
    if (!n.device.is_cuda()) return std::nullopt;
    cuda::Stream s(n.device.index, n.stream);
    if (!first_) first_ = cuda::current_stream(s.device_index());
    // The first node waits for the caller's stream too: the root gradient (ones, or the
    // caller's) was queued there.
    const cuda::Stream& before = last_ ? *last_ : *first_;
    if (!(before == s)) wait_for(before, s);
    last_ = s;
    return std::optional<cuda::StreamGuard>(std::in_place, s);
  }
  void finish() {
    if (last_ && first_ && !(*last_ == *first_)) wait_for(*last_, *first_);
  }

 private:
  static void wait_for(const cuda::Stream& before, const cuda::Stream& after) {
    cuda::Event done;
    done.record(before);
    done.block(after);
  }
  std::optional<cuda::Stream> first_, last_;  // the caller's stream; the last node's
};

void run(std::span<const Tensor> outputs, std::span<const Tensor> grad_outputs, bool retain_graph, bool create_graph,
         std::span<const Tensor> inputs, std::vector<Tensor>* captured) {
  KILN_CHECK(grad_outputs.empty() || grad_outputs.size() == outputs.size(),
             "backward: {} gradients given for {} outputs", grad_outputs.size(), outputs.size());
  GradModeGuard mode(create_graph);
  // Backward runs without autocast (runtime/autocast.h): each gradient comes back in its
  // input's dtype, whatever guard the caller holds.
  AutocastGuard no_autocast(DType::BF16, /*enabled=*/false);
  // Per node, the gradient of each of its outputs summed so far.
  std::unordered_map<const Node*, std::vector<Tensor>> buffer;
  auto add_to = [&](Node* n, uint32_t output_nr, const Tensor& g) {
    std::vector<Tensor>& slots = buffer[n];
    if (slots.empty()) slots.resize(n->num_outputs);
    slots[output_nr] = accumulate(slots[output_nr], g);
  };
  std::unordered_map<const TensorImpl*, Tensor> leaf_grads;  // when capturing
  std::map<std::pair<const Node*, uint32_t>, size_t> capture_node;
  std::unordered_map<const TensorImpl*, size_t> capture_leaf;
  for (size_t i = 0; i < inputs.size(); ++i) {
    KILN_CHECK(inputs[i].defined(), "grad: input {} is undefined", i);
    if (inputs[i].is_leaf()) capture_leaf[inputs[i].impl()] = i;
    else capture_node[{inputs[i].impl()->autograd->grad_fn.get(), inputs[i].impl()->autograd->output_nr}] = i;
  }
  bool capturing = captured != nullptr;

  CallbackScope callbacks;
  // Leaves with post-accumulate hooks: the gradients still to come in this pass (edges from
  // reachable nodes, and outputs that are the leaf), and whether any arrived.
  std::unordered_map<const TensorImpl*, int> leaf_pending;
  std::unordered_set<const TensorImpl*> leaf_received;
  auto deliver_leaf = [&](TensorImpl* leaf, const Tensor& g) {
    if (capturing) {
      if (capture_leaf.count(leaf)) leaf_grads[leaf] = accumulate(leaf_grads[leaf], g);
      return;
    }
    AutogradMeta& m = *leaf->autograd;
    m.grad = accumulate(m.grad, create_graph ? g : g.detach());
    if (!m.post_accumulate_hooks.empty()) leaf_received.insert(leaf);
  };
  // One of the leaf's expected gradients arrived (or its node had none for it).
  auto leaf_edge_done = [&](TensorImpl* leaf) {
    auto it = leaf_pending.find(leaf);
    if (it == leaf_pending.end() || --it->second > 0) return;
    if (leaf_received.count(leaf)) run_hooks(leaf);
  };

  std::vector<std::pair<TensorImpl*, Tensor>> leaf_roots;
  std::vector<Node*> roots;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& out = outputs[i];
    KILN_CHECK(out.defined(), "backward: output {} is undefined", i);
    KILN_CHECK(out.requires_grad(),
               "backward: output {} ({}) does not require grad: no input "
               "of the ops that made it requires grad",
               i, out.type().str());
    Tensor g;
    if (grad_outputs.empty() || !grad_outputs[i].defined()) {
      KILN_CHECK(out.numel() == 1,
                 "backward: output {} has {} elements; pass a gradient for "
                 "it (backward works implicitly only on one-element outputs)",
                 out.type().str(), out.numel());
      g = ones(out.shape(), out.dtype(), out.device());
    } else {
      g = grad_outputs[i];
      KILN_CHECK(g.shape() == out.shape(), "backward: gradient {} does not match output {}", g.type().str(),
                 out.type().str());
    }
    if (out.is_leaf()) {
      leaf_roots.emplace_back(out.impl(), g);
      continue;
    }
    Node* n = out.impl()->autograd->grad_fn.get();
    add_to(n, out.impl()->autograd->output_nr, g);
    roots.push_back(n);
  }

  // Count, for each reachable node, the edges that will deliver a gradient to it.
  std::unordered_map<const Node*, int> pending;
  std::vector<Node*> stack(roots.begin(), roots.end());
  std::unordered_set<const Node*> seen(roots.begin(), roots.end());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next) {
      if (e.leaf && !capturing && has_hooks(e.leaf.get())) ++leaf_pending[e.leaf.get()];
      if (!e.node) continue;
      ++pending[e.node.get()];
      if (seen.insert(e.node.get()).second) stack.push_back(e.node.get());
    }
  }
  if (!capturing)
    for (auto& [leaf, g] : leaf_roots)
      if (has_hooks(leaf)) ++leaf_pending[leaf];
  // grad() runs only the nodes whose gradients flow on to one of its inputs (as PyTorch's
  // engine): not the rest of the graph, which a backward nested in another's (a compiled
  // function's differentiable fallback) must leave as it is. A node's parents are created
  // after it, so by creation order each node's children are decided before it.
  std::unordered_set<const Node*> leads;
  if (capturing) {
    std::vector<const Node*> order(seen.begin(), seen.end());
    std::sort(order.begin(), order.end(), [](const Node* a, const Node* b) { return a->sequence < b->sequence; });
    std::unordered_set<const Node*> captures;
    for (const auto& [key, i] : capture_node) captures.insert(key.first);
    for (const Node* n : order)
      for (const Edge& e : n->next)
        if ((e.node && (captures.count(e.node.get()) || leads.count(e.node.get()))) ||
            (e.leaf && capture_leaf.count(e.leaf.get()))) {
          leads.insert(n);
          break;
        }
  }
  for (auto& [leaf, g] : leaf_roots) {
    deliver_leaf(leaf, g);
    leaf_edge_done(leaf);
  }
  std::priority_queue<Node*, std::vector<Node*>, ByLatest> ready;
  for (Node* r : roots)
    if (pending[r] == 0 && seen.erase(r)) ready.push(r);  // erase: push each root once

  StreamOrder streams;
  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    Ref<Node> keep(n);  // buffers and edges may drop the last other reference
    auto on_stream = streams.enter(*n);
    std::vector<Tensor> g(n->num_outputs);
    if (auto it = buffer.find(n); it != buffer.end()) {
      g = std::move(it->second);
      buffer.erase(it);
    }
    bool any = false;
    for (uint32_t o = 0; o < n->num_outputs; ++o) {
      if (!g[o].defined()) continue;
      any = true;
      if (auto it = capture_node.find({n, o}); it != capture_node.end())
        (*captured)[it->second] = accumulate((*captured)[it->second], g[o]);
    }
    // (a node of grad() leading to none of its inputs only hands on what reached it above)
    if (capturing && !leads.count(n)) continue;
    if (any) check_saved(*n, create_graph);
    // A compiled backward hands over each leaf's gradient as soon as it is written, so the
    // leaf's hooks run while the rest of its backward is computed.
    std::vector<char> early;  // per edge: its leaf's gradient was delivered already
    NodeBackward::GradReady on_ready;
    if (n->custom && !capturing) {
      early.assign(n->next.size(), 0);
      on_ready = [&](size_t t, const Tensor& gt) {
        const Edge& e = n->next.at(t);
        if (!e.leaf || !gt.defined() || early[t]) return;
        early[t] = 1;
        deliver_leaf(e.leaf.get(), fit(gt, n->in_types[t]));
        leaf_edge_done(e.leaf.get());
      };
    }
    // No gradient reached n: it still releases its children.
    Grads grads = any ? run_node(*n, keep, g, create_graph, on_ready ? &on_ready : nullptr) : Grads();
    int arity = static_cast<int>(n->next.size());
    if (!retain_graph) n->release();
    for (int t = 0; t < arity; ++t) {
      int k = slot_of_input(n->attrs.imm_mask, t);
      const Edge& e = n->next[t];
      const TensorType& type = n->in_types[t];
      if ((!e.node && !e.leaf) || (!early.empty() && early[t])) continue;
      Tensor gk = static_cast<size_t>(k) < grads.size() ? grads[k] : Tensor();
      if (e.node) {
        if (gk.defined()) add_to(e.node.get(), e.output_nr, fit(gk, type));
        if (--pending[e.node.get()] == 0) ready.push(e.node.get());
      } else {
        if (gk.defined()) deliver_leaf(e.leaf.get(), fit(gk, type));
        leaf_edge_done(e.leaf.get());
      }
    }
  }
  streams.finish();
  if (capturing) {
    for (auto& [leaf, g] : leaf_grads) (*captured)[capture_leaf[leaf]] = g;
  }
  callbacks.run();
}

}  // namespace

void backward(std::span<const Tensor> outputs, std::span<const Tensor> grad_outputs, bool retain_graph,
              bool create_graph) {
  if (!retain_graph && !create_graph)
    if (Recorder* r = active_recorder()) r->on_backward();
  // A differentiable backward refers to the forward graph, so it must outlive this pass.
  run(outputs, grad_outputs, retain_graph || create_graph, create_graph, {}, nullptr);
}

std::vector<Tensor> grad(std::span<const Tensor> outputs, std::span<const Tensor> inputs,
                         std::span<const Tensor> grad_outputs, bool retain_graph, bool create_graph,
                         bool allow_unused) {
  for (size_t i = 0; i < inputs.size(); ++i)
    KILN_CHECK(inputs[i].defined() && inputs[i].requires_grad(), "grad: input {} ({}) does not require grad", i,
               inputs[i].defined() ? inputs[i].type().str() : "undefined");
  std::vector<Tensor> out(inputs.size());
  run(outputs, grad_outputs, retain_graph || create_graph, create_graph, inputs, &out);
  for (size_t i = 0; i < out.size(); ++i)
    KILN_CHECK(out[i].defined() || allow_unused,
               "grad: input {} ({}) was not used to compute the outputs; pass allow_unused=true "
               "to get an undefined gradient for it",
               i, inputs[i].type().str());
  return out;
}

std::vector<Tensor> grad(std::initializer_list<Tensor> outputs, std::initializer_list<Tensor> inputs,
                         std::initializer_list<Tensor> grad_outputs, bool retain_graph, bool create_graph,
                         bool allow_unused) {
  return grad(
      std::span<const Tensor>(outputs.begin(), outputs.size()), std::span<const Tensor>(inputs.begin(), inputs.size()),
      std::span<const Tensor>(grad_outputs.begin(), grad_outputs.size()), retain_graph, create_graph, allow_unused);
}

void HookHandle::remove() {
  if (!leaf_.defined() || !leaf_.impl()->autograd) return;
  auto& hooks = leaf_.impl()->autograd->post_accumulate_hooks;
  std::erase_if(hooks, [&](const AutogradMeta::Hook& h) { return h.id == id_; });
  leaf_ = Tensor();
}

HookHandle register_post_accumulate_grad_hook(const Tensor& leaf, std::function<void(const Tensor&)> hook) {
  KILN_CHECK(leaf.defined() && leaf.requires_grad() && leaf.is_leaf(),
             "register_post_accumulate_grad_hook: the tensor must be a leaf that requires grad, got {}{}",
             leaf.defined() ? leaf.type().str() : std::string("an undefined tensor"),
             !leaf.defined()         ? ""
             : !leaf.requires_grad() ? " that does not require grad"
             : !leaf.is_leaf()       ? " made by an op"
                                     : "");
  KILN_CHECK(hook, "register_post_accumulate_grad_hook: the hook is empty");
  static std::atomic<uint64_t> next_id{1};
  uint64_t id = next_id++;
  leaf.impl()->autograd->post_accumulate_hooks.push_back({id, std::move(hook)});
  return HookHandle(leaf, id);
}

void queue_callback(std::function<void()> callback) {
  KILN_CHECK(!t_callbacks.empty(), "queue_callback: no backward pass is running on this thread");
  t_callbacks.back()->push_back(std::move(callback));
}

}  // namespace autograd

void Tensor::backward(const Tensor& gradient, bool retain_graph, bool create_graph) const {
  Tensor self = *this;
  autograd::backward(std::span<const Tensor>(&self, 1),
                     gradient.defined() ? std::span<const Tensor>(&gradient, 1) : std::span<const Tensor>(),
                     retain_graph, create_graph);
}

}  // namespace kiln
