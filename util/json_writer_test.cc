#include "util/json_writer.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace headroom {
namespace {

TEST(JsonWriterTest, NestsObjectsAndArraysWithCommas) {
  JsonWriter w;
  w.BeginObject()
      .Key("a")
      .Uint(1)
      .Key("list")
      .BeginArray()
      .Int(-2)
      .Bool(true)
      .Null()
      .BeginObject()
      .EndObject()
      .EndArray()
      .Key("x")
      .Double(0.5)
      .EndObject();
  EXPECT_EQ(w.str(), R"({"a":1,"list":[-2,true,null,{}],"x":0.5})");
}

TEST(JsonWriterTest, EscapesStrings) {
  JsonWriter w;
  w.String("a\"b\\c\nd\x01");
  EXPECT_EQ(w.str(), R"("a\"b\\c\nd\u0001")");
}

TEST(JsonWriterTest, NonFiniteDoublesAreNull) {
  JsonWriter w;
  w.BeginArray().Double(std::numeric_limits<double>::infinity()).Double(NAN).EndArray();
  EXPECT_EQ(w.str(), "[null,null]");
}

TEST(JsonWriterTest, LargeUnsignedValuesAreExact) {
  JsonWriter w;
  w.Uint(std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(w.str(), "18446744073709551615");
}

TEST(JsonWriterDeathTest, ValueWithoutKeyInObjectAborts) {
  JsonWriter w;
  w.BeginObject();
  EXPECT_DEATH(w.Uint(1), "without a key");
}

}  // namespace
}  // namespace headroom
