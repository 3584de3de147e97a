#include "util/printable.h"

#include "gtest/gtest.h"

namespace headroom {
namespace {

TEST(PrintableTest, KeepsPlainAndUtf8Text) {
  EXPECT_EQ(Printable("resnet50 job #3"), "resnet50 job #3");
  EXPECT_EQ(Printable("Schrödinger – ε"), "Schrödinger – ε");
  EXPECT_FALSE(HasControlCharacters("Schrödinger – ε"));
}

TEST(PrintableTest, EscapesC0ControlsAndDel) {
  // An ANSI sequence that would clear the screen, and a bell.
  EXPECT_EQ(Printable("a\x1b[2Jb\x07"), "a\\x1b[2Jb\\x07");
  EXPECT_EQ(Printable(std::string("x\0y\n\t\x7f", 6)), "x\\x00y\\x0a\\x09\\x7f");
  EXPECT_TRUE(HasControlCharacters("a\x1b"));
}

TEST(PrintableTest, EscapesUtf8EncodedC1Controls) {
  // U+009B, the one-character CSI, and U+0085; U+00A0 (no-break space) is kept.
  EXPECT_EQ(Printable("a\xc2\x9b" "31mb\xc2\x85" "c\xc2\xa0"),
            "a\\xc2\\x9b31mb\\xc2\\x85c\xc2\xa0");
  EXPECT_TRUE(HasControlCharacters("\xc2\x9b"));
  // A lone 0xc2 at the end is not a control.
  EXPECT_EQ(Printable("a\xc2"), "a\xc2");
}

TEST(PrintableTest, PrintableLinesKeepsNewlinesAndTabs) {
  EXPECT_EQ(PrintableLines("line 1\n\tline 2\x1b]0;title\x07"),
            "line 1\n\tline 2\\x1b]0;title\\x07");
}

TEST(PrintableTest, ValidUtf8) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("plain"));
  EXPECT_TRUE(IsValidUtf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));  // é, €, an emoji
  EXPECT_TRUE(IsValidUtf8("\xf4\x8f\xbf\xbf"));                          // U+10FFFF
  EXPECT_FALSE(IsValidUtf8("/0/\xe0mm"));          // a lead byte without its continuations
  EXPECT_FALSE(IsValidUtf8("\x80"));               // a stray continuation
  EXPECT_FALSE(IsValidUtf8("\xc0\xaf"));           // overlong '/'
  EXPECT_FALSE(IsValidUtf8("\xe0\x80\xaf"));       // overlong '/' in three bytes
  EXPECT_FALSE(IsValidUtf8("\xed\xa0\x80"));       // a surrogate
  EXPECT_FALSE(IsValidUtf8("\xf4\x90\x80\x80"));   // above U+10FFFF
  EXPECT_FALSE(IsValidUtf8("\xe2\x82"));           // truncated at the end
}

}  // namespace
}  // namespace headroom
