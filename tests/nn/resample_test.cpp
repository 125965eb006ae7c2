// tests/nn/resample_test.cpp -- adaptive_avg_pool2d, interpolate and conv_transpose2d against
// references written here in double loops (the LibTorch comparison is tests/torch), gradients by
// finite differences, the modules, and the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tests/unit/test_util.h"

using namespace kiln;
using kiln::test::expect_close;
using kiln::test::expect_error;

namespace {

// x [N, C, H, W] in double, at (n, c, i, j).
struct Image {
  Dims shape;
  std::vector<double> v;
  explicit Image(const Tensor& x) : shape(x.shape()), v(x.contiguous().to_vector<double>()) {}
  double at(int64_t n, int64_t c, int64_t i, int64_t j) const {
    return v[static_cast<size_t>(((n * shape[1] + c) * shape[2] + i) * shape[3] + j)];
  }
};

void expect_gradient(const std::function<Tensor(std::span<const Tensor>)>& f, std::vector<Tensor> in) {
  for (Tensor& t : in) t = t.detach().clone().requires_grad_();
  EXPECT_EQ(autograd::gradcheck(f, in), "");
}

}  // namespace

TEST(AdaptiveAvgPool2d, AveragesTorchsWindows) {
  Tensor x = randn({2, 3, 7, 5}, f64);
  Image im(x);
  for (Dims o : {Dims{3, 2}, Dims{7, 5}, Dims{1, 1}, Dims{4, 4}, Dims{7, 1}}) {
    SCOPED_TRACE(shape_str(o));
    std::vector<double> want;
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t c = 0; c < 3; ++c)
        for (int64_t i = 0; i < o[0]; ++i)
          for (int64_t j = 0; j < o[1]; ++j) {
            int64_t h0 = i * 7 / o[0], h1 = ((i + 1) * 7 + o[0] - 1) / o[0];
            int64_t w0 = j * 5 / o[1], w1 = ((j + 1) * 5 + o[1] - 1) / o[1];
            double s = 0;
            for (int64_t a = h0; a < h1; ++a)
              for (int64_t b = w0; b < w1; ++b) s += im.at(n, c, a, b);
            want.push_back(s / static_cast<double>((h1 - h0) * (w1 - w0)));
          }
    Tensor y = nn::AdaptiveAvgPool2d(o)(x);
    EXPECT_EQ(y.shape(), (Dims{2, 3, o[0], o[1]}));
    expect_close(y, want, 1e-12, 1e-12);
  }
  expect_gradient(
      [](std::span<const Tensor> in) {
        return nn::adaptive_avg_pool2d(in[0], {2, 3});
      },
      {randn({1, 2, 5, 4}, f64)});
  expect_error(
      [] {
        nn::adaptive_avg_pool2d(randn({2, 3, 4}), {1, 1});
      },
      {"adaptive_avg_pool2d", "[N, C, H, W]", "f32[2,3,4]"});
}

TEST(Interpolate, NearestAndBilinearReadTorchsSourceIndices) {
  Tensor x = randn({1, 2, 3, 4}, f64);
  Image im(x);
  // nearest to 5 x 6: src = min(floor(i in / out), in - 1).
  std::vector<double> want;
  for (int64_t c = 0; c < 2; ++c)
    for (int64_t i = 0; i < 5; ++i)
      for (int64_t j = 0; j < 6; ++j)
        want.push_back(im.at(0, c, std::min<int64_t>(static_cast<int64_t>(std::floor(i * 0.6f)), 2),
                             std::min<int64_t>(static_cast<int64_t>(std::floor(j * (4.0f / 6.0f))), 3)));
  expect_close(nn::interpolate(x, {.size = {5, 6}}), want, 0, 0);
  EXPECT_EQ(nn::Upsample({.scale_factor = {2, 2}})(x).shape(), (Dims{1, 2, 6, 8}));
  for (bool corners : {false, true}) {
    SCOPED_TRACE(corners);
    auto src = [&](int64_t i, int64_t in, int64_t out) {
      if (corners) return out > 1 ? static_cast<double>(i) * (in - 1) / (out - 1) : 0.0;
      return std::max((i + 0.5) * in / out - 0.5, 0.0);
    };
    std::vector<double> bil;
    for (int64_t c = 0; c < 2; ++c)
      for (int64_t i = 0; i < 5; ++i)
        for (int64_t j = 0; j < 7; ++j) {
          double sy = src(i, 3, 5), sx = src(j, 4, 7);
          int64_t y0 = std::min<int64_t>(static_cast<int64_t>(sy), 2),
                  x0 = std::min<int64_t>(static_cast<int64_t>(sx), 3);
          int64_t y1 = std::min<int64_t>(y0 + 1, 2), x1 = std::min<int64_t>(x0 + 1, 3);
          double ly = sy - y0, lx = sx - x0;
          bil.push_back((1 - ly) * ((1 - lx) * im.at(0, c, y0, x0) + lx * im.at(0, c, y0, x1)) +
                        ly * ((1 - lx) * im.at(0, c, y1, x0) + lx * im.at(0, c, y1, x1)));
        }
    expect_close(nn::interpolate(x, {.size = {5, 7}, .mode = "bilinear", .align_corners = corners}), bil, 1e-12, 1e-12);
    expect_gradient(
        [corners](std::span<const Tensor> in) {
          return nn::interpolate(in[0], {.size = {4, 3}, .mode = "bilinear", .align_corners = corners});
        },
        {randn({1, 1, 3, 5}, f64)});
  }
  expect_error([&] { nn::interpolate(x, {}); }, {"interpolate", "size or scale_factor"});
  expect_error([&] { nn::interpolate(x, {.size = {2, 2}, .mode = "bicubic"}); }, {"interpolate", "bicubic"});
}

TEST(ConvTranspose2d, ScattersEachInputThroughTheKernel) {
  for (auto [stride, pad, outpad, groups, dil] :
       {std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>{1, 0, 0, 1, 1},
        {2, 1, 1, 1, 1},
        {2, 0, 0, 2, 1},
        {1, 1, 0, 1, 2}}) {
    SCOPED_TRACE(testing::Message() << stride << " " << pad << " " << outpad << " " << groups << " " << dil);
    int64_t cin = 4, cout = 2 * groups, kh = 3, kw = 2;
    Tensor x = randn({2, cin, 3, 4}, f64), w = randn({cin, cout / groups, kh, kw}, f64), b = randn({cout}, f64);
    nn::ConvTranspose2d m(cin, cout, {kh, kw},
                          {.stride = {stride, stride},
                           .padding = {pad, pad},
                           .output_padding = {outpad, outpad},
                           .dilation = {dil, dil},
                           .groups = groups});
    m.to(f64);
    m.weight.detach().copy_(w);
    m.bias.detach().copy_(b);
    Tensor y = m(x);
    int64_t oh = (3 - 1) * stride - 2 * pad + dil * (kh - 1) + outpad + 1,
            ow = (4 - 1) * stride - 2 * pad + dil * (kw - 1) + outpad + 1;
    ASSERT_EQ(y.shape(), (Dims{2, cout, oh, ow}));
    std::vector<double> want(static_cast<size_t>(2 * cout * oh * ow));
    Image xi(x), wi(w);
    std::vector<double> bv = b.to_vector<double>();
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t co = 0; co < cout; ++co)
        for (int64_t i = 0; i < oh; ++i)
          for (int64_t j = 0; j < ow; ++j)
            want[static_cast<size_t>(((n * cout + co) * oh + i) * ow + j)] = bv[size_t(co)];
    int64_t cg_in = cin / groups, cg_out = cout / groups;
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t ci = 0; ci < cin; ++ci)
        for (int64_t a = 0; a < 3; ++a)
          for (int64_t c = 0; c < 4; ++c)
            for (int64_t k = 0; k < cg_out; ++k)
              for (int64_t p = 0; p < kh; ++p)
                for (int64_t q = 0; q < kw; ++q) {
                  int64_t i = a * stride - pad + p * dil, j = c * stride - pad + q * dil,
                          co = (ci / cg_in) * cg_out + k;
                  if (i < 0 || i >= oh || j < 0 || j >= ow) continue;
                  want[static_cast<size_t>(((n * cout + co) * oh + i) * ow + j)] +=
                      xi.at(n, ci, a, c) * wi.at(ci, k, p, q);
                }
    expect_close(y, want, 1e-10, 1e-10);
  }
  expect_gradient(
      [](std::span<const Tensor> in) {
        return nn::conv_transpose2d(in[0], in[1], in[2], {2, 2}, {1, 0}, {1, 0});
      },
      {randn({1, 2, 3, 3}, f64), randn({2, 3, 2, 3}, f64), randn({3}, f64)});
  expect_error(
      [] {
        nn::conv_transpose2d(randn({1, 2, 3, 3}), randn({3, 2, 2, 2}));
      },
      {"conv_transpose2d", "[2, out/groups, kh, kw]"});
  expect_error(
      [] {
        nn::conv_transpose2d(randn({1, 2, 3, 3}), randn({2, 2, 2, 2}), {}, {1, 1}, {0, 0}, {1, 1});
      },
      {"conv_transpose2d", "output_padding"});
}
