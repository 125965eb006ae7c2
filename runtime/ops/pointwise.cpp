// runtime/ops/pointwise.cpp -- the pointwise ops: their OpDefs and the strided driver that
// feeds the vectorized formulas (runtime/simd/kernels.h) contiguous chunks.
#include "runtime/ops/pointwise.h"

#include <cstring>
#include <limits>

#include "runtime/api.h"
#include "runtime/check.h"
#include "runtime/ops/defs.h"
#include "runtime/ops/formulas.h"
#include "runtime/ops/loops.h"
#include "runtime/simd/kernels.h"
#include "runtime/type_rules.h"

namespace kiln {
namespace {

constexpr int64_t kChunk = 256;

struct DriverCtx {
  simd::PointwiseFn fn;
  int arity;
  DType in_type[3];
  DType kernel_type;  // what the formula computes in (f16/bf16 compute in f32)
  DType kernel_out;   // what it writes: kernel_type, or bool for comparisons
  DType out_type;
};

void pointwise_row(void* c, char* const* p, const int64_t* st, int64_t n) {
  const auto& x = *static_cast<const DriverCtx*>(c);
  int64_t ke = dtype_size(x.kernel_type), koe = dtype_size(x.kernel_out);
  // Operands the kernel reads in place: the compute dtype, contiguous or broadcast (stride 0).
  uint32_t in_place = 0, broadcast = 0;
  for (int k = 0; k < x.arity; ++k) {
    if (x.in_type[k] != x.kernel_type) continue;
    if (st[k + 1] == ke) in_place |= 1u << k;
    if (st[k + 1] == 0) in_place |= 1u << k, broadcast |= 1u << k;
  }
  bool out_direct = x.out_type == x.kernel_out && st[0] == koe;
  const void* in[3];
  if (out_direct && in_place == (1u << x.arity) - 1) {
    for (int k = 0; k < x.arity; ++k) in[k] = p[k + 1];
    return x.fn(n, p[0], in, broadcast);
  }
  // Otherwise convert or gather chunks into buffers first.
  alignas(64) char buf[3][kChunk * 8];
  alignas(64) char obuf[kChunk * 8];
  for (int64_t c0 = 0; c0 < n; c0 += kChunk) {
    int64_t m = std::min(kChunk, n - c0);
    for (int k = 0; k < x.arity; ++k) {
      const char* src = p[k + 1] + c0 * st[k + 1];
      if (in_place >> k & 1) {
        in[k] = src;
      } else {
        convert(src, st[k + 1], x.in_type[k], buf[k], ke, x.kernel_type, m);
        in[k] = buf[k];
      }
    }
    char* dst = p[0] + c0 * st[0];
    if (out_direct) {
      x.fn(m, dst, in, broadcast);
    } else {
      x.fn(m, obuf, in, broadcast);
      convert(obuf, koe, x.kernel_out, dst, st[0], x.out_type, m);
    }
  }
}

// Writes scalar s as one element of dtype t (bool as one byte 0/1) into dst.
void store_scalar(Scalar s, DType t, char* dst) {
  visit_dtype(t, [&](auto v) {
    using T = decltype(v);
    T value;
    if constexpr (kIsHalf<T>) value = T(s.to<float>());
    else value = s.to<T>();
    std::memcpy(dst, &value, sizeof(T));
  });
}

}  // namespace

void pointwise_cpu(OpId id, std::span<const Tensor> in, const Attrs& a, const Tensor& out) {
  const OpDef& op = op_def(id);
  DriverCtx ctx;
  ctx.arity = op_arity(id);
  DType ct = a.dtype;
  ctx.kernel_type = (ct == DType::F16 || ct == DType::BF16) ? DType::F32 : ct;
  bool to_bool = op.promote == Promote::Compare || op.promote == Promote::Logical;
  ctx.kernel_out = to_bool ? DType::Bool : ctx.kernel_type;
  ctx.out_type = out.dtype();
  ctx.fn = simd::kernels().pointwise[static_cast<int>(id)][static_cast<int>(ctx.kernel_type)];
  KILN_ASSERT(ctx.fn != nullptr);

  const Dims& shape = out.shape();
  alignas(8) char imm[3][8];
  StridedOperands ops;
  ops.count = ctx.arity + 1;
  ops.base[0] = static_cast<char*>(out.data_ptr());
  ops.strides[0] = broadcast_byte_strides(out, shape);
  for (int k = 0; k < ctx.arity; ++k) {
    int t = input_of_slot(a.imm_mask, k);
    if (t < 0) {
      store_scalar(a.imm[k], ctx.kernel_type, imm[k]);
      ops.base[k + 1] = imm[k];
      ops.strides[k + 1] = Dims(shape.size(), 0);
      ctx.in_type[k] = ctx.kernel_type;
    } else {
      const Tensor& x = in[t];
      ops.base[k + 1] = static_cast<char*>(x.data_ptr());
      ops.strides[k + 1] = broadcast_byte_strides(x, shape);
      ctx.in_type[k] = x.dtype();
    }
  }
  for_each_row(shape, ops, kParallelGrain, pointwise_row, &ctx);
}

namespace {

TensorType cast_rule(OpId id, std::span<const Tensor> in, const Attrs& a) {
  KILN_CHECK(in.size() == 1, "cast: expected one tensor, got {}", in.size());
  KILN_CHECK(static_cast<int>(a.dtype) < kNumDTypes, "cast: invalid dtype {}", static_cast<int>(a.dtype));
  return {a.dtype, in[0].shape(), in[0].device()};
}

// Whether number s has a value in compute dtype t: an integer number must fit an integer dtype
// (-3 has no u8 value; storing it as 253 would make `u8_tensor < -3` true everywhere).
bool fits(Scalar s, DType t) {
  if (s.kind() != Scalar::Kind::Int || !is_integral(t)) return true;
  int64_t v = s.to_int();
  return visit_dtype(t, [&](auto x) {
    using T = decltype(x);
    if constexpr (std::is_integral_v<T>)
      return v >= int64_t{std::numeric_limits<T>::lowest()} && v <= int64_t{std::numeric_limits<T>::max()};
    else return true;
  });
}

}  // namespace

// cast(x): elementwise conversion to attrs.dtype (floats to integers truncate toward zero and
// saturate; NaN gives 0; anything nonzero is true).
const OpDef defs::Cast{
    .infer = cast_rule,
    .cpu = [](OpId, std::span<const Tensor> in, const Attrs&, const Tensor& out) { copy_into(in[0], out); },
    .vjp = [](const VjpArgs& a) { return Grads{a.grad}; },  // the engine casts it back
    .saves = kSaveNothing,
    .attrs = kAttrDType,
};

DType pointwise_dtype(OpId id, std::initializer_list<Operand> operands) {
  const OpDef& op = op_def(id);
  size_t k = 0;
  for (const Operand& o : operands) {  // before anything reads their dtypes
    KILN_CHECK(!o.tensor || o.tensor->defined(), "{}: operand {} is an undefined tensor", op_name(id), k);
    ++k;
  }
  bool have_tensor = false;
  DType ct = DType::Bool;
  k = 0;
  for (const Operand& o : operands) {
    bool is_cond = id == OpId::Where && k++ == 0;
    if (o.tensor && !is_cond) {
      ct = have_tensor ? promote(ct, o.tensor->dtype()) : o.tensor->dtype();
      have_tensor = true;
    }
  }
  k = 0;
  DType scalars = DType::Bool;
  bool have_scalar = false;
  for (const Operand& o : operands) {
    bool is_cond = id == OpId::Where && k++ == 0;
    if (o.tensor || is_cond) continue;
    if (have_tensor) ct = o.scalar.promote_with(ct);
    else scalars = have_scalar ? promote(scalars, o.scalar.default_dtype()) : o.scalar.default_dtype();
    have_scalar = true;
  }
  if (!have_tensor) ct = scalars;
  if (op.promote == Promote::Float) ct = to_float_dtype(ct);
  KILN_CHECK(op.kinds & kind_bit(ct), "{}: does not support dtype {}", op_name(id), dtype_name(ct));
  return ct;
}

namespace {

// What apply() gets for a pointwise op: its attrs and its tensor operands.
struct PointwiseCall {
  Attrs attrs;
  Tensor tensors[3];
  size_t count = 0;
};

// Promotes and checks the operands. Tensors are cast to the compute dtype; with `cast_all`
// false only where the kernel's own conversion would differ from that cast (an integer
// operand of an f16/bf16 op: the kernel computes in f32 and would skip the rounding to f16).
PointwiseCall prepare(OpId id, std::initializer_list<Operand> operands, bool cast_all) {
  int arity = op_arity(id);
  KILN_CHECK(static_cast<int>(operands.size()) == arity, "{}: expected {} operands, got {}", op_name(id), arity,
             operands.size());
  PointwiseCall c;
  Attrs& a = c.attrs;
  a.dtype = pointwise_dtype(id, operands);
  bool half = a.dtype == DType::F16 || a.dtype == DType::BF16;
  size_t k = 0;
  for (const Operand& o : operands) {
    if (o.tensor) {
      DType want = (id == OpId::Where && k == 0) ? DType::Bool : a.dtype;
      KILN_CHECK(!(id == OpId::Where && k == 0 && o.tensor->dtype() != DType::Bool),
                 "where: condition must be bool, got {}", o.tensor->type().str());
      bool cast = o.tensor->dtype() != want && (cast_all || half);
      c.tensors[c.count++] = cast ? apply(OpId::Cast, {*o.tensor},
                                          [&] {
                                            Attrs x;
                                            x.dtype = want;
                                            return x;
                                          }())
                                  : *o.tensor;
    } else {
      KILN_CHECK(!(id == OpId::Where && k == 0), "where: condition must be a tensor");
      KILN_CHECK(fits(o.scalar, a.dtype), "{}: {} is out of range for dtype {}", op_name(id), o.scalar.to_int(),
                 dtype_name(a.dtype));
      a.imm_mask |= static_cast<uint8_t>(1u << k);
      a.imm[k] = o.scalar;
    }
    ++k;
  }
  return c;
}

}  // namespace

Tensor pointwise(OpId id, std::initializer_list<Operand> operands) {
  PointwiseCall c = prepare(id, operands, true);
  return apply(id, std::span<const Tensor>(c.tensors, c.count), c.attrs);
}

void pointwise_into(OpId id, std::initializer_list<Operand> operands, const Tensor& out,
                    const std::function<void(const TensorType&)>& check_result) {
  PointwiseCall c = prepare(id, operands, false);
  // The result type pointwise_rule gives, with its broadcasting errors.
  Dims shape;
  for (size_t t = 0; t < c.count; ++t) {
    const Dims& s = c.tensors[t].shape();
    shape = t == 0 ? s : broadcast_shapes(shape, s, op_name(id));
  }
  Promote p = op_def(id).promote;
  bool to_bool = p == Promote::Compare || p == Promote::Logical;
  check_result({to_bool ? DType::Bool : c.attrs.dtype, shape, out.device()});
  for (size_t t = 0; t < c.count; ++t) c.tensors[t] = readable_while_writing(c.tensors[t], out);
  pointwise_cpu(id, std::span<const Tensor>(c.tensors, c.count), c.attrs, out);
}

}  // namespace kiln
