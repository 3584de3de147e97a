// The pairing of batched MatMul operands under numpy's broadcasting, worked out by hand.
#include "executor/matmul_batches.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace headroom::executor {
namespace {

using graph::Shape;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(MatMulBatchesTest, EachDimBroadcastsFromEitherSide) {
  // [2,1] x [1,3]: output [2,3]; a's matrix i for row i, b's matrix j for column j.
  absl::StatusOr<MatMulBatches> p = BroadcastMatMulBatches({2, 1}, {1, 3});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->dims, Shape({2, 3}));
  EXPECT_THAT(p->a_of, ElementsAre(0, 0, 0, 1, 1, 1)) << p->DebugString();
  EXPECT_THAT(p->b_of, ElementsAre(0, 1, 2, 0, 1, 2)) << p->DebugString();
}

TEST(MatMulBatchesTest, MissingLeadingDimsAreOnes) {
  // [2] x [3,2] (a [2,M,K] against b [3,2,K,N]): output [3,2]; a repeats for each of b's 3.
  absl::StatusOr<MatMulBatches> p = BroadcastMatMulBatches({2}, {3, 2});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->dims, Shape({3, 2}));
  EXPECT_THAT(p->a_of, ElementsAre(0, 1, 0, 1, 0, 1));
  EXPECT_THAT(p->b_of, ElementsAre(0, 1, 2, 3, 4, 5));
  // A single matrix against a batch: [] x [4].
  p = BroadcastMatMulBatches({}, {4});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->a_of, ElementsAre(0, 0, 0, 0));
  EXPECT_THAT(p->b_of, ElementsAre(0, 1, 2, 3));
}

TEST(MatMulBatchesTest, UnequalDimsNeitherOneAreRefused) {
  absl::StatusOr<MatMulBatches> p = BroadcastMatMulBatches({2, 3}, {4, 3});
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(std::string(p.status().message()),
              HasSubstr("batch dims [2,3] and [4,3] do not broadcast: dim 0"));
}

}  // namespace
}  // namespace headroom::executor
