// nn/attention.cpp -- scaled_dot_product_attention and MultiheadAttention, composites of
// matmul, softmax and masks with torch's semantics (and its two mask conventions: for
// scaled_dot_product_attention a bool mask is true where attention is allowed; for
// MultiheadAttention's attn_mask and key_padding_mask it is true where it is not).
#include <cmath>
#include <limits>

#include "nn/describe.h"
#include "nn/init.h"
#include "nn/layers.h"
#include "runtime/autocast.h"
#include "runtime/check.h"
#include "runtime/op.h"
#include "runtime/ops/attention.h"
#include "runtime/rearrange.h"

namespace kiln::nn {

namespace {

const double kNegInf = -std::numeric_limits<double>::infinity();

// The causal mask [L, S]: true where key j may be seen from query i (j <= i), from index
// ranges rather than a constant of ones.
Tensor causal_keep(int64_t l, int64_t s, Device device) {
  Tensor rows = arange(0, l, 1, DType::I64).reshape({l, 1}), cols = arange(0, s, 1, DType::I64).reshape({1, s});
  return le(cols, rows).to(device);
}

// Scores plus a mask: a bool mask keeps where `keep_where` (else -inf), a float mask is added.
Tensor with_mask(const Tensor& scores, const Tensor& mask, bool keep_where, const char* op) {
  if (!mask.defined()) return scores;
  if (mask.dtype() == DType::Bool) return masked_fill(scores, keep_where ? logical_not(mask) : mask, kNegInf);
  KILN_CHECK(is_float(mask.dtype()), "{}: a mask must be bool or float, got {}", op, mask.type().str());
  return scores + mask.to(scores.dtype());
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask,
                                    double dropout_p, bool is_causal, std::optional<double> scale) {
  KILN_CHECK(q.defined() && k.defined() && v.defined() && q.dim() >= 2 && k.dim() >= 2 && v.dim() >= 2,
             "scaled_dot_product_attention: expected q, k, v of 2 or more dims, got {}, {}, {}", type_of(q), type_of(k),
             type_of(v));
  int64_t e = q.shape().back(), s = k.shape()[k.shape().size() - 2];
  KILN_CHECK(k.shape().back() == e && v.shape()[v.shape().size() - 2] == s,
             "scaled_dot_product_attention: q {} and k {} must share their last dim, and k and v {} their length",
             q.type().str(), k.type().str(), v.type().str());
  KILN_CHECK(!(is_causal && attn_mask.defined()),
             "scaled_dot_product_attention: give attn_mask or is_causal, not both");
  KILN_CHECK(dropout_p >= 0 && dropout_p < 1, "scaled_dot_product_attention: dropout_p must be in [0, 1), got {}",
             dropout_p);
  // The fused op (runtime/ops/attention.h) takes operands of one float dtype and batch: under
  // autocast they compute in its dtype, as matmul does; batch dims broadcast as views.
  Tensor qa = autocast_low(q), ka = autocast_low(k), va = autocast_low(v);
  DType t = promote(promote(qa.dtype(), ka.dtype()), va.dtype());
  if (!is_float(t)) t = DType::F32;
  using attention::leading;
  Dims batch =
      broadcast_shapes(leading(qa.shape(), 2), broadcast_shapes(leading(ka.shape(), 2), leading(va.shape(), 2)));
  auto fit = [&](const Tensor& x) {
    Dims shape = batch;
    shape.push_back(x.shape()[x.dim() - 2]);
    shape.push_back(x.shape().back());
    return x.to(t).expand(shape);
  };
  Attrs a;
  a.scale = scale.value_or(1.0 / std::sqrt(static_cast<double>(e)));
  a.causal = is_causal;
  a.dropout_p = dropout_p;  // as torch: dropped whenever dropout_p > 0
  std::vector<Tensor> in = {fit(qa), fit(ka), fit(va)};
  if (attn_mask.defined()) in.push_back(attn_mask);
  if (dropout_p > 0) {
    attention::Operands o;
    o.q = in[0], o.k = in[1], o.v = in[2];
    attention::Sizes z = attention::sizes_of(o);
    Tensor state = random_state(attention::dropout_counters(z));
    in.push_back(q.device().is_cpu() ? state : state.to(q.device()));
  }
  int64_t l = q.shape()[q.shape().size() - 2];
  return attention::fused_on(q.device(), l, s) ? attention::apply_fused(in, a) : attention::composite(in, a);
}

MultiheadAttention::MultiheadAttention(int64_t embed_dim, int64_t num_heads, MultiheadAttentionOptions options)
    : out_proj(embed_dim, embed_dim, options.bias), embed_dim_(embed_dim), num_heads_(num_heads), options_(options) {
  KILN_CHECK(embed_dim > 0 && num_heads > 0 && embed_dim % num_heads == 0,
             "MultiheadAttention: embed_dim {} must be a positive multiple of num_heads {}", embed_dim, num_heads);
  KILN_CHECK(options.dropout >= 0 && options.dropout < 1, "MultiheadAttention: dropout must be in [0, 1), got {}",
             options.dropout);
  in_proj_weight = empty({3 * embed_dim, embed_dim});
  xavier_uniform_(in_proj_weight);
  register_parameter("in_proj_weight", in_proj_weight);
  if (options.bias) {
    in_proj_bias = zeros({3 * embed_dim});
    register_parameter("in_proj_bias", in_proj_bias);
    zeros_(out_proj.bias);
  }
  register_module("out_proj", out_proj);
}

std::tuple<Tensor, Tensor> MultiheadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                                       const Tensor& key_padding_mask, bool need_weights,
                                                       const Tensor& attn_mask, bool average_attn_weights,
                                                       bool is_causal) {
  for (const Tensor* t : {&query, &key, &value})
    KILN_CHECK(t->defined() && t->dim() == 3 && t->shape().back() == embed_dim_,
               "MultiheadAttention: expected query, key and value of 3 dims ending in {}, got {}, {}, {}", embed_dim_,
               type_of(query), type_of(key), type_of(value));
  // [N, L, E] from here on.
  Tensor q = options_.batch_first ? query : query.transpose(0, 1);
  Tensor k = options_.batch_first ? key : key.transpose(0, 1);
  Tensor v = options_.batch_first ? value : value.transpose(0, 1);
  int64_t n = q.shape()[0], l = q.shape()[1], s = k.shape()[1], h = num_heads_, d = embed_dim_ / num_heads_;
  KILN_CHECK(k.shape()[0] == n && v.shape()[0] == n && v.shape()[1] == s,
             "MultiheadAttention: query {}, key {} and value {} disagree on the batch or the key length",
             query.type().str(), key.type().str(), value.type().str());
  auto project = [&](const Tensor& x, int64_t part, int64_t len) {
    Tensor w = in_proj_weight.slice(0, part * embed_dim_, (part + 1) * embed_dim_);
    Tensor b = in_proj_bias.defined() ? in_proj_bias.slice(0, part * embed_dim_, (part + 1) * embed_dim_) : Tensor();
    return linear(x, w, b).reshape({n, len, h, d}).transpose(1, 2);  // [N, H, len, D]
  };
  Tensor qh = project(q, 0, l), kh = project(k, 1, s), vh = project(v, 2, s);
  if (attn_mask.defined())
    KILN_CHECK((attn_mask.dim() == 2 && attn_mask.shape() == (Dims{l, s})) ||
                   (attn_mask.dim() == 3 && attn_mask.shape() == (Dims{n * h, l, s})),
               "MultiheadAttention: attn_mask must be [{},{}] or [{},{},{}], got {}", l, s, n * h, l, s,
               attn_mask.type().str());
  if (key_padding_mask.defined())
    KILN_CHECK(key_padding_mask.shape() == (Dims{n, s}), "MultiheadAttention: key_padding_mask must be [{},{}], got {}",
               n, s, key_padding_mask.type().str());
  if (!need_weights) {  // torch's fast path: the fused op, with the masks made one
    Tensor keep_or_bias;
    bool causal = false;
    if (attn_mask.defined()) {
      Tensor m = attn_mask.dim() == 3 ? attn_mask.reshape({n, h, l, s}) : attn_mask;
      keep_or_bias = m.dtype() == DType::Bool ? logical_not(m) : m;
    } else if (is_causal) {
      causal = true;
    }
    if (key_padding_mask.defined()) {
      Tensor pad = key_padding_mask.reshape({n, 1, 1, s});
      if (causal) keep_or_bias = logical_and(causal_keep(l, s, pad.device()), logical_not(pad)), causal = false;
      else if (!keep_or_bias.defined()) keep_or_bias = logical_not(pad);
      else if (keep_or_bias.dtype() == DType::Bool) keep_or_bias = logical_and(keep_or_bias, logical_not(pad));
      else keep_or_bias = where(pad, kNegInf, keep_or_bias);
    }
    Tensor y = scaled_dot_product_attention(qh, kh, vh, keep_or_bias, is_training() ? options_.dropout : 0.0, causal);
    Tensor out = out_proj(y.transpose(1, 2).reshape({n, l, embed_dim_}));
    return {options_.batch_first ? out : out.transpose(0, 1), Tensor()};
  }
  Tensor scores = matmul(qh, kh.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(d)));  // [N, H, L, S]
  if (attn_mask.defined()) {
    bool per_head = attn_mask.dim() == 3;
    scores = with_mask(scores, per_head ? attn_mask.reshape({n, h, l, s}) : attn_mask, false, "MultiheadAttention");
  } else if (is_causal) {
    scores = with_mask(scores, causal_keep(l, s, scores.device()), true, "MultiheadAttention");
  }
  if (key_padding_mask.defined()) {
    scores = with_mask(scores, key_padding_mask.reshape({n, 1, 1, s}), false, "MultiheadAttention");
  }
  Tensor weights = softmax(scores, -1);
  if (options_.dropout > 0) weights = dropout(weights, options_.dropout, is_training());
  Tensor out = matmul(weights, vh).transpose(1, 2).reshape({n, l, embed_dim_});
  out = out_proj(out);
  if (!options_.batch_first) out = out.transpose(0, 1);
  if (!need_weights) return {out, Tensor()};
  return {out, average_attn_weights ? mean(weights, {1}) : weights};
}

}  // namespace kiln::nn
