// tests/unit/conv_grad_test.cpp -- conv2d's kernels and its two gradient ops against one
// double-precision loop: every path (im2col + GEMM, 1x1, grouped, depthwise), batch 1 and
// batches of several partial blocks, strided inputs, and the same bits on any thread count.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "autograd/autograd.h"
#include "runtime/op.h"
#include "runtime/ops/conv_onednn.h"
#include "tests/unit/test_util.h"

using namespace kiln;

namespace {

struct Case {
  int64_t n, c, h, w, o, kh, kw;
  Dims stride, padding, dilation;
  int64_t groups;
  const char* what;
};

const Case kCases[] = {
    {1, 3, 9, 8, 4, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, "3x3, batch 1"},
    {9, 5, 7, 6, 6, 3, 2, {2, 1}, {1, 2}, {1, 2}, 1, "stride, padding, dilation, 3 partial blocks"},
    {2, 4, 9, 7, 6, 3, 3, {2, 2}, {1, 1}, {1, 1}, 2, "grouped"},
    {3, 6, 8, 8, 6, 3, 3, {1, 1}, {1, 1}, {1, 1}, 6, "depthwise"},
    {2, 4, 7, 9, 8, 3, 3, {2, 1}, {2, 1}, {2, 1}, 4, "depthwise, two outputs per channel"},
    {5, 8, 5, 5, 16, 1, 1, {1, 1}, {0, 0}, {1, 1}, 1, "1x1"},
    {2, 8, 6, 5, 4, 1, 1, {1, 1}, {0, 0}, {1, 1}, 2, "1x1 grouped"},
    {2, 6, 7, 7, 4, 1, 1, {2, 2}, {0, 0}, {1, 1}, 1, "1x1 strided"},
    {1, 1, 8, 8, 5, 3, 3, {1, 1}, {0, 0}, {1, 1}, 1, "one input channel"},
    {1, 2, 3, 3, 2, 2, 2, {3, 3}, {2, 2}, {1, 1}, 2, "windows entirely in the padding"},
    {2, 4, 9, 9, 6, 3, 3, {1, 1}, {2, 1}, {2, 1}, 2, "stride 1, dilated, grouped"},
    {1, 3, 6, 6, 4, 3, 3, {1, 1}, {3, 3}, {1, 1}, 1, "stride 1, padding past the kernel"},
    {2, 6, 7, 7, 3, 3, 3, {1, 1}, {1, 1}, {1, 1}, 3, "one output channel per group"},
    {2, 5, 6, 6, 40, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, "output channels in blocks, the last partial"},
    {1, 36, 7, 5, 8, 3, 3, {2, 2}, {1, 1}, {1, 1}, 1, "input channels in blocks, the last partial"},
};

struct Reference {
  std::vector<double> y, dx, dw;              // forward, and the gradients for upstream g
  std::vector<double> y_mag, dx_mag, dw_mag;  // sums of |terms|, for rounding bounds
};

Reference reference(const Tensor& x, const Tensor& w, const Tensor& g, const Case& k) {
  std::vector<double> xv = x.to_vector<double>(), wv = w.to_vector<double>(), gv = g.to_vector<double>();
  int64_t oh = g.size(2), ow = g.size(3), cg = k.c / k.groups, og = k.o / k.groups;
  Reference r;
  r.y.assign(gv.size(), 0), r.y_mag.assign(gv.size(), 0);
  r.dx.assign(xv.size(), 0), r.dx_mag.assign(xv.size(), 0);
  r.dw.assign(wv.size(), 0), r.dw_mag.assign(wv.size(), 0);
  for (int64_t b = 0; b < k.n; ++b)
    for (int64_t o = 0; o < k.o; ++o)
      for (int64_t oy = 0; oy < oh; ++oy)
        for (int64_t ox = 0; ox < ow; ++ox) {
          size_t yi = static_cast<size_t>(((b * k.o + o) * oh + oy) * ow + ox);
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t ky = 0; ky < k.kh; ++ky)
              for (int64_t kx = 0; kx < k.kw; ++kx) {
                int64_t iy = oy * k.stride[0] - k.padding[0] + ky * k.dilation[0];
                int64_t ix = ox * k.stride[1] - k.padding[1] + kx * k.dilation[1];
                if (iy < 0 || iy >= k.h || ix < 0 || ix >= k.w) continue;
                size_t xi = static_cast<size_t>(((b * k.c + (o / og) * cg + ci) * k.h + iy) * k.w + ix);
                size_t wi = static_cast<size_t>(((o * cg + ci) * k.kh + ky) * k.kw + kx);
                r.y[yi] += xv[xi] * wv[wi], r.y_mag[yi] += std::abs(xv[xi] * wv[wi]);
                r.dx[xi] += wv[wi] * gv[yi], r.dx_mag[xi] += std::abs(wv[wi] * gv[yi]);
                r.dw[wi] += xv[xi] * gv[yi], r.dw_mag[wi] += std::abs(xv[xi] * gv[yi]);
              }
        }
  return r;
}

Attrs attrs_of(const Case& k, const Dims& shape = {}) {
  Attrs a;
  a.stride = k.stride, a.padding = k.padding, a.dilation = k.dilation, a.groups = k.groups, a.shape = shape;
  return a;
}

void expect_near(const Tensor& got, const std::vector<double>& want, const std::vector<double>& mag, double eps,
                 const char* what) {
  std::vector<double> v = got.to_vector<double>();
  ASSERT_EQ(v.size(), want.size()) << what;
  for (size_t i = 0; i < v.size(); ++i)
    ASSERT_NEAR(v[i], want[i], 64 * eps * mag[i] + 1e-300) << what << " element " << i;
}

// The f32 kernels to test: kiln's own, and oneDNN's when kiln has it. Restores the setting.
class Backends {
 public:
  Backends() : saved_(conv::onednn_enabled()) {}
  ~Backends() { conv::set_onednn_enabled(saved_); }
  std::vector<bool> list() const { return saved_ ? std::vector<bool>{false, true} : std::vector<bool>{false}; }
  void use(bool onednn) { conv::set_onednn_enabled(onednn); }

 private:
  bool saved_;
};

bool same_bits(const Tensor& a, const Tensor& b) {
  Tensor ca = a.contiguous(), cb = b.contiguous();
  return a.type() == b.type() &&
         std::memcmp(ca.data_ptr(), cb.data_ptr(), static_cast<size_t>(a.numel() * dtype_size(a.dtype()))) == 0;
}

TEST(Conv2dGrad, ForwardAndBothGradientsMatchAReferenceOnEveryPath) {
  manual_seed(3);
  Backends backends;
  for (const Case& k : kCases) {
    for (bool onednn : backends.list()) {
      SCOPED_TRACE(std::string(k.what) + (onednn ? ", oneDNN" : ", kiln's kernels"));
      backends.use(onednn);
      for (DType t : {f32, f64}) {
        double eps = t == f32 ? 0x1p-24 : 0x1p-53;
        Tensor x = randn({k.n, k.c, k.h, k.w}, t), w = randn({k.o, k.c / k.groups, k.kh, k.kw}, t);
        Tensor y = apply(OpId::Conv2d, {x, w}, attrs_of(k));
        Tensor g = randn(y.shape(), t);
        Reference r = reference(x, w, g, k);
        expect_near(y, r.y, r.y_mag, eps, "forward");
        expect_near(apply(OpId::Conv2dInputGrad, {g, w}, attrs_of(k, x.shape())), r.dx, r.dx_mag, eps, "input grad");
        expect_near(apply(OpId::Conv2dWeightGrad, {x, g}, attrs_of(k, w.shape())), r.dw, r.dw_mag, eps, "weight grad");
        // Through autograd, from transposed and sliced views.
        Tensor xs = randn({k.n, k.c, k.w, k.h + 2}, t).slice(3, 1, k.h + 1).transpose(2, 3).requires_grad_();
        Tensor ws = randn({k.o, k.c / k.groups, k.kw, k.kh}, t).transpose(2, 3).requires_grad_();
        Tensor ys = conv2d(xs, ws, {}, k.stride, k.padding, k.dilation, k.groups);
        ys.backward(g);
        Reference rs = reference(xs, ws, g, k);
        expect_near(ys, rs.y, rs.y_mag, eps, "forward of views");
        expect_near(xs.grad(), rs.dx, rs.dx_mag, eps, "input grad of views");
        expect_near(ws.grad(), rs.dw, rs.dw_mag, eps, "weight grad of views");
      }
    }
  }
}

TEST(Conv2dGrad, HalfTypesComputeInF32) {
  manual_seed(4);
  const Case& k = kCases[1];
  for (DType t : {f16, bf16}) {
    Tensor x = randn({k.n, k.c, k.h, k.w}, t), w = randn({k.o, k.c / k.groups, k.kh, k.kw}, t);
    Tensor g = randn(apply(OpId::Conv2d, {x, w}, attrs_of(k)).shape(), t);
    Tensor dx = apply(OpId::Conv2dInputGrad, {g, w}, attrs_of(k, x.shape()));
    Tensor dw = apply(OpId::Conv2dWeightGrad, {x, g}, attrs_of(k, w.shape()));
    EXPECT_EQ(dx.dtype(), t);
    EXPECT_EQ(dw.dtype(), t);
    Tensor want_dx = apply(OpId::Conv2dInputGrad, {g.to(f32), w.to(f32)}, attrs_of(k, x.shape())).to(t);
    Tensor want_dw = apply(OpId::Conv2dWeightGrad, {x.to(f32), g.to(f32)}, attrs_of(k, w.shape())).to(t);
    EXPECT_TRUE(same_bits(dx, want_dx));
    EXPECT_TRUE(same_bits(dw, want_dw));
  }
}

// Partial sums over images are cut by the batch size alone, so 1, 2 and 3 threads agree to the
// bit, at batch 1 (work split inside each image) and at larger batches.
TEST(Conv2dGrad, SameBitsOnAnyThreadCount) {
  manual_seed(5);
  int saved = num_threads();
  Backends backends;
  const Case cases[] = {{1, 16, 20, 20, 32, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, "batch 1"},
                        {10, 8, 12, 12, 16, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, "batch 10"},
                        {6, 16, 12, 12, 16, 3, 3, {2, 2}, {1, 1}, {1, 1}, 16, "depthwise"},
                        {3, 32, 10, 10, 32, 1, 1, {1, 1}, {0, 0}, {1, 1}, 1, "1x1"}};
  for (const Case& k : cases) {
    for (bool onednn : backends.list()) {
      SCOPED_TRACE(std::string(k.what) + (onednn ? ", oneDNN" : ", kiln's kernels"));
      backends.use(onednn);
      Tensor x = randn({k.n, k.c, k.h, k.w}), w = randn({k.o, k.c / k.groups, k.kh, k.kw});
      Tensor g = randn(apply(OpId::Conv2d, {x, w}, attrs_of(k)).shape());
      std::vector<Tensor> ys, dxs, dws;
      for (int threads : {1, 2, 3}) {
        set_num_threads(threads);
        ys.push_back(apply(OpId::Conv2d, {x, w}, attrs_of(k)));
        dxs.push_back(apply(OpId::Conv2dInputGrad, {g, w}, attrs_of(k, x.shape())));
        dws.push_back(apply(OpId::Conv2dWeightGrad, {x, g}, attrs_of(k, w.shape())));
      }
      set_num_threads(saved);
      for (size_t i = 1; i < ys.size(); ++i) {
        EXPECT_TRUE(same_bits(ys[i], ys[0])) << i + 1 << " threads, forward";
        EXPECT_TRUE(same_bits(dxs[i], dxs[0])) << i + 1 << " threads, input grad";
        EXPECT_TRUE(same_bits(dws[i], dws[0])) << i + 1 << " threads, weight grad";
      }
    }
  }
}

// With oneDNN built in, every f32 case above runs through it (none falls back unnoticed); a
// large dense weight gradient over a batch of 8 is left to kiln's GEMM, which is faster for it.
TEST(Conv2dGrad, OneDnnRunsEveryCase) {
  if (!conv::onednn_enabled()) GTEST_SKIP() << "kiln was built without oneDNN (libdnnl-dev) or KILN_ONEDNN=0";
  manual_seed(6);
  for (const Case& k : kCases) {
    SCOPED_TRACE(k.what);
    int64_t cg = k.c / k.groups;
    Tensor x = randn({k.n, k.c, k.h, k.w}), w = randn({k.o, cg, k.kh, k.kw});
    Tensor y = apply(OpId::Conv2d, {x, w}, attrs_of(k));
    Tensor dx = zeros(x.shape()), dw = zeros(w.shape());
    int64_t oh = y.size(2), ow = y.size(3);
    conv::Problem p{k.n,
                    k.c,
                    k.o,
                    k.groups,
                    {cg, k.h, k.w, k.kh, k.kw, k.stride[0], k.stride[1], k.padding[0], k.padding[1], k.dilation[0],
                     k.dilation[1], oh, ow}};
    const float *xp = static_cast<const float*>(x.data_ptr()), *wp = static_cast<const float*>(w.data_ptr());
    EXPECT_TRUE(conv::onednn_forward(p, xp, wp, static_cast<float*>(y.data_ptr())));
    EXPECT_TRUE(
        conv::onednn_input_grad(p, static_cast<const float*>(y.data_ptr()), wp, static_cast<float*>(dx.data_ptr())));
    EXPECT_TRUE(
        conv::onednn_weight_grad(p, xp, static_cast<const float*>(y.data_ptr()), static_cast<float*>(dw.data_ptr())));
  }
  conv::Problem large{8, 64, 64, 1, {64, 32, 32, 3, 3, 1, 1, 1, 1, 1, 1, 32, 32}};
  EXPECT_FALSE(conv::onednn_weight_grad(large, nullptr, nullptr, nullptr));
}

TEST(Conv2dGrad, ErrorsNameTheOpAndTheShapes) {
  Tensor w = zeros({4, 3, 3, 3}), x = zeros({2, 3, 8, 8}), g = zeros({2, 4, 6, 6});
  Case k{2, 3, 8, 8, 4, 3, 3, {1, 1}, {0, 0}, {1, 1}, 1, ""};
  test::expect_error(
      [&] {
        apply(OpId::Conv2dInputGrad, {g, w}, attrs_of(k, {2, 3, 9, 8}));
      },
      {"conv2d_input_grad", "f32[2,4,6,6]", "f32[2,4,7,6]"});
  test::expect_error(
      [&] {
        apply(OpId::Conv2dInputGrad, {g, w}, attrs_of(k, {2, 3}));
      },
      {"conv2d_input_grad", "shape", "[2,3]"});
  test::expect_error(
      [&] {
        apply(OpId::Conv2dWeightGrad, {x, g}, attrs_of(k, {4, 3, 2, 2}));
      },
      {"conv2d_weight_grad", "f32[2,4,6,6]", "f32[2,4,7,7]"});
  test::expect_error(
      [&] {
        apply(OpId::Conv2dWeightGrad, {x, g.to(f64)}, attrs_of(k, w.shape()));
      },
      {"conv2d_weight_grad", "f64[2,4,6,6]"});
  test::expect_error(
      [&] {
        apply(OpId::Conv2dWeightGrad, {x, g}, attrs_of(k, {4, 3, -1, 3}));
      },
      {"conv2d_weight_grad", "concrete"});
}

}  // namespace
