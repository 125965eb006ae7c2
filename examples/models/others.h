// examples/models/others.h -- the rest of the example models, each with its task on synthetic
// data: a small U-Net (segmentation), NCF (neural collaborative filtering, NeuMF) and a
// GNMT-style LSTM encoder-decoder with attention (translation).
#pragma once

#include <kiln/kiln.h>

#include <string>
#include <tuple>

#include "examples/models/train.h"
#include "examples/models/vision.h"

namespace kiln::examples {

// ---- U-Net (Ronneberger et al.: two 3x3 convolutions per level, max pool down, transposed
// convolution up, skip connections by concatenation; batch norm after each convolution) -----
class DoubleConv : public nn::Sequential {
 public:
  DoubleConv(int64_t in, int64_t out) {
    add<nn::Conv2d>(in, out, sq(3), nn::Conv2dOptions{.padding = sq(1), .bias = false});
    add<nn::BatchNorm2d>(out);
    add<nn::ReLU>();
    add<nn::Conv2d>(out, out, sq(3), nn::Conv2dOptions{.padding = sq(1), .bias = false});
    add<nn::BatchNorm2d>(out);
    add<nn::ReLU>();
  }
};

class UNet : public nn::UnaryModule {
 public:
  /// `depth` poolings; channels base, 2 base, ... at each level. Input sides must be multiples
  /// of 2^depth.
  UNet(int64_t in_channels = 3, int64_t classes = 2, int64_t base = 64, int64_t depth = 4) : out(base, classes, sq(1)) {
    int64_t c = base;
    down.add<DoubleConv>(in_channels, c);
    for (int64_t i = 0; i < depth; ++i, c *= 2) down.add<DoubleConv>(c, 2 * c);
    for (int64_t i = 0; i < depth; ++i, c /= 2) {
      up.add<nn::ConvTranspose2d>(c, c / 2, sq(2), nn::ConvTranspose2dOptions{.stride = sq(2)});
      up_conv.add<DoubleConv>(c, c / 2);
    }
    register_module("down", down);
    register_module("up", up);
    register_module("up_conv", up_conv);
    register_module("out", out);
  }
  Tensor forward(const Tensor& x) override {
    std::vector<Tensor> skips;
    Tensor h = x;
    for (size_t i = 0; i < down.size(); ++i) {
      if (i > 0) h = max_pool2d(h, sq(2), sq(2));
      h = down.at<DoubleConv>(i)(h);
      skips.push_back(h);
    }
    for (size_t i = 0; i < up.size(); ++i) {
      h = up.at<nn::ConvTranspose2d>(i)(h);
      h = up_conv.at<DoubleConv>(i)(cat({skips[skips.size() - 2 - i], h}, 1));
    }
    return out(h);
  }
  nn::ModuleList down, up, up_conv;
  nn::Conv2d out;
};

/// Segmentation of synthetic images: a few fixed batches of images and per-pixel classes.
class SegmentationTask : public Task {
 public:
  SegmentationTask(int64_t classes, int64_t base, int64_t depth, int64_t batch, int64_t size, int64_t distinct = 4)
      : net(3, classes, base, depth) {
    for (int64_t i = 0; i < distinct; ++i)
      batches_.push_back({randn({batch, 3, size, size}), randint(0, classes, {batch, size, size})});
  }
  nn::Module& model() override { return net; }
  std::vector<Tensor> batch(int64_t step) override { return batches_[static_cast<size_t>(step) % batches_.size()]; }
  Tensor loss(std::span<const Tensor> b) override { return cross_entropy(net(b[0]), b[1]); }
  std::vector<Tensor> forward(std::span<const Tensor> in) override { return {net(in[0])}; }
  UNet net;

 private:
  std::vector<std::vector<Tensor>> batches_;
};

// ---- NCF: NeuMF (He et al. 2017), a generalized matrix factorization beside an MLP over the
// user's and the item's embeddings, one logit per pair ----------------------------------------
class NCF : public nn::Module {
 public:
  NCF(int64_t users, int64_t items, int64_t factors = 8, std::vector<int64_t> mlp = {64, 32, 16, 8})
      : gmf_user(users, factors),
        gmf_item(items, factors),
        mlp_user(users, mlp[0] / 2),
        mlp_item(items, mlp[0] / 2),
        predict(factors + mlp.back(), 1) {
    register_module("gmf_user", gmf_user);
    register_module("gmf_item", gmf_item);
    register_module("mlp_user", mlp_user);
    register_module("mlp_item", mlp_item);
    for (size_t i = 0; i + 1 < mlp.size(); ++i) {
      layers.add<nn::Linear>(mlp[i], mlp[i + 1]);
      layers.add<nn::ReLU>();
    }
    register_module("mlp", layers);
    register_module("predict", predict);
    NoGradGuard no_grad;
    for (Tensor* t : {&gmf_user.weight, &gmf_item.weight, &mlp_user.weight, &mlp_item.weight}) nn::normal_(*t, 0, 0.01);
  }
  /// Logits [N] of users [N] liking items [N].
  Tensor operator()(const Tensor& user, const Tensor& item) {
    Tensor gmf = gmf_user(user) * gmf_item(item);
    Tensor mlp = layers(cat({mlp_user(user), mlp_item(item)}, 1));
    return predict(cat({gmf, mlp}, 1)).squeeze(1);
  }
  nn::Embedding gmf_user, gmf_item, mlp_user, mlp_item;
  nn::Sequential layers;
  nn::Linear predict;
};

/// Implicit feedback from a hidden low-rank taste: user u likes item i when their hidden
/// factors agree; a few fixed batches of (user, item, liked).
class NCFTask : public Task {
 public:
  NCFTask(int64_t users, int64_t items, int64_t batch, int64_t distinct = 8) : net(users, items) {
    Tensor u_taste = randn({users, 4}), i_taste = randn({items, 4});
    for (int64_t k = 0; k < distinct; ++k) {
      Tensor u = randint(0, users, {batch}), i = randint(0, items, {batch});
      Tensor liked = gt(sum(index_select(u_taste, 0, u) * index_select(i_taste, 0, i), {1}), 0).to(DType::F32);
      batches_.push_back({u, i, liked});
    }
  }
  nn::Module& model() override { return net; }
  std::vector<Tensor> batch(int64_t step) override { return batches_[static_cast<size_t>(step) % batches_.size()]; }
  Tensor loss(std::span<const Tensor> b) override { return binary_cross_entropy_with_logits(net(b[0], b[1]), b[2]); }
  size_t forward_arity() const override { return 2; }
  std::vector<Tensor> forward(std::span<const Tensor> in) override { return {net(in[0], in[1])}; }
  NCF net;

 private:
  std::vector<std::vector<Tensor>> batches_;
};

// ---- GNMT-style translation (Wu et al. 2016): an LSTM encoder whose first layer is
// bidirectional, residual connections from the third layer up; an LSTM decoder whose first
// layer's outputs query an additive (Bahdanau) attention over the encoder's outputs, the
// context then fed to every later layer beside its input ---------------------------------------
class GNMT : public nn::Module {
 public:
  GNMT(int64_t src_vocab, int64_t tgt_vocab, int64_t hidden = 256, int64_t layers = 2, double dropout = 0.2)
      : src_embed(src_vocab, hidden),
        tgt_embed(tgt_vocab, hidden),
        enc_first(hidden, hidden / 2, {.batch_first = true, .bidirectional = true}),
        dec_first(hidden, hidden, {.batch_first = true}),
        query(hidden, hidden, false),
        key(hidden, hidden, false),
        score(hidden, 1, false),
        classifier(hidden, tgt_vocab),
        dropout_(dropout) {
    register_module("src_embed", src_embed);
    register_module("tgt_embed", tgt_embed);
    register_module("enc_first", enc_first);
    for (int64_t i = 1; i < layers; ++i) enc_rest.add<nn::LSTM>(hidden, hidden, nn::RNNOptions{.batch_first = true});
    register_module("enc_rest", enc_rest);
    register_module("dec_first", dec_first);
    for (int64_t i = 1; i < layers; ++i)
      dec_rest.add<nn::LSTM>(2 * hidden, hidden, nn::RNNOptions{.batch_first = true});
    register_module("dec_rest", dec_rest);
    register_module("query", query);
    register_module("key", key);
    register_module("score", score);
    register_module("classifier", classifier);
  }

  /// Logits [N, T_tgt, tgt_vocab] of the next target token at each position, given the source
  /// [N, T_src] and the target so far [N, T_tgt] (teacher forcing).
  Tensor operator()(const Tensor& src, const Tensor& tgt) {
    bool training = is_training();
    Tensor h = nn::dropout(std::get<0>(enc_first(src_embed(src))), dropout_, training);
    for (size_t i = 0; i < enc_rest.size(); ++i) {
      Tensor out = std::get<0>(enc_rest.at<nn::LSTM>(i)(h));
      h = nn::dropout(i >= 1 ? out + h : out, dropout_, training);  // residual from the third layer
    }
    Tensor memory = h;                                  // [N, S, H]
    Tensor d = std::get<0>(dec_first(tgt_embed(tgt)));  // [N, T, H]
    // score[n, t, s] = v . tanh(W d[n, t] + U memory[n, s])
    Tensor e = score(tanh(query(d).unsqueeze(2) + key(memory).unsqueeze(1))).squeeze(3);  // [N, T, S]
    Tensor context = matmul(softmax(e, -1), memory);                                      // [N, T, H]
    for (size_t i = 0; i < dec_rest.size(); ++i) {
      Tensor out = std::get<0>(dec_rest.at<nn::LSTM>(i)(cat({nn::dropout(d, dropout_, training), context}, 2)));
      d = i >= 1 ? out + d : out;
    }
    return classifier(nn::dropout(d, dropout_, training));
  }
  nn::Embedding src_embed, tgt_embed;
  nn::LSTM enc_first;
  nn::ModuleList enc_rest;
  nn::LSTM dec_first;
  nn::ModuleList dec_rest;
  nn::Linear query, key, score, classifier;

 private:
  double dropout_;
};

/// Reversing sequences, a translation the attention must learn: a few fixed batches of source
/// [N, T] and target [N, T + 1] (a start token, then the source reversed).
class TranslationTask : public Task {
 public:
  TranslationTask(int64_t vocab, int64_t hidden, int64_t layers, int64_t batch, int64_t length, int64_t distinct = 4,
                  double dropout = 0.2)
      : net(vocab, vocab, hidden, layers, dropout), vocab_(vocab) {
    for (int64_t k = 0; k < distinct; ++k) {
      Tensor src = randint(1, vocab, {batch, length});
      Tensor tgt = cat({zeros({batch, 1}, DType::I64), flip(src, {1})}, 1);
      batches_.push_back({src, tgt.slice(1, 0, length).contiguous(), tgt.slice(1, 1, length + 1).contiguous()});
    }
  }
  nn::Module& model() override { return net; }
  std::vector<Tensor> batch(int64_t step) override { return batches_[static_cast<size_t>(step) % batches_.size()]; }
  Tensor loss(std::span<const Tensor> b) override {
    return cross_entropy(net(b[0], b[1]).reshape({-1, vocab_}), b[2].reshape({-1}));
  }
  size_t forward_arity() const override { return 2; }
  std::vector<Tensor> forward(std::span<const Tensor> in) override { return {net(in[0], in[1])}; }
  GNMT net;

 private:
  int64_t vocab_;
  std::vector<std::vector<Tensor>> batches_;
};

}  // namespace kiln::examples
