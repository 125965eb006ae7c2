// tests/nn/module_test.cpp -- Module: the parameter registry with dotted names, train/eval,
// state_dict save and load with its errors, and dtype conversion that keeps handles valid;
// ModuleList, ModuleDict and Identity; tied weights listed once.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "tests/unit/test_util.h"

using namespace kiln;
using kiln::test::expect_close;
using kiln::test::expect_error;

namespace {

struct Block : nn::Module {
  nn::Linear fc{3, 4};
  Tensor scale = ones({4});
  Tensor running = zeros({4});
  Block() {
    register_module("fc", fc);
    register_parameter("scale", scale);
    register_buffer("running", running);
  }
  Tensor operator()(const Tensor& x) { return fc(x) * scale; }
};

struct Net : nn::Module {
  Tensor bias = zeros({2});
  Block block;
  nn::Sequential head;
  Net() {
    register_parameter("bias", bias);
    register_module("block", block);
    head.add<nn::Linear>(4, 5);
    head.add<nn::ReLU>();
    head.add<nn::Dropout>(0.5);
    head.add<nn::Linear>(5, 2);
    register_module("head", head);
  }
  Tensor operator()(const Tensor& x) { return head(block(x)) + bias; }
};

// y = x W^T + b in double, x [n, in] row-major.
std::vector<double> linear_ref(const std::vector<double>& x, const nn::Linear& l) {
  std::vector<double> w = l.weight.to_vector<double>(), b = l.bias.to_vector<double>(), y;
  size_t out = b.size(), in = w.size() / out;
  for (size_t r = 0; r < x.size() / in; ++r)
    for (size_t o = 0; o < out; ++o) {
      double acc = b[o];
      for (size_t i = 0; i < in; ++i) acc += x[r * in + i] * w[o * in + i];
      y.push_back(acc);
    }
  return y;
}

// Net's forward in eval mode (dropout the identity), in double from its parameters.
std::vector<double> eval_ref(Net& net, const Tensor& x) {
  std::vector<double> h = linear_ref(x.to_vector<double>(), net.block.fc);
  std::vector<double> scale = net.block.scale.to_vector<double>(), bias = net.bias.to_vector<double>();
  for (size_t i = 0; i < h.size(); ++i) h[i] *= scale[i % scale.size()];
  h = linear_ref(h, static_cast<nn::Linear&>(net.head[0]));
  for (double& v : h) v = std::max(v, 0.0);
  h = linear_ref(h, static_cast<nn::Linear&>(net.head[3]));
  for (size_t i = 0; i < h.size(); ++i) h[i] += bias[i % bias.size()];
  return h;
}

std::vector<std::string> names_of(const std::vector<std::pair<std::string, Tensor>>& v) {
  std::vector<std::string> out;
  for (auto& [n, t] : v) out.push_back(n);
  return out;
}

std::map<std::string, Tensor> cloned(const std::map<std::string, Tensor>& sd) {
  std::map<std::string, Tensor> out;
  for (auto& [n, t] : sd) out[n] = t.detach().clone();
  return out;
}

std::string temp_path(const std::string& name) { return ::testing::TempDir() + "kiln_module_test_" + name; }

}  // namespace

TEST(Module, NamedParametersUseDottedNamesDepthFirst) {
  Net net;
  std::vector<std::string> want{"bias",          "block.scale", "block.fc.weight", "block.fc.bias",
                                "head.0.weight", "head.0.bias", "head.3.weight",   "head.3.bias"};
  EXPECT_EQ(names_of(net.named_parameters()), want);
  EXPECT_EQ(names_of(net.named_buffers()), (std::vector<std::string>{"block.running"}));
  auto params = net.parameters();
  ASSERT_EQ(params.size(), want.size());
  // The tensors themselves, not copies.
  EXPECT_EQ(params[2].impl(), net.block.fc.weight.impl());
  EXPECT_EQ(net.named_children().size(), 2u);
  EXPECT_EQ(net.head.size(), 4u);
}

TEST(Module, ParametersRequireGradAndAreLeaves) {
  Net net;
  for (auto& [name, p] : net.named_parameters()) {
    EXPECT_TRUE(p.requires_grad()) << name;
    EXPECT_TRUE(p.is_leaf()) << name;
  }
  EXPECT_FALSE(net.block.running.requires_grad());
  Tensor x = randn({6, 3});
  Tensor loss = net(x).sum();
  loss.backward();
  for (auto& [name, p] : net.named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    EXPECT_EQ(p.grad().shape(), p.shape()) << name;
  }
  net.zero_grad();
  for (auto& [name, p] : net.named_parameters()) EXPECT_FALSE(p.grad().defined()) << name;
}

TEST(Module, RegisteringABadOrTakenNameThrows) {
  struct Bad : nn::Module {
    Tensor a = zeros({1}), b = zeros({1});
    nn::ReLU r;
    void add(const std::string& name, Tensor& t) { register_parameter(name, t); }
    void add_buffer(const std::string& name, Tensor& t) { register_buffer(name, t); }
    void add_module(const std::string& name) { register_module(name, r); }
  } m;
  m.add("a", m.a);
  expect_error([&] { m.add("a", m.b); }, {"register", "\"a\"", "taken"});
  expect_error([&] { m.add_buffer("a", m.b); }, {"taken"});
  expect_error([&] { m.add_module("a"); }, {"taken"});
  expect_error([&] { m.add("x.y", m.b); }, {"register", "'.'"});
  expect_error([&] { m.add("", m.b); }, {"register", "non-empty"});
  Tensor undefined;
  expect_error([&] { m.add("u", undefined); }, {"register_parameter", "undefined"});
}

TEST(Module, TrainAndEvalPropagateToEverySubmodule) {
  Net net;
  EXPECT_TRUE(net.is_training());
  EXPECT_TRUE(net.head[2].is_training());
  net.eval();
  EXPECT_FALSE(net.is_training());
  EXPECT_FALSE(net.block.is_training());
  EXPECT_FALSE(net.block.fc.is_training());
  for (size_t i = 0; i < net.head.size(); ++i) EXPECT_FALSE(net.head[i].is_training());
  Tensor x = randn({4, 3});
  net.block.scale.detach().copy_(randn({4}));  // so a forgotten scale shows
  net.bias.detach().copy_(randn({2}));
  expect_close(net(x), eval_ref(net, x), 1e-5, 1e-5);  // dropout is off: the plain layers
  net.train();
  // Training, dropout zeroes about half of the hidden units: the output leaves the reference.
  Tensor big = randn({64, 3});
  std::vector<double> got = net(big).to_vector<double>(), want = eval_ref(net, big);
  int differ = 0;
  for (size_t i = 0; i < got.size(); ++i) differ += std::abs(got[i] - want[i]) > 1e-4;
  EXPECT_GT(differ, 10);
  EXPECT_TRUE(net.head[2].is_training());
  EXPECT_TRUE(net.block.fc.is_training());
}

TEST(Module, StateDictHoldsParametersAndBuffersByName) {
  Net net;
  auto sd = net.state_dict();
  EXPECT_EQ(sd.size(), 9u);
  EXPECT_EQ(sd.at("block.fc.weight").impl(), net.block.fc.weight.impl());
  EXPECT_EQ(sd.at("block.running").impl(), net.block.running.impl());
  EXPECT_EQ(sd.at("head.3.weight").shape(), (Dims{2, 5}));
}

TEST(Module, LoadStateDictCopiesValuesIntoAnotherModel) {
  manual_seed(1);
  Net a;
  manual_seed(2);
  Net b;
  Tensor x = randn({5, 3});
  a.eval();
  b.eval();
  {
    NoGradGuard no_grad;
    a.block.running.fill_(3);
  }
  auto saved = cloned(a.state_dict());
  EXPECT_FALSE(allclose(a(x), b(x)));
  Tensor w_handle = b.block.fc.weight;
  b.load_state_dict(saved);
  EXPECT_TRUE(allclose(a(x), b(x), 0, 0));
  EXPECT_EQ(w_handle.impl(), b.block.fc.weight.impl());  // copied into, not replaced
  expect_close(b.block.running, {3, 3, 3, 3}, 0);
  EXPECT_TRUE(b.block.fc.weight.requires_grad());
  EXPECT_TRUE(b.block.fc.weight.is_leaf());
  // The module owns its values: changing the source afterwards changes nothing.
  saved.at("block.fc.weight").fill_(0);
  EXPECT_TRUE(allclose(a(x), b(x), 0, 0));
}

TEST(Module, LoadStateDictStrictReportsMissingAndUnexpectedKeys) {
  Net net;
  auto sd = cloned(net.state_dict());
  auto missing = sd;
  missing.erase("block.fc.bias");
  missing.erase("head.0.weight");
  expect_error([&] { net.load_state_dict(missing); },
               {"load_state_dict", "missing keys [block.fc.bias, head.0.weight]", "unexpected keys []"});
  auto extra = sd;
  extra["head.9.weight"] = zeros({1});
  expect_error([&] { net.load_state_dict(extra); },
               {"load_state_dict", "missing keys []", "unexpected keys [head.9.weight]"});
  // Not strict: the known keys load, the rest are ignored.
  missing["head.9.weight"] = zeros({1});
  missing["bias"] = full({2}, 7.0);
  net.load_state_dict(missing, /*strict=*/false);
  expect_close(net.bias, {7, 7}, 0);
}

TEST(Module, LoadStateDictRejectsAShapeMismatch) {
  Net net;
  auto sd = cloned(net.state_dict());
  Tensor before = net.block.fc.weight.detach().clone();
  sd["block.fc.weight"] = zeros({3, 4});
  expect_error([&] { net.load_state_dict(sd); }, {"load_state_dict", "\"block.fc.weight\"", "f32[3,4]", "f32[4,3]"});
  EXPECT_TRUE(allclose(net.block.fc.weight, before, 0, 0));
}

TEST(Module, LoadStateDictConvertsDtypes) {
  Net net;
  auto sd = cloned(net.state_dict());
  sd["bias"] = from_vector<double>({0.5, -0.25});
  net.load_state_dict(sd);
  EXPECT_EQ(net.bias.dtype(), f32);
  expect_close(net.bias, {0.5, -0.25}, 0);
}

TEST(Module, SaveAndLoadThroughAFile) {
  manual_seed(3);
  Net a;
  manual_seed(4);
  Net b;
  std::string path = temp_path("save.safetensors");
  a.save(path);
  b.load(path);
  for (auto& [name, t] : a.state_dict()) EXPECT_TRUE(allclose(t, b.state_dict().at(name), 0, 0)) << name;
  std::remove(path.c_str());
}

TEST(Module, ToF64KeepsHandlesValid) {
  manual_seed(5);
  Net net;
  net.eval();
  Tensor x = randn({3, 3});
  std::vector<double> before = net(x).to_vector<double>();
  Tensor w = net.block.fc.weight;  // a handle taken before the conversion
  std::vector<double> w_before = w.to_vector<double>();
  std::vector<Tensor> params = net.parameters();
  optim::SGD opt(params, 0.1);  // holds handles too
  net(x).sum().backward();
  net.to(f64);
  EXPECT_FALSE(w.grad().defined());  // a gradient of the old dtype is dropped
  for (auto& [name, p] : net.named_parameters()) {
    EXPECT_EQ(p.dtype(), f64) << name;
    EXPECT_TRUE(p.requires_grad()) << name;
    EXPECT_TRUE(p.is_leaf()) << name;
  }
  EXPECT_EQ(net.block.running.dtype(), f64);
  EXPECT_EQ(w.dtype(), f64);
  EXPECT_EQ(w.impl(), net.block.fc.weight.impl());
  expect_close(w, w_before, 0);
  Tensor y = net(x.to(f64));
  EXPECT_EQ(y.dtype(), f64);
  expect_close(y, before, 1e-5, 1e-5);
  y.sum().backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().dtype(), f64);
  Tensor g = w.grad().clone();
  opt.step();  // the optimizer's handles see the converted parameters
  std::vector<double> want;
  for (size_t i = 0; i < w_before.size(); ++i) want.push_back(w_before[i] - 0.1 * g.to_vector<double>()[i]);
  expect_close(w, want, 1e-12);
  expect_error([&] { net.to(i64); }, {"Module::to", "i64"});
}

TEST(Module, SequentialRunsItsLayersInOrder) {
  nn::Sequential seq;
  auto& l1 = seq.add<nn::Linear>(3, 4);
  seq.add<nn::Tanh>();
  auto& l2 = seq.add<nn::Linear>(4, 2, /*bias=*/false);
  EXPECT_EQ(names_of(seq.named_parameters()), (std::vector<std::string>{"0.weight", "0.bias", "2.weight"}));
  Tensor x = randn({5, 3});
  EXPECT_TRUE(allclose(seq(x), matmul(tanh(matmul(x, l1.weight.t()) + l1.bias), l2.weight.t()), 1e-6, 1e-6));
  expect_error([&] { seq.push_back(nullptr); }, {"Sequential", "null"});
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
