// runtime/registered_op.h -- your own ops (TORCH_LIBRARY's role): a schema, a shape and dtype
// rule, a kernel per device and optionally a derivative written with kiln ops.
//
//   const RegisteredOp& scaled_add =
//       register_op("mylib::scaled_add(Tensor a, Tensor b, float alpha=1.0) -> Tensor")
//           .rule([](const OpCall& c) { return TensorType{c.input(0).dtype(), c.input(0).shape()}; })
//           .cpu([](const OpCall& c) { return my_cpu_kernel(c.input(0), c.input(1), c.get<double>("alpha")); })
//           .cuda([](const OpCall& c, const cuda::Stream&) { return my_kernel({c.input(0), c.input(1)}, ...)[0]; })
//           .derivative([](const OpCall& c, const Tensor& out, const Tensor& grad) {
//             return tensor_list{grad, grad * c.get<double>("alpha")};
//           });
//   Tensor y = scaled_add(a, b, 0.5);     // or scaled_add.call({a, b}, {{"alpha", 0.5}})
//
// A registered op runs like a built-in one: apply() checks its arguments against the schema
// and runs the rule, the tape records it, and jit::trace records one IR node named
// `mylib::scaled_add`, which the verifier checks against the rule, fusion leaves alone, and a
// saved module names with its schema (never its code). The rule runs on tensors without data
// when traced: it reads shapes and dtypes only. A dim it copies from an input stays symbolic
// in a saved module's dynamic shapes. Kernels return a new tensor of exactly the rule's type;
// the CUDA kernel queues its work on the stream it is given (kiln's current stream, which a
// CUDA graph capture records). Register an op once, before the programs that call it run.
#pragma once

#include <functional>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/op_schema.h"
#include "runtime/tensor.h"

namespace kiln {

namespace cuda {
class Stream;
}

class RegisteredOp;

/// A registered op's arguments as its rule, kernels and derivative see them.
class OpCall {
 public:
  OpCall(const RegisteredOp& op, std::span<const Tensor> inputs, std::span<const OpValue> values, uint32_t needs = ~0u)
      : op_(&op), inputs_(inputs), values_(values), needs_(needs) {}
  /// The Tensor arguments, in the schema's order.
  std::span<const Tensor> inputs() const { return inputs_; }
  const Tensor& input(size_t i) const;
  /// Argument `name`: T is Tensor, or the attribute's type: int64_t (int), double (float),
  /// bool, std::vector<int64_t> (int[]), std::vector<double> (float[]), std::string (str),
  /// DType (ScalarType). Throws kiln::Error for a name the schema lacks or another type.
  template <class T> T get(std::string_view name) const;
  /// In a derivative: whether Tensor argument i needs its gradient (others may be left
  /// undefined).
  bool needs_input_grad(size_t i) const { return needs_ >> std::min<size_t>(i, 31) & 1; }
  const RegisteredOp& op() const { return *op_; }

 private:
  const RegisteredOp* op_;
  std::span<const Tensor> inputs_;
  std::span<const OpValue> values_;  // one per attribute, in the schema's order
  uint32_t needs_;
};

/// One argument of a call: a Tensor or an attribute's value.
class OpArg {
 public:
  OpArg(Tensor t) : tensor_(std::move(t)), is_tensor_(true) {}
  OpArg(int v) : value_(int64_t{v}) {}
  OpArg(int64_t v) : value_(v) {}
  OpArg(double v) : value_(v) {}
  OpArg(bool v) : value_(v) {}
  OpArg(std::vector<int64_t> v) : value_(std::move(v)) {}
  OpArg(std::initializer_list<int64_t> v) : value_(std::vector<int64_t>(v)) {}
  OpArg(std::vector<double> v) : value_(std::move(v)) {}
  OpArg(std::string v) : value_(std::move(v)) {}
  OpArg(const char* v) : value_(std::string(v)) {}
  OpArg(DType v) : value_(v) {}
  bool is_tensor() const { return is_tensor_; }
  const Tensor& tensor() const { return tensor_; }
  const OpValue& value() const { return value_; }

 private:
  Tensor tensor_;
  OpValue value_;
  bool is_tensor_ = false;
};

using OpRule = std::function<TensorType(const OpCall&)>;
using OpCpuKernel = std::function<Tensor(const OpCall&)>;
using OpCudaKernel = std::function<Tensor(const OpCall&, const cuda::Stream&)>;
/// Gradients of the loss with respect to each Tensor argument, in order (an undefined Tensor
/// for none), given the op's output and the gradient with respect to it.
using OpDerivative = std::function<std::vector<Tensor>(const OpCall&, const Tensor& out, const Tensor& grad)>;

class RegisteredOp {
 public:
  /// The functions that give it meaning, set once after register_op (each returns *this).
  RegisteredOp& rule(OpRule f);
  RegisteredOp& cpu(OpCpuKernel f);
  RegisteredOp& cuda(OpCudaKernel f);
  RegisteredOp& derivative(OpDerivative f);

  /// Calls the op: Tensor arguments and attributes by position, then attributes by name;
  /// attributes left out take their defaults.
  Tensor call(std::span<const OpArg> args, std::span<const std::pair<std::string, OpArg>> named = {}) const;
  Tensor call(std::initializer_list<OpArg> args,
              std::initializer_list<std::pair<std::string, OpArg>> named = {}) const {
    return call(std::span<const OpArg>(args.begin(), args.size()),
                std::span<const std::pair<std::string, OpArg>>(named.begin(), named.size()));
  }
  template <class... A> Tensor operator()(A&&... args) const {
    const OpArg list[] = {OpArg(std::forward<A>(args))...};
    return call(std::span<const OpArg>(list, sizeof...(A)));
  }

  const OpSchema& schema() const { return schema_; }
  /// "mylib::rotary".
  const std::string& name() const { return name_; }
  /// The schema's one spelling (OpSchema::str), which saved modules hold.
  const std::string& schema_text() const { return schema_text_; }

  // What the registry runs (runtime/ops/registered.cpp).
  const OpRule& rule_fn() const { return rule_; }
  const OpCpuKernel& cpu_fn() const { return cpu_; }
  const OpCudaKernel& cuda_fn() const { return cuda_; }
  const OpDerivative& derivative_fn() const { return derivative_; }

  explicit RegisteredOp(OpSchema schema);

 private:
  OpSchema schema_;
  std::string name_, schema_text_;
  OpRule rule_;
  OpCpuKernel cpu_;
  OpCudaKernel cuda_;
  OpDerivative derivative_;
};

/// One call's op and attribute values (every attribute, defaults filled in, in the schema's
/// order), as Attrs::registered keeps them for the tape and the IR.
struct RegisteredCall {
  const RegisteredOp* op = nullptr;
  std::vector<OpValue> values;
};
/// The op's name, for op_name(id, attrs).
const char* registered_op_name(const RegisteredCall& call);

/// Registers an op by its schema text and returns it, to be given its rule, kernels and
/// derivative. The returned reference lives as long as the program. Throws kiln::Error for a
/// bad schema or a name registered already.
RegisteredOp& register_op(std::string_view schema);
/// The op registered under `name` ("mylib::rotary"), or nullptr.
const RegisteredOp* find_registered_op(std::string_view name);

}  // namespace kiln
