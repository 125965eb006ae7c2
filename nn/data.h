// nn/data.h -- a dataset of tensors and a shuffling batch iterator.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/tensor.h"

namespace kiln::data {

/// Tensors that share their first dim: example i is row i of each.
class TensorDataset {
 public:
  explicit TensorDataset(std::vector<Tensor> tensors);
  int64_t size() const { return size_; }
  /// The rows at `indices` (1-d i64) of every tensor.
  std::vector<Tensor> get(const Tensor& indices) const;
  /// Splits into the first n examples and the rest (no shuffling: shuffle first if needed).
  std::pair<TensorDataset, TensorDataset> split(int64_t n) const;

 private:
  std::vector<Tensor> tensors_;
  int64_t size_ = 0;
};

/// Iterates over a dataset in batches; shuffles (with the kiln generator) at each begin().
///   for (auto batch : data::DataLoader(ds, 64, true)) { Tensor x = batch[0], y = batch[1]; }
class DataLoader {
 public:
  DataLoader(const TensorDataset& dataset, int64_t batch_size, bool shuffle = false, bool drop_last = false);

  class Iterator {
   public:
    Iterator(const DataLoader* loader, int64_t batch) : loader_(loader), batch_(batch) {}
    std::vector<Tensor> operator*() const;
    Iterator& operator++() {
      ++batch_;
      return *this;
    }
    bool operator!=(const Iterator& o) const { return batch_ != o.batch_; }

   private:
    const DataLoader* loader_;
    int64_t batch_;
  };
  Iterator begin();
  Iterator end() const { return Iterator(this, num_batches()); }
  int64_t num_batches() const;

 private:
  TensorDataset dataset_;  // a copy of the handles: the loader may outlive what it was given
  int64_t batch_size_;
  bool shuffle_, drop_last_;
  Tensor order_;
};

}  // namespace kiln::data
