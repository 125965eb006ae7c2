// runtime/type_rules.cpp -- shared shape/dtype rules.
#include "runtime/type_rules.h"

#include "runtime/api.h"
#include "runtime/check.h"

namespace kiln {

Dims broadcast_shapes(const Dims& a, const Dims& b, const char* op) {
  size_t r = std::max(a.size(), b.size());
  Dims out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    KILN_CHECK(da == db || da == 1 || db == 1, "{}: shapes {} and {} cannot be broadcast together (dim {}: {} vs {})",
               op, shape_str(a), shape_str(b), i, da, db);
    out[i] = da == 1 ? db : da;
  }
  return out;
}

TensorType pointwise_rule(OpId id, std::span<const Tensor> in, const Attrs& attrs) {
  const OpDef& op = op_def(id);
  int arity = op_arity(id);
  int imms = __builtin_popcount(attrs.imm_mask);
  KILN_CHECK(static_cast<int>(in.size()) + imms == arity && attrs.imm_mask < (1u << arity),
             "{}: expected {} operands, got {} tensors and {} numbers", op_name(id), arity, in.size(), imms);
  DType ct = attrs.dtype;
  KILN_CHECK(op.kinds & kind_bit(ct), "{}: does not support dtype {}", op_name(id), dtype_name(ct));
  Dims shape;
  for (int k = 0; k < arity; ++k) {
    int t = input_of_slot(attrs.imm_mask, k);
    if (t < 0) continue;
    const Tensor& x = in[t];
    DType want = (id == OpId::Where && k == 0) ? DType::Bool : ct;
    KILN_CHECK(x.dtype() == want, "{}: operand {} is {}, expected dtype {}", op_name(id), k, x.type().str(),
               dtype_name(want));
    shape = t == 0 ? x.shape() : broadcast_shapes(shape, x.shape(), op_name(id));
  }
  bool to_bool = op.promote == Promote::Compare || op.promote == Promote::Logical;
  return {to_bool ? DType::Bool : ct, shape, in.empty() ? cpu : in[0].device()};
}

Dims normalize_axes(const Dims& axes, int64_t rank, const char* op) {
  Dims out;
  if (axes.empty()) {
    for (int64_t i = 0; i < rank; ++i) out.push_back(i);
    return out;
  }
  uint64_t seen = 0;
  for (int64_t a : axes) {
    int64_t d = wrap_dim(a, rank, op);
    if (rank == 0) continue;  // dim 0 / -1 of a 0-d tensor: nothing to reduce
    KILN_CHECK(d < 64 && !(seen & (uint64_t{1} << d)), "{}: dim {} appears more than once", op, a);
    seen |= uint64_t{1} << d;
  }
  for (int64_t i = 0; i < rank; ++i)
    if (seen & (uint64_t{1} << i)) out.push_back(i);
  return out;
}

TensorType reduce_rule(OpId id, std::span<const Tensor> in, const Attrs& attrs) {
  KILN_CHECK(in.size() == 1, "{}: expected one tensor, got {}", op_name(id), in.size());
  const Tensor& x = in[0];
  bool arg = id == OpId::Argmax || id == OpId::Argmin;
  KILN_CHECK(!arg || attrs.axes.size() <= 1, "{}: expected one dim or none, got {} for {}", op_name(id),
             shape_str(attrs.axes), x.type().str());
  Dims axes = normalize_axes(attrs.axes, x.dim(), op_name(id));
  Dims shape;
  size_t a = 0;
  for (int64_t i = 0; i < x.dim(); ++i) {
    bool reduced = a < axes.size() && axes[a] == i;
    if (reduced) {
      ++a;
      KILN_CHECK(x.shape()[i] > 0 || op_def(id).combine == Combine::Sum || op_def(id).combine == Combine::Prod,
                 "{}: cannot reduce over dim {} of size 0 in {}", op_name(id), i, x.type().str());
      if (attrs.keepdim) shape.push_back(1);
    } else {
      shape.push_back(x.shape()[i]);
    }
  }
  DType out = x.dtype();
  if (arg) out = DType::I64;
  if ((op_def(id).combine == Combine::Sum || op_def(id).combine == Combine::Prod) && !is_float(x.dtype()))
    out = DType::I64;
  return {out, shape, x.device()};
}

}  // namespace kiln
