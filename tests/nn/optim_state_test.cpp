// tests/nn/optim_state_test.cpp -- an optimizer's state_dict: torch's names, a checkpoint that
// resumes bit for bit, and a mismatched one refused.
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "nn/optim.h"
#include "tests/nn/optim_rule.h"

using namespace kiln;
using kiln::test::expect_error;

TEST(OptimizerState, ACheckpointResumesBitForBit) {
  struct Net : nn::Module {
    nn::Linear fc1{3, 8}, fc2{8, 2};
    Net() {
      register_module("fc1", fc1);
      register_module("fc2", fc2);
    }
    Tensor operator()(const Tensor& x) { return fc2(tanh(fc1(x))); }
  };
  std::vector<Tensor> xs, ys;
  for (int i = 0; i < 8; ++i) xs.push_back(randn({5, 3})), ys.push_back(randn({5, 2}));
  using MakeOpt = std::function<std::unique_ptr<optim::Optimizer>(Net&)>;
  std::vector<std::pair<const char*, MakeOpt>> kinds = {
      {"AdamW", [](Net& n) { return std::make_unique<optim::AdamW>(n.parameters(), 0.01); }},
      {"SGD",
       [](Net& n) {
         return std::make_unique<optim::SGD>(n.parameters(), 0.05,
                                             optim::SgdOptions{.momentum = 0.9, .dampening = 0.1});
       }},
      {"RMSprop",
       [](Net& n) {
         return std::make_unique<optim::RMSprop>(n.parameters(), 0.01,
                                                 optim::RmspropOptions{.momentum = 0.5, .centered = true});
       }},
      {"Adagrad",
       [](Net& n) {
         return std::make_unique<optim::Adagrad>(n.parameters(), 0.05, optim::AdagradOptions{.lr_decay = 0.01});
       }},
  };
  for (auto& [name, make] : kinds) {
    SCOPED_TRACE(name);
    auto train = [&](Net& net, optim::Optimizer& opt, int from, int to) {
      for (int i = from; i < to; ++i) {
        opt.zero_grad();
        mse_loss(net(xs[static_cast<size_t>(i)]), ys[static_cast<size_t>(i)]).backward();
        opt.step();
      }
    };
    Net unbroken;
    std::map<std::string, Tensor> init;
    for (auto& [n, t] : unbroken.state_dict()) init[n] = t.detach().clone();
    auto opt = make(unbroken);
    opt->set_lr(opt->lr() * 0.5);  // the rate is state too
    train(unbroken, *opt, 0, 8);

    Net first;
    first.load_state_dict(init);
    auto opt1 = make(first);
    opt1->set_lr(opt1->lr() * 0.5);
    train(first, *opt1, 0, 4);
    std::string model_file = ::testing::TempDir() + "kiln_resume_model.safetensors";
    std::string opt_file = ::testing::TempDir() + "kiln_resume_opt.safetensors";
    first.save(model_file);
    save_safetensors(opt1->state_dict(), opt_file);

    Net resumed;
    resumed.load(model_file);
    auto opt2 = make(resumed);
    opt2->load_state_dict(load_safetensors(opt_file));
    EXPECT_EQ(opt2->lr(), opt1->lr());
    train(resumed, *opt2, 4, 8);
    for (auto& [n, t] : unbroken.state_dict()) {
      SCOPED_TRACE(n);
      EXPECT_EQ(resumed.state_dict().at(n).to_vector<double>(), t.to_vector<double>());  // bit for bit
    }
    std::remove(model_file.c_str());
    std::remove(opt_file.c_str());
  }
}

TEST(OptimizerState, NamesTorchsStateAndRefusesAMismatch) {
  Tensor a = randn({2, 3}).requires_grad_(), b = randn({3}).requires_grad_();
  optim::Adam adam({a, b});
  std::vector<std::string> names;
  for (auto& [n, t] : adam.state_dict()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"lr", "state.0.exp_avg", "state.0.exp_avg_sq", "state.1.exp_avg",
                                             "state.1.exp_avg_sq", "step"}));
  auto sd = adam.state_dict();
  sd.erase("step");
  expect_error([&] { adam.load_state_dict(sd); }, {"load_state_dict", "missing [step]"});
  auto wrong = adam.state_dict();
  wrong["state.1.exp_avg"] = zeros({4});
  expect_error([&] { adam.load_state_dict(wrong); }, {"load_state_dict", "state.1.exp_avg", "f32[3]", "f32[4]"});
}
