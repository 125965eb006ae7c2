// runtime/ops/attention.h -- what every kernel of the fused attention ops reads (the CPU's in
// runtime/ops/attention.cpp, CUDA's in cuda/attention.cpp): the operands by role, the sizes,
// the mask's layout, the dropout's draw, the packed gradients' layout, and the composite that
// is the ops' meaning.
//
// attention(q, k, v[, mask][, state]; scale, causal, dropout_p) =
//   matmul(dropout(softmax(scale * q k^T + mask, -1)), v)
// with q [..., L, E], k [..., S, E], v [..., S, Ev] sharing their batch dims; a bool mask keeps
// the scores where it is true (else -inf), a float mask is added, either broadcast to
// [..., L, S]; causal keeps key j for query i where j <= i (torch's top-left alignment). The
// dropout draws one f32 uniform per weight from the state's Philox stream, as rand does, weight
// (b, i, j) taking value (b * L + i) * S + j, and keeps a weight where it is below 1 - dropout_p,
// as bernoulli does: the composite's mask, bit for bit. A row whose keys are all masked gives
// NaN, as softmax does; S = 0 gives zeros, as the composite's empty sum does.
//
// attention_backward(q, k, v, out, grad[, mask][, state]) gives dq, dk and dv packed along the
// last dim: [..., L * E + S * E + S * Ev], each row-major after the one before.
//
// With lse=true, attention keeps what its backward would otherwise compute again (a sweep of
// q k^T): its result packs every row's log-sum-exp of the masked, scaled scores (-inf where
// every key is masked) before the output, in one dim: [batch * L * w + batch * L * Ev], with
// w = lse_width(dtype) elements a row (f16 and bf16: two, whose sum is the f32 value). The
// output is a contiguous view of it (output_of). attention_backward with lse=true takes that
// packed result as `out` and its gradient as `grad`: the log-sum-exp's gradient g (a row's w
// elements' summed) enters as dS += P g, that is D = rowsum(dO * out) - g.
#pragma once

#include <cstdint>
#include <span>

#include "runtime/op.h"

namespace kiln::attention {

/// d without its last `drop` dims.
inline Dims leading(const Dims& d, size_t drop) { return Dims(std::span<const int64_t>(d.data(), d.size() - drop)); }

/// The operands by role; those an op was not given are undefined.
struct Operands {
  Tensor q, k, v, out, grad, mask, state;
};
/// Splits attention's or attention_backward's inputs (the rule checked their count).
Operands operands_of(OpId id, std::span<const Tensor> in, const Attrs& a);

struct Sizes {
  int64_t batch = 1, l = 0, s = 0, e = 0, ev = 0;
  int64_t packed() const { return l * e + s * e + s * ev; }  // attention_backward's last dim
};
Sizes sizes_of(const Operands& o);
/// The same from q [..., L, E] and v [..., S, Ev] alone, which fix them.
Sizes sizes_of(const Tensor& q, const Tensor& v);

/// The mask broadcast to [batch..., L, S], the batch dims merged where their strides allow:
/// element (b, i, j) lies at offset(b) + i * row_stride + j * col_stride (strides 0 where it
/// broadcasts).
struct MaskLayout {
  Dims batch_sizes, batch_strides;  // merged batch dims, outermost first
  int64_t row_stride = 0, col_stride = 0;
  int64_t offset(int64_t b) const {
    int64_t off = 0;
    for (size_t d = batch_sizes.size(); d-- > 0;) {
      off += b % batch_sizes[d] * batch_strides[d];
      b /= batch_sizes[d];
    }
    return off;
  }
};
/// `mask` (of the operands' dtype, or bool) broadcast over the batch of q.
MaskLayout mask_layout(const Tensor& mask, const Operands& o);

/// Elements of a row's log-sum-exp in a packed result: one, or for f16 and bf16 two (hi, then
/// the f32 value less hi), so the packed result keeps f32's accuracy in one dtype.
inline int64_t lse_width(DType t) { return t == DType::F16 || t == DType::BF16 ? 2 : 1; }
/// Elements of the log-sum-exp part, which comes first in the packed result.
inline int64_t lse_elements(const Sizes& z, DType t) { return z.batch * z.l * lse_width(t); }
/// The output [..., L, Ev] inside a packed result of q [..., L, E] and v [..., S, Ev] (or the
/// gradient of the packed result): a contiguous view.
Tensor output_of(const Tensor& packed, const Tensor& q, const Tensor& v);
/// The log-sum-exp part of a packed result (or of its gradient) as [..., L] in the compute
/// type (f64 for f64, else f32), each row's w elements summed.
Tensor lse_of(const Tensor& packed, const Tensor& q, const Tensor& v);
/// The op as the public functions apply it (`in` as attention takes them): with lse=true when
/// the result will be differentiated (grad mode on and an operand requiring grad), so the
/// backward reads the log-sum-exp; the output [..., L, Ev] either way.
Tensor apply_fused(std::span<const Tensor> in, Attrs a);
/// The log-sum-exp [..., L] of the masked, scaled scores, from Tensor ops (the kernels' where
/// they decline).
Tensor composite_lse(std::span<const Tensor> in, const Attrs& a);
/// The log-sum-exp part of a packed result of dtype t from the log-sum-exp (compute type, any
/// shape): one element a row, or for f16 and bf16 its rounding to t and the rest (0 where the
/// rounding is exact, -inf included).
Tensor lse_part(const Tensor& lse, DType t);
/// The packed result of attention(lse=true) from its log-sum-exp (compute type) and output.
Tensor pack_lse(const Tensor& lse, const Tensor& out);

/// The generator counters the dropout uses: rand's f32 draw of batch * L * S values.
int64_t dropout_counters(const Sizes& s);
/// rand's f32 value of a Philox word: its top 24 bits times 2^-24 (runtime/random.cpp).
inline float unit_f32(uint32_t word) { return static_cast<float>(word >> 8) * 0x1p-24f; }

/// Whether scaled_dot_product_attention runs the op on `device` for L queries and S keys, or
/// the composite. CUDA: always (its memory stays linear in the sequence). The CPU: from one
/// head's L x S = 2^20 weights (4 MB of f32) on, where the blocked kernel is as fast as the
/// traced composite or faster (measured with benchmarks/attention_bench.cpp: at T = 1024 1.0x
/// non-causal and 2x causal, which skips the masked keys; at T = 64 to 512 the traced
/// composite's fused softmax took 0.55 to 0.6x the kernel's time).
inline bool fused_on(Device device, int64_t l, int64_t s) { return !device.is_cpu() || l * s >= (int64_t{1} << 20); }

/// The composite whose meaning the op has, with Tensor ops (the tests compare with it; the
/// float mask's gradient is computed from it).
Tensor composite(std::span<const Tensor> in, const Attrs& a);

}  // namespace kiln::attention
