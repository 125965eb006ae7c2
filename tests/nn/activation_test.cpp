// tests/nn/activation_test.cpp -- the composite activations (nn/activation.cpp: ReLU6,
// Hardswish, LeakyReLU, Softplus, Mish) against torch's definitions in double, with their
// derivatives at the kinks and where softplus switches to x.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "tests/unit/test_util.h"

using namespace kiln;
using kiln::test::expect_close;

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
  expect_matches([](const Tensor& x) { return nn::softplus(x, 2.0, 5.0); },
                 [](double x) { return softplus_ref(x, 2, 5); });
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
