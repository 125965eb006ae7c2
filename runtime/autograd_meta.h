// runtime/autograd_meta.h -- the tape: what apply() records for reverse mode, per tensor and
// per op. The engine that walks it lives in autograd/engine.cpp.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/op.h"

namespace kiln {

struct Node;

/// Where the gradient of one input goes: the node that made it, or the leaf it is.
struct Edge {
  Ref<Node> node;
  Ref<TensorImpl> leaf;
  uint32_t output_nr = 0;  // which of node's outputs the gradient belongs to
};

/// The backward of a node that is not one op: a compiled function's backward graph, whose
/// forward made several outputs at once. The node's saved_in are the tensors it saved (their
/// versions are checked and they are freed as an op node's are).
class NodeBackward {
 public:
  virtual ~NodeBackward() = default;
  /// What the node is called in messages and grad_fn_name() ("jit @step").
  virtual const std::string& name() const = 0;
  /// Called with an input's gradient as soon as it is final, before the rest is computed (a
  /// leaf's hooks then start its gradient's all-reduce while the backward goes on).
  using GradReady = std::function<void(size_t edge, const Tensor& grad)>;
  /// The gradients of the node's inputs (one per edge in `next`; may be undefined where
  /// needs[i] is 0), from one gradient per output (undefined where none arrived). With
  /// `ready`, each gradient is also handed to it as soon as it is final (the engine then
  /// skips it in the result).
  virtual std::vector<Tensor> backward(std::span<const Tensor> saved, std::span<const Tensor> grads,
                                       std::span<const char> needs, const GradReady* ready) const = 0;
  /// Whether backward() records its own graph when called in grad mode (a backward with
  /// create_graph): else such a backward throws.
  virtual bool differentiable() const { return false; }
  /// How many of the node's `saved` tensors every backward reads: the engine checks their
  /// versions each time, the rest's only under create_graph (what a differentiable backward
  /// alone reads: a compiled composite's arguments, which batch norm's running statistics are,
  /// updated in place after the forward).
  virtual size_t always_read(size_t saved) const { return saved; }
};

/// One recorded op: enough to run its vjp once the output's gradient is known.
struct Node final : RefCounted {
  OpId op{};
  Attrs attrs;
  std::vector<Tensor> saved_in;      // the tensor inputs (empty when the rule needs none)
  Tensor saved_out;                  // the output without its history (when the rule needs it)
  std::vector<uint32_t> versions;    // storage versions when saved: inputs..., then output
  std::vector<TensorType> in_types;  // each tensor input's type, to fit its gradient
  std::vector<Edge> next;            // per tensor input; empty edge: needs no gradient
  TensorType out_type;
  uint32_t num_outputs = 1;                    // more than one only for a node with `custom`
  std::shared_ptr<const NodeBackward> custom;  // set: runs this instead of op's vjp
  uint64_t sequence = 0;                       // creation order; the engine runs later nodes first
  bool released = false;                       // saved tensors freed by a backward without retain_graph
  Device device;                               // where the op ran: its backward runs there too,
  uintptr_t stream = 0;                        // on this stream (CUDA: the forward's; 0: the default)

  ~Node();  // frees a long chain of nodes in a loop, not by recursion (runtime/tape.cpp)
  void release() {
    saved_in.clear();
    saved_out = Tensor();
    released = true;
  }
};

/// Per-tensor autograd state, allocated only for tensors that take part in autograd.
struct AutogradMeta {
  bool requires_grad = false;  // set on leaves by requires_grad_()
  Tensor grad;                 // accumulated by backward (leaves)
  Ref<Node> grad_fn;           // the op that made this tensor; null for leaves
  uint32_t output_nr = 0;      // which of grad_fn's outputs this tensor is
  /// Leaves: run once per backward(), after its last gradient was accumulated into `grad`.
  struct Hook {
    uint64_t id;
    std::function<void(const Tensor&)> fn;
  };
  std::vector<Hook> post_accumulate_hooks;
};

/// The name of a node's op, or of its custom backward.
std::string node_name(const Node& n);
/// Where the gradient of `t` goes: its grad_fn (and output), itself as a leaf, or nowhere.
Edge edge_to(const Tensor& t);

/// True when gradients flow into `t`: a leaf that requires grad, or a result of such.
inline bool requires_grad(const TensorImpl* t) {
  return t->autograd && (t->autograd->requires_grad || t->autograd->grad_fn);
}

/// A number for a new node: the engine runs later nodes first.
uint64_t next_node_sequence();

/// Records `out = op(in)` on the tape when grad mode is on and an input requires grad.
void record_grad(OpId id, std::span<const Tensor> in, const Attrs& attrs, const Tensor& out);

/// For nodes with a `custom` backward: keeps `t` in node.saved_in with its storage version, which
/// the engine checks before the backward reads it.
void save_for_node(Node& node, const Tensor& t);
/// Makes `out` output `output_nr` of `node`: its gradient goes there.
void set_history(const Tensor& out, const Ref<Node>& node, uint32_t output_nr);

/// Grad mode: when off (inside a NoGradGuard), ops are not recorded. Per thread.
bool grad_enabled();
void set_grad_enabled(bool on);

/// Sets grad mode for a scope; NoGradGuard (autograd/autograd.h) is GradModeGuard(false).
class GradModeGuard {
 public:
  explicit GradModeGuard(bool on) : prev_(grad_enabled()) { set_grad_enabled(on); }
  ~GradModeGuard() { set_grad_enabled(prev_); }
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace kiln
