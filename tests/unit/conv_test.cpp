// tests/unit/conv_test.cpp -- conv2d, max_pool2d and avg_pool2d against naive double-precision
// loops that follow PyTorch's definitions.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tests/unit/test_util.h"

using namespace kiln;
using kiln::test::expect_close;
using kiln::test::expect_error;

namespace {

struct ConvCase {
  int64_t n, c, h, w, o, kh, kw;
  Dims stride, padding, dilation;
  int64_t groups;
};

// out[n,o,y,x] = bias[o] + sum over the group's input channels and the kernel window.
// Returns the values and, for a rounding bound, the sums of |products|.
std::pair<std::vector<double>, std::vector<double>> reference_conv(const Tensor& x, const Tensor& w, const Tensor& bias,
                                                                   const ConvCase& k) {
  std::vector<double> xv = x.to_vector<double>(), wv = w.to_vector<double>();
  std::vector<double> bv = bias.defined() ? bias.to_vector<double>() : std::vector<double>(k.o, 0.0);
  int64_t oh = (k.h + 2 * k.padding[0] - k.dilation[0] * (k.kh - 1) - 1) / k.stride[0] + 1;
  int64_t ow = (k.w + 2 * k.padding[1] - k.dilation[1] * (k.kw - 1) - 1) / k.stride[1] + 1;
  int64_t cg = k.c / k.groups, og = k.o / k.groups;
  std::vector<double> out, mag;
  for (int64_t b = 0; b < k.n; ++b)
    for (int64_t o = 0; o < k.o; ++o)
      for (int64_t oy = 0; oy < oh; ++oy)
        for (int64_t ox = 0; ox < ow; ++ox) {
          double s = bv[o], m = std::abs(bv[o]);
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t ky = 0; ky < k.kh; ++ky)
              for (int64_t kx = 0; kx < k.kw; ++kx) {
                int64_t iy = oy * k.stride[0] - k.padding[0] + ky * k.dilation[0];
                int64_t ix = ox * k.stride[1] - k.padding[1] + kx * k.dilation[1];
                if (iy < 0 || iy >= k.h || ix < 0 || ix >= k.w) continue;
                int64_t c = (o / og) * cg + ci;
                double p = xv[((b * k.c + c) * k.h + iy) * k.w + ix] * wv[((o * cg + ci) * k.kh + ky) * k.kw + kx];
                s += p;
                m += std::abs(p);
              }
          out.push_back(s);
          mag.push_back(m);
        }
  return {out, mag};
}

// PyTorch's pooling_output_shape.
int64_t pool_out(int64_t in, int64_t k, int64_t s, int64_t p, bool ceil_mode) {
  int64_t num = in + 2 * p - (k - 1) - 1 + (ceil_mode ? s - 1 : 0);
  int64_t o = num / s + 1;
  if (ceil_mode && (o - 1) * s >= in + p) --o;
  return o;
}

// max_pool2d (NaN wins, as in PyTorch's CPU kernel) or avg_pool2d over planes of x.
std::vector<double> reference_pool(const Tensor& x, bool is_max, const Dims& k, const Dims& s, const Dims& p,
                                   bool flag) {
  std::vector<double> xv = x.to_vector<double>();
  int64_t h = x.size(-2), w = x.size(-1), planes = x.numel() / (h * w);
  bool ceil_mode = is_max && flag, include_pad = !is_max && flag;
  int64_t oh = pool_out(h, k[0], s[0], p[0], ceil_mode), ow = pool_out(w, k[1], s[1], p[1], ceil_mode);
  std::vector<double> out;
  for (int64_t q = 0; q < planes; ++q)
    for (int64_t oy = 0; oy < oh; ++oy)
      for (int64_t ox = 0; ox < ow; ++ox) {
        int64_t y0 = oy * s[0] - p[0], x0 = ox * s[1] - p[1];
        double best = -std::numeric_limits<double>::infinity(), sum = 0;
        int64_t count = 0, padded = 0;
        for (int64_t y = y0; y < y0 + k[0]; ++y)
          for (int64_t xx = x0; xx < x0 + k[1]; ++xx) {
            bool in_padded = y < h + p[0] && xx < w + p[1];  // inside the padded input
            padded += in_padded;
            if (y < 0 || y >= h || xx < 0 || xx >= w) continue;
            double v = xv[(q * h + y) * w + xx];
            if (v > best || std::isnan(v)) best = v;  // once NaN, nothing compares greater
            sum += v;
            ++count;
          }
        out.push_back(is_max ? best : sum / double(include_pad ? padded : count));
      }
  return out;
}

}  // namespace

TEST(Conv2d, MatchesANaiveConvolutionOverStridePaddingDilationAndGroups) {
  const ConvCase cases[] = {
      {2, 3, 7, 8, 4, 3, 3, {1, 1}, {0, 0}, {1, 1}, 1},
      {2, 4, 9, 7, 6, 3, 2, {2, 1}, {1, 2}, {1, 1}, 2},
      {1, 3, 10, 11, 5, 3, 3, {2, 3}, {2, 1}, {2, 2}, 1},
      {2, 6, 8, 8, 6, 3, 3, {1, 1}, {1, 1}, {1, 1}, 6},   // depthwise
      {1, 4, 6, 7, 8, 3, 3, {2, 2}, {1, 1}, {1, 2}, 4},   // depthwise, two outputs per channel
      {1, 8, 5, 5, 16, 1, 1, {1, 1}, {0, 0}, {1, 1}, 1},  // 1x1
      {3, 2, 4, 4, 3, 4, 4, {1, 1}, {0, 0}, {1, 1}, 1},   // kernel covers the input
      {1, 2, 3, 3, 2, 2, 2, {3, 3}, {2, 2}, {1, 1}, 2},   // windows entirely in the padding
  };
  manual_seed(1);
  for (const ConvCase& k : cases) {
    for (bool with_bias : {false, true}) {
      Tensor x = randn({k.n, k.c, k.h, k.w});
      Tensor w = randn({k.o, k.c / k.groups, k.kh, k.kw});
      Tensor bias = with_bias ? randn({k.o}) : Tensor();
      Tensor y = conv2d(x, w, bias, k.stride, k.padding, k.dilation, k.groups);
      auto [want, mag] = reference_conv(x, w, bias, k);
      ASSERT_EQ(y.numel(), static_cast<int64_t>(want.size()));
      EXPECT_EQ(y.size(0), k.n);
      EXPECT_EQ(y.size(1), k.o);
      std::vector<double> got = y.to_vector<double>();
      int64_t terms = k.c / k.groups * k.kh * k.kw + 1;
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], want[i], 2 * terms * 0x1p-24 * mag[i] + 1e-30) << "case groups=" << k.groups << " i=" << i;
    }
  }
}

TEST(Conv2d, AcceptsStridedInputsAndOtherFloatTypes) {
  manual_seed(2);
  ConvCase k{2, 3, 6, 5, 4, 3, 3, {1, 2}, {1, 1}, {1, 1}, 1};
  Tensor x = randn({2, 6, 5, 3}).permute({0, 3, 1, 2});  // NHWC memory
  Tensor w = randn({4, 3, 3, 3}).transpose(2, 3);
  Tensor b = randn({8}).slice(0, 0, 8, 2);
  auto [want, mag] = reference_conv(x, w, b, k);
  expect_close(conv2d(x, w, b, k.stride, k.padding, k.dilation), want, 1e-5, 1e-5);
  Tensor y64 = conv2d(x.to(f64), w.to(f64), b.to(f64), k.stride, k.padding);
  EXPECT_EQ(y64.dtype(), f64);
  expect_close(y64, want, 1e-12, 1e-12);
  Tensor xh = x.to(f16), wh = w.to(f16);
  auto [want_h, mag_h] = reference_conv(xh, wh, Tensor(), k);
  Tensor yh = conv2d(xh, wh, {}, k.stride, k.padding);
  EXPECT_EQ(yh.dtype(), f16);
  std::vector<double> got = yh.to_vector<double>();
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want_h[i], 0x1p-11 * std::abs(want_h[i]) + 1e-5 * mag_h[i] + 0x1p-24);
}

TEST(Conv2d, ErrorsDescribeTheMismatch) {
  Tensor x = zeros({1, 3, 5, 5}), w = zeros({4, 3, 3, 3});
  expect_error([&] { conv2d(zeros({3, 5, 5}), w); }, {"conv2d", "[N,C,H,W]", "f32[3,5,5]"});
  expect_error([&] { conv2d(x, zeros({4, 2, 3, 3})); }, {"conv2d", "f32[4,2,3,3]", "f32[1,3,5,5]"});
  expect_error([&] { conv2d(x, zeros({4, 3, 6, 6})); }, {"conv2d", "larger", "f32[1,3,5,5]"});
  expect_error([&] { conv2d(x, zeros({4, 1, 3, 3}), {}, {1, 1}, {0, 0}, {1, 1}, 2); }, {"conv2d", "groups 2"});
  expect_error([&] { conv2d(x, w, zeros({3})); }, {"conv2d", "bias", "f32[3]"});
  expect_error([&] { conv2d(x, w, {}, {0, 1}); }, {"conv2d", "stride"});
  expect_error([&] { conv2d(x, w, {}, {1, 1}, {-1, 0}); }, {"conv2d", "padding"});
  expect_error([&] { conv2d(x, w, {}, {1, 1}, {0, 0}, {0, 1}); }, {"conv2d", "dilation"});
  expect_error([&] { conv2d(x, w, {}, {1, 1}, {0, 0}, {3, 3}); }, {"conv2d", "larger"});
}

TEST(MaxPool2d, MatchesPyTorchWithPaddingAndCeilMode) {
  struct Case {
    Dims shape, kernel, stride, padding;
    bool ceil_mode;
  };
  const Case cases[] = {
      {{2, 3, 8, 8}, {2, 2}, {}, {0, 0}, false},     {{2, 3, 9, 7}, {3, 3}, {2, 2}, {1, 1}, false},
      {{1, 2, 7, 7}, {3, 3}, {3, 3}, {0, 0}, true},   // ceil adds a partial window
      {{1, 2, 6, 6}, {3, 3}, {2, 2}, {1, 1}, true},   // ceil adds a window over the last row
      {{1, 2, 4, 4}, {2, 2}, {3, 3}, {1, 1}, true},   // ceil's extra window would start in padding
      {{3, 5, 9}, {3, 2}, {2, 1}, {1, 0}, true},      // [C,H,W]
      {{1, 1, 5, 4}, {5, 4}, {1, 1}, {2, 2}, false},  // kernel as large as the input
  };
  manual_seed(3);
  for (const Case& c : cases) {
    Tensor x = randn(c.shape);
    Dims stride = c.stride.empty() ? c.kernel : c.stride;
    Tensor y = max_pool2d(x, c.kernel, c.stride, c.padding, c.ceil_mode);
    EXPECT_EQ(y.size(-2), pool_out(c.shape[c.shape.size() - 2], c.kernel[0], stride[0], c.padding[0], c.ceil_mode));
    EXPECT_EQ(y.size(-1), pool_out(c.shape.back(), c.kernel[1], stride[1], c.padding[1], c.ceil_mode));
    expect_close(y, reference_pool(x, true, c.kernel, stride, c.padding, c.ceil_mode), 0, 0);
  }
}

TEST(MaxPool2d, PropagatesNan) {
  Tensor x = arange(0.0, 16.0, 1.0).reshape({1, 1, 4, 4});
  x.data<float>()[5] = std::nanf("");  // row 1, col 1
  x.data<float>()[15] = -std::numeric_limits<float>::infinity();
  Tensor y = max_pool2d(x, {2, 2});
  std::vector<double> want = reference_pool(x, true, {2, 2}, {2, 2}, {0, 0}, false);
  EXPECT_TRUE(std::isnan(want[0]));
  expect_close(y, want, 0, 0);
  Tensor h = max_pool2d(x.to(f16), {3, 3}, {1, 1}, {1, 1});
  expect_close(h, reference_pool(x, true, {3, 3}, {1, 1}, {1, 1}, false), 0, 0);
}

TEST(AvgPool2d, CountsPaddingOnlyWhenAsked) {
  struct Case {
    Dims shape, kernel, stride, padding;
  };
  const Case cases[] = {
      {{2, 3, 8, 8}, {2, 2}, {}, {0, 0}},
      {{2, 3, 9, 7}, {3, 3}, {2, 2}, {1, 1}},
      {{1, 2, 7, 6}, {3, 2}, {1, 2}, {1, 1}},
      {{4, 5, 5}, {4, 4}, {3, 1}, {2, 2}},
  };
  manual_seed(4);
  for (const Case& c : cases) {
    Tensor x = randn(c.shape);
    Dims stride = c.stride.empty() ? c.kernel : c.stride;
    for (bool include_pad : {true, false}) {
      Tensor y = avg_pool2d(x, c.kernel, c.stride, c.padding, include_pad);
      expect_close(y, reference_pool(x, false, c.kernel, stride, c.padding, include_pad), 1e-6, 1e-6);
    }
  }
  Tensor d = avg_pool2d(randn({1, 1, 6, 6}, f64), {2, 2});
  EXPECT_EQ(d.dtype(), f64);
}

TEST(Pool2d, ErrorsDescribeTheMismatch) {
  Tensor x = zeros({1, 2, 4, 4});
  expect_error([&] { max_pool2d(zeros({4, 4}), {2, 2}); }, {"max_pool2d", "f32[4,4]"});
  expect_error([&] { avg_pool2d(zeros({1, 1, 1, 4, 4}), {2, 2}); }, {"avg_pool2d", "f32[1,1,1,4,4]"});
  expect_error([&] { max_pool2d(x, {5, 5}); }, {"max_pool2d", "larger", "f32[1,2,4,4]"});
  expect_error([&] { max_pool2d(x, {2, 2}, {}, {2, 2}); }, {"max_pool2d", "padding", "half"});
  expect_error([&] { avg_pool2d(x, {2}); }, {"avg_pool2d", "kernel"});
  expect_error([&] { max_pool2d(x, {2, 2}, {0, 1}); }, {"max_pool2d", "stride"});
  expect_error([&] { max_pool2d(zeros({1, 1, 4, 4}, i32), {2, 2}); }, {"max_pool2d", "i32[1,1,4,4]"});
}
