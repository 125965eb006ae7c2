// runtime/tape.cpp -- recording ops for reverse mode, grad mode, and the Tensor methods that
// touch autograd state (requires_grad_, grad, detach, in-place ops).
#include <atomic>

#include "runtime/api.h"
#include "runtime/autograd_meta.h"
#include "runtime/backend.h"
#include "runtime/check.h"
#include "runtime/cuda.h"
#include "runtime/ops/loops.h"
#include "runtime/ops/pointwise.h"
#include "runtime/recorder.h"

namespace kiln {
namespace {

thread_local bool t_grad_enabled = true;
std::atomic<uint64_t> g_sequence{0};

uint32_t version_of(const Tensor& t) { return t.defined() && t.has_storage() ? t.impl()->storage->version() : 0; }

AutogradMeta& meta(TensorImpl* t) {
  if (!t->autograd) t->autograd = std::make_unique<AutogradMeta>();
  return *t->autograd;
}

// Drops a saved input the rule will not read: one the op is linear in, when no other input
// needs a gradient. Then y.mul_(2) on a y with history does not look like a stale save.
void drop_unread_inputs(Node& n, const OpDef& op) {
  int needing = 0;
  for (const Edge& e : n.next) needing += e.node || e.leaf;
  for (size_t t = 0; t < n.saved_in.size(); ++t) {
    int k = slot_of_input(n.attrs.imm_mask, static_cast<int>(t));
    bool own = n.next[t].node || n.next[t].leaf;
    if ((op.linear_in >> k & 1) && needing == static_cast<int>(own)) n.saved_in[t] = Tensor();
  }
}

}  // namespace

bool grad_enabled() { return t_grad_enabled; }

uint64_t next_node_sequence() { return g_sequence.fetch_add(1, std::memory_order_relaxed); }

std::string node_name(const Node& n) { return n.custom ? n.custom->name() : std::string(op_name(n.op)); }

Edge edge_to(const Tensor& t) {
  Edge e;
  TensorImpl* impl = t.impl();
  if (!requires_grad(impl)) return e;
  if (impl->autograd->grad_fn) {
    e.node = impl->autograd->grad_fn;
    e.output_nr = impl->autograd->output_nr;
  } else {
    e.leaf = Ref<TensorImpl>(impl);
  }
  return e;
}
void set_grad_enabled(bool on) { t_grad_enabled = on; }

void save_for_node(Node& node, const Tensor& t) {
  node.saved_in.push_back(t);
  node.versions.push_back(version_of(t));
}

void set_history(const Tensor& out, const Ref<Node>& node, uint32_t output_nr) {
  AutogradMeta& m = meta(out.impl());
  m.grad_fn = node;
  m.output_nr = output_nr;
}

void record_grad(OpId id, std::span<const Tensor> in, const Attrs& attrs, const Tensor& out) {
  const OpDef& op = op_def(id);
  if (!op.differentiable) return;
  auto node = make_ref<Node>();
  node->op = id;
  node->attrs = attrs;
  node->sequence = next_node_sequence();
  node->in_types.reserve(in.size());
  node->next.resize(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    node->in_types.push_back(in[i].type());
    node->next[i] = edge_to(in[i]);
  }
  if (op.saves & kSaveInputs) {
    node->saved_in.assign(in.begin(), in.end());
    for (const Tensor& t : in) node->versions.push_back(version_of(t));
    if (op.linear_in) drop_unread_inputs(*node, op);
  }
  if (op.saves & kSaveOutput) {
    // Without its link to `out`: out -> grad_fn -> node -> out would be a cycle, never freed.
    node->saved_out = out.detach();
    node->versions.push_back(version_of(out));
  }
  node->out_type = out.type();
  node->device = out.device();
  if (out.device().is_cuda()) node->stream = cuda::current_stream(out.device().index).handle();
  meta(out.impl()).grad_fn = std::move(node);
}

namespace {
// What the outermost ~Node still has to drop: links of the nodes freed inside it.
struct Graveyard {
  std::vector<Ref<Node>> nodes;
  std::vector<Tensor> tensors;
};
thread_local Graveyard* t_graveyard = nullptr;
}  // namespace

// Dropping the last reference to a chain of N nodes would nest N destructors (and overflow
// the stack for deep graphs); instead every node hands its links (edges and saved tensors,
// whose history holds earlier nodes) to the outermost ~Node, which drops them one at a
// time, as PyTorch's deleteNode does.
Node::~Node() {
  Graveyard local;
  bool outermost = t_graveyard == nullptr;
  if (outermost) t_graveyard = &local;
  for (Edge& e : next)
    if (e.node) t_graveyard->nodes.push_back(std::move(e.node));
  for (Tensor& t : saved_in) t_graveyard->tensors.push_back(std::move(t));
  if (saved_out.defined()) t_graveyard->tensors.push_back(std::move(saved_out));
  if (!outermost) return;
  while (!local.nodes.empty() || !local.tensors.empty()) {
    if (!local.tensors.empty()) {
      Tensor t = std::move(local.tensors.back());
      local.tensors.pop_back();
    } else {
      Ref<Node> n = std::move(local.nodes.back());
      local.nodes.pop_back();
    }  // the last reference may go here, appending that object's own links to `local`
  }
  t_graveyard = nullptr;
}

Tensor VjpArgs::operand(int k) const {
  int t = input_of_slot(attrs.imm_mask, k);
  return t >= 0 ? in[t] : scalar_tensor(attrs.imm[k], attrs.dtype);
}

// ---- Tensor's autograd methods ---------------------------------------------------------

bool Tensor::requires_grad() const { return defined() && kiln::requires_grad(impl()); }

Tensor& Tensor::requires_grad_(bool on) {
  KILN_CHECK(defined(), "requires_grad_: the tensor is undefined");
  KILN_CHECK(is_leaf() || on,
             "requires_grad_: {} is the result of {}; only leaves can stop "
             "requiring grad (use detach())",
             type().str(), grad_fn_name());
  KILN_CHECK(!on || is_float(dtype()),
             "requires_grad_: only float tensors can require "
             "gradients, got {}",
             type().str());
  meta(impl()).requires_grad = on;
  return *this;
}

Tensor Tensor::grad() const { return defined() && impl()->autograd ? impl()->autograd->grad : Tensor(); }

void Tensor::set_grad(const Tensor& g) {
  KILN_CHECK(!g.defined() || (g.shape() == shape() && g.dtype() == dtype()),
             "set_grad: gradient {} does not match tensor {}", g.type().str(), type().str());
  if (Recorder* r = active_recorder()) r->on_grad_change(*this);
  meta(impl()).grad = g;
}

void Tensor::zero_grad() {
  if (!defined()) return;
  if (Recorder* r = active_recorder()) r->on_grad_change(*this);
  if (impl()->autograd) impl()->autograd->grad = Tensor();
}

bool Tensor::is_leaf() const { return !defined() || !impl()->autograd || !impl()->autograd->grad_fn; }

std::string Tensor::grad_fn_name() const { return is_leaf() ? std::string() : node_name(*impl()->autograd->grad_fn); }

Tensor Tensor::detach() const {
  KILN_CHECK(defined(), "detach: the tensor is undefined");
  auto t = make_ref<TensorImpl>();
  t->storage = impl()->storage;
  t->offset = impl()->offset;
  t->shape = impl()->shape;
  t->strides = impl()->strides;
  t->dtype = impl()->dtype;
  t->device = impl()->device;
  // Not a view for autograd: holding a base here would keep the original's graph alive.
  Tensor out(std::move(t));
  if (!has_storage())
    if (Recorder* r = active_recorder()) r->alias(*this, out);
  return out;
}

// ---- in-place ops ------------------------------------------------------------------------

namespace {

// Throws unless a value of type `value` can be written into `self`: it broadcasts to self's
// shape, and its dtype converts (PyTorch's casting rule: anything but float -> integer and
// non-bool -> bool).
void check_assignable(const Tensor& self, const TensorType& value, const char* op) {
  KILN_CHECK(broadcast_shapes(value.shape, self.shape(), op) == self.shape(),
             "{}: result {} cannot be written into {} in place", op, value.str(), self.type().str());
  bool castable = !(is_float(value.dtype) && !is_float(self.dtype())) &&
                  !(value.dtype != DType::Bool && self.dtype() == DType::Bool);
  KILN_CHECK(castable, "{}: result dtype {} cannot be written into {} in place", op, dtype_name(value.dtype),
             self.type().str());
}

// Writes `value` into `self`, broadcasting it: the path of copy_ and fill_, and of every
// in-place op that is traced or recorded for autograd.
Tensor& assign(Tensor& self, const Tensor& value, const char* op) {
  KILN_CHECK(self.defined() && value.defined(), "{}: undefined tensor", op);
  check_no_internal_overlap(self, op);
  check_assignable(self, value.type(), op);
  TensorImpl* s = self.impl();
  bool record = grad_enabled() && (requires_grad(s) || requires_grad(value.impl()));
  if (record) {
    KILN_CHECK(!(s->autograd && s->autograd->requires_grad),
               "{}: {} is a leaf that requires grad; in-place changes to it would be lost to "
               "autograd (update it under NoGradGuard, as optimizers do)",
               op, self.type().str());
    TensorImpl* base = s->view_base.get();
    KILN_CHECK(!base || !requires_grad(base),
               "{}: {} is a view of a tensor that requires grad; in-place changes through a view "
               "are not supported under autograd (write the result out of place)",
               op, self.type().str());
  }
  Recorder* rec = active_recorder();
  // The value as self's type, for the recorder and the tape (eagerly, copy_into converts).
  Tensor v = value;
  if (rec || record) {
    if (v.dtype() != self.dtype()) v = v.to(self.dtype());
    if (v.shape() != self.shape()) v = v.expand(self.shape());
  }
  if (rec) {
    rec->record_assign(self, v);  // the trace writes it when the compiled function runs
  } else {
    copy_between(value, self);  // reads value first where it shares memory with self
    if (s->storage) s->storage->bump_version();
  }
  if (record) {
    // The tensor's history is now that of the value written into it.
    if (v.impl() == s) return self;
    if (!requires_grad(v.impl())) {
      s->autograd->grad_fn.reset();  // now holds a value without history
    } else {
      Tensor linked = v.is_leaf() ? apply(OpId::Copy, {v}) : v;
      meta(s).grad_fn = linked.impl()->autograd->grad_fn;
      meta(s).output_nr = linked.impl()->autograd->output_nr;
    }
  } else if (s->autograd && grad_enabled()) {
    s->autograd->grad_fn.reset();  // overwritten by a value without history
  }
  return self;
}

// Whether the in-place op runs its kernel straight into self: eagerly on the CPU, with no
// tracer and no gradient to record (else it computes out of place and goes through assign).
bool writes_directly(const Tensor& self, std::initializer_list<Operand> operands) {
  if (active_recorder() || !self.defined() || !self.has_storage() || !self.device().is_cpu()) return false;
  bool grad = grad_enabled();
  if (grad && requires_grad(self.impl())) return false;
  for (const Operand& o : operands) {
    const Tensor* t = o.tensor;
    if (!t) continue;
    if (!t->defined() || !t->has_storage() || !t->device().is_cpu()) return false;
    if (grad && requires_grad(t->impl())) return false;
  }
  return true;
}

// self = op(operands...), where operands usually start with self.
Tensor& update(Tensor& self, OpId id, std::initializer_list<Operand> operands, const char* op) {
  if (self.defined()) check_no_internal_overlap(self, op);
  if (!writes_directly(self, operands)) return assign(self, pointwise(id, operands), op);
  pointwise_into(id, operands, self, [&](const TensorType& t) { check_assignable(self, t, op); });
  self.impl()->storage->bump_version();
  return self;
}

}  // namespace

Tensor& Tensor::add_(const Tensor& o) { return update(*this, OpId::Add, {*this, o}, "add_"); }
Tensor& Tensor::add_(Scalar o) { return update(*this, OpId::Add, {*this, o}, "add_"); }
Tensor& Tensor::sub_(const Tensor& o) { return update(*this, OpId::Sub, {*this, o}, "sub_"); }
Tensor& Tensor::sub_(Scalar o) { return update(*this, OpId::Sub, {*this, o}, "sub_"); }
Tensor& Tensor::mul_(const Tensor& o) { return update(*this, OpId::Mul, {*this, o}, "mul_"); }
Tensor& Tensor::mul_(Scalar o) { return update(*this, OpId::Mul, {*this, o}, "mul_"); }
Tensor& Tensor::div_(const Tensor& o) { return update(*this, OpId::Div, {*this, o}, "div_"); }
Tensor& Tensor::div_(Scalar o) { return update(*this, OpId::Div, {*this, o}, "div_"); }
Tensor& Tensor::clamp_(std::optional<Scalar> lo, std::optional<Scalar> hi) {
  auto [l, h] = clamp_bounds(*this, lo, hi);
  return update(*this, OpId::Clamp, {*this, l, h}, "clamp_");
}
Tensor& Tensor::zero_() { return fill_(0); }
Tensor& Tensor::fill_(Scalar v) { return assign(*this, full({}, v, dtype()), "fill_"); }
Tensor& Tensor::copy_(const Tensor& src) { return assign(*this, src, "copy_"); }

}  // namespace kiln
