// runtime/ops/attention.cpp -- attention and attention_backward (runtime/ops/attention.h): their
// shape rules, their meaning as a composite, their derivative, and the CPU's blocked kernels.
// The CPU never holds more of the L x S weights than one block of kRowBlock query rows: per
// block, the scores come from one GEMM, become weights row by row (scale, mask, causal,
// softmax, dropout) and meet v in a second GEMM. The backward recomputes the weights per block
// (flash attention's trade: compute for memory) and sums dk and dv over the blocks in order,
// so its results are the same on any number of threads.
#include "runtime/ops/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "runtime/api.h"
#include "runtime/autograd_meta.h"
#include "runtime/check.h"
#include "runtime/loop_layout.h"
#include "runtime/ops/defs.h"
#include "runtime/ops/gemm.h"
#include "runtime/parallel.h"
#include "runtime/simd/kernels.h"

namespace kiln {
namespace attention {

Operands operands_of(OpId id, std::span<const Tensor> in, const Attrs& a) {
  Operands o;
  size_t next = id == OpId::Attention ? 3 : 5;
  o.q = in[0], o.k = in[1], o.v = in[2];
  if (id == OpId::AttentionBackward) o.out = in[3], o.grad = in[4];
  bool dropout = a.dropout_p.to_double() > 0;
  if (in.size() > next + (dropout ? 1 : 0)) o.mask = in[next++];
  if (dropout) o.state = in[next];
  return o;
}

Sizes sizes_of(const Operands& o) { return sizes_of(o.q, o.v); }

Sizes sizes_of(const Tensor& qt, const Tensor& vt) {
  const Dims &q = qt.shape(), &v = vt.shape();
  Sizes z;
  for (size_t d = 0; d + 2 < q.size(); ++d) z.batch *= q[d];
  z.l = q[q.size() - 2], z.e = q.back(), z.s = v[v.size() - 2], z.ev = v.back();
  return z;
}

namespace {

// [batch..., L, S]: the weights' shape, which the mask broadcasts to and the dropout draws.
Dims weights_shape(const Operands& o) {
  Dims w = leading(o.q.shape(), 1);
  w.push_back(o.k.shape()[o.k.dim() - 2]);
  return w;
}

}  // namespace

MaskLayout mask_layout(const Tensor& mask, const Operands& o) {
  Dims full = weights_shape(o);
  Dims st = broadcast_strides(mask.shape(), mask.strides(), full, "attention mask");
  MaskLayout m;
  size_t r = full.size();
  m.row_stride = full[r - 2] == 1 ? 0 : st[r - 2];
  m.col_stride = full[r - 1] == 1 ? 0 : st[r - 1];
  m.batch_sizes = leading(full, 2);
  m.batch_strides = leading(st, 2);
  if (!m.batch_sizes.empty()) merge_dims(m.batch_sizes, std::span<Dims>(&m.batch_strides, 1));
  return m;
}

int64_t dropout_counters(const Sizes& s) { return (s.batch * s.l * s.s + 3) / 4; }

namespace {

const double kNegInf = -std::numeric_limits<double>::infinity();

// scale * q k^T + mask with the causal and bool masks as -inf.
Tensor masked_scores(const Operands& o, const Attrs& a) {
  Tensor scores = matmul(o.q, o.k.transpose(-2, -1)) * a.scale.to_double();
  if (a.causal) {
    Sizes z = sizes_of(o);
    Tensor rows = arange(0, z.l, 1, DType::I64).reshape({z.l, 1}),
           cols = arange(0, z.s, 1, DType::I64).reshape({1, z.s});
    scores = where(le(cols, rows).to(o.q.device()), scores, kNegInf);
  }
  if (o.mask.defined())
    scores = o.mask.dtype() == DType::Bool ? where(o.mask, scores, kNegInf) : scores + o.mask.to(scores.dtype());
  return scores;
}

// softmax of the masked scores: the weights before the dropout.
Tensor weights(const Operands& o, const Attrs& a) { return softmax(masked_scores(o, a), -1); }

// The dropout's factor per weight: 1 / (1 - p) where rand's value is below 1 - p, else 0.
Tensor dropout_factor(const Operands& o, const Attrs& a) {
  double p = a.dropout_p.to_double();
  Attrs draw;
  draw.shape = weights_shape(o);
  draw.dtype = DType::F32;
  Tensor u = apply(OpId::Rand, {o.state}, draw);
  return (u < static_cast<float>(1.0 - p)).to(o.q.dtype()) * (1.0 / (1.0 - p));
}

}  // namespace

Tensor composite(std::span<const Tensor> in, const Attrs& a) {
  Operands o = operands_of(OpId::Attention, in, a);
  Tensor w = weights(o, a);
  if (o.state.defined()) w = w * dropout_factor(o, a);
  return matmul(w, o.v);
}

Tensor composite_lse(std::span<const Tensor> in, const Attrs& a) {
  Operands o = operands_of(OpId::Attention, in, a);
  return logsumexp(masked_scores(o, a), {-1});
}

Tensor lse_part(const Tensor& lse, DType t) {
  Tensor flat = lse.reshape({-1});
  if (lse_width(t) == 1) return flat.to(t);
  Tensor hi = flat.to(t).to(flat.dtype());
  Tensor lo = where(ne(hi, flat), flat - hi, 0.0);  // (-inf - -inf would be NaN)
  return cat({hi.to(t).reshape({-1, 1}), lo.to(t).reshape({-1, 1})}, 1).reshape({-1});
}

Tensor pack_lse(const Tensor& lse, const Tensor& out) {
  return cat({lse_part(lse, out.dtype()), out.reshape({-1})}, 0);
}

Tensor output_of(const Tensor& packed, const Tensor& q, const Tensor& v) {
  Sizes z = sizes_of(q, v);
  int64_t first = lse_elements(z, q.dtype());
  Dims shape = leading(q.shape(), 1);
  shape.push_back(z.ev);
  return packed.slice(0, first, first + z.batch * z.l * z.ev).reshape(shape);
}

Tensor lse_of(const Tensor& packed, const Tensor& q, const Tensor& v) {
  Sizes z = sizes_of(q, v);
  DType t = q.dtype();
  Dims shape = leading(q.shape(), 1);
  Tensor part = packed.slice(0, 0, lse_elements(z, t)).to(t == DType::F64 ? DType::F64 : DType::F32);
  return part.reshape({z.batch * z.l, lse_width(t)}).sum({1}).reshape(shape);
}

Tensor apply_fused(std::span<const Tensor> in, Attrs a) {
  a.lse = false;
  if (grad_enabled())
    for (const Tensor& x : in) a.lse = a.lse || x.requires_grad();
  Tensor r = apply(OpId::Attention, in, a);
  return a.lse ? output_of(r, in[0], in[2]) : r;
}

namespace {

constexpr int64_t kRowBlock = 64;

bool is_state(const Tensor& t) { return t.dtype() == DType::I64 && t.shape() == Dims{2}; }

TensorType attention_rule(OpId id, std::span<const Tensor> in, const Attrs& a) {
  const char* op = op_name(id);
  size_t fixed = id == OpId::Attention ? 3 : 5;
  double p = a.dropout_p.to_double(), scale = a.scale.to_double();
  KILN_CHECK(p >= 0 && p < 1 && std::isfinite(scale), "{}: dropout_p must be in [0, 1) and scale finite, got {} and {}",
             op, p, scale);
  size_t want = fixed + (p > 0 ? 1 : 0);
  KILN_CHECK(in.size() == want || in.size() == want + 1, "{}: expected {} operands{} and an optional mask, got {}", op,
             want, p > 0 ? " (the last the dropout's generator state)" : "", in.size());
  Operands o = operands_of(id, in, a);
  const Tensor &q = o.q, &k = o.k, &v = o.v;
  KILN_CHECK(q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim(),
             "{}: expected q [..., L, E], k [..., S, E] and v [..., S, Ev] of one rank of 2 or more, got {}, {} and {}",
             op, q.type().str(), k.type().str(), v.type().str());
  KILN_CHECK(is_float(q.dtype()) && k.dtype() == q.dtype() && v.dtype() == q.dtype(),
             "{}: q, k and v must share a float dtype, got {}, {} and {}", op, q.type().str(), k.type().str(),
             v.type().str());
  int64_t r = q.dim();
  bool batch_same = true;
  for (int64_t d = 0; d + 2 < r; ++d) batch_same &= k.shape()[d] == q.shape()[d] && v.shape()[d] == q.shape()[d];
  KILN_CHECK(batch_same && k.shape()[r - 1] == q.shape()[r - 1] && v.shape()[r - 2] == k.shape()[r - 2],
             "{}: q {}, k {} and v {} must share their batch dims, q and k their last dim, k and v their length", op,
             q.type().str(), k.type().str(), v.type().str());
  for (int64_t d : q.shape()) KILN_CHECK(d >= 0, "{}: q {} needs concrete sizes", op, q.type().str());
  for (int64_t d : v.shape()) KILN_CHECK(d >= 0, "{}: v {} needs concrete sizes", op, v.type().str());
  Dims out_shape = leading(q.shape(), 1);
  out_shape.push_back(v.shape().back());
  if (o.mask.defined()) {
    const Tensor& m = o.mask;
    KILN_CHECK(m.dtype() == DType::Bool || is_float(m.dtype()), "{}: the mask must be bool or float, got {}", op,
               m.type().str());
    Dims w = leading(q.shape(), 1);
    w.push_back(k.shape()[r - 2]);
    bool fits = m.dim() <= r;
    for (int64_t d = 0; fits && d < m.dim(); ++d) {
      int64_t md = m.shape()[m.dim() - 1 - d], wd = w[w.size() - 1 - d];
      fits = md == wd || md == 1;
    }
    KILN_CHECK(fits, "{}: the mask {} does not broadcast to the weights' shape {}", op, m.type().str(), shape_str(w));
    KILN_CHECK(!a.causal, "{}: give a mask or causal, not both", op);
  }
  if (o.state.defined())
    KILN_CHECK(is_state(o.state), "{}: the dropout's generator state must be i64[2] (seed, offset), got {}", op,
               o.state.type().str());
  TensorType out_type{q.dtype(), out_shape, q.device()};
  Sizes z = sizes_of(o);
  TensorType packed_type{q.dtype(), {lse_elements(z, q.dtype()) + z.batch * z.l * z.ev}, q.device()};
  if (id == OpId::Attention) return a.lse ? packed_type : out_type;
  const TensorType& result_type = a.lse ? packed_type : out_type;
  KILN_CHECK(o.out.type() == result_type && o.grad.type() == result_type,
             "{}: out {} and grad {} must be attention's result{}, {}", op, o.out.type().str(), o.grad.type().str(),
             a.lse ? " with its log-sum-exp" : "", result_type.str());
  Dims packed = leading(q.shape(), 2);
  packed.push_back(z.packed());
  return {q.dtype(), packed, q.device()};
}

// The operands in compute type C, contiguous, with what the rows read.
template <class C> struct Prepared {
  Sizes z;
  Tensor q, k, v, out, grad, mask;
  Tensor lse_grad;  // with lse: the log-sum-exp's gradient [batch * L], else undefined
  MaskLayout ml;
  C scale = 1, drop_scale = 1;
  bool causal = false, dropout = false, mask_bool = false;
  float keep_below = 1;
  uint64_t seed = 0, first = 0;
};

template <class C> Prepared<C> prepare(OpId id, std::span<const Tensor> in, const Attrs& a) {
  GradModeGuard no_grad(false);
  Operands o = operands_of(id, in, a);
  Prepared<C> p;
  p.z = sizes_of(o);
  DType ct = dtype_of<C>();
  auto as_c = [&](const Tensor& t) { return t.defined() ? t.to(ct).contiguous() : t; };
  if (o.out.defined() && a.lse) {
    p.lse_grad = lse_of(o.grad, o.q, o.v).to(ct).contiguous();
    o.out = output_of(o.out, o.q, o.v), o.grad = output_of(o.grad, o.q, o.v);
  }
  p.q = as_c(o.q), p.k = as_c(o.k), p.v = as_c(o.v), p.out = as_c(o.out), p.grad = as_c(o.grad);
  p.scale = static_cast<C>(a.scale.to_double());
  p.causal = a.causal;
  if (o.mask.defined()) {
    p.mask_bool = o.mask.dtype() == DType::Bool;
    p.mask = p.mask_bool ? o.mask : o.mask.to(ct);  // converted before it is broadcast
    p.ml = mask_layout(p.mask, o);
  }
  if (o.state.defined()) {
    double drop = a.dropout_p.to_double();
    std::vector<int64_t> st = o.state.contiguous().to_vector<int64_t>();
    p.dropout = true;
    p.seed = static_cast<uint64_t>(st[0]), p.first = static_cast<uint64_t>(st[1]);
    p.keep_below = static_cast<float>(1.0 - drop);
    p.drop_scale = static_cast<C>(1.0 / (1.0 - drop));
  }
  return p;
}

// Row i of batch b over its first n keys (the rest are causally masked): raw scores q k^T in,
// the softmax weights out (before the dropout); NaN when every key is masked, as softmax gives.
// Returns the row's log-sum-exp (-inf when every key is masked). exp runs on the SIMD kernel
// pointwise exp runs on.
template <class C> C weights_row(const Prepared<C>& p, int64_t b, int64_t i, int64_t n, C* s) {
  const int64_t seen = p.causal ? std::min(n, i + 1) : n;
  const C inf = std::numeric_limits<C>::infinity();
  C m = -inf;
  const bool* mb = nullptr;
  const C* mf = nullptr;
  if (p.mask.defined()) {
    int64_t off = p.ml.offset(b) + i * p.ml.row_stride;
    if (p.mask_bool) mb = static_cast<const bool*>(p.mask.data_ptr()) + off;
    else mf = static_cast<const C*>(p.mask.data_ptr()) + off;
  }
  for (int64_t j = 0; j < n; ++j) {
    C x = j < seen ? s[j] * p.scale : -inf;
    if (mb && !mb[j * p.ml.col_stride]) x = -inf;
    if (mf) x += mf[j * p.ml.col_stride];
    s[j] = x;
    m = std::max(m, x);
  }
  if (m == -inf) {
    std::fill(s, s + n, std::numeric_limits<C>::quiet_NaN());
    return -inf;
  }
  for (int64_t j = 0; j < n; ++j) s[j] -= m;
  const void* in[] = {s};
  simd::kernels().pointwise[static_cast<int>(OpId::Exp)][static_cast<int>(dtype_of<C>())](n, s, in, 0);
  C sum = 0;
  for (int64_t j = 0; j < n; ++j) sum += s[j];
  C inv = C(1) / sum;
  for (int64_t j = 0; j < n; ++j) s[j] *= inv;
  return m + std::log(sum);
}

// The dropout's factor for the first n weights of row i of batch b (rand's f32 draw, value
// (b * L + i) * S + j of the stream): drop_scale where kept, else 0.
template <class C>
void dropout_row(const Prepared<C>& p, int64_t b, int64_t i, int64_t n, std::vector<uint32_t>& words, C* f) {
  const int64_t idx0 = (b * p.z.l + i) * p.z.s, c0 = idx0 / 4, m = (idx0 + n - 1) / 4 - c0 + 1;
  words.resize(static_cast<size_t>(4 * m));
  simd::kernels().philox(p.seed, p.first + static_cast<uint64_t>(c0), m, words.data());
  for (int64_t j = 0; j < n; ++j) {
    int64_t idx = idx0 + j;
    uint32_t w = words[static_cast<size_t>(idx % 4 * m + idx / 4 - c0)];
    f[j] = unit_f32(w) < p.keep_below ? p.drop_scale : C(0);
  }
}

template <class C>
gemm::Mat<const C> rows_of(const Tensor& t, int64_t b, int64_t rows, int64_t cols, int64_t r0 = 0, int64_t nr = -1) {
  const C* base = t.data<C>() + (b * rows + r0) * cols;
  return {base, nr < 0 ? rows : nr, cols, cols, 1};
}

// a @ b into c (or added to it); an empty inner dim gives zeros.
template <class C>
void block_product(gemm::Mat<const C> a, gemm::Mat<const C> b, gemm::Mat<C> c, bool accumulate = false) {
  if (c.rows == 0 || c.cols == 0) return;
  if (a.cols == 0) {
    if (!accumulate)
      for (int64_t i = 0; i < c.rows; ++i)
        for (int64_t j = 0; j < c.cols; ++j) c.data[i * c.rs + j * c.cs] = 0;
    return;
  }
  gemm::gemm(a, b, c, accumulate);
}

// The keys a block of query rows [r0, r0 + nr) sees: causally, none past its last row.
template <class C> int64_t keys_of(const Prepared<C>& p, int64_t r0, int64_t nr) {
  return p.causal ? std::min(p.z.s, r0 + nr) : p.z.s;
}

// Writes each row's log-sum-exp into lse[b * L + i] when lse is given.
template <class C> void forward(const Prepared<C>& p, C* out, C* lse) {
  const Sizes z = p.z;
  const int64_t blocks = (z.l + kRowBlock - 1) / kRowBlock;
  parallel_for(0, z.batch * blocks, 1, [&](int64_t t0, int64_t t1) {
    std::vector<C> s(static_cast<size_t>(kRowBlock * z.s)), f(p.dropout ? z.s : 0);
    std::vector<uint32_t> words;
    for (int64_t t = t0; t < t1; ++t) {
      int64_t b = t / blocks, r0 = t % blocks * kRowBlock, nr = std::min(kRowBlock, z.l - r0), n = keys_of(p, r0, nr);
      gemm::Mat<C> sm{s.data(), nr, n, n, 1};
      block_product(rows_of<C>(p.q, b, z.l, z.e, r0, nr), rows_of<C>(p.k, b, z.s, z.e, 0, n).transposed(), sm);
      for (int64_t i = 0; i < nr; ++i) {
        C* row = s.data() + i * n;
        C row_lse = weights_row(p, b, r0 + i, n, row);
        if (lse) lse[b * z.l + r0 + i] = row_lse;
        if (!p.dropout) continue;
        dropout_row(p, b, r0 + i, n, words, f.data());
        for (int64_t j = 0; j < n; ++j) row[j] *= f[j];
      }
      block_product(sm.as_const(), rows_of<C>(p.v, b, z.s, z.ev, 0, n),
                    gemm::Mat<C>{out + (b * z.l + r0) * z.ev, nr, z.ev, z.ev, 1});
    }
  });
}

// dq, dk, dv of batch b into its packed row. Per block of query rows: the weights P again,
// dPd = dO v^T, the dropout's factor f, dS = P (f dPd - D) with D = rowsum(dO * out), then
// dq = scale dS k, dk += scale dS^T q, dv += (f P)^T dO.
template <class C> void backward(const Prepared<C>& p, C* packed) {
  const Sizes z = p.z;
  const int64_t width = z.packed();
  parallel_for(0, z.batch, 1, [&](int64_t b0, int64_t b1) {
    std::vector<C> w(static_cast<size_t>(kRowBlock * z.s)), ds(w.size()), f(p.dropout ? z.s : 0);
    std::vector<uint32_t> words;
    for (int64_t b = b0; b < b1; ++b) {
      C* dq = packed + b * width;
      C* dk = dq + z.l * z.e;
      C* dv = dk + z.s * z.e;
      std::fill(dk, dk + z.s * (z.e + z.ev), C(0));
      for (int64_t r0 = 0; r0 < z.l; r0 += kRowBlock) {
        int64_t nr = std::min(kRowBlock, z.l - r0), n = keys_of(p, r0, nr);
        gemm::Mat<C> wm{w.data(), nr, n, n, 1}, dsm{ds.data(), nr, n, n, 1};
        auto q_rows = rows_of<C>(p.q, b, z.l, z.e, r0, nr), go_rows = rows_of<C>(p.grad, b, z.l, z.ev, r0, nr);
        auto k_rows = rows_of<C>(p.k, b, z.s, z.e, 0, n);
        block_product(q_rows, k_rows.transposed(), wm);
        block_product(go_rows, rows_of<C>(p.v, b, z.s, z.ev, 0, n).transposed(), dsm);
        for (int64_t i = 0; i < nr; ++i) {
          C* wr = w.data() + i * n;
          C* dr = ds.data() + i * n;
          weights_row(p, b, r0 + i, n, wr);
          const C* go = p.grad.template data<C>() + (b * z.l + r0 + i) * z.ev;
          const C* o = p.out.template data<C>() + (b * z.l + r0 + i) * z.ev;
          C d = p.lse_grad.defined() ? -p.lse_grad.template data<C>()[b * z.l + r0 + i] : C(0);
          for (int64_t c = 0; c < z.ev; ++c) d += go[c] * o[c];
          if (p.dropout) dropout_row(p, b, r0 + i, n, words, f.data());
          for (int64_t j = 0; j < n; ++j) {
            C fj = p.dropout ? f[j] : C(1);
            dr[j] = wr[j] * (fj * dr[j] - d) * p.scale;
            wr[j] *= fj;
          }
        }
        block_product(wm.as_const().transposed(), go_rows, gemm::Mat<C>{dv, n, z.ev, z.ev, 1}, true);
        block_product(dsm.as_const(), k_rows, gemm::Mat<C>{dq + r0 * z.e, nr, z.e, z.e, 1});
        block_product(dsm.as_const().transposed(), q_rows, gemm::Mat<C>{dk, n, z.e, z.e, 1}, true);
      }
    }
  });
}

template <class C> void run_cpu(OpId id, std::span<const Tensor> in, const Attrs& a, const Tensor& out) {
  Prepared<C> p = prepare<C>(id, in, a);
  bool direct = out.dtype() == dtype_of<C>();
  Tensor result = direct ? out : empty(out.shape(), dtype_of<C>());
  C* r = result.data<C>();
  const bool lse = id == OpId::Attention && a.lse;
  const int64_t first = lse ? lse_elements(p.z, in[0].dtype()) : 0;
  // Each row's log-sum-exp (-inf without keys), packed into the result's first part below.
  std::vector<C> rows_lse(lse ? static_cast<size_t>(p.z.batch * p.z.l) : 0, -std::numeric_limits<C>::infinity());
  if (p.z.s == 0 || result.numel() == 0) {  // no keys: the empty sums are zeros
    std::fill(r, r + result.numel(), C(0));
  } else {
    BlasThreadsScope blas;
    if (id == OpId::Attention) forward(p, r + first, lse ? rows_lse.data() : nullptr);
    else backward(p, r);
  }
  GradModeGuard no_grad(false);
  Tensor o = out;
  if (!direct) o.copy_(result);
  if (lse && first > 0) o.slice(0, 0, first).copy_(lse_part(from_vector(rows_lse), out.dtype()));
}

void attention_cpu(OpId id, std::span<const Tensor> in, const Attrs& a, const Tensor& out) {
  if (in[0].dtype() == DType::F64) run_cpu<double>(id, in, a, out);
  else run_cpu<float>(id, in, a, out);
}

// Under create_graph, the gradients from the composite's formulas, which are Tensor ops and so
// differentiable again (with the L x S weights in memory): dS = W (dW - rowsum(dW W) + g) with
// g the log-sum-exp's gradient (with lse; d lse / d scores = W),
// dW = f (grad v^T), dq = scale dS k, dk = scale dS^T q, dv = (f W)^T grad; a float mask's is dS.
Grads composite_vjp(const VjpArgs& v, const Operands& o, const Tensor& grad) {
  Tensor w = weights(o, v.attrs), f = o.state.defined() ? dropout_factor(o, v.attrs) : Tensor();
  Tensor dw = matmul(grad, o.v.transpose(-2, -1));
  if (f.defined()) dw = dw * f;
  Tensor ds = w * (dw - sum(dw * w, {-1}, true));
  if (v.attrs.lse) ds = ds + w * lse_of(v.grad, o.q, o.v).to(w.dtype()).unsqueeze(-1);  // d lse / d scores = w
  Tensor scaled = ds * v.attrs.scale.to_double();
  Grads g(v.in.size());
  if (v.needs_grad(0)) g[0] = matmul(scaled, o.k);
  if (v.needs_grad(1)) g[1] = matmul(scaled.transpose(-2, -1), o.q);
  if (v.needs_grad(2)) g[2] = matmul((f.defined() ? w * f : w).transpose(-2, -1), grad);
  if (o.mask.defined() && o.mask.dtype() != DType::Bool && v.needs_grad(3)) g[3] = ds;
  return g;
}

// dq, dk, dv from attention_backward's packed result; a float mask's gradient is dS (without
// the scale), from the composite's pieces: it is L x S, as the mask's broadcast is.
// With lse, v.out is the packed result (the backward reads it whole) and v.grad its gradient,
// whose output part is the output's.
Grads attention_vjp(const VjpArgs& v) {
  Operands o = operands_of(OpId::Attention, v.in, v.attrs);
  Tensor grad = v.attrs.lse ? output_of(v.grad, o.q, o.v) : v.grad;
  if (grad_enabled()) return composite_vjp(v, o, grad);
  std::vector<Tensor> bin = {o.q, o.k, o.v, v.out, v.grad};
  if (o.mask.defined()) bin.push_back(o.mask);
  if (o.state.defined()) bin.push_back(o.state);
  Tensor packed = apply(OpId::AttentionBackward, bin, v.attrs);
  Sizes z = sizes_of(o);
  Dims batch = leading(o.q.shape(), 2);
  int64_t last = packed.dim() - 1;
  auto part = [&](int64_t start, int64_t rows, int64_t cols) {
    Dims shape = batch;
    shape.push_back(rows);
    shape.push_back(cols);
    return packed.slice(last, start, start + rows * cols).reshape(shape);
  };
  Grads g(v.in.size());
  if (v.needs_grad(0)) g[0] = part(0, z.l, z.e);
  if (v.needs_grad(1)) g[1] = part(z.l * z.e, z.s, z.e);
  if (v.needs_grad(2)) g[2] = part(z.l * z.e + z.s * z.e, z.s, z.ev);
  if (o.mask.defined() && o.mask.dtype() != DType::Bool && v.needs_grad(3)) {
    VjpArgs mask_only{v.op, v.in, v.in_types, v.out, v.grad, v.attrs, VjpArgs::need_bit(3)};
    g[3] = composite_vjp(mask_only, o, grad)[3];
  }
  return g;
}

}  // namespace
}  // namespace attention

constexpr uint64_t kAttentionAttrs = kAttrScale | kAttrCausal | kAttrDropoutP | kAttrLse;
// attention(q, k, v[, mask][, state]): runtime/ops/attention.h.
namespace attention {
namespace {
// The products over the kept (query, key) pairs: q k^T and P v forward (E + Ev multiply-adds a
// pair); the backward as FlashAttention-2 counts it, q k^T again, dO v^T, P^T dO, dS k, dS^T q
// (3E + 2Ev). Causal keeps key j for query i where j <= i.
double flops(std::span<const TensorType> in, const TensorType&, const Attrs& a, bool backward) {
  const Dims &q = in[0].shape, &v = in[2].shape;
  int64_t l = q[q.size() - 2], s = in[1].shape[in[1].shape.size() - 2], e = q.back(), ev = v.back();
  double batch = static_cast<double>(q.product()) / static_cast<double>(std::max<int64_t>(l * e, 1));
  double pairs = static_cast<double>(l) * static_cast<double>(s);
  if (a.causal) {
    int64_t full = std::min(l, s);  // rows 0..full-1 keep i + 1 keys, the rest keep all s
    pairs = static_cast<double>(full) * static_cast<double>(full + 1) / 2 + static_cast<double>(l - full) * s;
  }
  return 2.0 * batch * pairs * static_cast<double>(backward ? 3 * e + 2 * ev : e + ev);
}
double forward_flops(std::span<const TensorType> in, const TensorType& out, const Attrs& a) {
  return flops(in, out, a, false);
}
double backward_flops(std::span<const TensorType> in, const TensorType& out, const Attrs& a) {
  return flops(in, out, a, true);
}
}  // namespace
}  // namespace attention

const OpDef defs::Attention{.infer = attention::attention_rule,
                            .cpu = attention::attention_cpu,
                            .vjp = attention::attention_vjp,
                            .saves = kSaveBoth,
                            .attrs = kAttentionAttrs,
                            .flops = attention::forward_flops};
// attention_backward(q, k, v, out, grad[, mask][, state]): dq, dk, dv packed.
const OpDef defs::AttentionBackward{.infer = attention::attention_rule,
                                    .cpu = attention::attention_cpu,
                                    .differentiable = false,
                                    .saves = kSaveNothing,
                                    .attrs = kAttentionAttrs,
                                    .flops = attention::backward_flops};

}  // namespace kiln
