// tests/nn/layers_more_test.cpp -- the composite activations (ReLU6, Hardswish, LeakyReLU,
// Softplus, Mish) against torch's definitions in double, with their derivatives at the kinks
// and where softplus switches to x; ModuleList, ModuleDict and Identity; tied weights listed
// once; gradient clipping by norm and by value.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "tests/unit/test_util.h"

using namespace kiln;
using kiln::test::expect_close;
using kiln::test::expect_error;

namespace {

const std::vector<double> kPoints = {-30, -6, -3.5, -3, -1, -0.25, 0, 0.25, 1, 2.5, 3, 6, 7.5, 30};

void expect_matches(const std::function<Tensor(const Tensor&)>& f, const std::function<double(double)>& ref) {
  std::vector<double> want;
  for (double x : kPoints) want.push_back(ref(x));
  expect_close(f(from_vector(kPoints)), want, 1e-12, 1e-12);
  Tensor nan = f(from_vector(std::vector<double>{std::numeric_limits<double>::quiet_NaN()}));
  EXPECT_TRUE(std::isnan(nan.item<double>())) << "NaN in, NaN out";
}

// d f / dx at x, through backward.
double derivative(const std::function<Tensor(const Tensor&)>& f, double x) {
  Tensor t = from_vector(std::vector<double>{x}).requires_grad_();
  f(t).sum().backward();
  return t.grad().item<double>();
}

double softplus_ref(double x, double beta, double threshold) {
  return beta * x > threshold ? x : std::log1p(std::exp(beta * x)) / beta;
}

}  // namespace

TEST(Activations, FollowTorchsDefinitions) {
  expect_matches(nn::relu6, [](double x) { return std::min(std::max(x, 0.0), 6.0); });
  expect_matches(nn::hardswish, [](double x) { return x * std::min(std::max(x + 3, 0.0), 6.0) / 6; });
  expect_matches([](const Tensor& x) { return nn::leaky_relu(x, 0.2); }, [](double x) { return x > 0 ? x : 0.2 * x; });
  expect_matches([](const Tensor& x) { return nn::softplus(x); }, [](double x) { return softplus_ref(x, 1, 20); });
  expect_matches([](const Tensor& x) { return nn::softplus(x, 2.0, 5.0); }, [](double x) { return softplus_ref(x, 2, 5); });
  expect_matches(nn::mish, [](double x) { return x * std::tanh(softplus_ref(x, 1, 20)); });
  // The modules are the functions, with torch's defaults.
  Tensor x = from_vector(kPoints);
  expect_close(nn::LeakyReLU()(x), nn::leaky_relu(x, 0.01).to_vector<double>(), 0, 0);
  expect_close(nn::Softplus()(x), nn::softplus(x).to_vector<double>(), 0, 0);
  expect_close(nn::Mish()(x), nn::mish(x).to_vector<double>(), 0, 0);
  expect_close(nn::ReLU6()(x), nn::relu6(x).to_vector<double>(), 0, 0);
  expect_close(nn::Hardswish()(x), nn::hardswish(x).to_vector<double>(), 0, 0);
}

TEST(Activations, DifferentiateAsTorchDoes) {
  for (double x : {-2.0, -0.5, 0.7, 1.9, 4.0}) {
    Tensor p = from_vector(std::vector<double>{x}).requires_grad_();
    for (auto f : {nn::relu6, nn::hardswish, nn::mish})
      EXPECT_EQ(autograd::gradcheck([&](std::span<const Tensor> in) { return f(in[0]); }, std::vector<Tensor>{p}), "");
    EXPECT_EQ(autograd::gradcheck([](std::span<const Tensor> in) { return nn::softplus(in[0], 1.5, 3.0); },
                                  std::vector<Tensor>{p}),
              "");
  }
  // At the kinks: leaky_relu's slope at 0, relu6's 0 at 6, softplus's 1 far above its threshold
  // (no NaN from the branch it does not take).
  EXPECT_EQ(derivative([](const Tensor& t) { return nn::leaky_relu(t, 0.2); }, 0.0), 0.2);
  EXPECT_EQ(derivative(nn::relu6, 6.0), 0.0);
  EXPECT_EQ(derivative([](const Tensor& t) { return nn::softplus(t); }, 1000.0), 1.0);
  EXPECT_NEAR(derivative([](const Tensor& t) { return nn::softplus(t); }, -1000.0), 0.0, 1e-300);
  EXPECT_FALSE(std::isnan(derivative(nn::mish, 1000.0)));
}

TEST(Containers, ModuleListAndModuleDictRegisterTheirItems) {
  nn::ModuleList list;
  list.add<nn::Linear>(3, 4);
  list.add<nn::Linear>(4, 2, false);
  list.push_back(std::make_shared<nn::Identity>());
  std::vector<std::string> names;
  for (auto& [n, t] : list.named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"0.weight", "0.bias", "1.weight"}));
  EXPECT_EQ(list.size(), 3u);
  Tensor x = randn({5, 3});
  Tensor h = x;
  for (size_t i = 0; i < list.size(); ++i) h = dynamic_cast<nn::UnaryModule&>(list[i])(h);
  expect_close(h, list.at<nn::Linear>(1)(list.at<nn::Linear>(0)(x)).to_vector<double>(), 0, 0);
  expect_error([&] { list.at<nn::Conv2d>(0); }, {"ModuleList", "item 0"});

  nn::ModuleDict dict;
  dict.add<nn::Linear>("encoder", 2, 2);
  dict.add<nn::BatchNorm1d>("norm", 2);
  EXPECT_EQ(dict.keys(), (std::vector<std::string>{"encoder", "norm"}));
  EXPECT_TRUE(dict.contains("norm"));
  EXPECT_EQ(dict.state_dict().count("norm.running_mean"), 1u);
  dict.eval();
  EXPECT_FALSE(dict["norm"].is_training());
  expect_error([&] { dict["decoder"]; }, {"ModuleDict", "decoder", "encoder, norm"});
  expect_error([&] { dict.add<nn::Identity>("norm"); }, {"taken"});
  Tensor y = randn({2, 2});
  EXPECT_EQ(nn::Identity()(y).data_ptr(), y.data_ptr());
}

TEST(Containers, ATiedWeightIsOneParameter) {
  struct Lm : nn::Module {
    nn::Embedding embed{10, 4};
    nn::Linear head{4, 10, false};
    Lm() {
      head.weight = embed.weight;  // tied: one tensor, two modules
      register_module("embed", embed);
      register_module("head", head);
    }
  };
  Lm lm;
  EXPECT_EQ(lm.parameters().size(), 1u);
  EXPECT_EQ(lm.named_parameters()[0].first, "embed.weight");
  EXPECT_EQ(lm.state_dict().size(), 2u);  // both names, as torch's state_dict
  // One SGD step moves it once, by the gradient both uses gave it.
  Tensor before = lm.embed.weight.detach().clone();
  optim::SGD opt(lm.parameters(), 0.5);
  Tensor ids = from_vector(std::vector<int64_t>{1, 3});
  linear(embedding(ids, lm.embed.weight), lm.head.weight).sum().backward();
  Tensor g = lm.embed.weight.grad().clone();
  opt.step();
  expect_close(lm.head.weight, (before - g * 0.5).to_vector<double>(), 1e-6, 1e-6);
}

TEST(ClipGrad, ScalesToTheMaxNormAndReturnsTheNormBefore) {
  Tensor a = zeros({2}, f64).requires_grad_(), b = zeros({1}, f64).requires_grad_(), c = zeros({3}).requires_grad_();
  auto set = [&] {
    a.set_grad(from_vector(std::vector<double>{3, 4}));
    b.set_grad(from_vector(std::vector<double>{-12}));
  };
  set();
  Tensor total = nn::utils::clip_grad_norm_({a, b, c}, 6.5);  // c has no gradient: skipped
  EXPECT_NEAR(total.item<double>(), 13, 1e-12);
  double s = 6.5 / (13 + 1e-6);
  expect_close(a.grad(), {3 * s, 4 * s}, 1e-12, 1e-12);
  expect_close(b.grad(), {-12 * s}, 1e-12, 1e-12);
  set();
  EXPECT_NEAR(nn::utils::clip_grad_norm_({a, b}, 100).item<double>(), 13, 1e-12);
  expect_close(a.grad(), {3, 4}, 0, 0);  // below the bound: untouched
  set();
  EXPECT_NEAR(nn::utils::clip_grad_norm_({a, b}, 6, std::numeric_limits<double>::infinity()).item<double>(), 12, 0);
  expect_close(b.grad(), {-12 * 6 / (12 + 1e-6)}, 1e-12, 1e-12);
  set();
  EXPECT_NEAR(nn::utils::clip_grad_norm_({a, b}, 100, 1).item<double>(), 19, 1e-12);
  a.set_grad(from_vector(std::vector<double>{std::numeric_limits<double>::infinity(), 0}));
  expect_error([&] { nn::utils::clip_grad_norm_({a, b}, 1, 2, true); }, {"clip_grad_norm_", "inf", "error_if_nonfinite"});
  set();
  nn::utils::clip_grad_value_({a, b}, 3.5);
  expect_close(a.grad(), {3, 3.5}, 0, 0);
  expect_close(b.grad(), {-3.5}, 0, 0);
  // A gradient straight from backward may be an expanded view (sum's is): clipped all the same.
  Tensor p = randn({4}, f64).requires_grad_();
  (p.sum() * 5.0).backward();
  EXPECT_NEAR(nn::utils::clip_grad_norm_({p}, 1.0).item<double>(), 10, 1e-12);
  expect_close(p.grad(), std::vector<double>(4, 5 / (10 + 1e-6)), 1e-12, 1e-12);
  (p.sum() * 5.0).backward();
  nn::utils::clip_grad_value_({p}, 2.0);
  expect_close(p.grad(), std::vector<double>(4, 2.0), 0, 0);
}

TEST(Embedding, APaddingRowStartsAtZeroAndGetsNoGradient) {
  nn::Embedding e(5, 3, 1);
  expect_close(e.weight.select(0, 1).contiguous(), {0, 0, 0}, 0, 0);
  nn::Embedding last(5, 3, -1);
  expect_close(last.weight.select(0, 4).contiguous(), {0, 0, 0}, 0, 0);
  Tensor ids = from_vector(std::vector<int64_t>{1, 2, 1, 0}, {2, 2});
  Tensor out = e(ids);
  EXPECT_EQ(out.shape(), (Dims{2, 2, 3}));
  expect_close(out.select(0, 0).select(0, 1).contiguous(), e.weight.select(0, 2).contiguous().to_vector<double>(), 0, 0);
  (out * 2.0).sum().backward();
  std::vector<double> g = e.weight.grad().to_vector<double>();
  std::vector<double> want{2, 2, 2, 0, 0, 0, 2, 2, 2, 0, 0, 0, 0, 0, 0};  // rows 0 and 2 read once; row 1 padding
  EXPECT_EQ(g, want);
  expect_error([] { nn::Embedding(5, 3, 5); }, {"Embedding", "padding_idx 5", "5 embeddings"});
}
