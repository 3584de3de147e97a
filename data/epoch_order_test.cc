#include "data/epoch_order.h"

#include <algorithm>
#include <numeric>
#include <set>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace headroom::data {
namespace {

using ::testing::HasSubstr;

std::vector<int64_t> Iota(int64_t n) {
  std::vector<int64_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

TEST(EpochOrderTest, APermutationDependsOnlyOnSeedAndEpoch) {
  const std::vector<int64_t> items = Iota(1000);
  const std::vector<int64_t> a = EpochPermutation(items, 7, 3);
  std::vector<int64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, items);  // A permutation: every item once.
  EXPECT_EQ(EpochPermutation(items, 7, 3), a);
  EXPECT_NE(EpochPermutation(items, 7, 4), a);
  EXPECT_NE(EpochPermutation(items, 8, 3), a);
  EXPECT_NE(a, items);
}

// Every item lands in every position about equally often: a biased draw (modulo without
// rejection, an off-by-one in Fisher-Yates) shows as a skewed first position.
TEST(EpochOrderTest, FirstPositionsAreUniform) {
  const std::vector<int64_t> items = Iota(10);
  std::vector<int> first(10, 0);
  constexpr int kEpochs = 20000;
  for (int e = 0; e < kEpochs; ++e) ++first[EpochPermutation(items, 1, e)[0]];
  for (int i = 0; i < 10; ++i) {
    // Expected 2000, standard deviation about 42: 6 sigma either way.
    EXPECT_NEAR(first[i], kEpochs / 10, 255) << "item " << i;
  }
}

TEST(EpochOrderTest, TheSplitIsDisjointCoveringAndSeeded) {
  absl::StatusOr<TrainValidationSplit> s = SplitTrainValidation(1000, 0.1, 5);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->validation.size(), 100u);
  EXPECT_EQ(s->train.size(), 900u);
  std::vector<int64_t> all = s->train;
  all.insert(all.end(), s->validation.begin(), s->validation.end());
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, Iota(1000));
  EXPECT_TRUE(std::is_sorted(s->validation.begin(), s->validation.end()));
  EXPECT_EQ(SplitTrainValidation(1000, 0.1, 5)->validation, s->validation);
  EXPECT_NE(SplitTrainValidation(1000, 0.1, 6)->validation, s->validation);
  // Not the first or last hundred: chosen, not cut.
  EXPECT_NE(s->validation, std::vector<int64_t>(Iota(100)));
}

TEST(EpochOrderTest, BadSplitsAreErrors) {
  EXPECT_THAT(SplitTrainValidation(10, 1.0, 1).status().message(), HasSubstr("outside [0, 1)"));
  EXPECT_THAT(SplitTrainValidation(10, -0.1, 1).status().message(), HasSubstr("outside [0, 1)"));
  EXPECT_THAT(SplitTrainValidation(1, 0.6, 1).status().message(), HasSubstr("none to train on"));
  EXPECT_EQ(SplitTrainValidation(10, 0.0, 1)->train.size(), 10u);
}

// Ranks' batches, side by side, are the global batch one process at batch ranks * B reads.
TEST(EpochOrderTest, RanksSplitEachGlobalBatch) {
  const std::vector<int64_t> order = EpochPermutation(Iota(103), 3, 0);
  constexpr int kRanks = 4;
  constexpr int64_t kBatch = 5;
  EXPECT_EQ(BatchesPerEpoch(103, kRanks * kBatch), 5);
  for (int64_t b = 0; b < 5; ++b) {
    std::vector<int64_t> joined;
    for (int r = 0; r < kRanks; ++r) {
      absl::StatusOr<absl::Span<const int64_t>> part = RankBatch(order, b, kBatch, r, kRanks);
      ASSERT_TRUE(part.ok()) << part.status();
      joined.insert(joined.end(), part->begin(), part->end());
    }
    absl::StatusOr<absl::Span<const int64_t>> whole = RankBatch(order, b, kRanks * kBatch, 0, 1);
    ASSERT_TRUE(whole.ok());
    EXPECT_EQ(joined, std::vector<int64_t>(whole->begin(), whole->end())) << "batch " << b;
  }
  EXPECT_EQ(RankBatch(order, 5, kBatch, 0, kRanks).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(RankBatch(order, 0, kBatch, 4, kRanks).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RankBatch(order, 0, 0, 0, kRanks).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace headroom::data
