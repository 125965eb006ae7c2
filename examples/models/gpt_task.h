// examples/models/gpt_task.h -- the GPT as a training task: next-byte prediction on windows of
// a text (any file: bytes are the vocabulary), or on synthetic sequences (each a run of bytes
// counting up from a random start by a random stride, which a model learns to continue).
#pragma once

#include <fstream>
#include <iterator>
#include <string>

#include "examples/models/gpt.h"
#include "examples/models/train.h"

namespace kiln::examples {

class GPTTask : public Task {
 public:
  /// text: the bytes to learn; empty for synthetic sequences.
  GPTTask(const GPTConfig& config, int64_t batch, std::string text = {})
      : net(config), batch_(batch), text_(std::move(text)) {
    require(text_.empty() || static_cast<int64_t>(text_.size()) > config.context + 1,
            "GPTTask: the text has " + std::to_string(text_.size()) + " bytes, fewer than a window of " +
                std::to_string(config.context + 1));
  }

  nn::Module& model() override { return net; }

  std::vector<Tensor> batch(int64_t) override {
    int64_t t = net.config.context;
    std::vector<int64_t> bytes;
    if (text_.empty()) {
      std::vector<int64_t> start = randint(0, net.config.vocab, {batch_}).to_vector<int64_t>();
      std::vector<int64_t> stride = randint(1, 8, {batch_}).to_vector<int64_t>();
      for (int64_t i = 0; i < batch_; ++i)
        for (int64_t j = 0; j <= t; ++j) bytes.push_back((start[size_t(i)] + j * stride[size_t(i)]) % net.config.vocab);
    } else {
      Tensor offsets = randint(0, static_cast<int64_t>(text_.size()) - t - 1, {batch_});
      for (int64_t o : offsets.to_vector<int64_t>())
        for (int64_t j = 0; j <= t; ++j) bytes.push_back(static_cast<unsigned char>(text_[size_t(o + j)]));
    }
    Tensor rows = from_vector<int64_t>(bytes, {batch_, t + 1});
    return {rows.slice(1, 0, t).contiguous(), rows.slice(1, 1, t + 1).contiguous()};
  }

  Tensor loss(std::span<const Tensor> b) override { return net.loss(b[0], b[1]); }

  std::vector<Tensor> forward(std::span<const Tensor> in) override { return {net(in[0])}; }

  GPT net;

 private:
  int64_t batch_;
  std::string text_;
};

/// The whole of a file, as bytes.
inline std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  require(f.good(), "cannot read " + path);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

}  // namespace kiln::examples
