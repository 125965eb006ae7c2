// autograd/function.h -- custom autograd functions: a forward and the backward that replaces
// autograd's derivative of it, in LibTorch's shape (torch::autograd::Function<T>).
//
//   struct Cube : autograd::Function<Cube> {
//     static Tensor forward(autograd::AutogradContext* ctx, Tensor x) {
//       ctx->save_for_backward({x});
//       return x * x * x;
//     }
//     static autograd::tensor_list backward(autograd::AutogradContext* ctx, autograd::tensor_list g) {
//       Tensor x = ctx->get_saved_variables()[0];
//       return {g[0] * 3 * x * x};
//     }
//   };
//   Tensor y = Cube::apply(x);
//
// Eagerly the call is one node on the tape. Traced (jit::trace), the forward's ops are recorded
// as usual and the node's backward, run by the engine on the tracer's tensors, records the
// user's backward: the compiled backward and a traced training step use the user's rule, and a
// saved module holds both as plain IR (JAX's custom_vjp).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "runtime/autograd_meta.h"
#include "runtime/tensor.h"

namespace kiln::autograd {

/// A list of tensors: what a custom function's backward takes and returns (LibTorch's
/// variable_list).
using tensor_list = std::vector<Tensor>;

/// A value a custom function keeps for its backward in ctx->saved_data (LibTorch's IValue
/// there): a bool, an integer, a float, a string, a list of integers or a tensor. The to_*
/// accessors throw a kiln::Error naming what it holds when asked for another kind.
class SavedValue {
 public:
  SavedValue() = default;
  SavedValue(bool v) : v_(v) {}
  SavedValue(int v) : v_(int64_t{v}) {}
  SavedValue(int64_t v) : v_(v) {}
  SavedValue(double v) : v_(v) {}
  SavedValue(float v) : v_(double{v}) {}
  SavedValue(const char* v) : v_(std::string(v)) {}
  SavedValue(std::string v) : v_(std::move(v)) {}
  SavedValue(std::vector<int64_t> v) : v_(std::move(v)) {}
  SavedValue(Tensor v) : v_(std::move(v)) {}

  bool to_bool() const;
  int64_t to_int() const;
  double to_double() const;  // an integer converts
  const std::string& to_string() const;
  const std::vector<int64_t>& to_int_list() const;
  const Tensor& to_tensor() const;
  /// What it holds: "none", "bool", "int", "double", "string", "int list" or "tensor".
  const char* kind() const;

 private:
  std::variant<std::monostate, bool, int64_t, double, std::string, std::vector<int64_t>, Tensor> v_;
};

namespace detail {
struct FunctionCall;
class FunctionBackward;
}  // namespace detail

/// What a custom function's forward leaves for its backward (LibTorch's AutogradContext).
class AutogradContext {
 public:
  /// Tensors the backward reads, given back by get_saved_variables(). Their versions are kept:
  /// a backward after an in-place change to one throws (use clone() to keep a value).
  void save_for_backward(tensor_list tensors);
  /// In the backward: the saved tensors, in order. Under create_graph, a saved output carries
  /// its history again, so the backward's ops differentiate through it.
  tensor_list get_saved_variables() const;
  /// Whether the input at forward argument position `index` (every argument counts, a
  /// tensor_list argument one position per element, as backward's result does) needs a
  /// gradient: in the forward, whether it requires grad; in the backward, whether this pass
  /// needs it. (LibTorch numbers the tensor inputs only; Python numbers every argument, as here.)
  bool needs_input_grad(size_t index) const;
  /// Whether any of `indices` needs a gradient.
  bool needs_input_grad(std::initializer_list<size_t> indices) const;
  /// Inputs the forward changed in place; each must also be returned. Their history becomes
  /// this function's.
  void mark_dirty(const tensor_list& inputs);
  /// Outputs that get no gradient (an index, a mask): they do not require grad, and their
  /// gradient in the backward is zeros (or undefined without materialized grads).
  void mark_non_differentiable(const tensor_list& outputs);
  /// Whether an output no gradient reached gets a tensor of zeros in the backward (the
  /// default) or an undefined tensor.
  void set_materialize_grads(bool value) { materialize_grads_ = value; }

  /// Values that are not tensors, kept for the backward (LibTorch's saved_data).
  std::unordered_map<std::string, SavedValue> saved_data;

 private:
  friend struct detail::FunctionCall;
  friend class detail::FunctionBackward;
  tensor_list to_save_;            // in the forward
  std::vector<int> saved_output_;  // per saved tensor: which output it is, or -1
  std::span<const Tensor> saved_;  // in the backward: the node's saved tensors
  bool in_backward_ = false;
  std::vector<char> needs_;  // per forward argument position
  std::vector<const TensorImpl*> dirty_, non_differentiable_;
  bool materialize_grads_ = true;
  Node* node_ = nullptr;  // the node that owns this context (through its backward)
};

namespace detail {

using BackwardFn = tensor_list (*)(AutogradContext*, tensor_list);

/// One call of Function<T>::apply: its arguments by position, its context, then its outputs
/// made into the node's (function.cpp).
struct FunctionCall {
  tensor_list inputs;           // per argument position; undefined where it is no tensor
  std::vector<char> is_tensor;  // per argument position
  std::vector<Edge> edges;      // per tensor argument, taken before the forward runs
  std::shared_ptr<AutogradContext> ctx = std::make_shared<AutogradContext>();

  void add(const Tensor& t) { inputs.push_back(t), is_tensor.push_back(1); }
  void add(const tensor_list& ts) {
    for (const Tensor& t : ts) add(t);
  }
  template <typename A> void add(const A&) { inputs.emplace_back(), is_tensor.push_back(0); }
  /// After the arguments: whether a node will be recorded, and needs_input_grad for the forward.
  void begin();
  /// After the forward: records the node when begin() said so, and returns the outputs as the
  /// caller gets them.
  tensor_list finish(tensor_list outputs, BackwardFn backward, const std::type_info& type);
};

}  // namespace detail

/// Derive as `struct F : Function<F>` with
///   static Tensor (or tensor_list) forward(AutogradContext* ctx, ARGS...);
///   static tensor_list backward(AutogradContext* ctx, tensor_list grad_outputs);
/// and call F::apply(args...). The forward runs without recording gradients. The backward
/// gets one gradient per output and returns one per forward argument position (undefined for
/// those that are not tensors or need none); each is summed to its input's shape where it
/// broadcasts and converted to its dtype. A backward built of kiln ops supports create_graph.
template <typename T> struct Function {
  template <typename... Args> static auto apply(Args&&... args) {
    detail::FunctionCall call;
    (call.add(args), ...);
    call.begin();
    using Out = decltype(T::forward(call.ctx.get(), std::forward<Args>(args)...));
    static_assert(std::is_same_v<Out, Tensor> || std::is_same_v<Out, tensor_list>,
                  "a custom function's forward returns Tensor or autograd::tensor_list");
    tensor_list outs;
    {
      GradModeGuard off(false);
      if constexpr (std::is_same_v<Out, Tensor>)
        outs.push_back(T::forward(call.ctx.get(), std::forward<Args>(args)...));
      else outs = T::forward(call.ctx.get(), std::forward<Args>(args)...);
    }
    outs = call.finish(std::move(outs), &T::backward, typeid(T));
    if constexpr (std::is_same_v<Out, Tensor>) return outs[0];
    else return outs;
  }
};

}  // namespace kiln::autograd
