// tests/unit/pool_test.cpp -- max_pool2d, avg_pool2d and the ops their derivatives run, against
// double-precision references: kernel sizes 1 to 3, strides, padding, ceil_mode,
// count_include_pad, strided inputs, 3-d and 4-d inputs, f32/f64/f16/bf16; NaN and ties; the
// backward equals the earlier slice-by-slice formulation and has the same bits on any number
// of threads.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "runtime/op.h"
#include "tests/unit/test_util.h"

using namespace kiln;
using kiln::test::bits;
using kiln::test::expect_error;

namespace {

struct Pool {
  Dims kernel, stride, padding;
  bool flag;  // max: ceil_mode; avg: count_include_pad
};

Attrs attrs_of(const Pool& c, const Dims& in_shape = {}) {
  Attrs a;
  a.kernel = c.kernel, a.stride = c.stride, a.padding = c.padding;
  a.ceil_mode = c.flag, a.count_include_pad = c.flag, a.shape = in_shape;
  return a;
}

// Every kernel 1..3 in each dim with a few strides and paddings, ceil_mode / include_pad both.
std::vector<Pool> all_pools() {
  std::vector<Pool> out;
  for (int64_t kh = 1; kh <= 3; ++kh)
    for (int64_t kw = 1; kw <= 3; ++kw)
      for (int64_t s = 1; s <= 3; ++s)
        for (int64_t p = 0; p <= 1; ++p) {
          if (p > kh / 2 || p > kw / 2) continue;
          for (bool flag : {false, true}) out.push_back({{kh, kw}, {s, s == 3 ? 2 : s}, {p, p}, flag});
        }
  return out;
}

int64_t out_len(int64_t in, int64_t k, int64_t s, int64_t p, bool ceil_mode) {
  int64_t span = in + 2 * p - k;
  int64_t o = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  if (ceil_mode && (o - 1) * s >= in + p) --o;
  return o;
}

// The windows of one plane: the reference each kernel is checked against.
struct RefWindow {
  std::vector<int64_t> cells;  // y * w + x of the input elements in the window, row-major
  int64_t count;               // avg_pool2d's divisor
};

std::vector<RefWindow> ref_windows(int64_t h, int64_t w, const Pool& c, bool is_max) {
  bool ceil_mode = is_max && c.flag;
  int64_t oh = out_len(h, c.kernel[0], c.stride[0], c.padding[0], ceil_mode);
  int64_t ow = out_len(w, c.kernel[1], c.stride[1], c.padding[1], ceil_mode);
  std::vector<RefWindow> out;
  for (int64_t oy = 0; oy < oh; ++oy)
    for (int64_t ox = 0; ox < ow; ++ox) {
      RefWindow r;
      int64_t y0 = oy * c.stride[0] - c.padding[0], x0 = ox * c.stride[1] - c.padding[1];
      int64_t padded = 0;
      for (int64_t y = y0; y < y0 + c.kernel[0]; ++y)
        for (int64_t x = x0; x < x0 + c.kernel[1]; ++x) {
          if (y >= 0 && y < h && x >= 0 && x < w) r.cells.push_back(y * w + x);
          padded += y < h + c.padding[0] && x < w + c.padding[1];
        }
      r.count = !is_max && c.flag ? padded : static_cast<int64_t>(r.cells.size());
      out.push_back(r);
    }
  return out;
}

// The first largest element of a window (the first NaN when there is one).
int64_t ref_argmax(const std::vector<double>& plane, const RefWindow& r) {
  int64_t best = r.cells[0];
  for (int64_t c : r.cells) {
    if (std::isnan(plane[best])) break;
    if (std::isnan(plane[c]) || plane[c] > plane[best]) best = c;
  }
  return best;
}

struct Reference {
  std::vector<double> out, grad;  // forward values; gradient for an upstream gradient g
  std::vector<int64_t> indices;   // max only
  Dims out_shape;
};

// Forward, indices and backward of a pool over the planes of x, in double.
Reference reference(const Tensor& x, const Tensor& g, const Pool& c, bool is_max) {
  int64_t r = x.dim(), h = x.shape()[r - 2], w = x.shape()[r - 1], planes = x.numel() / (h * w);
  std::vector<RefWindow> wins = ref_windows(h, w, c, is_max);
  bool ceil_mode = is_max && c.flag;
  Reference ref;
  ref.out_shape = x.shape();
  ref.out_shape[r - 2] = out_len(h, c.kernel[0], c.stride[0], c.padding[0], ceil_mode);
  ref.out_shape[r - 1] = out_len(w, c.kernel[1], c.stride[1], c.padding[1], ceil_mode);
  std::vector<double> xv = x.to_vector<double>();
  std::vector<double> gv = g.defined() ? g.to_vector<double>() : std::vector<double>(planes * wins.size(), 0.0);
  ref.grad.assign(xv.size(), 0.0);
  for (int64_t p = 0; p < planes; ++p) {
    std::vector<double> plane(xv.begin() + p * h * w, xv.begin() + (p + 1) * h * w);
    for (size_t k = 0; k < wins.size(); ++k) {
      const RefWindow& win = wins[k];
      double gk = gv[p * wins.size() + k];
      if (is_max) {
        int64_t a = ref_argmax(plane, win);
        ref.out.push_back(plane[a]);
        ref.indices.push_back(a);
        ref.grad[p * h * w + a] += gk;
      } else {
        double s = 0;
        for (int64_t cell : win.cells) s += plane[cell];
        ref.out.push_back(s / win.count);
        for (int64_t cell : win.cells) ref.grad[p * h * w + cell] += gk / win.count;
      }
    }
  }
  return ref;
}

Tensor pool_of(const Tensor& x, const Pool& c, bool is_max) {
  return is_max ? max_pool2d(x, c.kernel, c.stride, c.padding, c.flag)
                : avg_pool2d(x, c.kernel, c.stride, c.padding, c.flag);
}

// Relative tolerance of a dtype for a mean of a few elements (f16/bf16 round the f32 result).
double rtol_of(DType t) { return t == f64 ? 1e-13 : t == f32 ? 2e-6 : t == f16 ? 1e-3 : 8e-3; }

void expect_near(const Tensor& got, const std::vector<double>& want, double rtol, double atol) {
  std::vector<double> v = got.to_vector<double>();
  ASSERT_EQ(v.size(), want.size());
  int bad = 0;
  for (size_t i = 0; i < v.size() && bad < 5; ++i) {
    bool ok = std::isnan(want[i])                       ? std::isnan(v[i])
              : std::isinf(want[i]) || std::isinf(v[i]) ? v[i] == want[i]
                                                        : std::abs(v[i] - want[i]) <= atol + rtol * std::abs(want[i]);
    if (!ok) {
      ++bad;
      ADD_FAILURE() << got.type().str() << " element " << i << ": got " << v[i] << ", expected " << want[i];
    }
  }
}

// A view of `t` that is not contiguous: stored with its last two dims swapped.
Tensor transposed_view(const Tensor& t) {
  int64_t r = t.dim();
  return t.transpose(r - 2, r - 1).contiguous().transpose(r - 2, r - 1);
}

// max_pool2d's derivative as it was first written: the window's gradient goes to the first
// largest of its k*k strided slices of the -inf-padded input (through stack, argmax, gather and
// autograd of pad and slice).
Tensor old_max_pool_grad(const Tensor& x_in, const Tensor& g, const Pool& c) {
  Tensor x = x_in.detach().requires_grad_();
  int64_t r = x.dim(), oh = g.shape()[r - 2], ow = g.shape()[r - 1];
  Tensor padded = x;
  for (int d = 0; d < 2; ++d) {
    int64_t need = (d == 0 ? oh : ow) - 1;
    need = need * c.stride[d] + c.kernel[d];
    int64_t extra = std::max<int64_t>(0, need - (x.shape()[r - 2 + d] + 2 * c.padding[d]));
    Dims pads(static_cast<size_t>(2 * (2 - d)), 0);
    pads[pads.size() - 2] = c.padding[d];
    pads[pads.size() - 1] = c.padding[d] + extra;
    padded = pad(padded, pads, -std::numeric_limits<double>::infinity());
  }
  std::vector<Tensor> slices;
  for (int64_t ky = 0; ky < c.kernel[0]; ++ky)
    for (int64_t kx = 0; kx < c.kernel[1]; ++kx)
      slices.push_back(padded.slice(r - 2, ky, ky + (oh - 1) * c.stride[0] + 1, c.stride[0])
                           .slice(r - 1, kx, kx + (ow - 1) * c.stride[1] + 1, c.stride[1]));
  Tensor s = stack(slices, 0);
  Tensor first = argmax(s.detach(), 0, true);
  Tensor y = gather(s, 0, first).squeeze(0);
  y.backward(g);
  return x.grad();
}

}  // namespace

TEST(Pool, ForwardMatchesADoubleReferenceForEveryWindow) {
  manual_seed(21);
  for (DType t : {f32, f64, f16, bf16})
    for (const Pool& c : all_pools())
      for (bool is_max : {true, false}) {
        for (const Dims& shape : {Dims{1, 2, 7, 6}, Dims{3, 2, 5, 8}, Dims{2, 6, 5}}) {
          Tensor x = randn(shape, f64).to(t);
          Reference ref = reference(x, {}, c, is_max);
          SCOPED_TRACE(fmt::format("{} {} kernel {} stride {} padding {} flag {} on {}", dtype_name(t),
                                   is_max ? "max" : "avg", shape_str(c.kernel), shape_str(c.stride),
                                   shape_str(c.padding), c.flag, x.type().str()));
          Tensor y = pool_of(x, c, is_max);
          ASSERT_EQ(y.type().str(), (TensorType{t, ref.out_shape, cpu}).str());
          expect_near(y, ref.out, is_max ? 0 : rtol_of(t), is_max ? 0 : 1e-5);
          expect_near(pool_of(transposed_view(x), c, is_max), ref.out, is_max ? 0 : rtol_of(t), is_max ? 0 : 1e-5);
          if (is_max) {
            Tensor idx = apply(OpId::MaxPool2dIndices, {transposed_view(x)}, attrs_of(c));
            ASSERT_EQ(idx.type().str(), (TensorType{i64, ref.out_shape, cpu}).str());
            EXPECT_EQ(idx.to_vector<int64_t>(), ref.indices);
          }
        }
      }
}

TEST(Pool, BackwardMatchesADoubleReferenceForEveryWindow) {
  manual_seed(22);
  for (DType t : {f32, f64, bf16})
    for (const Pool& c : all_pools())
      for (bool is_max : {true, false}) {
        for (const Dims& shape : {Dims{1, 2, 7, 6}, Dims{3, 2, 5, 8}, Dims{2, 6, 5}}) {
          // Whole numbers: windows see ties, which go to the first largest element.
          Tensor x = (randint(-4, 5, shape, i64).to(f64) * 0.5).to(t);
          Tensor xs = transposed_view(x).requires_grad_();
          Tensor y = pool_of(xs, c, is_max);
          Tensor g = randn(y.shape(), f64).to(t);
          Reference ref = reference(x, g, c, is_max);
          SCOPED_TRACE(fmt::format("{} {} kernel {} stride {} padding {} flag {} on {}", dtype_name(t),
                                   is_max ? "max" : "avg", shape_str(c.kernel), shape_str(c.stride),
                                   shape_str(c.padding), c.flag, x.type().str()));
          y.backward(transposed_view(g));
          ASSERT_TRUE(xs.grad().defined());
          ASSERT_EQ(xs.grad().type().str(), x.type().str());
          expect_near(xs.grad(), ref.grad, rtol_of(t), 1e-5);
        }
      }
}

TEST(MaxPool2d, BackwardEqualsTheSliceFormulationWithTies) {
  manual_seed(23);
  for (const Pool& c : all_pools())
    for (const Dims& shape : {Dims{2, 3, 7, 6}, Dims{3, 5, 8}}) {
      Tensor x = randint(-2, 3, shape, i64).to(f64);  // many ties
      Tensor xg = x.detach().requires_grad_();
      Tensor y = max_pool2d(xg, c.kernel, c.stride, c.padding, c.flag);
      Tensor g = randint(-8, 9, y.shape(), i64).to(f64);  // whole numbers: sums are exact
      y.backward(g);
      Tensor want = old_max_pool_grad(x, g, c);
      SCOPED_TRACE(fmt::format("kernel {} stride {} padding {} ceil {} on {}", shape_str(c.kernel), shape_str(c.stride),
                               shape_str(c.padding), c.flag, x.type().str()));
      EXPECT_EQ(bits(xg.grad()), bits(want));
    }
}

TEST(MaxPool2d, NaNWinsItsWindowAndTakesItsGradient) {
  double nan = std::numeric_limits<double>::quiet_NaN();
  for (DType t : {f32, f64, bf16}) {
    Tensor x = from_vector<double>({1, nan, 5, 2,  //
                                    3, 4, nan, 0,  //
                                    9, 8, 7, 6,    //
                                    -1, -2, -3, -4},
                                   {1, 1, 4, 4})
                   .to(t)
                   .requires_grad_();
    Tensor y = max_pool2d(x, {2, 2});
    std::vector<double> v = y.to_vector<double>();
    EXPECT_TRUE(std::isnan(v[0]) && std::isnan(v[1]));
    EXPECT_EQ(v[2], 9);
    EXPECT_EQ(v[3], 7);
    Attrs a;
    a.kernel = a.stride = {2, 2};
    a.padding = {0, 0};
    EXPECT_EQ(apply(OpId::MaxPool2dIndices, {x.detach()}, a).to_vector<int64_t>(), (std::vector<int64_t>{1, 6, 8, 10}));
    y.backward(from_vector<double>({1, 2, 3, 4}, {1, 1, 2, 2}).to(t));
    EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{0, 1, 0, 0, 0, 0, 2, 0, 3, 0, 4, 0, 0, 0, 0, 0}));
  }
}

// A window holding only -inf (and padding) still gives its gradient to one of its elements.
TEST(MaxPool2d, AWindowOfMinusInfinityPassesItsGradientToItsFirstElement) {
  double inf = std::numeric_limits<double>::infinity();
  Tensor x = full({1, 3, 3}, -inf, f64).requires_grad_();
  Tensor y = max_pool2d(x, {3, 3}, {2, 2}, {1, 1});  // windows at -1 and 1 in each dim
  EXPECT_EQ(y.shape(), (Dims{1, 2, 2}));
  y.backward(from_vector<double>({1, 2, 3, 4}, {1, 2, 2}));
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{1, 2, 0, 3, 4, 0, 0, 0, 0}));
}

TEST(Pool, BackwardGivesTheSameBitsOnAnyThreadCount) {
  manual_seed(24);
  Tensor x = randn({4, 16, 40, 40});
  Pool c{{3, 3}, {1, 1}, {1, 1}, true};  // overlapping windows: gradients sum
  for (bool is_max : {true, false}) {
    Tensor g = randn(pool_of(x, c, is_max).shape());
    std::vector<uint8_t> one, two;
    for (int n : {1, 2}) {
      int saved = num_threads();
      set_num_threads(n);
      Tensor xg = x.detach().requires_grad_();
      pool_of(xg, c, is_max).backward(g);
      (n == 1 ? one : two) = bits(xg.grad());
      set_num_threads(saved);
    }
    EXPECT_EQ(one, two) << (is_max ? "max" : "avg");
  }
}

TEST(Pool, BackwardOpsCheckTheirOperands) {
  Attrs a;
  a.kernel = a.stride = {2, 2};
  a.padding = {0, 0};
  Tensor x = zeros({1, 2, 4, 4});
  expect_error(
      [&] {
        apply(OpId::MaxPool2dBackward, {x, zeros({1, 2, 3, 2})}, a);
      },
      {"max_pool2d_backward", "f32[1,2,3,2]", "f32[1,2,2,2]", "f32[1,2,4,4]"});
  expect_error(
      [&] {
        apply(OpId::MaxPool2dBackward, {x, zeros({1, 2, 2, 2}, f64)}, a);
      },
      {"max_pool2d_backward", "f64[1,2,2,2]"});
  expect_error(
      [&] {
        apply(OpId::MaxPool2dBackward, {zeros({4, 4}), zeros({2, 2})}, a);
      },
      {"max_pool2d_backward", "f32[4,4]"});
  expect_error([&] { apply(OpId::MaxPool2dIndices, {zeros({1, 1, 4, 4}, i32)}, a); }, {"max_pool2d_indices", "float"});
  a.shape = {1, 2, 4, 4};
  expect_error(
      [&] {
        apply(OpId::AvgPool2dBackward, {zeros({1, 2, 3, 3})}, a);
      },
      {"avg_pool2d_backward", "f32[1,2,3,3]", "[1,2,2,2]", "f32[1,2,4,4]"});
  expect_error(
      [&] {
        apply(OpId::AvgPool2dBackward, {zeros({1, 2, 2, 2}, i64)}, a);
      },
      {"avg_pool2d_backward", "float"});
  a.shape = {2, 4, 4, 4, 4};
  expect_error([&] { apply(OpId::AvgPool2dBackward, {zeros({1, 2, 2, 2})}, a); }, {"avg_pool2d_backward", "[N,C,H,W]"});
  a.shape = {1, 2, 4, 4};
  a.kernel = {5, 5};
  expect_error([&] { apply(OpId::AvgPool2dBackward, {zeros({1, 2, 2, 2})}, a); }, {"avg_pool2d_backward", "larger"});
}
