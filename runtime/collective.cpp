// runtime/collective.cpp -- the all_reduce op's OpDef: its type rule, its kernel (a copy of the
// operand that the installed engine reduces in place; the same on the CPU and on CUDA, whose
// op table runs it too: there the engine is NCCL and the reduction is ordered on the current
// stream) and its derivative.
#include "runtime/collective.h"

#include <atomic>

#include "runtime/api.h"
#include "runtime/check.h"
#include "runtime/ops/defs.h"

namespace kiln {
namespace {

std::atomic<AllReduceEngine> g_engine{nullptr};

TensorType all_reduce_rule(OpId, std::span<const Tensor> in, const Attrs& a) {
  KILN_CHECK(in.size() == 1, "all_reduce: takes one tensor, got {}", in.size());
  DType t = in[0].dtype();
  KILN_CHECK(t == DType::F32 || t == DType::F64 || t == DType::I32 || t == DType::I64 || t == DType::U8,
             "all_reduce: {} is not supported (f32, f64, i32, i64 and u8 are)", in[0].type().str());
  KILN_CHECK(a.reduce == Combine::Sum || a.reduce == Combine::Max || a.reduce == Combine::Min,
             "all_reduce: reduce must be sum, max or min, got {}", combine_name(a.reduce));
  KILN_CHECK(a.group > 0, "all_reduce: group {} is no process group's id", a.group);
  return in[0].type();
}

void all_reduce_kernel(OpId, std::span<const Tensor> in, const Attrs& a, const Tensor& out) {
  AllReduceEngine engine = g_engine.load();
  KILN_CHECK(engine,
             "all_reduce: no process group exists in this process (group {}); make a "
             "distributed::ProcessGroup first",
             a.group);
  Tensor result = out;
  result.copy_(in[0]);  // through the device's backend
  engine(a.group, a.reduce, out);
}

// Every rank's result is the reduction of every rank's operand, so each operand's gradient
// gathers the gradients of every rank's result: for a sum, their sum; for max and min, that sum
// where the operand was the extremum, split evenly among the ranks that tied.
Grads all_reduce_vjp(const VjpArgs& a) {
  Tensor total = all_reduce_op(a.grad, a.attrs.group, Combine::Sum);
  if (a.attrs.reduce == Combine::Sum) return {total};
  Tensor hit = eq(a.in[0], a.out).to(a.grad.dtype());
  return {total * hit / all_reduce_op(hit, a.attrs.group, Combine::Sum)};
}

}  // namespace

const OpDef defs::AllReduce{.infer = all_reduce_rule,
                            .cpu = all_reduce_kernel,
                            .vjp = all_reduce_vjp,
                            .saves = kSaveBoth,
                            .attrs = kAttrGroup | kAttrReduce,
                            .effect = true};

void set_all_reduce_engine(AllReduceEngine engine) { g_engine.store(engine); }

Tensor all_reduce_op(const Tensor& x, int64_t group, Combine reduce) {
  Attrs a;
  a.group = group;
  a.reduce = reduce;
  return apply(OpId::AllReduce, {x}, a);
}

}  // namespace kiln
