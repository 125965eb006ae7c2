// tests/unit/test_util.h -- helpers the unit tests share: error-message checks and comparisons
// against double-precision references computed inside each test.
#pragma once

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <ostream>
#include <string>
#include <vector>

namespace kiln {
/// Lets gtest print shapes as "[2,3]".
inline void PrintTo(const Dims& d, std::ostream* os) { *os << shape_str(d); }
}  // namespace kiln

namespace kiln::test {

/// Expects `fn` to throw kiln::Error whose message contains every one of `parts`.
inline void expect_error(const std::function<void()>& fn, std::initializer_list<std::string> parts) {
  try {
    fn();
  } catch (const Error& e) {
    std::string msg = e.what();
    for (const std::string& p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << "message: " << msg << "\nlacks: " << p;
    return;
  }
  ADD_FAILURE() << "expected a kiln::Error";
}

/// Expects `actual` to hold `expected` (row-major) within atol + rtol * |expected|.
inline void expect_close(const Tensor& actual, const std::vector<double>& expected, double atol = 1e-6,
                         double rtol = 1e-6) {
  std::vector<double> got = actual.to_vector<double>();
  ASSERT_EQ(got.size(), expected.size());
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i) {
    // NaN meets NaN; an infinity only itself (rtol |inf| would admit anything).
    bool ok = got[i] == expected[i] || (std::isnan(expected[i]) ? std::isnan(got[i])
                                        : std::isinf(expected[i]) || std::isinf(got[i])
                                            ? false
                                            : std::abs(got[i] - expected[i]) <= atol + rtol * std::abs(expected[i]));
    if (!ok) {
      ++bad;
      ADD_FAILURE() << "element " << i << ": got " << got[i] << ", expected " << expected[i];
    }
  }
}

/// Row-major index of `idx` in `shape`.
inline int64_t flat_index(const std::vector<int64_t>& idx, const Dims& shape) {
  int64_t f = 0;
  for (size_t d = 0; d < idx.size(); ++d) f = f * shape[d] + idx[d];
  return f;
}

/// Every multi-index of `shape` in row-major order.
inline std::vector<std::vector<int64_t>> all_indices(const Dims& shape) {
  std::vector<std::vector<int64_t>> out;
  std::vector<int64_t> idx(shape.size(), 0);
  if (shape.product() == 0) return out;
  for (;;) {
    out.push_back(idx);
    size_t d = shape.size();
    while (d > 0) {
      if (++idx[d - 1] < shape[d - 1]) break;
      idx[--d] = 0;
    }
    if (d == 0) return out;
  }
}

/// The bits of a tensor, for comparisons that must be exact.
inline std::vector<uint8_t> bits(const Tensor& t) {
  Tensor c = t.contiguous();
  std::vector<uint8_t> b(static_cast<size_t>(c.numel() * dtype_size(c.dtype())));
  std::memcpy(b.data(), c.data_ptr(), b.size());
  return b;
}

}  // namespace kiln::test
