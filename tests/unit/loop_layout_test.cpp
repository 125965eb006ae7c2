// tests/unit/loop_layout_test.cpp -- the loop-layout rules every strided kernel shares.
#include <gtest/gtest.h>

#include "runtime/error.h"
#include "runtime/loop_layout.h"
#include "tests/unit/test_util.h"

namespace kiln {
namespace {

TEST(LoopLayout, BroadcastStridesAlignAtTheRight) {
  EXPECT_EQ(broadcast_strides({3, 1}, {1, 1}, {2, 3, 4}, "t"), Dims({0, 1, 0}));
  EXPECT_EQ(broadcast_strides({4}, {2}, {2, 3, 4}, "t"), Dims({0, 0, 2}));
  EXPECT_EQ(broadcast_strides({}, {}, {5}, "t"), Dims({0}));
  EXPECT_EQ(broadcast_strides({2, 3}, {3, 1}, {2, 3}, "t"), Dims({3, 1}));
  test::expect_error([] { broadcast_strides({3}, {1}, {2, 4}, "copy"); }, {"copy: [3] does not broadcast to [2,4]"});
  test::expect_error(
      [] {
        broadcast_strides({2, 2, 2}, {4, 2, 1}, {2, 2}, "copy");
      },
      {"copy: [2,2,2] has more dims than [2,2]"});
}

TEST(LoopLayout, MergesDimsEveryOperandStepsThroughAsOne) {
  // A contiguous [2,3,4] and a broadcast over its last dim: the first two dims merge for both.
  Dims shape{2, 3, 4};
  std::vector<Dims> st{{12, 4, 1}, {3, 1, 0}};
  merge_dims(shape, st);
  EXPECT_EQ(shape, Dims({6, 4}));
  EXPECT_EQ(st[0], Dims({4, 1}));
  EXPECT_EQ(st[1], Dims({1, 0}));
  // A transposed operand merges nothing; size-1 dims go.
  shape = {2, 1, 3};
  st = {{3, 3, 1}, {1, 1, 2}};
  merge_dims(shape, st);
  EXPECT_EQ(shape, Dims({2, 3}));
  EXPECT_EQ(st[1], Dims({1, 2}));
  // Groups never merge with each other: [kept 2, reduced 3, reduced 4] -> [2, 12].
  shape = {2, 3, 4};
  st = {{12, 4, 1}};
  uint64_t groups = 0b110;
  merge_dims(shape, st, &groups);
  EXPECT_EQ(shape, Dims({2, 12}));
  EXPECT_EQ(groups, 0b10u);
  shape = {4, 4};
  st = {{4, 1}};
  groups = 0b10;  // kept then reduced: contiguous, but not one loop
  merge_dims(shape, st, &groups);
  EXPECT_EQ(shape, Dims({4, 4}));
  // Nothing left: all ones.
  shape = {1, 1};
  st = {{5, 7}};
  merge_dims(shape, st);
  EXPECT_TRUE(shape.empty());
  EXPECT_TRUE(st[0].empty());
}

}  // namespace
}  // namespace kiln
