// tests/torch/vs_torch_test.cpp -- kiln's layers and ops beside LibTorch's (Debian's
// libtorch-dev, 1.13) on the same inputs and weights: one forward and one backward each, within
// 1e-4 relative (f32), and the integer results (indices, dtypes) exactly. Built only where
// LibTorch is installed (tests/CMakeLists.txt). RMSNorm is newer than LibTorch 1.13: its
// reference is tests/nn/norm_test.cpp.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include <kiln/kiln.h>

#include "tests/torch/torch_util.h"

namespace {

using namespace kiln::test_torch;

// f on kiln and torch copies of `inputs`; the results, then the gradients of sum(result * r)
// for one random r, must match.
void expect_forward_and_backward(const std::vector<KTensor>& inputs,
                                 const std::function<KTensor(const std::vector<KTensor>&)>& kf,
                                 const std::function<TTensor(const std::vector<TTensor>&)>& tf) {
  std::vector<KTensor> k;
  std::vector<TTensor> t;
  for (const KTensor& x : inputs) {
    k.push_back(x.detach().clone().requires_grad_());
    t.push_back(to_torch(x).requires_grad_());
  }
  KTensor ky = kf(k);
  TTensor ty = tf(t);
  expect_same(ky, ty);
  KTensor r = kiln::randn(ky.shape());
  (ky * r).sum().backward();
  (ty * to_torch(r)).sum().backward();
  for (size_t i = 0; i < k.size(); ++i) {
    SCOPED_TRACE(testing::Message() << "gradient of input " << i);
    ASSERT_TRUE(k[i].grad().defined());
    expect_same(k[i].grad(), t[i].grad());
  }
}

}  // namespace

TEST(VsTorch, BatchNorm2dTrainsAndEvaluatesAsTorchs) {
  kiln::nn::BatchNorm2d kbn(3);
  torch::nn::BatchNorm2d tbn(3);
  kbn.weight.detach().copy_(kiln::randn({3}));
  kbn.bias.detach().copy_(kiln::randn({3}));
  {
    torch::NoGradGuard no_grad;
    tbn->weight.copy_(to_torch(kbn.weight));
    tbn->bias.copy_(to_torch(kbn.bias));
  }
  KTensor x = kiln::randn({4, 3, 5, 5}) * 2.0 + 0.5;
  expect_forward_and_backward(
      {x, kbn.weight, kbn.bias},
      [&](const std::vector<KTensor>& in) {
        return kiln::nn::batch_norm(in[0], kbn.running_mean, kbn.running_var, in[1], in[2], true);
      },
      [&](const std::vector<TTensor>& in) {
        return torch::nn::functional::batch_norm(
            in[0], tbn->running_mean, tbn->running_var,
            torch::nn::functional::BatchNormFuncOptions().weight(in[1]).bias(in[2]).training(true));
      });
  expect_same(kbn.running_mean, tbn->running_mean);
  expect_same(kbn.running_var, tbn->running_var);
  // The modules, a training step then eval.
  KTensor x2 = kiln::randn({2, 3, 4, 4});
  expect_same(kbn(x2), tbn(to_torch(x2)));
  expect_same(kbn.running_var, tbn->running_var);
  EXPECT_EQ(kbn.num_batches_tracked.item<int64_t>(), tbn->num_batches_tracked.item<int64_t>());
  kbn.eval();
  tbn->eval();
  expect_same(kbn(x2), tbn(to_torch(x2)));
}

TEST(VsTorch, GroupNormAndBatchNorm1d) {
  KTensor x = kiln::randn({3, 6, 4}), w = kiln::randn({6}), b = kiln::randn({6});
  expect_forward_and_backward(
      {x, w, b}, [](const std::vector<KTensor>& in) { return kiln::nn::group_norm(in[0], 3, in[1], in[2]); },
      [](const std::vector<TTensor>& in) { return torch::group_norm(in[0], 3, in[1], in[2]); });
  kiln::nn::BatchNorm1d kbn(6, {.momentum = std::nullopt});
  torch::nn::BatchNorm1d tbn(torch::nn::BatchNorm1dOptions(6).momentum(c10::nullopt));
  for (int i = 0; i < 3; ++i) {
    KTensor xi = kiln::randn({5, 6}) + static_cast<double>(i);
    expect_same(kbn(xi), tbn(to_torch(xi)));
  }
  expect_same(kbn.running_mean, tbn->running_mean);
  expect_same(kbn.running_var, tbn->running_var);
}

TEST(VsTorch, Activations) {
  // Random points, none at a kink (where torch's one-sided choices are tested in
  // tests/nn/activation_test.cpp).
  KTensor x = kiln::randn({64}) * 4.0;
  namespace F = torch::nn::functional;
  auto check = [&](std::function<KTensor(const KTensor&)> kf, std::function<TTensor(const TTensor&)> tf) {
    expect_forward_and_backward(
        {x}, [&](const std::vector<KTensor>& in) { return kf(in[0]); },
        [&](const std::vector<TTensor>& in) { return tf(in[0]); });
  };
  check(kiln::nn::relu6, [](const TTensor& t) { return F::relu6(t); });
  check(kiln::nn::hardswish, [](const TTensor& t) { return torch::hardswish(t); });
  check([](const KTensor& t) { return kiln::nn::leaky_relu(t, 0.2); },
        [](const TTensor& t) { return F::leaky_relu(t, F::LeakyReLUFuncOptions().negative_slope(0.2)); });
  check([](const KTensor& t) { return kiln::nn::softplus(t, 2.0, 5.0); },
        [](const TTensor& t) { return F::softplus(t, F::SoftplusFuncOptions().beta(2.0).threshold(5.0)); });
  check(kiln::nn::mish, [](const TTensor& t) { return torch::mish(t); });
}

TEST(VsTorch, ScansAndOrderings) {
  KTensor x = kiln::randn({4, 7});
  expect_forward_and_backward(
      {x}, [](const std::vector<KTensor>& in) { return kiln::cumsum(in[0], 1); },
      [](const std::vector<TTensor>& in) { return torch::cumsum(in[0], 1); });
  KTensor ints = kiln::randint(-5, 5, {3, 4}).to(kiln::DType::I32);
  EXPECT_EQ(kiln::cumsum(ints, 0).dtype(), kiln::DType::I64);
  EXPECT_EQ(torch::cumsum(to_torch(ints), 0).scalar_type(), torch::kLong);
  expect_same(kiln::cumsum(ints, 0), torch::cumsum(to_torch(ints), 0), 0, 0);
  // Ties and NaN: torch's stable sort gives the one order kiln always gives.
  KTensor ties = kiln::randint(0, 4, {5, 9}).to(kiln::DType::F32);
  ties = kiln::where(kiln::lt(kiln::rand({5, 9}), 0.15), std::numeric_limits<double>::quiet_NaN(), ties);
  for (bool descending : {false, true}) {
    auto [kv, ki] = kiln::sort(ties, 1, descending);
    auto [tv, ti] = torch::sort(to_torch(ties), /*stable=*/true, 1, descending);
    expect_same(kv, tv, 0, 0);
    expect_same(ki, ti, 0, 0);
    expect_same(kiln::argsort(ties, 0, descending), std::get<1>(torch::sort(to_torch(ties), true, 0, descending)), 0,
                0);
  }
  // topk: values always; indices where the values are distinct (torch leaves ties' order open).
  for (bool largest : {true, false}) {
    auto [kv, ki] = kiln::topk(x, 3, 1, largest);
    auto [tv, ti] = torch::topk(to_torch(x), 3, 1, largest);
    expect_same(kv, tv, 0, 0);
    expect_same(ki, ti, 0, 0);
  }
  expect_forward_and_backward(
      {x}, [](const std::vector<KTensor>& in) { return std::get<0>(kiln::topk(in[0], 2, 0)); },
      [](const std::vector<TTensor>& in) { return std::get<0>(torch::topk(in[0], 2, 0)); });
}

TEST(VsTorch, MaskingReorderingAndTiling) {
  KTensor x = kiln::randn({3, 4, 5});
  using KF = std::function<KTensor(const std::vector<KTensor>&)>;
  using TF = std::function<TTensor(const std::vector<TTensor>&)>;
  std::vector<std::pair<KF, TF>> cases = {
      {[](auto& in) { return kiln::tril(in[0], -1); }, [](auto& in) { return torch::tril(in[0], -1); }},
      {[](auto& in) { return kiln::triu(in[0], 2); }, [](auto& in) { return torch::triu(in[0], 2); }},
      {[](auto& in) {
         return kiln::flip(in[0], {0, 2});
       },
       [](auto& in) {
         return torch::flip(in[0], {0, 2});
       }},
      {[](auto& in) {
         return kiln::roll(in[0], {2, -1}, {1, 2});
       },
       [](auto& in) {
         return torch::roll(in[0], {2, -1}, {1, 2});
       }},
      {[](auto& in) { return kiln::roll(in[0], {7}); }, [](auto& in) { return torch::roll(in[0], {7}); }},
      {[](auto& in) {
         return kiln::repeat(in[0], {2, 1, 1, 2});
       },
       [](auto& in) {
         return in[0].repeat({2, 1, 1, 2});
       }},
      {[](auto& in) { return kiln::chunk(in[0], 3, 2)[1]; }, [](auto& in) { return in[0].chunk(3, 2)[1]; }},
      {[](auto& in) {
         return kiln::split(in[0], std::vector<int64_t>{1, 3}, 1)[1];
       },
       [](auto& in) {
         return in[0].split_with_sizes({1, 3}, 1)[1];
       }},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(testing::Message() << "case " << i);
    expect_forward_and_backward({x}, cases[i].first, cases[i].second);
  }
  KTensor mask = kiln::lt(kiln::rand({4, 1}), 0.5);
  expect_forward_and_backward(
      {x}, [&](auto& in) { return kiln::masked_fill(in[0], mask, -2.5); },
      [&](auto& in) { return in[0].masked_fill(to_torch(mask), -2.5); });
}

TEST(VsTorch, MultiheadAttention) {
  kiln::nn::MultiheadAttention kmha(8, 2);
  torch::nn::MultiheadAttention tmha(torch::nn::MultiheadAttentionOptions(8, 2));
  kmha.in_proj_bias.detach().copy_(kiln::randn({24}));
  kmha.out_proj.bias.detach().copy_(kiln::randn({8}));
  {
    torch::NoGradGuard no_grad;
    tmha->in_proj_weight.copy_(to_torch(kmha.in_proj_weight));
    tmha->in_proj_bias.copy_(to_torch(kmha.in_proj_bias));
    tmha->out_proj->weight.copy_(to_torch(kmha.out_proj.weight));
    tmha->out_proj->bias.copy_(to_torch(kmha.out_proj.bias));
  }
  KTensor q = kiln::randn({3, 2, 8}), kv = kiln::randn({5, 2, 8});  // [L, N, E]
  KTensor pad = kiln::lt(kiln::rand({2, 5}), 0.3);
  pad = kiln::logical_and(pad, kiln::ne(kiln::arange(0, 5, 1, kiln::DType::I64).reshape({1, 5}), 0));  // key 0 stays
  KTensor mask = kiln::lt(kiln::rand({3, 5}), 0.2);
  mask = kiln::logical_and(mask, kiln::ne(kiln::arange(0, 5, 1, kiln::DType::I64).reshape({1, 5}), 0));
  for (int which = 0; which < 3; ++which) {
    SCOPED_TRACE(which == 0 ? "key padding" : which == 1 ? "attention mask" : "both");
    KTensor kp = which != 1 ? pad : KTensor(), km = which != 0 ? mask : KTensor();
    auto [ko, kw] = kmha(q, kv, kv, kp, true, km);
    // LibTorch 1.13's C++ MultiheadAttention adds a bool attn_mask as 0 and 1 instead of masking
    // (its Python one masks where true, as kiln does): it gets the same mask as -inf floats.
    TTensor tm = km.defined() ? torch::zeros({3, 5}).masked_fill(to_torch(km), -INFINITY) : TTensor();
    auto [to, tw] = tmha(to_torch(q), to_torch(kv), to_torch(kv), kp.defined() ? to_torch(kp) : TTensor(), true, tm);
    expect_same(ko, to);
    expect_same(kw, tw);
  }
}

TEST(VsTorch, Resampling) {
  namespace F = torch::nn::functional;
  KTensor x = kiln::randn({2, 3, 7, 5});
  expect_forward_and_backward(
      {x},
      [](auto& in) {
        return kiln::nn::adaptive_avg_pool2d(in[0], {3, 2});
      },
      [](auto& in) {
        return torch::adaptive_avg_pool2d(in[0], {3, 2});
      });
  expect_forward_and_backward(
      {x},
      [](auto& in) {
        return kiln::nn::interpolate(in[0], {.size = {9, 4}});
      },
      [](auto& in) {
        return F::interpolate(in[0],
                              F::InterpolateFuncOptions().size(std::vector<int64_t>{9, 4}).mode(torch::kNearest));
      });
  expect_forward_and_backward(
      {x},
      [](auto& in) {
        return kiln::nn::interpolate(in[0], {.scale_factor = {2.5, 1.5}});
      },
      [](auto& in) {
        return F::interpolate(
            in[0], F::InterpolateFuncOptions().scale_factor(std::vector<double>{2.5, 1.5}).mode(torch::kNearest));
      });
  for (bool corners : {false, true})
    expect_forward_and_backward(
        {x},
        [corners](auto& in) {
          return kiln::nn::interpolate(in[0], {.size = {11, 8}, .mode = "bilinear", .align_corners = corners});
        },
        [corners](auto& in) {
          return F::interpolate(in[0], F::InterpolateFuncOptions()
                                           .size(std::vector<int64_t>{11, 8})
                                           .mode(torch::kBilinear)
                                           .align_corners(corners));
        });
  KTensor w = kiln::randn({4, 3, 3, 2}), b = kiln::randn({6});
  KTensor xi = kiln::randn({2, 4, 5, 4});
  expect_forward_and_backward(
      {xi, w, b},
      [](auto& in) {
        return kiln::nn::conv_transpose2d(in[0], in[1], in[2], {2, 2}, {1, 0}, {1, 1}, 2, {1, 1});
      },
      [](auto& in) {
        return F::conv_transpose2d(
            in[0], in[1],
            F::ConvTranspose2dFuncOptions().bias(in[2]).stride(2).padding({1, 0}).output_padding(1).groups(2));
      });
}

TEST(VsTorch, RmspropAndAdagradSteps) {
  auto run = [](auto make_kiln, auto make_torch) {
    KTensor p0 = kiln::randn({5});
    KTensor kp = p0.detach().clone().requires_grad_();
    TTensor tp = to_torch(p0).requires_grad_();
    auto kopt = make_kiln(kp);
    auto topt = make_torch(tp);
    for (int s = 0; s < 5; ++s) {
      KTensor g = kiln::randn({5});
      kp.set_grad(g);
      tp.mutable_grad() = to_torch(g);
      kopt.step();
      topt.step();
      expect_same(kp, tp, 1e-5, 1e-6);
    }
  };
  run(
      [](KTensor p) {
        return kiln::optim::RMSprop({p}, 0.01, {.weight_decay = 0.1, .momentum = 0.5, .centered = true});
      },
      [](TTensor p) {
        return torch::optim::RMSprop({p},
                                     torch::optim::RMSpropOptions(0.01).weight_decay(0.1).momentum(0.5).centered(true));
      });
  run([](KTensor p) { return kiln::optim::RMSprop({p}, 0.01); },
      [](TTensor p) { return torch::optim::RMSprop({p}, torch::optim::RMSpropOptions(0.01)); });
  run(
      [](KTensor p) {
        return kiln::optim::Adagrad({p}, 0.1,
                                    {.lr_decay = 0.05, .weight_decay = 0.01, .initial_accumulator_value = 0.1});
      },
      [](TTensor p) {
        return torch::optim::Adagrad(
            {p}, torch::optim::AdagradOptions(0.1).lr_decay(0.05).weight_decay(0.01).initial_accumulator_value(0.1));
      });
}

TEST(VsTorch, LstmAndGruWithTorchsWeights) {
  // torch's parameters by name into kiln's: the names are the same.
  auto load_from = [](kiln::nn::Module& k, torch::nn::Module& t) {
    std::map<std::string, KTensor> sd;
    for (const auto& item : t.named_parameters()) {
      TTensor v = item.value().detach().to(torch::kDouble).contiguous();
      std::vector<double> data(v.data_ptr<double>(), v.data_ptr<double>() + v.numel());
      sd[item.key()] = kiln::from_vector(data, kiln::Dims(std::vector<int64_t>(v.sizes().begin(), v.sizes().end())))
                           .to(kiln::DType::F32);
    }
    k.load_state_dict(sd);
  };
  kiln::nn::LSTM klstm(3, 4, {.num_layers = 2, .bidirectional = true});
  torch::nn::LSTM tlstm(torch::nn::LSTMOptions(3, 4).num_layers(2).bidirectional(true));
  load_from(klstm, *tlstm);
  KTensor x = kiln::randn({5, 2, 3});
  std::vector<KTensor> kparams = klstm.parameters();
  std::vector<KTensor> inputs{x};
  expect_forward_and_backward(
      inputs, [&](const std::vector<KTensor>& in) { return std::get<0>(klstm(in[0])); },
      [&](const std::vector<TTensor>& in) { return std::get<0>(tlstm->forward(in[0])); });
  // The weights' gradients too: one backward of the same projection through each.
  KTensor r = kiln::randn({5, 2, 8});
  for (KTensor& p : kparams) p.zero_grad();
  tlstm->zero_grad();
  (std::get<0>(klstm(x)) * r).sum().backward();
  (std::get<0>(tlstm->forward(to_torch(x))) * to_torch(r)).sum().backward();
  auto tnamed = tlstm->named_parameters();
  for (auto& [name, p] : klstm.named_parameters()) {
    SCOPED_TRACE(name);
    expect_same(p.grad(), tnamed[name].grad());
  }
  kiln::nn::GRU kgru(3, 5);
  torch::nn::GRU tgru(torch::nn::GRUOptions(3, 5));
  load_from(kgru, *tgru);
  KTensor h0 = kiln::randn({1, 2, 5});
  expect_forward_and_backward(
      {x, h0}, [&](const std::vector<KTensor>& in) { return std::get<0>(kgru(in[0], in[1])); },
      [&](const std::vector<TTensor>& in) { return std::get<0>(tgru->forward(in[0], in[1])); });
}

TEST(VsTorch, EmbeddingWithPaddingIdx) {
  KTensor w = kiln::randn({6, 4});
  KTensor ids = kiln::from_vector(std::vector<int64_t>{2, 5, 2, 0, 5, 3}, {2, 3});
  namespace F = torch::nn::functional;
  expect_forward_and_backward(
      {w}, [&](auto& in) { return kiln::nn::embedding(ids, in[0], 5); },
      [&](auto& in) { return F::embedding(to_torch(ids), in[0], F::EmbeddingFuncOptions().padding_idx(5)); });
}
