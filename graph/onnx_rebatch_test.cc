#include "graph/onnx_rebatch.h"

#include "gtest/gtest.h"

namespace headroom::graph {
namespace {

TEST(ReshapeBatchAxisTest, ChannelShuffleKeepsTheBatchLeading) {
  // [8, 116, 28, 28] -> [8, 2, 58, 28, 28]: the sample index stays outermost.
  std::optional<BatchAxis> b =
      ReshapeBatchAxis({8, 116, 28, 28}, BatchAxis{0, 1, 1}, 8, {8, 2, 58, 28, 28});
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(*b, (BatchAxis{0, 1, 1})) << b->DebugString();
}

TEST(ReshapeBatchAxisTest, AttentionHeadsJoinTheBatch) {
  // torch's multi-head attention: [L, B, E] -> [L, B * heads, head_dim], then [L * B, E].
  std::optional<BatchAxis> heads =
      ReshapeBatchAxis({197, 8, 768}, BatchAxis{1, 1, 1}, 8, {197, 96, 64});
  ASSERT_TRUE(heads.has_value());
  EXPECT_EQ(*heads, (BatchAxis{1, 1, 12})) << heads->DebugString();
  std::optional<BatchAxis> rows =
      ReshapeBatchAxis({197, 96, 64}, BatchAxis{1, 1, 12}, 8, {1576, 768});
  ASSERT_TRUE(rows.has_value());
  EXPECT_EQ(*rows, (BatchAxis{0, 197, 1})) << rows->DebugString();
}

TEST(RebatchReshapeTest, AttentionExportedAtBatchOneFindsTheBatchInTheSmallerNeighbour) {
  // At batch 1 [L, 1, E] -> [L, 1 * heads, d] could put the batch in L or in the heads; torch
  // wrote bsz * num_heads.
  absl::StatusOr<RebatchedReshape> q =
      RebatchReshape({50, 8, 768}, BatchAxis{1, 1, 1}, 1, 8, {50, 12, 64}, false);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->shape, (Shape{50, 96, 64}));
  // ... and back: [L, B * heads, d] -> [L * B, E] (tgt_len * bsz), not [L, B * E].
  absl::StatusOr<RebatchedReshape> rows =
      RebatchReshape({50, 96, 64}, q->batch, 1, 8, {50, 768}, false);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(rows->shape, (Shape{400, 768}));
  // ... and [L * B, E] -> [L, B, E].
  absl::StatusOr<RebatchedReshape> out =
      RebatchReshape({400, 768}, rows->batch, 1, 8, {50, 1, 768}, false);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->shape, (Shape{50, 8, 768}));
  EXPECT_EQ(out->batch, (BatchAxis{1, 1, 1}));
}

TEST(ReshapeBatchAxisTest, MixingSamplesHasNoBatchAxis) {
  // [B, C] -> [C, B] as a reshape interleaves samples.
  EXPECT_FALSE(ReshapeBatchAxis({4, 6}, BatchAxis{0, 1, 1}, 4, {6, 4}).has_value());
}

TEST(RebatchReshapeTest, ScalesTheTargetAxisThatHoldsTheBatch) {
  // shufflenet's channel shuffle exported at batch 1, imported at 8.
  absl::StatusOr<RebatchedReshape> r =
      RebatchReshape({8, 116, 28, 28}, BatchAxis{0, 1, 1}, 1, 8, {1, 2, 58, 28, 28}, false);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->shape, (Shape{8, 2, 58, 28, 28}));
  // x.view(x.size(0), -1) exported at batch 1: [1, -1].
  r = RebatchReshape({8, 512, 1, 1}, BatchAxis{0, 1, 1}, 1, 8, {1, -1}, false);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->shape, (Shape{8, 512}));
  // swin's windows: [B, 2, 4, 2, 4, C] (after the permute) -> [B * 4, 16, C] at export batch 2.
  r = RebatchReshape({3, 2, 2, 4, 4, 5}, BatchAxis{0, 1, 1}, 2, 3, {8, 16, 5}, false);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->shape, (Shape{12, 16, 5}));
  EXPECT_EQ(r->batch, (BatchAxis{0, 1, 4}));
}

TEST(RebatchReshapeTest, ErrorsSayWhy) {
  // A target that does not even fit the export batch.
  absl::StatusOr<RebatchedReshape> r =
      RebatchReshape({8, 6}, BatchAxis{0, 1, 1}, 2, 8, {5, 5}, false);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("export batch either"), std::string::npos) << r.status();
  // A target whose rows straddle samples: [2, 6] -> [3, 4] puts half a sample in a row.
  r = RebatchReshape({8, 6}, BatchAxis{0, 1, 1}, 2, 8, {3, 4}, false);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("mixes samples"), std::string::npos) << r.status();
}

}  // namespace
}  // namespace headroom::graph
