#include "common/utf8/utf8.h"

#include <string>

#include "gtest/gtest.h"

namespace llmserve::common::utf8 {
namespace {

TEST(utf8_test, FindFirstInvalidReturnsTheOffsetOfTheFirstBadByte) {
  EXPECT_EQ(FindFirstInvalid(""), kValid);
  EXPECT_EQ(FindFirstInvalid("héllo €𝄞"), kValid);
  EXPECT_EQ(FindFirstInvalid("abc\xFF"), 3u);
  EXPECT_EQ(FindFirstInvalid("ab\xC3"), 2u);            // truncated 2-byte sequence
  EXPECT_EQ(FindFirstInvalid("\xC0\xAF"), 0u);          // overlong '/'
  EXPECT_EQ(FindFirstInvalid("a\xED\xA0\x80"), 1u);     // surrogate U+D800
  EXPECT_EQ(FindFirstInvalid("\xF4\x90\x80\x80"), 0u);  // above U+10FFFF
  EXPECT_EQ(FindFirstInvalid("x\x80"), 1u);             // lone continuation byte
  EXPECT_TRUE(IsValid("\xF0\x9F\x98\x80"));
}

TEST(utf8_test, DecodeOneAndEncodeAreInverse) {
  for (char32_t cp : {U'a', U'\u00e9', U'\u20ac', U'\U0001F600', U'\U0010FFFF'}) {
    const std::string bytes = Encode(cp);
    char32_t decoded = 0;
    EXPECT_EQ(DecodeOne(bytes, 0, &decoded), static_cast<int>(bytes.size()));
    EXPECT_EQ(decoded, cp);
  }
  char32_t cp = 0;
  EXPECT_EQ(DecodeOne("\xE2\x82", 0, &cp), -2);  // maximal subpart of a truncated €
  EXPECT_EQ(DecodeOne("\xE2\x41", 0, &cp), -1);
  EXPECT_EQ(Encode(0xD800), "\xEF\xBF\xBD");  // not a scalar value
}

TEST(utf8_test, IncompleteSuffixLengthFindsOnlyValidPrefixes) {
  EXPECT_EQ(IncompleteSuffixLength(""), 0u);
  EXPECT_EQ(IncompleteSuffixLength("abc"), 0u);
  EXPECT_EQ(IncompleteSuffixLength("a\xE2"), 1u);
  EXPECT_EQ(IncompleteSuffixLength("a\xE2\x82"), 2u);
  EXPECT_EQ(IncompleteSuffixLength("a\xE2\x82\xAC"), 0u);  // complete €
  EXPECT_EQ(IncompleteSuffixLength("\xF0\x9F\x98"), 3u);
  EXPECT_EQ(IncompleteSuffixLength("\xE0\x80"), 0u);  // can never become valid
  EXPECT_EQ(IncompleteSuffixLength("\x80"), 0u);
  EXPECT_EQ(IncompleteSuffixLength("\xFF"), 0u);
}

TEST(utf8_test, SanitizeLossyMatchesPythonReplace) {
  // Expected values from Python: bytes.decode("utf-8", errors="replace").
  EXPECT_EQ(SanitizeLossy("ok €"), "ok €");
  EXPECT_EQ(SanitizeLossy("a\xFF"
                          "b"),
            "a\uFFFD"
            "b");
  EXPECT_EQ(SanitizeLossy("\xE2\x82"
                          "a"),
            "\uFFFD"
            "a");  // one U+FFFD per subpart
  EXPECT_EQ(SanitizeLossy("\xF0\x9F\x98"), "\uFFFD");
  EXPECT_EQ(SanitizeLossy("\xC0\xAF"), "\uFFFD\uFFFD");            // overlong: two bytes
  EXPECT_EQ(SanitizeLossy("\xED\xA0\x80"), "\uFFFD\uFFFD\uFFFD");  // surrogate
  EXPECT_TRUE(IsValid(SanitizeLossy("\x80\x81\xFE\xE2")));
}

TEST(Utf8Test, TruncationNeverCutsACharacterInTwo) {
  const std::string text = "a\xC3\xA9\xE2\x82\xAC";  // a, é (2 bytes), € (3 bytes)
  EXPECT_EQ(TruncateAtCharBoundary(text, 10), text);
  EXPECT_EQ(TruncateAtCharBoundary(text, 6), text);
  EXPECT_EQ(TruncateAtCharBoundary(text, 5), "a\xC3\xA9");  // € would be cut: dropped
  EXPECT_EQ(TruncateAtCharBoundary(text, 4), "a\xC3\xA9");
  EXPECT_EQ(TruncateAtCharBoundary(text, 2), "a");
  EXPECT_EQ(TruncateAtCharBoundary(text, 0), "");
}

}  // namespace
}  // namespace llmserve::common::utf8
