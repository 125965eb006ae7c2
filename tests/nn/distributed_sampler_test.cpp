// tests/nn/distributed_sampler_test.cpp -- each rank's shard: disjoint, covering, the same
// permutation on every rank for an epoch and a new one per epoch, padded or trimmed to a
// multiple of the ranks; and a DataLoader over it.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "nn/data.h"
#include "runtime/api.h"
#include "tests/unit/test_util.h"

namespace kiln {
namespace {

std::vector<int64_t> shard(int64_t n, int ranks, int rank, int64_t epoch, bool shuffle = true, bool drop_last = false) {
  data::DistributedSampler s(n, ranks, rank, shuffle, 7, drop_last);
  s.set_epoch(epoch);
  Tensor i = s.indices();
  EXPECT_EQ(i.numel(), s.num_samples());
  return i.to_vector<int64_t>();
}

TEST(DistributedSampler, ShardsAreDisjointAndCoverTheData) {
  for (int ranks : {1, 2, 3, 4}) {
    std::multiset<int64_t> all;
    for (int r = 0; r < ranks; ++r)
      for (int64_t i : shard(12, ranks, r, 0)) all.insert(i);
    EXPECT_EQ(all.size(), 12u) << ranks;
    for (int64_t i = 0; i < 12; ++i) EXPECT_EQ(all.count(i), 1u) << ranks;
  }
}

TEST(DistributedSampler, OnePermutationPerEpochOnEveryRankAndANewOneNextEpoch) {
  // The ranks' shards interleave one permutation: rebuilt from two ranks, it is a permutation.
  std::vector<int64_t> a = shard(10, 2, 0, 3), b = shard(10, 2, 1, 3), order;
  for (size_t k = 0; k < a.size(); ++k) order.push_back(a[k]), order.push_back(b[k]);
  std::vector<int64_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 10; ++i) EXPECT_EQ(sorted[static_cast<size_t>(i)], i);
  EXPECT_EQ(shard(10, 2, 0, 3), a);                                      // the same seed and epoch: the same shard
  EXPECT_NE(shard(10, 2, 0, 4), a);                                      // the next epoch reshuffles
  EXPECT_EQ(shard(6, 2, 1, 9, false), (std::vector<int64_t>{1, 3, 5}));  // no shuffle: in order
}

TEST(DistributedSampler, PadsOrTrimsToAMultipleOfTheRanks) {
  EXPECT_EQ(shard(5, 2, 1, 0, false), (std::vector<int64_t>{1, 3, 0}));  // padded from the start
  EXPECT_EQ(shard(5, 2, 1, 0, false, true), (std::vector<int64_t>{1, 3}));
  test::expect_error([] { data::DistributedSampler(5, 2, 2); }, {"DistributedSampler", "rank 2"});
}

TEST(DistributedSampler, ADataLoaderIteratesTheShard) {
  Tensor x = arange(10).to(f32), y = arange(10);
  data::TensorDataset ds({x, y});
  data::DistributedSampler s(10, 2, 1, false);
  std::vector<int64_t> seen;
  for (auto batch : data::DataLoader(ds, 2, s)) {
    EXPECT_LE(batch[1].numel(), 2);
    for (int64_t v : batch[1].to_vector<int64_t>()) seen.push_back(v);
  }
  EXPECT_EQ(seen, (std::vector<int64_t>{1, 3, 5, 7, 9}));
  EXPECT_EQ(data::DataLoader(ds, 2, s).num_batches(), 3);
}

}  // namespace
}  // namespace kiln
