// nn/data.cpp -- datasets and batching.
#include "nn/data.h"

#include <random>

#include "runtime/api.h"
#include "runtime/check.h"
#include "runtime/cuda.h"

namespace kiln::data {

TensorDataset::TensorDataset(std::vector<Tensor> tensors) : tensors_(std::move(tensors)) {
  KILN_CHECK(!tensors_.empty(), "TensorDataset: needs at least one tensor");
  auto type_of = [](const Tensor& t) { return t.defined() ? t.type().str() : "undefined"; };
  for (const Tensor& t : tensors_)
    KILN_CHECK(t.defined() && t.dim() >= 1 && t.shape()[0] == tensors_[0].shape()[0],
               "TensorDataset: every tensor needs the same first dim; got {} and {}", type_of(tensors_[0]), type_of(t));
  size_ = tensors_[0].shape()[0];
}

std::vector<Tensor> TensorDataset::get(const Tensor& indices) const {
  std::vector<Tensor> out;
  for (const Tensor& t : tensors_) out.push_back(index_select(t, 0, indices));
  return out;
}

std::pair<TensorDataset, TensorDataset> TensorDataset::split(int64_t n) const {
  KILN_CHECK(n >= 0 && n <= size_, "TensorDataset::split: {} is outside [0, {}]", n, size_);
  std::vector<Tensor> a, b;
  for (const Tensor& t : tensors_) {
    a.push_back(t.slice(0, 0, n));
    b.push_back(t.slice(0, n, size_));
  }
  return {TensorDataset(a), TensorDataset(b)};
}

DistributedSampler::DistributedSampler(int64_t dataset_size, int num_replicas, int rank, bool shuffle, uint64_t seed,
                                       bool drop_last)
    : size_(dataset_size), replicas_(num_replicas), rank_(rank), shuffle_(shuffle), seed_(seed) {
  KILN_CHECK(num_replicas >= 1 && rank >= 0 && rank < num_replicas,
             "DistributedSampler: rank {} of {} replicas is outside 0..{}", rank, num_replicas, num_replicas - 1);
  KILN_CHECK(dataset_size >= 0, "DistributedSampler: negative dataset size {}", dataset_size);
  per_rank_ = drop_last ? dataset_size / num_replicas : (dataset_size + num_replicas - 1) / num_replicas;
}

Tensor DistributedSampler::indices() const {
  std::vector<int64_t> order(static_cast<size_t>(size_));
  for (int64_t i = 0; i < size_; ++i) order[static_cast<size_t>(i)] = i;
  if (shuffle_) {
    // Fisher-Yates over a generator of our own, fully specified, so every rank (and every
    // machine) draws the same permutation for one seed and epoch.
    std::mt19937_64 gen(seed_ + static_cast<uint64_t>(epoch_));
    for (int64_t i = size_ - 1; i > 0; --i) {
      uint64_t bound = static_cast<uint64_t>(i) + 1, limit = UINT64_MAX - UINT64_MAX % bound, x;
      do x = gen();
      while (x >= limit);  // unbiased
      std::swap(order[static_cast<size_t>(i)], order[x % bound]);
    }
  }
  std::vector<int64_t> mine;
  int64_t total = per_rank_ * replicas_;
  for (int64_t k = rank_; k < total; k += replicas_)
    mine.push_back(order[static_cast<size_t>(size_ ? k % size_ : 0)]);  // past the end: padding from the start
  return from_vector(mine);
}

DataLoader::DataLoader(const TensorDataset& dataset, int64_t batch_size, bool shuffle, bool drop_last)
    : dataset_(dataset), batch_size_(batch_size), shuffle_(shuffle), drop_last_(drop_last) {
  KILN_CHECK(batch_size > 0, "DataLoader: batch_size must be positive, got {}", batch_size);
  order_ = arange(dataset.size());
}

DataLoader::DataLoader(const TensorDataset& dataset, const DataLoaderOptions& options)
    : DataLoader(dataset, options.batch_size, options.shuffle, options.drop_last) {
  pin_memory_ = options.pin_memory && cuda::is_available();
}

DataLoader::DataLoader(const TensorDataset& dataset, int64_t batch_size, const DistributedSampler& sampler,
                       bool drop_last)
    : DataLoader(dataset, batch_size, false, drop_last) {
  sampler_ = &sampler;
  order_ = sampler.indices();
}

int64_t DataLoader::num_batches() const {
  int64_t n = order_.numel();
  return drop_last_ ? n / batch_size_ : (n + batch_size_ - 1) / batch_size_;
}

DataLoader::Iterator DataLoader::begin() {
  if (sampler_) order_ = sampler_->indices();
  else if (shuffle_) order_ = randperm(dataset_.size());
  return Iterator(this, 0);
}

std::vector<Tensor> DataLoader::Iterator::operator*() const {
  int64_t b = batch_ * loader_->batch_size_;
  int64_t e = std::min(b + loader_->batch_size_, loader_->order_.numel());
  std::vector<Tensor> batch = loader_->dataset_.get(loader_->order_.slice(0, b, e));
  if (loader_->pin_memory_)
    for (Tensor& t : batch) t = t.pin_memory();
  return batch;
}

}  // namespace kiln::data
