// The walks of the reductions, with their strides worked out by hand in the comments, and
// their rejections.
#include "executor/reduce_walk.h"

#include <map>
#include <string>

#include "gmock/gmock.h"
#include "graph/graph_builder.h"
#include "gtest/gtest.h"

namespace headroom::executor {
namespace {

using graph::Shape;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

graph::Attrs ReduceAttrs(std::vector<int64_t> axes, bool keepdims) {
  proto::AttrValue a;
  a.mutable_ints();
  for (int64_t v : axes) a.mutable_ints()->add_values(v);
  return graph::Attrs(std::map<std::string, proto::AttrValue>{
      {"axes", a}, {"keepdims", graph::BoolAttr(keepdims)}});
}

TEST(ReduceWalkTest, KeptAndReducedAxesTakeXsStrides) {
  // x [2,3,4,5] has strides [60,20,5,1]; reducing axes 1 and -1 keeps [2,4] at [60,5] and
  // walks [3,5] at [20,1].
  absl::StatusOr<ReduceWalk> w =
      ReduceWalkOf(ReduceAttrs({1, -1}, true), {2, 3, 4, 5}, {2, 1, 4, 1});
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->kept.dims, Shape({2, 4}));
  EXPECT_THAT(w->kept.strides, ElementsAre(60, 5));
  EXPECT_EQ(w->reduced.dims, Shape({3, 5}));
  EXPECT_THAT(w->reduced.strides, ElementsAre(20, 1));
  EXPECT_EQ(w->outputs(), 8);
  EXPECT_EQ(w->reduced_count(), 15);
  // Without keepdims the output drops the axes; the walk is the same.
  w = ReduceWalkOf(ReduceAttrs({-1, 1}, false), {2, 3, 4, 5}, {2, 4});
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_THAT(w->kept.strides, ElementsAre(60, 5));
  // No axes: everything, to one element.
  w = ReduceWalkOf(ReduceAttrs({}, false), {2, 3}, {});
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->outputs(), 1);
  EXPECT_THAT(w->reduced.strides, ElementsAre(3, 1));
}

TEST(ReduceWalkTest, RejectsAttributesThatDoNotReduceXToY) {
  const Shape x = {4, 6};
  for (const auto& [attrs, y] : std::vector<std::pair<graph::Attrs, Shape>>{
           {ReduceAttrs({1}, true), {4}},         // keepdims keeps [4,1].
           {ReduceAttrs({1}, false), {4, 1}},     // No keepdims drops it.
           {ReduceAttrs({2}, true), {4, 1}},      // No axis 2.
           {ReduceAttrs({1, -1}, true), {4, 1}},  // Axis 1 twice.
       }) {
    absl::StatusOr<ReduceWalk> w = ReduceWalkOf(attrs, x, y);
    ASSERT_FALSE(w.ok()) << graph::ShapeString(y);
    EXPECT_THAT(std::string(w.status().message()),
                HasSubstr("do not reduce input 'x' [4,6] to output 'y' " + graph::ShapeString(y)));
  }
}

}  // namespace
}  // namespace headroom::executor
