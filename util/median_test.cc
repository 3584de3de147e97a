#include "util/median.h"

#include "gtest/gtest.h"

namespace headroom {
namespace {

TEST(MedianTest, OddEvenAndEmpty) {
  EXPECT_EQ(Median({}), 0);
  EXPECT_EQ(Median({3}), 3);
  EXPECT_EQ(Median({5, 1, 3}), 3);
  EXPECT_EQ(Median({4, 1, 3, 2}), 2.5);
  EXPECT_EQ(Median({1, 100, 2, 2}), 2) << "one outlier does not move it";
}

}  // namespace
}  // namespace headroom
