#include "util/cli_flags.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace headroom {
namespace {

using ::testing::HasSubstr;

TEST(CliFlagsTest, ParsesSpacedEqualsAndBooleanForms) {
  auto flags = CliFlags::Parse({"--model", "resnet50", "--batch=64", "--json"}, {"json"});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(flags->TakeString("model"), "resnet50");
  EXPECT_EQ(*flags->TakeInt("batch", 32), 64);
  EXPECT_TRUE(flags->TakeBool("json"));
  EXPECT_TRUE(flags->CheckAllTaken("graph").ok());
}

TEST(CliFlagsTest, AbsentFlagsTakeTheirFallbacks) {
  auto flags = CliFlags::Parse({}, {"json"});
  ASSERT_TRUE(flags.ok());
  EXPECT_EQ(flags->TakeString("model", "mlp"), "mlp");
  EXPECT_EQ(*flags->TakeInt("batch", 32), 32);
  EXPECT_FALSE(flags->TakeBool("json"));
}

TEST(CliFlagsTest, UnknownFlagIsNamed) {
  auto flags = CliFlags::Parse({"--jsno"}, {"json"});
  // --jsno is not boolean, so it needs a value.
  EXPECT_THAT(flags.status().message(), HasSubstr("--jsno needs a value"));
  auto flags2 = CliFlags::Parse({"--jsno", "1"}, {"json"});
  ASSERT_TRUE(flags2.ok());
  EXPECT_THAT(flags2->CheckAllTaken("graph").message(), HasSubstr("unknown flag --jsno"));
}

TEST(CliFlagsTest, RejectsPositionalRepeatedAndBadIntegers) {
  EXPECT_THAT(CliFlags::Parse({"resnet50"}, {}).status().message(),
              HasSubstr("unexpected argument 'resnet50'"));
  EXPECT_THAT(CliFlags::Parse({"--batch", "1", "--batch", "2"}, {}).status().message(),
              HasSubstr("--batch is given twice"));
  auto flags = CliFlags::Parse({"--batch", "0", "--depth", "x"}, {});
  ASSERT_TRUE(flags.ok());
  EXPECT_THAT(flags->TakeInt("batch", 32).status().message(), HasSubstr("at least 1"));
  EXPECT_THAT(flags->TakeInt("depth", 4).status().message(), HasSubstr("'x'"));
}

}  // namespace
}  // namespace headroom
