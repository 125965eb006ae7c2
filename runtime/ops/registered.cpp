// runtime/ops/registered.cpp -- users' own ops (runtime/registered_op.h): the registry, calls
// checked against the schema, and the one OpDef through which apply(), the tape, the tracer
// and the IR reach every registered op's rule, kernels and derivative.
#include <fmt/format.h>

#include <deque>
#include <map>
#include <memory>
#include <mutex>

#include "runtime/check.h"
#include "runtime/cuda.h"
#include "runtime/ops/defs.h"
#include "runtime/registered_op.h"

namespace kiln {

namespace {

struct Registry {
  std::mutex mutex;
  std::deque<RegisteredOp> ops;  // stable addresses: RegisteredCall points at them
  std::map<std::string, RegisteredOp*, std::less<>> by_name;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: static tensors' attrs may point in
  return *r;
}

const RegisteredCall& call_of(const Attrs& attrs) {
  KILN_CHECK(attrs.registered && attrs.registered->op,
             "registered: the call names no registered op (build it with RegisteredOp::call)");
  return *attrs.registered;
}

// Runs `f`, naming the op in any kiln::Error it throws that does not name it already.
template <class F> decltype(auto) naming(const RegisteredOp& op, const char* what, F&& f) {
  try {
    return f();
  } catch (const OutOfMemory&) {
    throw;
  } catch (const Error& e) {
    std::string_view msg = e.what();
    if (msg.substr(0, op.name().size()) == op.name()) throw;
    throw Error(fmt::format("{}: {}: {}", op.name(), what, msg));
  }
}

TensorType registered_rule(OpId, std::span<const Tensor> in, const Attrs& attrs) {
  const RegisteredCall& rc = call_of(attrs);
  const RegisteredOp& op = *rc.op;
  KILN_CHECK(in.size() == op.schema().num_tensors(), "{}: takes {} Tensor arguments, got {} ({})", op.name(),
             op.schema().num_tensors(), in.size(), op.schema_text());
  KILN_CHECK(rc.values.size() == op.schema().args.size() - in.size(), "{}: takes {} attributes, got {}", op.name(),
             op.schema().args.size() - in.size(), rc.values.size());
  KILN_CHECK(op.rule_fn() != nullptr, "{}: has no shape rule (give it one with RegisteredOp::rule)", op.name());
  return naming(op, "its shape rule", [&] { return op.rule_fn()(OpCall(op, in, rc.values)); });
}

Tensor registered_make(std::span<const Tensor> in, const Attrs& attrs, const TensorType& type) {
  const RegisteredCall& rc = call_of(attrs);
  const RegisteredOp& op = *rc.op;
  OpCall call(op, in, rc.values);
  Tensor out;
  std::string where = type.device.str();
  if (type.device.is_cpu()) {
    KILN_CHECK(op.cpu_fn() != nullptr, "{}: has no CPU kernel (RegisteredOp::cpu), so it cannot run on {}", op.name(),
               where);
    out = naming(op, "its CPU kernel", [&] { return op.cpu_fn()(call); });
  } else if (type.device.type == DeviceType::CUDA) {
    KILN_CHECK(op.cuda_fn() != nullptr, "{}: has no CUDA kernel (RegisteredOp::cuda), so it cannot run on {}",
               op.name(), where);
    cuda::Stream stream = cuda::current_stream(type.device.index);
    out = naming(op, "its CUDA kernel", [&] { return op.cuda_fn()(call, stream); });
  } else {
    throw Error(fmt::format("{}: registered ops run on the CPU and CUDA devices, not on {}", op.name(), where));
  }
  KILN_CHECK(out.defined(), "{}: its {} kernel returned no tensor", op.name(), where);
  KILN_CHECK(out.type() == type,
             "{}: its {} kernel returned {}, but its shape rule gives {} for inputs {}: the kernel and the rule "
             "must agree",
             op.name(), where, out.type().str(), type.str(), [&] {
               std::string s;
               for (const Tensor& t : in) s += (s.empty() ? "" : ", ") + t.type().str();
               return s;
             }());
  // The result is the op's own: never an input's storage (the tape and in-place ops would see
  // one tensor as two), always contiguous as every op's is.
  bool alias = false;
  for (const Tensor& t : in) alias = alias || (t.has_storage() && t.impl()->storage == out.impl()->storage);
  return alias || !out.is_contiguous() ? out.clone() : out;
}

// The schema's i-th Tensor argument.
const OpSchemaArg& tensor_arg(const OpSchema& s, size_t i) {
  for (const OpSchemaArg& a : s.args)
    if (a.type == OpArgType::Tensor && i-- == 0) return a;
  throw_internal("a Tensor argument of that index", __FILE__, __LINE__);
}

Grads registered_vjp(const VjpArgs& v) {
  const RegisteredCall& rc = call_of(v.attrs);
  const RegisteredOp& op = *rc.op;
  KILN_CHECK(op.derivative_fn() != nullptr,
             "{}: has no derivative (RegisteredOp::derivative), so no gradient flows back through it", op.name());
  OpCall call(op, v.in, rc.values, v.needs);
  Grads g = naming(op, "its derivative", [&] { return op.derivative_fn()(call, v.out, v.grad); });
  KILN_CHECK(g.size() == v.in.size(), "{}: its derivative returned {} gradients for {} Tensor arguments", op.name(),
             g.size(), v.in.size());
  for (size_t i = 0; i < g.size(); ++i) {
    if (!g[i].defined()) continue;
    KILN_CHECK(g[i].shape() == v.in_types[i].shape,
               "{}: its derivative returned a gradient {} for Tensor argument {} ('{}'), which is {}", op.name(),
               g[i].type().str(), i, tensor_arg(op.schema(), i).name, v.in_types[i].str());
  }
  return g;
}

// An attribute's value converted to its schema type, or an error naming both.
OpValue attribute(const RegisteredOp& op, const OpSchemaArg& a, const OpArg& arg) {
  KILN_CHECK(!arg.is_tensor(), "{}: argument '{}' is {}, got a Tensor ({})", op.name(), a.name,
             op_arg_type_name(a.type), op.schema_text());
  const OpValue& v = arg.value();
  OpArgType t = op_value_type(v);
  size_t items = t == OpArgType::Ints     ? std::get<std::vector<int64_t>>(v).size()
                 : t == OpArgType::Floats ? std::get<std::vector<double>>(v).size()
                                          : 0;
  KILN_CHECK(items <= kMaxOpListValues, "{}: argument '{}' holds {} values, more than the {} a call may have",
             op.name(), a.name, items, kMaxOpListValues);
  if (t == a.type) return v;
  if (a.type == OpArgType::Float && t == OpArgType::Int) return static_cast<double>(std::get<int64_t>(v));
  if (a.type == OpArgType::Floats && t == OpArgType::Ints) {
    const auto& ints = std::get<std::vector<int64_t>>(v);
    return std::vector<double>(ints.begin(), ints.end());
  }
  throw Error(fmt::format("{}: argument '{}' is {}, got {} ({})", op.name(), a.name, op_arg_type_name(a.type),
                          op_arg_type_name(t), op.schema_text()));
}

}  // namespace

const OpDef defs::Registered{
    .infer = registered_rule, .make = registered_make, .vjp = registered_vjp, .saves = kSaveBoth};

const Tensor& OpCall::input(size_t i) const {
  KILN_CHECK(i < inputs_.size(), "{}: has {} Tensor arguments, asked for argument {}", op_->name(), inputs_.size(), i);
  return inputs_[i];
}

template <class T> T OpCall::get(std::string_view name) const {
  const OpSchema& s = op_->schema();
  size_t tensor = 0, value = 0;
  for (const OpSchemaArg& a : s.args) {
    bool is_tensor = a.type == OpArgType::Tensor;
    if (a.name == name) {
      if constexpr (std::is_same_v<T, Tensor>) {
        KILN_CHECK(is_tensor, "{}: argument '{}' is {}, not a Tensor", op_->name(), name, op_arg_type_name(a.type));
        return input(tensor);
      } else {
        KILN_CHECK(!is_tensor && value < values_.size() && std::holds_alternative<T>(values_[value]),
                   "{}: argument '{}' is {}, read as {}", op_->name(), name, op_arg_type_name(a.type),
                   op_arg_type_name(op_value_type(OpValue(T{}))));
        return std::get<T>(values_[value]);
      }
    }
    (is_tensor ? tensor : value) += 1;
  }
  throw Error(fmt::format("{}: no argument named '{}' ({})", op_->name(), name, op_->schema_text()));
}
template Tensor OpCall::get<Tensor>(std::string_view) const;
template int64_t OpCall::get<int64_t>(std::string_view) const;
template double OpCall::get<double>(std::string_view) const;
template bool OpCall::get<bool>(std::string_view) const;
template std::vector<int64_t> OpCall::get<std::vector<int64_t>>(std::string_view) const;
template std::vector<double> OpCall::get<std::vector<double>>(std::string_view) const;
template std::string OpCall::get<std::string>(std::string_view) const;
template DType OpCall::get<DType>(std::string_view) const;

RegisteredOp::RegisteredOp(OpSchema schema)
    : schema_(std::move(schema)), name_(schema_.qualified_name()), schema_text_(schema_.str()) {}

RegisteredOp& RegisteredOp::rule(OpRule f) {
  rule_ = std::move(f);
  return *this;
}
RegisteredOp& RegisteredOp::cpu(OpCpuKernel f) {
  cpu_ = std::move(f);
  return *this;
}
RegisteredOp& RegisteredOp::cuda(OpCudaKernel f) {
  cuda_ = std::move(f);
  return *this;
}
RegisteredOp& RegisteredOp::derivative(OpDerivative f) {
  derivative_ = std::move(f);
  return *this;
}

Tensor RegisteredOp::call(std::span<const OpArg> args, std::span<const std::pair<std::string, OpArg>> named) const {
  const std::vector<OpSchemaArg>& schema = schema_.args;
  KILN_CHECK(args.size() <= schema.size(), "{}: takes {} arguments, got {} ({})", name_, schema.size(), args.size(),
             schema_text_);
  std::vector<const OpArg*> given(schema.size(), nullptr);
  for (size_t i = 0; i < args.size(); ++i) given[i] = &args[i];
  for (const auto& [key, arg] : named) {
    size_t k = 0;
    while (k < schema.size() && schema[k].name != key) ++k;
    KILN_CHECK(k < schema.size(), "{}: no argument named '{}' ({})", name_, key, schema_text_);
    KILN_CHECK(!given[k], "{}: argument '{}' given twice", name_, key);
    given[k] = &arg;
  }
  auto rc = std::make_shared<RegisteredCall>();
  rc->op = this;
  std::vector<Tensor> tensors;
  for (size_t k = 0; k < schema.size(); ++k) {
    const OpSchemaArg& a = schema[k];
    if (a.type == OpArgType::Tensor) {
      KILN_CHECK(given[k], "{}: missing Tensor argument '{}' ({})", name_, a.name, schema_text_);
      KILN_CHECK(given[k]->is_tensor(), "{}: argument '{}' is a Tensor, got {} ({})", name_, a.name,
                 op_arg_type_name(op_value_type(given[k]->value())), schema_text_);
      tensors.push_back(given[k]->tensor());
    } else if (given[k]) {
      rc->values.push_back(attribute(*this, a, *given[k]));
    } else {
      KILN_CHECK(a.default_value.has_value(), "{}: missing argument '{}' ({}), which has no default", name_, a.name,
                 op_arg_type_name(a.type));
      rc->values.push_back(*a.default_value);
    }
  }
  Attrs attrs;
  attrs.registered = std::move(rc);
  return apply(OpId::Registered, tensors, attrs);
}

const char* registered_op_name(const RegisteredCall& call) {
  return call.op ? call.op->name().c_str() : op_name(OpId::Registered);
}

RegisteredOp& register_op(std::string_view schema) {
  OpSchema s = parse_op_schema(schema);
  std::string name = s.qualified_name();
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  if (auto it = r.by_name.find(name); it != r.by_name.end())
    throw Error(fmt::format("register_op: {} is registered already, as {}", name, it->second->schema_text()));
  RegisteredOp& op = r.ops.emplace_back(std::move(s));
  r.by_name.emplace(name, &op);
  return op;
}

const RegisteredOp* find_registered_op(std::string_view name) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.by_name.find(name);
  return it == r.by_name.end() ? nullptr : it->second;
}

}  // namespace kiln
