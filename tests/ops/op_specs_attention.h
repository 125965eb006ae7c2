// tests/ops/op_specs_attention.h -- the Specs of attention and attention_backward
// (runtime/ops/attention.h): softmax(scale q k^T + mask) v and its three gradients, written
// out in double. (The dropout, which needs the generator's stream, is checked against the
// composite in tests/nn/attention_fused_test.cpp.)
#pragma once

#include <cmath>
#include <limits>
#include <vector>

#include "runtime/ops/attention.h"
#include "tests/ops/op_specs_common.h"

namespace kiln::test {

struct AttentionRef {
  int64_t batch = 1, l = 0, s = 0, e = 0, ev = 0;
  std::vector<double> w;    // [batch, L, S] softmax weights
  std::vector<double> lse;  // [batch, L] the log-sum-exp of the masked, scaled scores
};

/// The weights of q [..., L, E] and k [..., S, E] with an optional mask broadcast to
/// [..., L, S] (bool: kept where nonzero; else added) and the causal rule.
inline AttentionRef attention_weights(const Ref& q, const Ref& k, const Ref* mask, bool mask_bool, bool causal,
                                      double scale) {
  AttentionRef a;
  size_t r = q.shape.size();
  for (size_t d = 0; d + 2 < r; ++d) a.batch *= q.shape[d];
  a.l = q.shape[r - 2], a.e = q.shape[r - 1], a.s = k.shape[r - 2];
  Dims wshape = q.shape;
  wshape[r - 1] = a.s;
  const double inf = std::numeric_limits<double>::infinity();
  for (int64_t b = 0; b < a.batch; ++b)
    for (int64_t i = 0; i < a.l; ++i) {
      std::vector<double> x(static_cast<size_t>(a.s));
      double m = -inf;
      for (int64_t j = 0; j < a.s; ++j) {
        double dot = 0;
        for (int64_t c = 0; c < a.e; ++c)
          dot += q.v[size_t((b * a.l + i) * a.e + c)] * k.v[size_t((b * a.s + j) * a.e + c)];
        double v = dot * scale;
        if (causal && j > i) v = -inf;
        if (mask) {
          // The weight's index, right-aligned onto the mask's shape (size-1 dims broadcast).
          int64_t flat = (b * a.l + i) * a.s + j, off = 0, stride = 1;
          for (size_t d = wshape.size(), md = mask->shape.size(); md-- > 0;) {
            --d;
            int64_t idx = flat % wshape[d];
            flat /= wshape[d];
            off += (mask->shape[md] == 1 ? 0 : idx) * stride;
            stride *= mask->shape[md];
          }
          double mv = mask->v[size_t(off)];
          if (mask_bool) v = mv != 0 ? v : -inf;
          else v += mv;
        }
        x[size_t(j)] = v;
        m = std::max(m, v);
      }
      double z = 0;
      for (double& v : x) z += (v = std::exp(v - m));
      for (double v : x) a.w.push_back(v / z);
      a.lse.push_back(m + std::log(z));
    }
  return a;
}

/// attention's output [..., L, Ev], each element's scale the sum of its |terms|.
inline Ref attention_forward_ref(const AttentionRef& a, const Ref& q, const Ref& v) {
  int64_t ev = v.shape.back();
  Dims shape = q.shape;
  shape.back() = ev;
  Ref o{shape, {}, {}};
  for (int64_t b = 0; b < a.batch; ++b)
    for (int64_t i = 0; i < a.l; ++i)
      for (int64_t c = 0; c < ev; ++c) {
        double acc = 0, mag = 0;
        for (int64_t j = 0; j < a.s; ++j) {
          double t = a.w[size_t((b * a.l + i) * a.s + j)] * v.v[size_t((b * a.s + j) * ev + c)];
          acc += t, mag += std::abs(t);
        }
        o.v.push_back(acc), o.scale.push_back(mag);
      }
  return o;
}

/// attention(lse=true)'s packed [batch*L*w + batch*L*Ev]: each row's log-sum-exp (for f16 and
/// bf16 two elements whose sum it is: the second's reference 0, within the first's rounding),
/// then the output.
inline Ref attention_forward_lse_ref(const AttentionRef& a, const Ref& q, const Ref& v, DType t) {
  Ref out = attention_forward_ref(a, q, v);
  const int64_t w = attention::lse_width(t);
  Ref o{Dims{int64_t(a.lse.size()) * w + out.numel()}, {}, {}};
  for (double x : a.lse)
    for (int64_t u = 0; u < w; ++u) o.v.push_back(u == 0 ? x : 0), o.scale.push_back(std::max(1.0, std::abs(x)));
  o.v.insert(o.v.end(), out.v.begin(), out.v.end());
  o.scale.insert(o.scale.end(), out.scale.begin(), out.scale.end());
  return o;
}
/// The output's part of attention(lse=true)'s packed result, as attention's output.
inline Ref output_part(const Ref& packed, const Ref& q, const Ref& v) {
  Dims shape = q.shape;
  shape.back() = v.shape.back();
  const size_t first = size_t(packed.numel() - shape.product());
  return Ref{shape, std::vector<double>(packed.v.begin() + std::ptrdiff_t(first), packed.v.end()), {}};
}
/// The log-sum-exp part of a packed result: each row's w elements summed.
inline std::vector<double> lse_part(const Ref& packed, const Ref& q, const Ref& v, DType t) {
  const size_t rows = size_t((packed.numel() - q.numel() / q.shape.back() * v.shape.back()) / attention::lse_width(t));
  std::vector<double> out(rows);
  for (size_t r = 0; r < rows; ++r)
    for (int64_t u = 0; u < attention::lse_width(t); ++u)
      out[r] += packed.v[r * size_t(attention::lse_width(t)) + size_t(u)];
  return out;
}

/// attention_backward's packed [..., L*E + S*E + S*Ev]: dq, dk, dv with D = rowsum(grad * out).
/// With lse_grad (a row's log-sum-exp's gradient), D is less it.
inline Ref attention_backward_ref(const AttentionRef& a, const Ref& q, const Ref& k, const Ref& v, const Ref& out,
                                  const Ref& grad, double scale, const std::vector<double>* lse_grad = nullptr) {
  const int64_t l = a.l, s = a.s, e = a.e, ev = v.shape.back(), width = l * e + s * e + s * ev;
  Dims shape(std::span<const int64_t>(q.shape.data(), q.shape.size() - 2));
  shape.push_back(width);
  Ref o{shape, std::vector<double>(size_t(a.batch * width)), std::vector<double>(size_t(a.batch * width))};
  for (int64_t b = 0; b < a.batch; ++b) {
    auto at = [&](const Ref& x, int64_t rows, int64_t cols, int64_t r, int64_t c) {
      return x.v[size_t((b * rows + r) * cols + c)];
    };
    std::vector<double> ds(size_t(l * s)), dsmag(size_t(l * s));
    for (int64_t i = 0; i < l; ++i) {
      const double g = lse_grad ? (*lse_grad)[size_t(b * l + i)] : 0;
      double d = -g, dmag = std::abs(g);
      for (int64_t c = 0; c < ev; ++c)
        d += at(grad, l, ev, i, c) * at(out, l, ev, i, c),
            dmag += std::abs(at(grad, l, ev, i, c) * at(out, l, ev, i, c));
      for (int64_t j = 0; j < s; ++j) {
        double dw = 0, dwmag = 0;
        for (int64_t c = 0; c < ev; ++c)
          dw += at(grad, l, ev, i, c) * at(v, s, ev, j, c),
              dwmag += std::abs(at(grad, l, ev, i, c) * at(v, s, ev, j, c));
        double w = a.w[size_t((b * l + i) * s + j)];
        ds[size_t(i * s + j)] = w * (dw - d) * scale;
        dsmag[size_t(i * s + j)] = w * (dwmag + dmag) * std::abs(scale);
      }
    }
    double* base = o.v.data() + b * width;
    double* mag = o.scale.data() + b * width;
    for (int64_t i = 0; i < l; ++i)
      for (int64_t c = 0; c < e; ++c)
        for (int64_t j = 0; j < s; ++j) {
          base[i * e + c] += ds[size_t(i * s + j)] * at(k, s, e, j, c);
          mag[i * e + c] += dsmag[size_t(i * s + j)] * std::abs(at(k, s, e, j, c));
        }
    for (int64_t j = 0; j < s; ++j) {
      for (int64_t c = 0; c < e; ++c)
        for (int64_t i = 0; i < l; ++i) {
          base[l * e + j * e + c] += ds[size_t(i * s + j)] * at(q, l, e, i, c);
          mag[l * e + j * e + c] += dsmag[size_t(i * s + j)] * std::abs(at(q, l, e, i, c));
        }
      for (int64_t c = 0; c < ev; ++c)
        for (int64_t i = 0; i < l; ++i) {
          double t = a.w[size_t((b * l + i) * s + j)] * at(grad, l, ev, i, c);
          base[l * e + s * e + j * ev + c] += t;
          mag[l * e + s * e + j * ev + c] += std::abs(t);
        }
    }
  }
  return o;
}

/// One geometry of the cases: shapes, the mask (none, bool or float) and the causal rule.
struct AttentionShape {
  std::string name;
  Dims q, k, v, mask;
  int mask_kind = 0;  // 0 none, 1 bool, 2 float
  bool causal = false;
  double scale = 0.5;
};
inline std::vector<AttentionShape> attention_shapes() {
  return {{"plain", {2, 3, 4}, {2, 5, 4}, {2, 5, 6}, {}, 0, false, 0.5},
          {"heads_causal_longer_queries", {2, 2, 6, 3}, {2, 2, 4, 3}, {2, 2, 4, 5}, {}, 0, true, 0.7},
          {"bool_mask_broadcast", {2, 3, 4}, {2, 5, 4}, {2, 5, 2}, {3, 5}, 1, false, 0.5},
          {"float_mask_per_batch", {2, 3, 4}, {2, 5, 4}, {2, 5, 3}, {2, 1, 5}, 2, false, 0.4},
          {"rows_past_a_block", {1, 70, 5}, {1, 40, 5}, {1, 40, 3}, {}, 0, true, 0.3},
          {"one_query_one_key", {1, 1, 2}, {1, 1, 2}, {1, 1, 2}, {}, 0, false, 1.0}};
}
inline Attrs attention_attrs(const AttentionShape& g) {
  Attrs a;
  a.scale = g.scale, a.causal = g.causal;
  return a;
}
/// The case's inputs: q, k, v (q a transposed view in "plain"), then the mask (a bool mask
/// keeps key 0 of every row, so no row is all masked).
inline std::vector<Tensor> attention_inputs(const AttentionShape& g, DType t) {
  std::vector<Tensor> in = {values(g.q, t, -1.5, 1.5), values(g.k, t, -1.5, 1.5), values(g.v, t)};
  if (g.name == "plain") {
    Dims swapped = g.q;
    std::swap(swapped[1], swapped[2]);
    in[0] = values(swapped, t, -1.5, 1.5).transpose(1, 2);
  }
  if (g.mask_kind == 1) {
    Tensor keep = values(g.mask, f32, 0, 1) < 0.6;
    Tensor first = eq(arange(0, g.mask.back(), 1, DType::I64), 0);
    in.push_back(logical_or(keep, first));
  } else if (g.mask_kind == 2) {
    in.push_back(values(g.mask, t, -1, 1));
  }
  return in;
}

template <> struct Spec<OpId::Attention> {
  static std::vector<DType> dtypes() { return kFloatDTypes; }
  static std::vector<Case> cases(DType t) {
    std::vector<Case> out;
    for (const AttentionShape& g : attention_shapes()) {
      auto run = [g](std::span<const Tensor> in) { return apply(OpId::Attention, in, attention_attrs(g)); };
      auto ref = [g](std::span<const Ref> r) {
        AttentionRef a =
            attention_weights(r[0], r[1], g.mask_kind ? &r[3] : nullptr, g.mask_kind == 1, g.causal, g.scale);
        return attention_forward_ref(a, r[0], r[2]);
      };
      out.push_back({g.name, attention_inputs(g, t), run, ref});
      auto run_lse = [g](std::span<const Tensor> in) {
        Attrs a = attention_attrs(g);
        a.lse = true;
        return apply(OpId::Attention, in, a);
      };
      auto ref_lse = [g, t](std::span<const Ref> r) {
        AttentionRef a =
            attention_weights(r[0], r[1], g.mask_kind ? &r[3] : nullptr, g.mask_kind == 1, g.causal, g.scale);
        return attention_forward_lse_ref(a, r[0], r[2], t);
      };
      out.push_back({"lse_" + g.name, attention_inputs(g, t), run_lse, ref_lse});
    }
    return out;
  }
};

template <> struct Spec<OpId::AttentionBackward> {
  static std::vector<DType> dtypes() { return kFloatDTypes; }
  static std::vector<Case> cases(DType t) {
    std::vector<Case> out;
    for (const AttentionShape& g : attention_shapes()) {
      std::vector<Tensor> in = attention_inputs(g, t);
      Dims o = g.q;
      o.back() = g.v.back();
      // q, k, v, out, grad[, mask]: out need not be attention's (D reads whatever it is).
      in.insert(in.begin() + 3, {values(o, t), values(o, t)});
      auto run = [g](std::span<const Tensor> x) { return apply(OpId::AttentionBackward, x, attention_attrs(g)); };
      auto ref = [g](std::span<const Ref> r) {
        AttentionRef a =
            attention_weights(r[0], r[1], g.mask_kind ? &r[5] : nullptr, g.mask_kind == 1, g.causal, g.scale);
        return attention_backward_ref(a, r[0], r[1], r[2], r[3], r[4], g.scale);
      };
      out.push_back({g.name, in, run, ref});
      // With lse: out is the forward's packed result, whose log-sum-exp the backward reads.
      Attrs with_lse = attention_attrs(g);
      with_lse.lse = true;
      std::vector<Tensor> fin = attention_inputs(g, t), lin = fin;
      // (A dtype the op refuses gets values of the packed result's shape, for the refusal.)
      Tensor packed = is_float(t) ? apply(OpId::Attention, fin, with_lse)
                                  : values({g.q.product() / g.q.back() * (attention::lse_width(t) + g.v.back())}, t);
      lin.insert(lin.begin() + 3, {packed, values(packed.shape(), t)});  // the gradient of the log-sum-exp too
      auto run_lse = [with_lse](std::span<const Tensor> x) { return apply(OpId::AttentionBackward, x, with_lse); };
      auto ref_lse = [g, t](std::span<const Ref> r) {
        AttentionRef a =
            attention_weights(r[0], r[1], g.mask_kind ? &r[5] : nullptr, g.mask_kind == 1, g.causal, g.scale);
        std::vector<double> lse_grad = lse_part(r[4], r[0], r[2], t);
        return attention_backward_ref(a, r[0], r[1], r[2], output_part(r[3], r[0], r[2]), output_part(r[4], r[0], r[2]),
                                      g.scale, &lse_grad);
      };
      out.push_back({"lse_" + g.name, lin, run_lse, ref_lse});
    }
    return out;
  }
};

}  // namespace kiln::test
