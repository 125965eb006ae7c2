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

/// Each rank's share of a dataset in data-parallel training, as PyTorch's DistributedSampler:
/// every epoch, one permutation of the indices (from seed + epoch, so the same on every rank;
/// the identity without shuffle) is padded by repeating its start to a multiple of num_replicas
/// (or trimmed to one, with drop_last), and rank r takes every num_replicas-th index from r.
/// The shards are disjoint apart from the padding and together cover the data set.
///   data::DistributedSampler sampler(ds.size(), pg.world_size(), pg.rank(), true, 42);
///   for (int epoch = 0; ...; ++epoch) {
///     sampler.set_epoch(epoch);                            // a new shuffle, shared by the ranks
///     for (auto batch : data::DataLoader(ds, 32, sampler)) ...
class DistributedSampler {
 public:
  DistributedSampler(int64_t dataset_size, int num_replicas, int rank, bool shuffle = true, uint64_t seed = 0,
                     bool drop_last = false);
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  /// This rank's indices for the current epoch (i64, num_samples() of them).
  Tensor indices() const;
  int64_t num_samples() const { return per_rank_; }

 private:
  int64_t size_, per_rank_;
  int replicas_, rank_;
  bool shuffle_;
  uint64_t seed_;
  int64_t epoch_ = 0;
};

/// A DataLoader's settings, PyTorch's names and defaults.
struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;
  bool drop_last = false;
  /// Batches in page-locked host memory (Tensor::pin_memory), from which a copy to a CUDA
  /// device is asynchronous: x.to(cuda::device(0)) returns at once. Without CUDA, batches
  /// are plain (as PyTorch's, which warns).
  bool pin_memory = false;
};

/// Iterates over a dataset in batches; shuffles (with the kiln generator) at each begin().
///   for (auto batch : data::DataLoader(ds, 64, true)) { Tensor x = batch[0], y = batch[1]; }
///   data::DataLoader(ds, {.batch_size = 64, .shuffle = true, .pin_memory = true})
class DataLoader {
 public:
  DataLoader(const TensorDataset& dataset, int64_t batch_size, bool shuffle = false, bool drop_last = false);
  DataLoader(const TensorDataset& dataset, const DataLoaderOptions& options);
  /// The batches of this rank's share: the sampler's indices for its epoch, read at begin().
  DataLoader(const TensorDataset& dataset, int64_t batch_size, const DistributedSampler& sampler,
             bool drop_last = false);
  /// The sampler is read at each begin(), so it must outlive the loader: not a temporary.
  DataLoader(const TensorDataset&, int64_t, DistributedSampler&&, bool = false) = delete;

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
  bool shuffle_, drop_last_, pin_memory_ = false;
  const DistributedSampler* sampler_ = nullptr;  // the caller's: it outlives the loop
  Tensor order_;
};

}  // namespace kiln::data
