// nn/data.cpp -- datasets and batching.
#include "nn/data.h"

#include "runtime/api.h"
#include "runtime/check.h"

namespace kiln::data {

TensorDataset::TensorDataset(std::vector<Tensor> tensors) : tensors_(std::move(tensors)) {
  KILN_CHECK(!tensors_.empty(), "TensorDataset: needs at least one tensor");
  auto type_of = [](const Tensor& t) { return t.defined() ? t.type().str() : "undefined"; };
  for (const Tensor& t : tensors_)
    KILN_CHECK(t.defined() && t.dim() >= 1 && t.shape()[0] == tensors_[0].shape()[0],
               "TensorDataset: every tensor needs the same first dim; got {} and {}",
               type_of(tensors_[0]), type_of(t));
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

DataLoader::DataLoader(const TensorDataset& dataset, int64_t batch_size, bool shuffle, bool drop_last)
    : dataset_(dataset), batch_size_(batch_size), shuffle_(shuffle), drop_last_(drop_last) {
  KILN_CHECK(batch_size > 0, "DataLoader: batch_size must be positive, got {}", batch_size);
  order_ = arange(dataset.size());
}

int64_t DataLoader::num_batches() const {
  int64_t n = dataset_.size();
  return drop_last_ ? n / batch_size_ : (n + batch_size_ - 1) / batch_size_;
}

DataLoader::Iterator DataLoader::begin() {
  if (shuffle_) order_ = randperm(dataset_.size());
  return Iterator(this, 0);
}

std::vector<Tensor> DataLoader::Iterator::operator*() const {
  int64_t b = batch_ * loader_->batch_size_;
  int64_t e = std::min(b + loader_->batch_size_, loader_->dataset_.size());
  return loader_->dataset_.get(loader_->order_.slice(0, b, e));
}

}  // namespace kiln::data
