// autograd/function.cpp -- custom autograd functions: the node a call records, its context and
// the checks on what the user's backward returns.
#include "autograd/function.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>

#include "autograd/autograd.h"
#include "runtime/api.h"
#include "runtime/check.h"
#include "runtime/cuda.h"
#include "runtime/recorder.h"

namespace kiln::autograd {

// ---- SavedValue ----------------------------------------------------------------------------

const char* SavedValue::kind() const {
  static constexpr const char* kNames[] = {"none", "bool", "int", "double", "string", "int list", "tensor"};
  return kNames[v_.index()];
}

namespace {
template <typename V>
const V& held(const std::variant<std::monostate, bool, int64_t, double, std::string, std::vector<int64_t>, Tensor>& v,
              const SavedValue& s, const char* want) {
  const V* p = std::get_if<V>(&v);
  KILN_CHECK(p, "saved_data: asked for {} of a value that holds {}", want, s.kind());
  return *p;
}
}  // namespace

bool SavedValue::to_bool() const { return held<bool>(v_, *this, "a bool"); }
int64_t SavedValue::to_int() const { return held<int64_t>(v_, *this, "an int"); }
double SavedValue::to_double() const {
  if (const int64_t* i = std::get_if<int64_t>(&v_)) return static_cast<double>(*i);
  return held<double>(v_, *this, "a double");
}
const std::string& SavedValue::to_string() const { return held<std::string>(v_, *this, "a string"); }
const std::vector<int64_t>& SavedValue::to_int_list() const {
  return held<std::vector<int64_t>>(v_, *this, "an int list");
}
const Tensor& SavedValue::to_tensor() const { return held<Tensor>(v_, *this, "a tensor"); }

// ---- AutogradContext -----------------------------------------------------------------------

void AutogradContext::save_for_backward(tensor_list tensors) {
  KILN_CHECK(!in_backward_ && !node_, "save_for_backward: call it in the forward, not after");
  to_save_ = std::move(tensors);
}

tensor_list AutogradContext::get_saved_variables() const {
  KILN_CHECK(in_backward_, "get_saved_variables: call it in the backward");
  tensor_list out(saved_.begin(), saved_.end());
  if (!grad_enabled()) return out;
  // create_graph: a saved output was kept without its history (it would hold its own node
  // alive); the backward's ops need it, so an alias gets that history back.
  for (size_t k = 0; k < out.size(); ++k)
    if (saved_output_[k] >= 0 && out[k].defined()) {
      out[k] = out[k].detach();
      set_history(out[k], Ref<Node>(node_), static_cast<uint32_t>(saved_output_[k]));
    }
  return out;
}

bool AutogradContext::needs_input_grad(size_t index) const {
  KILN_CHECK(index < needs_.size(), "needs_input_grad: index {} past the forward's {} arguments", index, needs_.size());
  return needs_[index] != 0;
}

bool AutogradContext::needs_input_grad(std::initializer_list<size_t> indices) const {
  return std::any_of(indices.begin(), indices.end(), [&](size_t i) { return needs_input_grad(i); });
}

void AutogradContext::mark_dirty(const tensor_list& inputs) {
  KILN_CHECK(!in_backward_ && !node_, "mark_dirty: call it in the forward");
  for (const Tensor& t : inputs)
    if (t.defined()) dirty_.push_back(t.impl());
}

void AutogradContext::mark_non_differentiable(const tensor_list& outputs) {
  KILN_CHECK(!in_backward_ && !node_, "mark_non_differentiable: call it in the forward");
  for (const Tensor& t : outputs)
    if (t.defined()) non_differentiable_.push_back(t.impl());
}

namespace detail {
namespace {

std::string demangled(const std::type_info& type) {
  int status = 0;
  char* d = abi::__cxa_demangle(type.name(), nullptr, nullptr, &status);
  std::string name = status == 0 && d ? d : type.name();
  std::free(d);
  return name;
}

bool contains(const std::vector<const TensorImpl*>& set, const TensorImpl* t) {
  return std::find(set.begin(), set.end(), t) != set.end();
}

// Whether one of `list` (undefined entries aside) is the tensor `t`.
bool holds(const tensor_list& list, const TensorImpl* t) {
  return std::any_of(list.begin(), list.end(), [&](const Tensor& x) { return x.defined() && x.impl() == t; });
}

}  // namespace

// The node's backward: the user's, with its context, and checks on what it returns. Edges:
// one per argument position that holds a tensor (an undefined one gets an empty edge).
class FunctionBackward final : public NodeBackward {
 public:
  FunctionBackward(std::shared_ptr<AutogradContext> ctx, BackwardFn fn, std::string function,
                   std::vector<char> is_tensor, std::vector<TensorType> out_types)
      : ctx_(std::move(ctx)),
        fn_(fn),
        function_(std::move(function)),
        name_(function_ + "Backward"),
        is_tensor_(std::move(is_tensor)),
        out_types_(std::move(out_types)) {}

  const std::string& name() const override { return name_; }
  bool differentiable() const override { return true; }

  std::vector<Tensor> backward(std::span<const Tensor> saved, std::span<const Tensor> grads,
                               std::span<const char> needs, const GradReady*) const override {
    AutogradContext& ctx = *ctx_;
    // needs_input_grad by argument position, from the edges' needs.
    std::vector<char> by_position(is_tensor_.size(), 0);
    for (size_t p = 0, e = 0; p < is_tensor_.size(); ++p)
      if (is_tensor_[p]) by_position[p] = needs[e++];
    tensor_list g(out_types_.size());
    for (size_t k = 0; k < g.size(); ++k) {
      if (k < grads.size() && grads[k].defined()) g[k] = grads[k];
      else if (ctx.materialize_grads_) g[k] = zeros(out_types_[k].shape, out_types_[k].dtype, out_types_[k].device);
    }
    struct InBackward {  // also when the user's backward throws
      AutogradContext& c;
      std::vector<char> forward_needs;
      InBackward(AutogradContext& c, std::span<const Tensor> saved, std::vector<char> needs)
          : c(c), forward_needs(std::move(c.needs_)) {
        c.saved_ = saved, c.in_backward_ = true, c.needs_ = std::move(needs);
      }
      ~InBackward() { c.saved_ = {}, c.in_backward_ = false, c.needs_ = std::move(forward_needs); }
    } scope(ctx, saved, std::move(by_position));
    tensor_list r = fn_(&ctx, std::move(g));
    return edge_gradients(std::move(r), needs);
  }

 private:
  // One gradient per edge from the user's one per argument position, checked.
  std::vector<Tensor> edge_gradients(tensor_list r, std::span<const char> needs) const {
    const size_t n = is_tensor_.size();
    if (r.size() > n) {  // more is fine as long as the extra ones are undefined, as in LibTorch
      for (size_t p = n; p < r.size(); ++p)
        KILN_CHECK(!r[p].defined(), "{}: backward returned {} gradients, but forward took {} arguments", function_,
                   r.size(), n);
      r.resize(n);
    }
    KILN_CHECK(r.size() == n,
               "{}: backward returned {} gradients, but forward took {} arguments (return one per argument, "
               "an undefined Tensor() where there is none)",
               function_, r.size(), n);
    std::vector<Tensor> out;
    const std::vector<TensorType>& in_types = ctx_->node_->in_types;
    for (size_t p = 0; p < n; ++p) {
      if (!is_tensor_[p]) {
        KILN_CHECK(!r[p].defined(), "{}: backward returned a gradient {} for argument {}, which is not a tensor",
                   function_, r[p].type().str(), p);
        continue;
      }
      const size_t e = out.size();
      Tensor gp = needs[e] ? r[p] : Tensor();
      if (gp.defined()) {
        const TensorType& want = in_types[e];
        KILN_CHECK(gp.device() == want.device,
                   "{}: backward returned a gradient {} for argument {}, an input on {}: it must be on the input's "
                   "device",
                   function_, gp.type().str(), p, want.device.str());
        KILN_CHECK(is_float(gp.dtype()), "{}: backward returned a gradient {} for argument {}: it must be a float",
                   function_, gp.type().str(), p);
        bool fits = gp.shape() == want.shape;
        if (!fits) {
          // It may be broadcast to the input's shape; the engine then sums it back.
          try {
            fits = broadcast_shapes(want.shape, gp.shape(), "backward") == gp.shape();
          } catch (const Error&) {
            fits = false;
          }
        }
        KILN_CHECK(fits, "{}: backward returned a gradient {} for argument {}, an input {}: the shapes must match",
                   function_, gp.type().str(), p, want.str());
      }
      out.push_back(gp);
    }
    return out;
  }

  std::shared_ptr<AutogradContext> ctx_;
  BackwardFn fn_;
  std::string function_, name_;
  std::vector<char> is_tensor_;
  std::vector<TensorType> out_types_;
};

void FunctionCall::begin() {
  AutogradContext& c = *ctx;
  c.needs_.assign(inputs.size(), 0);
  if (!grad_enabled()) return;
  for (size_t p = 0; p < inputs.size(); ++p) {
    if (!is_tensor[p]) continue;
    c.needs_[p] = inputs[p].defined() && inputs[p].requires_grad();
    edges.push_back(c.needs_[p] ? edge_to(inputs[p]) : Edge());
  }
}

tensor_list FunctionCall::finish(tensor_list outputs, BackwardFn backward, const std::type_info& type) {
  AutogradContext& c = *ctx;
  const std::string function = demangled(type);
  for (const TensorImpl* d : c.dirty_) {
    KILN_CHECK(holds(inputs, d), "{}: mark_dirty was given a tensor that is not one of the forward's inputs", function);
    KILN_CHECK(holds(outputs, d), "{}: an input marked dirty must also be returned by the forward", function);
  }
  for (const TensorImpl* o : c.non_differentiable_)
    KILN_CHECK(holds(outputs, o), "{}: mark_non_differentiable was given a tensor the forward did not return",
               function);
  bool record = std::any_of(c.needs_.begin(), c.needs_.end(), [](char n) { return n != 0; });
  // An input returned as it is, and not changed in place, is returned as a new tensor on the
  // same memory, so the input keeps its own history.
  for (Tensor& out : outputs)
    if (out.defined() && holds(inputs, out.impl()) && !contains(c.dirty_, out.impl())) out = out.detach();
  if (!record) return outputs;

  std::vector<TensorType> out_types;
  std::vector<char> out_differentiable;
  Device device = cpu;
  for (const Tensor& out : outputs) {
    KILN_CHECK(out.defined(), "{}: forward returned an undefined tensor", function);
    out_types.push_back(out.type());
    const bool differentiable = is_float(out.dtype()) && !contains(c.non_differentiable_, out.impl());
    out_differentiable.push_back(differentiable);
    if (differentiable) device = out.device();
  }
  auto node = make_ref<Node>();
  node->sequence = next_node_sequence();
  node->num_outputs = static_cast<uint32_t>(outputs.size());
  node->device = device;  // its backward runs where the forward ran, as an op's does
  if (device.is_cuda()) node->stream = cuda::current_stream(device.index).handle();
  node->next = std::move(edges);
  for (size_t p = 0; p < inputs.size(); ++p)
    if (is_tensor[p]) node->in_types.push_back(inputs[p].defined() ? inputs[p].type() : TensorType());
  // Saved outputs without their history (it would hold this node alive: a cycle).
  for (const Tensor& s : c.to_save_) {
    int output = -1;
    for (size_t k = 0; k < outputs.size() && s.defined(); ++k)
      if (outputs[k].impl() == s.impl()) output = static_cast<int>(k);
    c.saved_output_.push_back(output);
    save_for_node(*node, output >= 0 ? s.detach() : s);
  }
  c.to_save_.clear();
  c.node_ = node.get();
  if (Recorder* r = active_recorder()) r->on_custom_function(function);
  node->custom = std::make_shared<FunctionBackward>(ctx, backward, function, is_tensor, std::move(out_types));
  for (size_t k = 0; k < outputs.size(); ++k) {
    if (!out_differentiable[k]) continue;
    TensorImpl* t = outputs[k].impl();
    KILN_CHECK(!(t->autograd && t->autograd->requires_grad),
               "{}: forward changed {}, a leaf that requires grad, in place (mark_dirty); change a copy instead",
               function, outputs[k].type().str());
    set_history(outputs[k], node, static_cast<uint32_t>(k));
  }
  return outputs;
}

}  // namespace detail
}  // namespace kiln::autograd
