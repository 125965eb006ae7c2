// tests/nn/training_test.cpp -- end to end: small models trained on synthetic problems reach
// high accuracy, and a trained model saved and loaded predicts the same.
#include <gtest/gtest.h>

#include <cstdio>

#include "tests/unit/test_util.h"

using namespace kiln;

namespace {

// XOR of the signs: class 1 when x0 x1 > 0. Points keep a margin of 0.1 from the axes, so the
// classes are separable, but not linearly: the hidden layer is needed.
std::pair<Tensor, Tensor> xor_points(int64_t n) {
  Tensor mag = rand({n, 2}) * 0.9 + 0.1;
  Tensor sgn = bernoulli({n, 2}, 0.5) * 2.0 - 1.0;
  Tensor x = mag * sgn;
  Tensor y = (x.select(1, 0) * x.select(1, 1) > 0).to(i64);
  return {x, y};
}

struct Mlp : nn::Module {
  nn::Linear fc1{2, 32}, fc2{32, 32}, fc3{32, 2};
  Mlp() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
    register_module("fc3", fc3);
  }
  Tensor operator()(const Tensor& x) { return fc3(tanh(fc2(relu(fc1(x))))); }
};

double accuracy(const Tensor& logits, const Tensor& y) {
  NoGradGuard no_grad;
  return (argmax(logits, 1) == y).to(f64).mean().item<double>();
}

}  // namespace

TEST(Training, AnMlpLearnsXorWithAdam) {
  manual_seed(40);
  auto [x, y] = xor_points(512);
  auto [xt, yt] = xor_points(512);
  Mlp net;
  optim::Adam opt(net.parameters(), 0.01);
  double first_loss = 0, last_loss = 0;
  for (int step = 0; step < 300; ++step) {
    opt.zero_grad();
    Tensor loss = cross_entropy(net(x), y);
    loss.backward();
    opt.step();
    if (step == 0) first_loss = loss.item<double>();
    last_loss = loss.item<double>();
  }
  EXPECT_GT(first_loss, 0.5);  // about log 2 at the start
  EXPECT_LT(last_loss, 0.1);
  EXPECT_GE(accuracy(net(x), y), 0.98);
  EXPECT_GE(accuracy(net(xt), yt), 0.95);  // held-out points
  // Saved and loaded into a fresh model, it predicts the same.
  std::string path = ::testing::TempDir() + "kiln_training_test_mlp.safetensors";
  net.save(path);
  Mlp copy;
  copy.load(path);
  std::remove(path.c_str());
  EXPECT_TRUE(allclose(copy(xt), net(xt), 0, 0));
}

TEST(Training, ALinearModelLearnsBlobsWithMiniBatchSgd) {
  manual_seed(41);
  const int64_t n = 600;
  Tensor y = randint(0, 3, {n});
  Tensor centers = from_vector<float>({2, 0, -1, 1.7f, -1, -1.7f}, {3, 2});
  Tensor x = index_select(centers, 0, y) + randn({n, 2}) * 0.3;
  data::TensorDataset ds({x, y});
  auto [train, test] = ds.split(500);
  nn::Sequential model;
  model.add<nn::Linear>(2, 3);
  optim::SGD opt(model.parameters(), 0.1, {.momentum = 0.9});
  optim::StepLR sched(opt, 5, 0.5);
  data::DataLoader loader(train, 32, /*shuffle=*/true);
  for (int epoch = 0; epoch < 10; ++epoch) {
    for (auto batch : loader) {
      opt.zero_grad();
      cross_entropy(model(batch[0]), batch[1]).backward();
      opt.step();
    }
    sched.step();
  }
  std::vector<Tensor> all = test.get(arange(0, test.size()));
  EXPECT_GE(accuracy(model(all[0]), all[1]), 0.97);
}
