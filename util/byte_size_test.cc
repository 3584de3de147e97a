#include "util/byte_size.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace headroom {
namespace {

using ::testing::HasSubstr;

TEST(ByteSizeTest, UnitsAndNumbers) {
  EXPECT_EQ(*ParseByteSize("4096"), 4096u);
  EXPECT_EQ(*ParseByteSize("4096B"), 4096u);
  EXPECT_EQ(*ParseByteSize("512MiB"), 512ull << 20);
  EXPECT_EQ(*ParseByteSize("6GiB"), 6ull << 30);
  EXPECT_EQ(*ParseByteSize("6 gib"), 6ull << 30);
  EXPECT_EQ(*ParseByteSize("6G"), 6ull << 30);
  EXPECT_EQ(*ParseByteSize("1.5GB"), 1500000000u);
  EXPECT_EQ(*ParseByteSize("2KB"), 2000u);
  EXPECT_EQ(*ParseByteSize("1TiB"), 1ull << 40);
  EXPECT_EQ(*ParseByteSize("0.5KiB"), 512u);
}

TEST(ByteSizeTest, BadSizesAreNamed) {
  for (const char* bad : {"", "GiB", "-1GiB", "6XB", "6GiBs", "1..5G", "99999999999TiB"}) {
    absl::StatusOr<uint64_t> parsed = ParseByteSize(bad);
    EXPECT_FALSE(parsed.ok()) << bad;
    EXPECT_THAT(parsed.status().message(), HasSubstr(std::string("'") + bad + "'")) << bad;
  }
}

}  // namespace
}  // namespace headroom
