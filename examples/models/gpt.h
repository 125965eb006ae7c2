// examples/models/gpt.h -- a GPT-2-style decoder, written as a user writes one: token and
// position embeddings, pre-norm blocks of causal self-attention and a GELU MLP, dropout, a
// final LayerNorm, and a head whose weight is the token embedding's (tied). GPT-2's
// initialization: N(0, 0.02) weights, the residual projections scaled by 1/sqrt(2 layers).
#pragma once

#include <kiln/kiln.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>

namespace kiln::examples {

struct GPTConfig {
  int64_t vocab = 256;   // bytes
  int64_t context = 64;  // the longest sequence, the position table's size
  int64_t embed = 64;
  int64_t heads = 4;
  int64_t layers = 2;
  double dropout = 0.1;
  /// Applied to every attention's queries and keys [B,H,T,D]: a rotary embedding, as LLaMA's
  /// (examples/custom_ops.cpp). None: positions come from the learned table alone.
  std::function<Tensor(const Tensor&)> rotate = {};
  /// Applied to every MLP's hidden activations: fake quantization through a straight-through
  /// estimator, say (examples/custom_ops.cpp). None: GELU's output as it is.
  std::function<Tensor(const Tensor&)> mlp_activation = {};
};

class CausalSelfAttention : public nn::Module {
 public:
  explicit CausalSelfAttention(const GPTConfig& c)
      : qkv(c.embed, 3 * c.embed), proj(c.embed, c.embed), heads_(c.heads), dropout_(c.dropout), rotate_(c.rotate) {
    register_module("qkv", qkv);
    register_module("proj", proj);
  }
  Tensor operator()(const Tensor& x) {
    int64_t b = x.shape()[0], t = x.shape()[1], c = x.shape()[2], d = c / heads_;
    // [B,T,3C] -> three [B,H,T,D]
    auto parts = chunk(qkv(x), 3, -1);
    auto heads = [&](const Tensor& p) { return p.reshape({b, t, heads_, d}).transpose(1, 2); };
    Tensor q = heads(parts[0]), k = heads(parts[1]);
    if (rotate_) q = rotate_(q), k = rotate_(k);
    double p = is_training() ? dropout_ : 0.0;
    Tensor y = nn::scaled_dot_product_attention(q, k, heads(parts[2]), {}, p, /*is_causal=*/true);
    return nn::dropout(proj(y.transpose(1, 2).reshape({b, t, c})), dropout_, is_training());
  }
  nn::Linear qkv, proj;

 private:
  int64_t heads_;
  double dropout_;
  std::function<Tensor(const Tensor&)> rotate_;
};

class GPTBlock : public nn::Module {
 public:
  explicit GPTBlock(const GPTConfig& c)
      : ln1(Dims{c.embed}),
        attn(c),
        ln2(Dims{c.embed}),
        fc(c.embed, 4 * c.embed),
        proj(4 * c.embed, c.embed),
        dropout_(c.dropout),
        mlp_activation_(c.mlp_activation) {
    register_module("ln1", ln1);
    register_module("attn", attn);
    register_module("ln2", ln2);
    register_module("fc", fc);
    register_module("proj", proj);
  }
  Tensor operator()(const Tensor& x) {
    Tensor h = x + attn(ln1(x));
    Tensor a = gelu(fc(ln2(h)), "tanh");
    if (mlp_activation_) a = mlp_activation_(a);
    return h + nn::dropout(proj(a), dropout_, is_training());
  }
  nn::LayerNorm ln1;
  CausalSelfAttention attn;
  nn::LayerNorm ln2;
  nn::Linear fc, proj;

 private:
  double dropout_;
  std::function<Tensor(const Tensor&)> mlp_activation_;
};

class GPT : public nn::Module {
 public:
  explicit GPT(const GPTConfig& c)
      : config(c), wte(c.vocab, c.embed), wpe(c.context, c.embed), ln_f(Dims{c.embed}), head(c.embed, c.vocab, false) {
    register_module("wte", wte);
    register_module("wpe", wpe);
    for (int64_t i = 0; i < c.layers; ++i) blocks.add<GPTBlock>(c);
    register_module("blocks", blocks);
    register_module("ln_f", ln_f);
    head.weight = wte.weight;  // tied: the head reads the token embedding
    register_module("head", head);
    NoGradGuard no_grad;
    for (auto& [name, p] : named_parameters()) {
      bool bias_or_norm = name.ends_with(".bias") || name.find("ln") != std::string::npos;
      if (bias_or_norm) continue;
      double sd = name.ends_with("proj.weight") ? 0.02 / std::sqrt(2.0 * double(c.layers)) : 0.02;
      nn::normal_(p, 0.0, sd);
    }
  }

  /// Logits [B,T,vocab] of tokens [B,T] (T at most the context).
  Tensor operator()(const Tensor& idx) {
    int64_t t = idx.shape()[1];
    Tensor x = nn::dropout(wte(idx) + wpe(arange(t).to(idx.device())), config.dropout, is_training());
    for (size_t i = 0; i < blocks.size(); ++i) x = blocks.at<GPTBlock>(i)(x);
    return head(ln_f(x));
  }

  /// The mean cross-entropy of predicting targets [B,T] from tokens [B,T].
  Tensor loss(const Tensor& idx, const Tensor& targets) {
    Tensor logits = (*this)(idx);
    return cross_entropy(logits.reshape({-1, config.vocab}), targets.reshape({-1}));
  }

  GPTConfig config;
  nn::Embedding wte, wpe;
  nn::ModuleList blocks;
  nn::LayerNorm ln_f;
  nn::Linear head;
};

}  // namespace kiln::examples
