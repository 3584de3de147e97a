#include "dist/overlap.h"

#include <thread>

#include "dist/local_collectives.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace headroom::dist {
namespace {

using ::testing::HasSubstr;

// Two ranks, one step, two buckets. Rank 0 finishes its backward first:
//   bucket 0: both issue at 1.0; done at 1.5 on both.
//   bucket 1: rank 0 issues at 2.0, rank 1 at 3.0 (the last issue); done at 3.2 on both.
// Rank 0 waits for bucket 0 over [2.0, 2.0] (done already) and bucket 1 over [2.0, 3.2]:
// 1.0 s of it before rank 1 issued (imbalance), 0.2 s after (exposed communication).
// Rank 1 waits for bucket 1 over [3.0, 3.2]: 0.2 s exposed. Communication in flight on
// each: [1.0, 1.5] and [3.0, 3.2], 0.7 s.
std::vector<RankTimeline> TwoRanks() {
  RankTimeline r0{{{{1.0, 1.5, 2.0, 2.0}, {2.0, 3.2, 2.0, 3.2}}}};
  RankTimeline r1{{{{1.0, 1.5, 3.0, 3.0}, {3.0, 3.2, 3.0, 3.2}}}};
  return {r0, r1};
}

TEST(OverlapTest, SplitsTheWaitAtTheLastRanksIssue) {
  absl::StatusOr<OverlapReport> r = AnalyseOverlap(TwoRanks());
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->steps.size(), 1u);
  // Means over the two ranks: waited (1.2 + 0.2) / 2, imbalance (1.0 + 0) / 2,
  // exposed (0.2 + 0.2) / 2, communication 0.7.
  EXPECT_NEAR(r->median.waited_seconds, 0.7, 1e-12) << r->DebugString();
  EXPECT_NEAR(r->median.imbalance_seconds, 0.5, 1e-12);
  EXPECT_NEAR(r->median.exposed_seconds, 0.2, 1e-12);
  EXPECT_NEAR(r->median.communication_seconds, 0.7, 1e-12);
  EXPECT_NEAR(r->hidden_share(), 1 - 0.2 / 0.7, 1e-12);
  // All of it bucket 1's.
  ASSERT_EQ(r->exposed_by_bucket.size(), 2u);
  EXPECT_EQ(r->exposed_by_bucket[0], 0);
  EXPECT_NEAR(r->exposed_by_bucket[1], 0.2, 1e-12);
  EXPECT_THAT(r->DebugString(), HasSubstr("most: bucket 1 0.2000 s"));
}

TEST(OverlapTest, OverlappingReductionsCountOnce) {
  // Two buckets in flight together, [1.0, 2.0] and [1.5, 2.5]: 1.5 s, not 2.0; no wait.
  RankTimeline r{{{{1.0, 2.0, 3.0, 3.0}, {1.5, 2.5, 3.0, 3.0}}}};
  absl::StatusOr<OverlapReport> o = AnalyseOverlap({r});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_NEAR(o->median.communication_seconds, 1.5, 1e-12);
  EXPECT_EQ(o->median.waited_seconds, 0);
  EXPECT_EQ(o->hidden_share(), 1);
}

TEST(OverlapTest, MedianOverSteps) {
  // Exposed 0.1, 0.3 and 0.2 s in three steps: the median is 0.2.
  RankTimeline r;
  for (double exposed : {0.1, 0.3, 0.2}) {
    r.steps.push_back({{1.0, 2.0 + exposed, 2.0, 2.0 + exposed}});
  }
  absl::StatusOr<OverlapReport> o = AnalyseOverlap({r});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_NEAR(o->median.exposed_seconds, 0.2, 1e-12);
  EXPECT_EQ(o->median.imbalance_seconds, 0);
}

TEST(OverlapTest, RefusesTimelinesOfDifferentShapes) {
  std::vector<RankTimeline> ranks = TwoRanks();
  ranks[1].steps[0].pop_back();
  absl::StatusOr<OverlapReport> r = AnalyseOverlap(ranks);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("rank 1's timeline differs"));
  EXPECT_FALSE(AnalyseOverlap({}).ok());
}

TEST(OverlapTest, GatherGivesEveryRankEveryTimelineExactly) {
  const std::vector<RankTimeline> mine = {
      RankTimeline{{{{1234.000001, 1234.5, 1236.25, 1236.125}}}},
      RankTimeline{{{{0.1, 0.2, 0.3, 1e-7}}}}};
  LocalGroup group(2);
  std::vector<absl::StatusOr<std::vector<RankTimeline>>> got(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      std::unique_ptr<Collectives> c = group.Rank(r);
      got[r] = GatherTimelines(mine[r], *c);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(got[r].ok()) << got[r].status();
    ASSERT_EQ(got[r]->size(), 2u);
    for (int q = 0; q < 2; ++q) {
      const BucketTimes& want = mine[q].steps[0][0];
      const BucketTimes& have = (*got[r])[q].steps[0][0];
      // Two floats carry about 48 bits: 1e-9 relative at least.
      EXPECT_NEAR(have.issued, want.issued, 1e-9 * want.issued) << "rank " << r << " of " << q;
      EXPECT_NEAR(have.completed, want.completed, 1e-9 * want.completed);
      EXPECT_NEAR(have.wait_start, want.wait_start, 1e-9 * want.wait_start);
      EXPECT_NEAR(have.wait_end, want.wait_end, 1e-9 * want.wait_end);
    }
  }
}

TEST(OverlapTest, GatherRefusesRanksThatRecordedOtherSteps) {
  const std::vector<RankTimeline> mine = {RankTimeline{{{{1, 2, 3, 4}}}},
                                          RankTimeline{{{{1, 2, 3, 4}}, {{1, 2, 3, 4}}}}};
  LocalGroup group(2);
  std::vector<absl::Status> got(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      std::unique_ptr<Collectives> c = group.Rank(r);
      got[r] = GatherTimelines(mine[r], *c).status();
    });
  }
  for (std::thread& t : threads) t.join();
  for (const absl::Status& s : got) {
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_THAT(s.message(), HasSubstr("rank(s) 1 recorded other step or bucket counts"));
  }
}

}  // namespace
}  // namespace headroom::dist
