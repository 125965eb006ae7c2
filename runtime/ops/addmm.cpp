// runtime/ops/addmm.cpp -- addmm, addmm_relu, addmm_gelu_tanh: a matmul with its bias add and
// activation, the node the matmul-epilogue pass (ir/passes/matmul_epilogue.cpp) makes so that
// CUDA runs them as one cuBLASLt call with an epilogue. Their meaning is their composition:
// act(matmul(a, b) + bias) with a [m,k], b [k,n], bias [n]; the CPU computes exactly that, op
// by op (its fused bias and activation already run in one kernel after the GEMM), and the
// derivatives are the three ops' own.
#include "runtime/api.h"
#include "runtime/autograd_meta.h"
#include "runtime/check.h"
#include "runtime/ops/defs.h"
#include "runtime/ops/pointwise.h"

namespace kiln {
namespace {

TensorType addmm_rule(OpId id, std::span<const Tensor> in, const Attrs&) {
  const Tensor &bias = in[0], &a = in[1], &b = in[2];
  KILN_CHECK(a.dim() == 2 && b.dim() == 2 && bias.dim() == 1,
             "{}: expects bias [n], a [m,k] and b [k,n], got {}, {} and {}", op_name(id), bias.type().str(),
             a.type().str(), b.type().str());
  KILN_CHECK(a.dtype() == b.dtype() && bias.dtype() == a.dtype() && is_float(a.dtype()),
             "{}: expects operands of one float dtype, got {}, {} and {}", op_name(id), bias.type().str(),
             a.type().str(), b.type().str());
  KILN_CHECK(a.shape()[1] == b.shape()[0] && bias.shape()[0] == b.shape()[1],
             "{}: shapes do not chain: bias {}, a {}, b {} (expected bias [n], a [m,k], b [k,n])", op_name(id),
             bias.type().str(), a.type().str(), b.type().str());
  return {a.dtype(), {a.shape()[0], b.shape()[1]}, a.device()};
}

// The activation after the bias add: none (addmm), relu, gelu_tanh.
OpId activation(OpId id) {
  switch (id) {
    case OpId::AddmmRelu: return OpId::Relu;
    case OpId::AddmmGeluTanh: return OpId::GeluTanh;
    default: return OpId::Addmm;
  }
}

// act(matmul(a, b) + bias), op by op.
Tensor compose(OpId id, const Tensor& bias, const Tensor& a, const Tensor& b) {
  Tensor z = pointwise(OpId::Add, {apply(OpId::Matmul, {a, b}), bias});
  OpId act = activation(id);
  return act == OpId::Addmm ? z : pointwise(act, {z});
}

void addmm_cpu(OpId id, std::span<const Tensor> in, const Attrs&, const Tensor& out) {
  GradModeGuard no_grad(false);
  Tensor z = compose(id, in[0], in[1], in[2]);
  Tensor result = out;
  result.copy_(z);
}

// The activation's derivative (its own vjp), then add's and matmul's.
Grads addmm_vjp(const VjpArgs& v) {
  const Tensor &bias = v.in[0], &a = v.in[1], &b = v.in[2];
  Tensor gz = v.grad;
  if (OpId act = activation(v.op); act != OpId::Addmm) {
    Tensor z = compose(OpId::Addmm, bias, a, b);
    Tensor y = pointwise(act, {z});
    Tensor zs[] = {z};
    TensorType zt[] = {z.type()};
    Attrs computed_in;
    computed_in.dtype = z.dtype();
    VjpArgs inner{act, zs, zt, y, v.grad, computed_in, 1};
    gz = op_def(act).vjp(inner)[0];
  }
  Grads g(3);
  if (v.needs_grad(0)) g[0] = gz;  // the engine sums it over the rows
  if (v.needs_grad(1)) g[1] = matmul(gz, b.transpose(0, 1));
  if (v.needs_grad(2)) g[2] = matmul(a.transpose(0, 1), gz);
  return g;
}

// The GEMM's dot products, then the bias added (the activation counts as part of it).
double addmm_flops(std::span<const TensorType> in, const TensorType& out, const Attrs&) {
  double n = static_cast<double>(out.shape.product());
  return 2.0 * n * static_cast<double>(in[1].shape.back()) + n;
}

constexpr OpDef kAddmm{.infer = addmm_rule, .cpu = addmm_cpu, .vjp = addmm_vjp, .flops = addmm_flops};

}  // namespace

// addmm(bias, a, b) = matmul(a, b) + bias, in PyTorch's operand order (bias [n] only).
const OpDef defs::Addmm = kAddmm;
// relu(addmm(bias, a, b)): cuBLASLt's RELU_BIAS epilogue.
const OpDef defs::AddmmRelu = kAddmm;
// gelu_tanh(addmm(bias, a, b)): cuBLASLt's GELU_BIAS epilogue (the tanh approximation; the exact
// gelu stays a kernel of its own after an addmm).
const OpDef defs::AddmmGeluTanh = kAddmm;

}  // namespace kiln
