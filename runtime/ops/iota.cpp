// runtime/ops/iota.cpp -- the ops with no operands, whose sizes may be a saved module's dynamic
// dims: iota, the positions 0, 1, ..., n - 1, and arange, which is made of it; and numel, a
// size as a number. Ops rather than data, so that inside a trace arange(T) is a node whose size
// may stay symbolic (jit::save's dynamic dims), as are the masks made from it (tril, triu, a
// causal attention mask); as data it would be a constant of one length. jit::save turns a
// number that is a size (a mean's count) into a numel node for the same reason.
#include <cmath>

#include "runtime/api.h"
#include "runtime/check.h"
#include "runtime/ops/defs.h"
#include "runtime/ops/loops.h"
#include "runtime/parallel.h"

namespace kiln {
namespace {

// iota {shape=[n], device}: i64[n] on `device` (an op with no operands says where it runs).
TensorType iota_rule(OpId id, std::span<const Tensor> in, const Attrs& a) {
  KILN_CHECK(in.empty(), "{}: takes no tensors, got {}", op_name(id), in.size());
  KILN_CHECK(a.shape.size() == 1 && a.shape[0] >= 0, "{}: shape must be one non-negative size [n], got {}", op_name(id),
             shape_str(a.shape));
  return {DType::I64, a.shape, a.device};
}

void iota_cpu(OpId, std::span<const Tensor>, const Attrs&, const Tensor& out) {
  int64_t* p = out.data<int64_t>();
  parallel_for(0, out.numel(), 1 << 16, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) p[i] = i;
  });
}

// numel {shape, dtype}: the product of shape as a 0-d CPU tensor of dtype (a float or integer
// type; exact below 2^24 in f32).
TensorType numel_rule(OpId id, std::span<const Tensor> in, const Attrs& a) {
  KILN_CHECK(in.empty(), "{}: takes no tensors, got {}", op_name(id), in.size());
  KILN_CHECK(a.dtype != DType::Bool, "{}: dtype must be a number type, got bool", op_name(id));
  for (int64_t d : a.shape) KILN_CHECK(d >= 0, "{}: shape {} has a negative size", op_name(id), shape_str(a.shape));
  return {a.dtype, {}, a.device};
}

void numel_cpu(OpId, std::span<const Tensor>, const Attrs& a, const Tensor& out) {
  copy_into(scalar_tensor(static_cast<double>(a.shape.product()), DType::F64), out);
}

}  // namespace

// Always on the host: a 0-d CPU tensor meets any device.
const OpDef defs::Numel{
    .infer = numel_rule, .cpu = numel_cpu, .differentiable = false, .attrs = kAttrShape | kAttrDType};

const OpDef defs::Iota{.infer = iota_rule, .cpu = iota_cpu, .differentiable = false, .attrs = kAttrShape | kAttrDevice};

Tensor arange(Scalar stop) { return arange(0, stop, 1); }

Tensor arange(Scalar start, Scalar stop, Scalar step) {
  bool ints = !start.is_float() && !stop.is_float() && !step.is_float();
  return arange(start, stop, step, ints ? DType::I64 : DType::F32);
}

// start + i * step: in i64 for integer start and step (exact), else in f64, then in `dtype`.
Tensor arange(Scalar start, Scalar stop, Scalar step, DType dtype) {
  double a = start.to_double(), b = stop.to_double(), s = step.to_double();
  KILN_CHECK(s != 0 && std::isfinite(a) && std::isfinite(b) && std::isfinite(s),
             "arange: invalid range start={} stop={} step={}", a, b, s);
  KILN_CHECK((b - a) / s >= 0, "arange: step {} goes away from stop ({} to {})", s, a, b);
  Attrs at;
  at.shape = {static_cast<int64_t>(std::ceil((b - a) / s))};
  at.device = cpu;
  Tensor i = apply(OpId::Iota, {}, at);
  if (!start.is_float() && !step.is_float()) {
    if (step.to_int() != 1) i = i * step.to_int();
    if (start.to_int() != 0) i = i + start.to_int();
    return i.to(dtype);
  }
  return (i.to(DType::F64) * s + a).to(dtype);
}

}  // namespace kiln
