// tests/jit/jit_test_util.h -- helpers the jit tests share: bitwise comparison, round trips.
#pragma once

#include <cstring>
#include <string>

#include "ir/graph.h"
#include "jit/trace.h"
#include "tests/unit/test_util.h"  // expect_error

namespace kiln::test {

/// True when a and b have one type and the same bytes, element by element (row-major).
inline bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  if (!(a.type() == b.type())) return false;
  Tensor ca = a.contiguous(), cb = b.contiguous();
  size_t n = static_cast<size_t>(a.numel() * dtype_size(a.dtype()));
  return n == 0 || std::memcmp(ca.data_ptr(), cb.data_ptr(), n) == 0;
}

/// Expects bitwise equality, printing both tensors when they differ.
inline void expect_bitwise(const Tensor& got, const Tensor& want) {
  ASSERT_TRUE(got.defined() && want.defined());
  ASSERT_EQ(got.type().str(), want.type().str());
  EXPECT_TRUE(bitwise_equal(got, want)) << "got\n" << got << "\nwant\n" << want;
}

/// The graph's text without source locations: what golden files and round trips compare.
inline std::string text_of(const ir::Graph& g) { return ir::print(g, {.locations = false}); }

/// Expects parse(print(g)) to verify and to print as g does.
inline void expect_round_trip(const ir::Graph& g) {
  std::string text = text_of(g);
  ir::Graph back = ir::parse(text, "round_trip.ir");
  EXPECT_NO_THROW(ir::verify(back)) << text;
  EXPECT_EQ(text_of(back), text);
}

}  // namespace kiln::test
