// tests/jit/trace_test.cpp -- jit::trace: traced == eager, live parameters, constants, errors.
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "jit_test_util.h"

namespace kiln {
namespace {

using test::expect_error;
using test::expect_same;

struct ManyOps {
  Tensor w = randn({5, 6}), b = randn({6}), lnw = randn({6}), lnb = randn({6});
  Tensor operator()(const Tensor& x, const Tensor& y) const {
    Tensor h = matmul(x, w) + b;                                 // [4,6]
    Tensor g = gelu(h) * sigmoid(y) - tanh(h) / (abs(y) + 1.0);  // [4,6]
    Tensor r = layer_norm(g, {6}, lnw, lnb);                     // [4,6]
    Tensor s = softmax(r, 1) + log_softmax(r, 0);                // [4,6]
    Tensor p = s.t().reshape({3, 8}).slice(1, 1, 7, 2);          // [3,3]
    Tensor c = cat({p, exp(p)}, 0);                              // [6,3]
    Tensor m = where(c > 0.1, c, -c);                            // [6,3]
    Tensor out = sum(m, {0}, true) + mean(m, {1}, true);         // [6,3]
    return out * var(x) + sqrt(abs(out)) + clamp(out, -1.0, 1.0) - amin(m, {0});
  }
};

TEST(Trace, TracedMatchesEagerBitwiseForManyOps) {
  manual_seed(1);
  ManyOps f;
  Tensor x = randn({4, 5}), y = randn({4, 6});
  auto fast = jit::trace([&](Tensor a, Tensor c) { return f(a, c); }, {x, y});
  expect_same(fast(x, y), f(x, y));
  for (int i = 0; i < 3; ++i) {  // new data, same signature: no retrace
    Tensor x2 = randn({4, 5}), y2 = randn({4, 6});
    expect_same(fast(x2, y2), f(x2, y2));
  }
  EXPECT_EQ(fast.stats().traces, 1);
  EXPECT_EQ(fast.stats().hits, 4);
}

TEST(Trace, TracedMatchesEagerForIntegerOpsAndCasts) {
  manual_seed(2);
  Tensor emb = randn({5, 3});
  auto f = [&](Tensor idx, Tensor v) {
    Tensor oh = one_hot(idx, 5).to(f32);                    // [6,5]
    Tensor picked = matmul(oh, emb) + embedding(idx, emb);  // [6,3]
    Tensor k = argmax(picked, 1) * 2 + idx;                 // i64 [6]
    Tensor mixed = k.to(f64) / 3 + v;                       // f64 [6]
    Tensor r = round(mixed) + floor(mixed) * ceil(-mixed) + pow(abs(mixed), 1.5);
    return std::make_tuple(maximum(r, 0.5), minimum(k, 3), k == idx, sign(mixed));
  };
  Tensor idx = from_vector<int64_t>({0, 4, 2, 2, 1, 3}), v = randn({6}, f64);
  auto fast = jit::trace(f, {idx, v});
  std::vector<Tensor> got = fast.call(std::vector<Tensor>{idx, v});
  auto [a, b, c, d] = f(idx, v);
  ASSERT_EQ(got.size(), 4u);
  expect_same(got[0], a);
  expect_same(got[1], b);
  expect_same(got[2], c);
  expect_same(got[3], d);
}

TEST(Trace, ParametersStayLive) {
  manual_seed(3);
  nn::Linear lin(3, 2);
  Tensor scale = scalar_tensor(2.0f);
  auto fast = jit::trace([&](Tensor x) { return lin(x) * scale; }, {randn({4, 3})});
  Tensor x = randn({4, 3});
  {
    NoGradGuard no_grad;
    lin.weight.mul_(-3.0);       // in place
    lin.bias.copy_(randn({2}));  // copy_ under NoGradGuard
    scale.fill_(0.25);           // a 0-d tensor the function reads
  }
  expect_same(fast(x), lin(x) * scale);
  std::map<std::string, Tensor> state{{"weight", randn({2, 3})}, {"bias", randn({2})}};
  lin.load_state_dict(state);
  expect_same(fast(x), lin(x) * scale);
  EXPECT_EQ(fast.stats().traces, 1);
  EXPECT_EQ(fast.graph().params.size(), 3u);
}

TEST(Trace, LiteralTensorsBecomeConstants) {
  auto fast = jit::trace(
      [](Tensor x) {
        return x * from_vector<float>({0, 1, 2, 3}) + zeros({4}) + 1.5;
      },
      {ones({3, 4})});
  const ir::Graph& g = fast.graph();
  EXPECT_TRUE(g.params.empty());
  bool has_literal = false;
  for (const ir::Node& n : g.nodes)
    if (n.kind == ir::NodeKind::Const && n.constant.numel() == 4)
      has_literal = has_literal || n.constant.to_vector<double>() == std::vector<double>{0, 1, 2, 3};
  EXPECT_TRUE(has_literal) << test::text_of(g);
  Tensor x = randn({3, 4});
  expect_same(fast(x), x * from_vector<float>({0, 1, 2, 3}) + zeros({4}) + 1.5);
}

// arange is an op (iota), not data: its size can stay symbolic in a saved module.
TEST(Trace, ArangeIsAnIotaNode) {
  auto fast = jit::trace([](Tensor x) { return x * arange(4).to(f32) + arange(1.0, 3.0, 0.5); }, {ones({3, 4})});
  std::string text = test::text_of(fast.graph());
  EXPECT_NE(text.find("iota {shape=[4], device=cpu} : i64[4]"), std::string::npos) << text;
  Tensor x = randn({3, 4});
  expect_same(fast(x), x * from_vector<float>({0, 1, 2, 3}) + from_vector<float>({1, 1.5, 2, 2.5}));
}

TEST(Trace, ConstantsAreSnapshotsOfLiterals) {
  Tensor x = randn({4});
  auto fast = jit::trace(
      [](Tensor a) {
        Tensor lit = arange(4).to(f32);
        Tensor r = a + lit;
        lit.add_(100);  // a later write to the literal does not reach the earlier use
        return r * lit;
      },
      {x});
  Tensor lit = arange(4).to(f32);
  Tensor want = (x + lit) * (lit + 100);
  expect_same(fast(x), want);
}

TEST(Trace, PlainNumbersAreBakedIn) {
  double factor = 2.0;
  auto fast = jit::trace([&](Tensor x) { return x * factor; }, {ones({2})});
  factor = 5.0;
  Tensor x = from_vector<float>({1, 2});
  expect_same(fast(x), x * 2.0);  // the trace keeps the value it saw
  EXPECT_EQ(fast.stats().traces, 1);
}

TEST(Trace, FunctionsReturnTuplesAndVectors) {
  Tensor x = randn({2, 3});
  auto tup = jit::trace([](Tensor a) { return std::make_tuple(a + 1, a.sum(), a.t()); }, {x});
  std::vector<Tensor> got = tup.call(std::vector<Tensor>{x});
  ASSERT_EQ(got.size(), 3u);
  expect_same(got[0], x + 1);
  expect_same(got[1], x.sum());
  expect_same(got[2], x.t());
  expect_same(tup(x), x + 1);  // operator() returns the first output
  auto vec = jit::trace([](Tensor a, Tensor b) { return std::vector<Tensor>{a * b, a - b}; }, {x, x});
  Tensor y = randn({2, 3});
  got = vec.call(std::vector<Tensor>{x, y});
  ASSERT_EQ(got.size(), 2u);
  expect_same(got[0], x * y);
  expect_same(got[1], x - y);
}

TEST(Trace, ReadingValuesThrowsNamingTheOp) {
  Tensor x = randn({3});
  expect_error([&] { jit::trace([](Tensor a) { return a * exp(a).sum().item<float>(); }, {x}); }, {"traced", "sum"});
  expect_error([&] { jit::trace([](Tensor a) { return a * static_cast<float>(tanh(a).to_vector<float>()[0]); }, {x}); },
               {"traced", "tanh"});
  expect_error(
      [&] {
        jit::trace(
            [](Tensor a) {
              std::ostringstream os;
              Tensor s = sqrt(a);
              os << s;
              return s;
            },
            {x});
      },
      {"traced", "sqrt"});
  expect_error([&] { jit::trace([](Tensor a) { return a * a.item<float>(); }, {randn({1})}); },
               {"traced", "argument 0"});
}

TEST(Trace, InPlaceWriteIntoAnArgumentThrows) {
  expect_error([] { jit::trace([](Tensor a) { return a.add_(1.0); }, {ones({2})}); }, {"in-place", "argument"});
  expect_error([] { jit::trace([](Tensor a) { return a.mul_(a); }, {ones({2})}); }, {"in-place", "argument"});
}

TEST(Trace, WrongArityThrows) {
  Tensor x = ones({2});
  expect_error([&] { jit::trace([](Tensor a, Tensor b) { return a + b; }, {x}); }, {"jit::trace", "1 tensors"});
  expect_error([&] { jit::trace([](Tensor a) { return a; }, {x, x, x}); }, {"3 tensors"});
  auto fast = jit::trace([](Tensor a, Tensor b) { return a + b; }, {x, x});
  expect_error([&] { fast(x); }, {"2 arguments", "got 1"});
  expect_error([&] { fast(x, x, x); }, {"2 arguments", "got 3"});
}

TEST(Trace, UndefinedResultThrows) {
  expect_error([] { jit::trace([](Tensor) { return Tensor(); }, {ones({2})}); }, {"undefined"});
}

}  // namespace
}  // namespace kiln
