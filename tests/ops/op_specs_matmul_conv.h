// tests/ops/op_specs_matmul_conv.h -- the Specs of the loop-shaped compute: matmul, the addmm
// family, and conv2d with its two gradients.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tests/ops/op_specs_common.h"

namespace kiln::test {

// ---- loop-shaped compute ----------------------------------------------------------------------
/// NumPy matmul of a [..., m, k] and b [k, n] (or 1-d operands), with each output's sum of
/// |terms| as its scale.
inline Ref matmul_ref(const Ref& a, const Ref& b) {
  bool a1 = a.shape.size() == 1, b1 = b.shape.size() == 1;
  int64_t k = b1 ? b.shape[0] : b.shape[b.shape.size() - 2];
  int64_t n = b1 ? 1 : b.shape.back();
  int64_t m = a1 ? 1 : a.shape[a.shape.size() - 2];
  int64_t batch = a1 ? 1 : a.numel() / (m * k);
  Dims shape;
  if (!a1)
    for (size_t d = 0; d + 1 < a.shape.size(); ++d) shape.push_back(a.shape[d]);
  if (!b1) shape.push_back(n);
  Ref o{shape, {}, {}};
  for (int64_t p = 0; p < batch; ++p)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0, mag = 0;
        for (int64_t q = 0; q < k; ++q) {
          double t = a.v[size_t((p * m + i) * k + q)] * b.v[size_t(q * n + j)];
          s += t, mag += std::abs(t);
        }
        o.v.push_back(s), o.scale.push_back(mag);
      }
  return o;
}
template <> struct Spec<OpId::Matmul> {
  static std::vector<DType> dtypes() { return kNumericDTypes; }
  static std::vector<Case> cases(DType t) {
    auto run = [](std::span<const Tensor> in) { return matmul(in[0], in[1]); };
    auto ref = [](std::span<const Ref> r) { return matmul_ref(r[0], r[1]); };
    return {{"batched", {values({2, 3, 4}, t), values({4, 5}, t)}, run, ref},
            {"views", {transposed(3, 6, t), transposed(6, 2, t)}, run, ref},
            {"vector_matrix", {values({4}, t), values({4, 3}, t)}, run, ref},
            {"matrix_vector", {values({3, 4}, t), values({4}, t)}, run, ref}};
  }
};

/// addmm, addmm_relu, addmm_gelu_tanh (bias [n], a [m,k], b [k,n]): the matmul's reference,
/// plus the bias, through the activation (relu and gelu_tanh stretch errors by at most 1.13).
template <OpId Id> struct AddmmSpec {
  static std::vector<DType> dtypes() { return kFloatDTypes; }
  static std::vector<Case> cases(DType t) {
    auto run = [](std::span<const Tensor> in) { return apply(Id, {in[0], in[1], in[2]}); };
    auto ref = [](std::span<const Ref> r) {
      Ref o = matmul_ref(r[1], r[2]);
      int64_t n = r[0].shape[0];
      for (size_t i = 0; i < o.v.size(); ++i) {
        double bias = r[0].v[i % static_cast<size_t>(n)], z = o.v[i] + bias;
        o.scale[i] = 1.13 * (o.scale[i] + std::abs(bias));
        if (Id == OpId::AddmmRelu) z = z < 0 ? 0 : z;
        if (Id == OpId::AddmmGeluTanh) z = 0.5 * z * (1 + std::tanh(0.7978845608028654 * (z + 0.044715 * z * z * z)));
        o.v[i] = z;
      }
      return o;
    };
    return {{"rows", {values({5}, t), values({3, 4}, t), values({4, 5}, t)}, run, ref},
            {"views", {values({2}, t), transposed(3, 6, t), transposed(6, 2, t)}, run, ref}};
  }
};
template <> struct Spec<OpId::Addmm> : AddmmSpec<OpId::Addmm> {};
template <> struct Spec<OpId::AddmmRelu> : AddmmSpec<OpId::AddmmRelu> {};
template <> struct Spec<OpId::AddmmGeluTanh> : AddmmSpec<OpId::AddmmGeluTanh> {};

/// A 2-d convolution's geometry: every (output, input, weight) triple of taps it sums.
struct ConvGeometry {
  Dims x, w, stride, padding, dilation;
  int64_t groups;
  Dims out() const {
    auto len = [&](int d) { return (x[2 + d] + 2 * padding[d] - dilation[d] * (w[2 + d] - 1) - 1) / stride[d] + 1; };
    return {x[0], w[0], len(0), len(1)};
  }
  Attrs attrs() const {
    Attrs a;
    a.stride = stride, a.padding = padding, a.dilation = dilation, a.groups = groups;
    return a;
  }
  // fn(out index, x index, w index) for every tap inside the input.
  template <class F> void taps(F fn) const {
    int64_t cin = w[1], cout_g = w[0] / groups;
    for_each_index(out(), [&](const Dims& o) {
      int64_t g = o[1] / cout_g;
      for (int64_t c = 0; c < cin; ++c)
        for (int64_t kh = 0; kh < w[2]; ++kh)
          for (int64_t kw = 0; kw < w[3]; ++kw) {
            int64_t ih = o[2] * stride[0] - padding[0] + kh * dilation[0];
            int64_t iw = o[3] * stride[1] - padding[1] + kw * dilation[1];
            if (ih < 0 || ih >= x[2] || iw < 0 || iw >= x[3]) continue;
            fn(o, Dims{o[0], g * cin + c, ih, iw}, Dims{o[1], c, kh, kw});
          }
    });
  }
};
inline const ConvGeometry kConv{{2, 4, 6, 7}, {6, 2, 3, 3}, {2, 1}, {1, 2}, {1, 2}, 2};
inline const ConvGeometry kConvPlain{{1, 3, 5, 5}, {2, 3, 2, 2}, {1, 1}, {0, 0}, {1, 1}, 1};

/// conv2d(x, w) and its two gradients, each as `sum over taps of a product`, with scales.
template <class Pick> Ref conv_sum(const Dims& shape, const ConvGeometry& g, Pick pick) {
  Ref o = zeros_ref(shape);
  o.scale.assign(o.v.size(), 0.0);
  g.taps([&](const Dims& oi, const Dims& xi, const Dims& wi) {
    auto [at, term] = pick(oi, xi, wi);
    int64_t off = o.offset(at);
    o.v[size_t(off)] += term, o.scale[size_t(off)] += std::abs(term);
  });
  return o;
}
/// conv2d and its two gradients, each a sum over the taps: operands (x, w), (g, w) and (x, g),
/// and where each tap's product goes.
enum class ConvPart { Output, InputGrad, WeightGrad };
inline std::vector<Case> conv_cases(OpId id, ConvPart part, DType t) {
  std::vector<Case> out;
  for (const ConvGeometry* g : {&kConv, &kConvPlain}) {
    Dims a = part == ConvPart::InputGrad ? g->out() : g->x;
    Dims b = part == ConvPart::WeightGrad ? g->out() : g->w;
    Dims result = part == ConvPart::Output ? g->out() : part == ConvPart::InputGrad ? g->x : g->w;
    auto run = [id, part, g, result](std::span<const Tensor> in) {
      Attrs at = g->attrs();
      if (part != ConvPart::Output) at.shape = result;
      return apply(id, {in[0], in[1]}, at);
    };
    auto ref = [part, g, result](std::span<const Ref> r) {
      return conv_sum(result, *g, [&](const Dims& o, const Dims& x, const Dims& w) {
        switch (part) {
          case ConvPart::Output: return std::pair{o, r[0].at(x) * r[1].at(w)};
          case ConvPart::InputGrad: return std::pair{x, r[0].at(o) * r[1].at(w)};
          case ConvPart::WeightGrad: break;
        }
        return std::pair{w, r[0].at(x) * r[1].at(o)};
      });
    };
    std::string name = g == &kConv ? "strided_padded_dilated_grouped" : "plain";
    out.push_back({name, {values(a, t), values(b, t)}, run, ref});
    // A channels-last view of the first operand.
    Dims nhwc{a[0], a[2], a[3], a[1]};
    out.push_back({name + "_channels_last", {values(nhwc, t).permute({0, 3, 1, 2}), values(b, t)}, run, ref});
  }
  return out;
}
template <> struct Spec<OpId::Conv2d> {
  static std::vector<DType> dtypes() { return kFloatDTypes; }
  static std::vector<Case> cases(DType t) { return conv_cases(OpId::Conv2d, ConvPart::Output, t); }
};
template <> struct Spec<OpId::Conv2dInputGrad> {
  static std::vector<DType> dtypes() { return kFloatDTypes; }
  static std::vector<Case> cases(DType t) { return conv_cases(OpId::Conv2dInputGrad, ConvPart::InputGrad, t); }
};
template <> struct Spec<OpId::Conv2dWeightGrad> {
  static std::vector<DType> dtypes() { return kFloatDTypes; }
  static std::vector<Case> cases(DType t) { return conv_cases(OpId::Conv2dWeightGrad, ConvPart::WeightGrad, t); }
};

}  // namespace kiln::test
