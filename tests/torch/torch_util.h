// tests/torch/torch_util.h -- kiln tensors as LibTorch tensors and back, and the comparison
// the LibTorch suites share: same shape, |kiln - torch| <= atol + rtol |torch| elementwise.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <vector>

#include <kiln/kiln.h>

namespace kiln::test_torch {

using KTensor = kiln::Tensor;
using TTensor = torch::Tensor;

inline std::vector<int64_t> sizes(const KTensor& t) { return std::vector<int64_t>(t.shape().begin(), t.shape().end()); }

// The same values (and dtype, for f32, f64, i64 and bool) as a torch tensor.
inline TTensor to_torch(const KTensor& t) {
  std::vector<double> v = t.to_vector<double>();
  TTensor d = torch::tensor(v, torch::kDouble).reshape(sizes(t));
  switch (t.dtype()) {
    case kiln::DType::F32: return d.to(torch::kFloat);
    case kiln::DType::I64: return d.to(torch::kLong);
    case kiln::DType::I32: return d.to(torch::kInt);
    case kiln::DType::Bool: return d.to(torch::kBool);
    default: return d;
  }
}

inline std::vector<double> values(const TTensor& t) {
  TTensor d = t.detach().to(torch::kDouble).contiguous();
  return std::vector<double>(d.data_ptr<double>(), d.data_ptr<double>() + d.numel());
}

inline void expect_same(const KTensor& got, const TTensor& want, double rtol = 1e-4, double atol = 1e-5) {
  ASSERT_EQ(sizes(got), want.sizes().vec());
  std::vector<double> g = got.to_vector<double>(), w = values(want);
  int bad = 0;
  for (size_t i = 0; i < g.size() && bad < 5; ++i) {
    bool ok =
        (std::isnan(g[i]) && std::isnan(w[i])) || g[i] == w[i] || std::abs(g[i] - w[i]) <= atol + rtol * std::abs(w[i]);
    if (!ok) ++bad, ADD_FAILURE() << "element " << i << ": kiln " << g[i] << ", torch " << w[i];
  }
}

}  // namespace kiln::test_torch
