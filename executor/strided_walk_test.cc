// The walks of Transpose, Slice and Expand, with their strides worked out by hand in the
// comments, and Slice's and Expand's rejections.
#include "executor/strided_walk.h"

#include <map>
#include <string>

#include "gmock/gmock.h"
#include "graph/graph_builder.h"
#include "gtest/gtest.h"

namespace headroom::executor {
namespace {

using graph::IntsAttr;
using graph::Shape;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Slice's attributes; empty `steps` is the schema's default.
graph::Attrs SliceAttrs(std::vector<int64_t> axes, std::vector<int64_t> starts,
                        std::vector<int64_t> ends, std::vector<int64_t> steps = {}) {
  std::map<std::string, proto::AttrValue> values = {{"axes", IntsAttr(std::move(axes))},
                                                    {"starts", IntsAttr(std::move(starts))},
                                                    {"ends", IntsAttr(std::move(ends))}};
  proto::AttrValue s;
  s.mutable_ints();
  for (int64_t v : steps) s.mutable_ints()->add_values(v);
  values["steps"] = s;
  return graph::Attrs(std::move(values));
}

TEST(StridedWalkTest, TransposePermutesTheStrides) {
  // x [2,3,4] has strides [12,4,1]; perm [2,0,1] walks [4,2,3] with strides [1,12,4].
  const StridedWalk w = TransposeWalk({2, 3, 4}, {2, 0, 1});
  EXPECT_EQ(w.dims, Shape({4, 2, 3}));
  EXPECT_THAT(w.strides, ElementsAre(1, 12, 4));
  EXPECT_EQ(w.offset, 0);
}

TEST(StridedWalkTest, SliceStartsAtTheFirstElementAndStepsOver) {
  // swin's x[:, 1::2, 0::2, :] on [2,5,6,3] (strides [90,18,3,1]): offset 1 * 18, strides
  // of the sliced dims doubled, dims ceil(4/2) = 2 and ceil(6/2) = 3.
  absl::StatusOr<StridedWalk> w =
      SliceWalk(SliceAttrs({1, -2}, {1, 0}, {5, 6}, {2, 2}), {2, 5, 6, 3}, {2, 2, 3, 3});
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->dims, Shape({2, 2, 3, 3})) << w->DebugString();
  EXPECT_THAT(w->strides, ElementsAre(90, 36, 6, 1)) << w->DebugString();
  EXPECT_EQ(w->offset, 18);
  // vit's x[:, 1:] on [2,197,768]: one token in.
  w = SliceWalk(SliceAttrs({1}, {1}, {197}), {2, 197, 768}, {2, 196, 768});
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_THAT(w->strides, ElementsAre(197 * 768, 768, 1));
  EXPECT_EQ(w->offset, 768);
}

TEST(StridedWalkTest, SliceWithNegativeStepsWalksBackwards) {
  // x[:, ::-1] on [2,5,3] (strides [15,3,1]): start 4, end -1 (through element 0), step -1:
  // offset 4 * 3, stride -3.
  absl::StatusOr<StridedWalk> w = SliceWalk(SliceAttrs({1}, {4}, {-1}, {-1}), {2, 5, 3}, {2, 5, 3});
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_THAT(w->strides, ElementsAre(15, -3, 1)) << w->DebugString();
  EXPECT_EQ(w->offset, 12);
  // x[:, 4:0:-2, ::-2] on [2,5,3]: rows 4, 2 (ceil(4/2)); columns 2, 0 (ceil(3/2)).
  w = SliceWalk(SliceAttrs({1, 2}, {4, 2}, {0, -1}, {-2, -2}), {2, 5, 3}, {2, 2, 2});
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_THAT(w->strides, ElementsAre(15, -6, -2)) << w->DebugString();
  EXPECT_EQ(w->offset, 4 * 3 + 2);
}

TEST(StridedWalkTest, SliceRejectsAttributesThatDoNotCutXToY) {
  const Shape x = {4, 6};
  for (const auto& [attrs, y] : std::vector<std::pair<graph::Attrs, Shape>>{
           {SliceAttrs({1}, {0}, {3}), {4, 2}},            // Cuts to [4,3], not [4,2].
           {SliceAttrs({1}, {2}, {7}), {4, 5}},            // End past the dim.
           {SliceAttrs({1}, {3}, {3}), {4, 1}},            // Empty range.
           {SliceAttrs({1, -1}, {0, 0}, {3, 3}), {4, 3}},  // Axis 1 twice.
           {SliceAttrs({2}, {0}, {1}), {4, 6}},            // No axis 2.
           {SliceAttrs({1}, {0}, {6}, {0}), {4, 6}},       // Step 0.
           {SliceAttrs({1}, {6}, {-1}, {-1}), {4, 6}},     // Negative step from past the dim.
           {SliceAttrs({1}, {2}, {2}, {-1}), {4, 1}},      // Negative step, empty range.
           {SliceAttrs({1}, {3}, {-2}, {-1}), {4, 5}},     // Negative step, end before -1.
       }) {
    absl::StatusOr<StridedWalk> w = SliceWalk(attrs, x, y);
    ASSERT_FALSE(w.ok()) << w->DebugString();
    EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(w.status().message()),
                HasSubstr("do not cut input 'x' [4,6] to output 'y' " + graph::ShapeString(y)));
  }
}

TEST(StridedWalkTest, ExpandRepeatsAlongBroadcastDims) {
  // The class token [1,1,4] expanded to [3,2,4]: only the last dim moves.
  absl::StatusOr<StridedWalk> w = ExpandWalk({1, 1, 4}, {3, 2, 4});
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_THAT(w->strides, ElementsAre(0, 0, 1));
  // [3,1] to [2,3,4]: a new leading dim and a size-1 dim repeat; x's dim 0 has stride 1.
  w = ExpandWalk({3, 1}, {2, 3, 4});
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->dims, Shape({2, 3, 4}));
  EXPECT_THAT(w->strides, ElementsAre(0, 1, 0));

  for (const Shape& y : {Shape{2, 3}, Shape{2}}) {
    w = ExpandWalk({2, 2}, y);
    ASSERT_FALSE(w.ok()) << w->DebugString();
    EXPECT_THAT(std::string(w.status().message()),
                HasSubstr("input 'x' [2,2] does not broadcast to output 'y' " +
                          graph::ShapeString(y)));
  }
}

}  // namespace
}  // namespace headroom::executor
