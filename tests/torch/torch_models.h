// tests/torch/torch_models.h -- the example models (examples/models) written again with
// LibTorch's modules, layer for layer under the same parameter names, so kiln's weights copy
// in by name: for the comparison tests (models_vs_torch_test.cpp) and the benchmarks
// (benchmarks/torch_models_bench.cpp). Dropout is left out (the comparisons run at p = 0).
#pragma once

#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "examples/models/gpt.h"
#include "examples/models/vision.h"

namespace kiln::torch_models {

using TTensor = torch::Tensor;
namespace ex = kiln::examples;
namespace tnn = torch::nn;
namespace F = torch::nn::functional;

inline tnn::Conv2dOptions conv(int64_t in, int64_t out, int64_t k, int64_t stride = 1, int64_t padding = 0,
                               bool bias = true, int64_t groups = 1) {
  return tnn::Conv2dOptions(in, out, k).stride(stride).padding(padding).bias(bias).groups(groups);
}

// ---- the models in LibTorch -----------------------------------------------------------------
struct TAlexNet : tnn::Module {
  tnn::Sequential features, classifier;
  tnn::AdaptiveAvgPool2d avgpool{tnn::AdaptiveAvgPool2dOptions({6, 6})};
  TAlexNet(int64_t classes, int64_t width) {
    auto c = [width](int64_t n) { return ex::scaled(n, width); };
    features = register_module("features", tnn::Sequential(tnn::Conv2d(conv(3, c(64), 11, 4, 2)), tnn::ReLU(),
                                                           tnn::MaxPool2d(tnn::MaxPool2dOptions(3).stride(2)),
                                                           tnn::Conv2d(conv(c(64), c(192), 5, 1, 2)), tnn::ReLU(),
                                                           tnn::MaxPool2d(tnn::MaxPool2dOptions(3).stride(2)),
                                                           tnn::Conv2d(conv(c(192), c(384), 3, 1, 1)), tnn::ReLU(),
                                                           tnn::Conv2d(conv(c(384), c(256), 3, 1, 1)), tnn::ReLU(),
                                                           tnn::Conv2d(conv(c(256), c(256), 3, 1, 1)), tnn::ReLU(),
                                                           tnn::MaxPool2d(tnn::MaxPool2dOptions(3).stride(2))));
    register_module("avgpool", avgpool);
    classifier =
        register_module("classifier", tnn::Sequential(tnn::Dropout(0.0), tnn::Linear(c(256) * 36, c(4096)), tnn::ReLU(),
                                                      tnn::Dropout(0.0), tnn::Linear(c(4096), c(4096)), tnn::ReLU(),
                                                      tnn::Linear(c(4096), classes)));
  }
  TTensor forward(const TTensor& x) { return classifier->forward(torch::flatten(avgpool(features->forward(x)), 1)); }
};

struct TVGG19BN : tnn::Module {
  tnn::Sequential features, classifier;
  tnn::AdaptiveAvgPool2d avgpool{tnn::AdaptiveAvgPool2dOptions({7, 7})};
  TVGG19BN(int64_t classes, int64_t width) {
    int64_t in = 3;
    for (int64_t v : {64, 64, 0, 128, 128, 0, 256, 256, 256, 256, 0, 512, 512, 512, 512, 0, 512, 512, 512, 512, 0}) {
      if (v == 0) {
        features->push_back(tnn::MaxPool2d(tnn::MaxPool2dOptions(2).stride(2)));
        continue;
      }
      int64_t out = ex::scaled(v, width);
      features->push_back(tnn::Conv2d(conv(in, out, 3, 1, 1)));
      features->push_back(tnn::BatchNorm2d(out));
      features->push_back(tnn::ReLU());
      in = out;
    }
    register_module("features", features);
    register_module("avgpool", avgpool);
    int64_t h = ex::scaled(4096, width);
    classifier = register_module(
        "classifier", tnn::Sequential(tnn::Linear(in * 49, h), tnn::ReLU(), tnn::Dropout(0.0), tnn::Linear(h, h),
                                      tnn::ReLU(), tnn::Dropout(0.0), tnn::Linear(h, classes)));
  }
  TTensor forward(const TTensor& x) { return classifier->forward(torch::flatten(avgpool(features->forward(x)), 1)); }
};

struct TBottleneck : tnn::Module {
  tnn::Conv2d conv1{nullptr}, conv2{nullptr}, conv3{nullptr};
  tnn::BatchNorm2d bn1{nullptr}, bn2{nullptr}, bn3{nullptr};
  tnn::Sequential downsample{nullptr};
  TBottleneck(int64_t in, int64_t planes, int64_t stride) {
    conv1 = register_module("conv1", tnn::Conv2d(conv(in, planes, 1, 1, 0, false)));
    bn1 = register_module("bn1", tnn::BatchNorm2d(planes));
    conv2 = register_module("conv2", tnn::Conv2d(conv(planes, planes, 3, stride, 1, false)));
    bn2 = register_module("bn2", tnn::BatchNorm2d(planes));
    conv3 = register_module("conv3", tnn::Conv2d(conv(planes, planes * 4, 1, 1, 0, false)));
    bn3 = register_module("bn3", tnn::BatchNorm2d(planes * 4));
    if (stride != 1 || in != planes * 4)
      downsample = register_module("downsample", tnn::Sequential(tnn::Conv2d(conv(in, planes * 4, 1, stride, 0, false)),
                                                                 tnn::BatchNorm2d(planes * 4)));
  }
  TTensor forward(const TTensor& x) {
    TTensor out = torch::relu(bn1(conv1(x)));
    out = torch::relu(bn2(conv2(out)));
    out = bn3(conv3(out));
    return torch::relu(out + (downsample ? downsample->forward(x) : x));
  }
};

struct TResNet50 : tnn::Module {
  tnn::Conv2d conv1{nullptr};
  tnn::BatchNorm2d bn1{nullptr};
  tnn::ModuleList layers[4];
  tnn::Linear fc{nullptr};
  TResNet50(int64_t classes, int64_t width) {
    int64_t in = ex::scaled(64, width);
    conv1 = register_module("conv1", tnn::Conv2d(conv(3, in, 7, 2, 3, false)));
    bn1 = register_module("bn1", tnn::BatchNorm2d(in));
    const int64_t blocks[] = {3, 4, 6, 3};
    for (int64_t l = 0; l < 4; ++l) {
      int64_t planes = ex::scaled(64 << l, width);
      for (int64_t b = 0; b < blocks[l]; ++b) {
        layers[l]->push_back(std::make_shared<TBottleneck>(in, planes, b == 0 && l > 0 ? 2 : 1));
        in = planes * 4;
      }
      register_module("layer" + std::to_string(l + 1), layers[l]);
    }
    fc = register_module("fc", tnn::Linear(in, classes));
  }
  TTensor forward(const TTensor& x) {
    TTensor h = F::max_pool2d(torch::relu(bn1(conv1(x))), F::MaxPool2dFuncOptions(3).stride(2).padding(1));
    for (auto& layer : layers)
      for (const auto& block : *layer) h = block->as<TBottleneck>()->forward(h);
    return fc(torch::flatten(F::adaptive_avg_pool2d(h, F::AdaptiveAvgPool2dFuncOptions(1)), 1));
  }
};

// A Sequential another Sequential can hold (LibTorch's own forward is a template, which its
// containers refuse).
struct TSeqImpl : tnn::SequentialImpl {
  using tnn::SequentialImpl::SequentialImpl;
  TTensor forward(TTensor x) { return tnn::SequentialImpl::forward(x); }
};
TORCH_MODULE(TSeq);

inline TSeq t_conv_bn_relu6(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t groups = 1) {
  return TSeq(tnn::Conv2d(conv(in, out, k, stride, (k - 1) / 2, false, groups)), tnn::BatchNorm2d(out), tnn::ReLU6());
}

struct TInvertedResidual : tnn::Module {
  tnn::Sequential conv_;
  bool residual;
  TInvertedResidual(int64_t in, int64_t out, int64_t stride, int64_t expand) : residual(stride == 1 && in == out) {
    int64_t hidden = in * expand;
    if (expand != 1) conv_->push_back(t_conv_bn_relu6(in, hidden, 1, 1));
    conv_->push_back(t_conv_bn_relu6(hidden, hidden, 3, stride, hidden));
    conv_->push_back(tnn::Conv2d(conv(hidden, out, 1, 1, 0, false)));
    conv_->push_back(tnn::BatchNorm2d(out));
    register_module("conv", conv_);
  }
  TTensor forward(const TTensor& x) { return residual ? x + conv_->forward(x) : conv_->forward(x); }
};

struct TMobileNetV2 : tnn::Module {
  tnn::Sequential features, classifier;
  TMobileNetV2(int64_t classes, int64_t width) {
    const int64_t table[][4] = {{1, 16, 1, 1}, {6, 24, 2, 2},  {6, 32, 3, 2}, {6, 64, 4, 2},
                                {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1}};
    int64_t in = ex::scaled(32, width), last = ex::scaled(1280, width);
    features->push_back(t_conv_bn_relu6(3, in, 3, 2));
    for (const auto& row : table) {
      int64_t out = ex::scaled(row[1], width);
      for (int64_t i = 0; i < row[2]; ++i) {
        features->push_back(std::make_shared<TInvertedResidual>(in, out, i == 0 ? row[3] : 1, row[0]));
        in = out;
      }
    }
    features->push_back(t_conv_bn_relu6(in, last, 1, 1));
    register_module("features", features);
    classifier = register_module("classifier", tnn::Sequential(tnn::Dropout(0.0), tnn::Linear(last, classes)));
  }
  TTensor forward(const TTensor& x) { return classifier->forward(features->forward(x).mean({2, 3})); }
};

inline TSeq t_double_conv(int64_t in, int64_t out) {
  return TSeq(tnn::Conv2d(conv(in, out, 3, 1, 1, false)), tnn::BatchNorm2d(out), tnn::ReLU(),
              tnn::Conv2d(conv(out, out, 3, 1, 1, false)), tnn::BatchNorm2d(out), tnn::ReLU());
}

struct TUNet : tnn::Module {
  tnn::ModuleList down, up, up_conv;
  tnn::Conv2d out{nullptr};
  TUNet(int64_t classes, int64_t base, int64_t depth) {
    int64_t c = base;
    down->push_back(t_double_conv(3, c));
    for (int64_t i = 0; i < depth; ++i, c *= 2) down->push_back(t_double_conv(c, 2 * c));
    for (int64_t i = 0; i < depth; ++i, c /= 2) {
      up->push_back(tnn::ConvTranspose2d(tnn::ConvTranspose2dOptions(c, c / 2, 2).stride(2)));
      up_conv->push_back(t_double_conv(c, c / 2));
    }
    register_module("down", down);
    register_module("up", up);
    register_module("up_conv", up_conv);
    out = register_module("out", tnn::Conv2d(conv(c, classes, 1)));
  }
  TTensor forward(const TTensor& x) {
    std::vector<TTensor> skips;
    TTensor h = x;
    for (size_t i = 0; i < down->size(); ++i) {
      if (i > 0) h = F::max_pool2d(h, F::MaxPool2dFuncOptions(2).stride(2));
      h = down->ptr(i)->as<TSeqImpl>()->forward(h);
      skips.push_back(h);
    }
    for (size_t i = 0; i < up->size(); ++i) {
      h = up->ptr(i)->as<tnn::ConvTranspose2d>()->forward(h);
      h = up_conv->ptr(i)->as<TSeqImpl>()->forward(torch::cat({skips[skips.size() - 2 - i], h}, 1));
    }
    return out(h);
  }
};

struct TNCF : tnn::Module {
  tnn::Embedding gmf_user{nullptr}, gmf_item{nullptr}, mlp_user{nullptr}, mlp_item{nullptr};
  tnn::Sequential mlp;
  tnn::Linear predict{nullptr};
  TNCF(int64_t users, int64_t items) {
    gmf_user = register_module("gmf_user", tnn::Embedding(users, 8));
    gmf_item = register_module("gmf_item", tnn::Embedding(items, 8));
    mlp_user = register_module("mlp_user", tnn::Embedding(users, 32));
    mlp_item = register_module("mlp_item", tnn::Embedding(items, 32));
    mlp = register_module("mlp", tnn::Sequential(tnn::Linear(64, 32), tnn::ReLU(), tnn::Linear(32, 16), tnn::ReLU(),
                                                 tnn::Linear(16, 8), tnn::ReLU()));
    predict = register_module("predict", tnn::Linear(16, 1));
  }
  TTensor forward(const TTensor& u, const TTensor& i) {
    TTensor gmf = gmf_user(u) * gmf_item(i);
    TTensor m = mlp->forward(torch::cat({mlp_user(u), mlp_item(i)}, 1));
    return predict(torch::cat({gmf, m}, 1)).squeeze(1);
  }
};

struct TGNMT : tnn::Module {
  tnn::Embedding src_embed{nullptr}, tgt_embed{nullptr};
  tnn::LSTM enc_first{nullptr}, dec_first{nullptr};
  tnn::ModuleList enc_rest, dec_rest;
  tnn::Linear query{nullptr}, key{nullptr}, score{nullptr}, classifier{nullptr};
  TGNMT(int64_t vocab, int64_t hidden, int64_t layers) {
    src_embed = register_module("src_embed", tnn::Embedding(vocab, hidden));
    tgt_embed = register_module("tgt_embed", tnn::Embedding(vocab, hidden));
    enc_first = register_module("enc_first",
                                tnn::LSTM(tnn::LSTMOptions(hidden, hidden / 2).batch_first(true).bidirectional(true)));
    for (int64_t i = 1; i < layers; ++i)
      enc_rest->push_back(tnn::LSTM(tnn::LSTMOptions(hidden, hidden).batch_first(true)));
    register_module("enc_rest", enc_rest);
    dec_first = register_module("dec_first", tnn::LSTM(tnn::LSTMOptions(hidden, hidden).batch_first(true)));
    for (int64_t i = 1; i < layers; ++i)
      dec_rest->push_back(tnn::LSTM(tnn::LSTMOptions(2 * hidden, hidden).batch_first(true)));
    register_module("dec_rest", dec_rest);
    query = register_module("query", tnn::Linear(tnn::LinearOptions(hidden, hidden).bias(false)));
    key = register_module("key", tnn::Linear(tnn::LinearOptions(hidden, hidden).bias(false)));
    score = register_module("score", tnn::Linear(tnn::LinearOptions(hidden, 1).bias(false)));
    classifier = register_module("classifier", tnn::Linear(hidden, vocab));
  }
  TTensor forward(const TTensor& src, const TTensor& tgt) {
    TTensor h = std::get<0>(enc_first(src_embed(src)));
    for (size_t i = 0; i < enc_rest->size(); ++i) {
      TTensor out = std::get<0>(enc_rest->ptr(i)->as<tnn::LSTM>()->forward(h));
      h = i >= 1 ? out + h : out;
    }
    TTensor d = std::get<0>(dec_first(tgt_embed(tgt)));
    TTensor e = score(torch::tanh(query(d).unsqueeze(2) + key(h).unsqueeze(1))).squeeze(3);
    TTensor context = torch::matmul(torch::softmax(e, -1), h);
    for (size_t i = 0; i < dec_rest->size(); ++i) {
      TTensor out = std::get<0>(dec_rest->ptr(i)->as<tnn::LSTM>()->forward(torch::cat({d, context}, 2)));
      d = i >= 1 ? out + d : out;
    }
    return classifier(d);
  }
};

struct TBlock : tnn::Module {
  tnn::LayerNorm ln1{nullptr}, ln2{nullptr};
  tnn::Linear qkv{nullptr}, attn_proj{nullptr}, fc{nullptr}, proj{nullptr};
  int64_t heads;
  TBlock(int64_t c, int64_t h) : heads(h) {
    ln1 = register_module("ln1", tnn::LayerNorm(tnn::LayerNormOptions({c})));
    auto attn = register_module("attn", std::make_shared<tnn::Module>());
    qkv = attn->register_module("qkv", tnn::Linear(c, 3 * c));
    attn_proj = attn->register_module("proj", tnn::Linear(c, c));
    ln2 = register_module("ln2", tnn::LayerNorm(tnn::LayerNormOptions({c})));
    fc = register_module("fc", tnn::Linear(c, 4 * c));
    proj = register_module("proj", tnn::Linear(4 * c, c));
  }
  TTensor attention(const TTensor& x) {
    int64_t b = x.size(0), t = x.size(1), c = x.size(2), d = c / heads;
    auto parts = qkv(x).chunk(3, -1);
    auto split = [&](const TTensor& p) { return p.reshape({b, t, heads, d}).transpose(1, 2); };
    TTensor q = split(parts[0]), k = split(parts[1]), v = split(parts[2]);
    TTensor s = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(double(d));
    s = s.masked_fill(torch::ones({t, t}, torch::kBool).triu(1), -std::numeric_limits<float>::infinity());
    TTensor y = torch::matmul(torch::softmax(s, -1), v);
    return attn_proj(y.transpose(1, 2).reshape({b, t, c}));
  }
  TTensor forward(const TTensor& x) {
    TTensor h = x + attention(ln1(x));
    return h + proj(F::gelu(fc(ln2(h)), F::GELUFuncOptions().approximate("tanh")));
  }
};

struct TGPT : tnn::Module {
  tnn::Embedding wte{nullptr}, wpe{nullptr};
  tnn::ModuleList blocks;
  tnn::LayerNorm ln_f{nullptr};
  explicit TGPT(const ex::GPTConfig& c) {
    wte = register_module("wte", tnn::Embedding(c.vocab, c.embed));
    wpe = register_module("wpe", tnn::Embedding(c.context, c.embed));
    for (int64_t i = 0; i < c.layers; ++i) blocks->push_back(std::make_shared<TBlock>(c.embed, c.heads));
    register_module("blocks", blocks);
    ln_f = register_module("ln_f", tnn::LayerNorm(tnn::LayerNormOptions({c.embed})));
  }
  TTensor forward(const TTensor& idx) {
    TTensor x = wte(idx) + wpe(torch::arange(idx.size(1)));
    for (const auto& b : *blocks) x = b->as<TBlock>()->forward(x);
    return torch::matmul(ln_f(x), wte->weight.t());  // the head is the tied token embedding
  }
};

}  // namespace kiln::torch_models
