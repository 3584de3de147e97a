#include "dist/data_parallel.h"

#include <thread>

#include "dist/local_collectives.h"
#include "gmock/gmock.h"
#include "graph/zoo.h"
#include "graph/zoo_testing.h"
#include "gtest/gtest.h"

namespace headroom::dist {
namespace {

using ::testing::HasSubstr;

// Runs `body(rank, collectives)` on each of `n` ranks in its own thread; returns the
// statuses by rank.
template <typename F>
std::vector<absl::Status> OnRanks(int n, F body) {
  LocalGroup group(n);
  std::vector<absl::Status> statuses(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      std::unique_ptr<Collectives> c = group.Rank(r);
      statuses[r] = body(r, *c);
    });
  }
  for (std::thread& t : threads) t.join();
  return statuses;
}

TEST(DataParallelTest, EqualSequencesPass) {
  const std::vector<CollectiveSpec> seq = {{"bucket 0", 100}, {"bucket 1", 50}};
  for (const absl::Status& s :
       OnRanks(3, [&](int, Collectives& c) { return CheckSequencesAgree(seq, c); })) {
    EXPECT_TRUE(s.ok()) << s;
  }
}

TEST(DataParallelTest, MismatchedSequencesFailOnEveryRankNamingTheFirstDifference) {
  // Rank 2 splits the second bucket: the first difference is collective #1.
  const std::vector<CollectiveSpec> same = {{"bucket 0", 100}, {"bucket 1", 50}};
  const std::vector<CollectiveSpec> other = {{"bucket 0", 100}, {"bucket 1", 25}, {"b2", 25}};
  const std::vector<absl::Status> statuses = OnRanks(
      3, [&](int r, Collectives& c) { return CheckSequencesAgree(r == 2 ? other : same, c); });
  for (int r = 0; r < 3; ++r) {
    const absl::Status& s = statuses[r];
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_THAT(s.message(), HasSubstr("rank(s) 2 differ from rank 0"));
    EXPECT_THAT(s.message(), HasSubstr("2 on rank 0, 2 on rank 1, 3 on rank 2"));
    EXPECT_THAT(s.message(), HasSubstr("collective #1"));
    EXPECT_THAT(s.message(), HasSubstr("50 floats on rank 0, 50 floats on rank 1, 25 floats on "
                                       "rank 2"));
  }
}

TEST(DataParallelTest, SequenceHashSeesSizesAndOrder) {
  const uint64_t h = SequenceHash({{"x", 1}, {"y", 2}});
  EXPECT_NE(h, SequenceHash({{"x", 2}, {"y", 1}}));
  EXPECT_NE(h, SequenceHash({{"x", 1}, {"y", 2}, {"z", 0}}));
  EXPECT_EQ(h, SequenceHash({{"other names", 1}, {"same sizes", 2}}));
}

TEST(DataParallelTest, RankShardSplitsRowsAndSharesBatchFreeInputs) {
  // The small transformer at 2 samples per rank: tokens [2, 32] split, positions [32] shared.
  absl::StatusOr<proto::GraphDef> def = graph::BuildZooModel(graph::SmallZooSpec("transformer", 2));
  ASSERT_TRUE(def.ok()) << def.status();
  absl::StatusOr<graph::Graph> per_rank = graph::Graph::FromProto(*def);
  ASSERT_TRUE(per_rank.ok()) << per_rank.status();
  executor::HostTensor tokens = executor::MakeHostTensor("tokens", {4, 32}, proto::DTYPE_INT64);
  for (int i = 0; i < 128; ++i) reinterpret_cast<int64_t*>(tokens.bytes.data())[i] = i;
  executor::HostTensor positions = executor::MakeHostTensor("positions", {32}, proto::DTYPE_INT64);
  positions.bytes[8] = 7;
  for (int r = 0; r < 2; ++r) {
    absl::StatusOr<std::vector<executor::HostTensor>> shard =
        RankShard({tokens, positions}, *per_rank, r, 2);
    ASSERT_TRUE(shard.ok()) << shard.status();
    ASSERT_EQ((*shard)[0].shape, (graph::Shape{2, 32}));
    const int64_t* mine = reinterpret_cast<const int64_t*>((*shard)[0].bytes.data());
    for (int i = 0; i < 64; ++i) ASSERT_EQ(mine[i], 64 * r + i);
    EXPECT_EQ((*shard)[1].bytes, positions.bytes);
  }
  // 4 rows do not make 3 ranks of 2.
  const absl::Status s = RankShard({tokens}, *per_rank, 0, 3).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("'tokens'"));
  EXPECT_THAT(RankShard({tokens}, *per_rank, 2, 2).status().message(), HasSubstr("rank 2"));
}

}  // namespace
}  // namespace headroom::dist
