// Property tests: decode(encode(s)) == s for random UTF-8 strings, and invalid UTF-8 is a clear
// error, on the built-in vocabularies and (when LLMSERVE_TESTDATA is set) the real ones.
#include <random>
#include <string>
#include <vector>

#include "common/tokenizer/tokenizer.h"
#include "common/utf8/utf8.h"
#include "gtest/gtest.h"
#include "tests/unit/common/tokenizer/test_tokenizers.h"
#include "tests/unit/common/tokenizer/testdata_util.h"

namespace llmserve::common::tokenizer {
namespace {

struct Alphabet {
  bool latin1 = true;     // deepseek has added tokens such as "ü" that do not decode back
  bool combining = true;  // non-NFC text: mpt normalizes it
};

// A random mix of ASCII words, digits, punctuation, whitespace runs, multi-byte text and emoji.
std::string RandomText(std::mt19937& rng, const Alphabet& alphabet) {
  static const std::vector<std::string> kCommon = {
      "hello",   "World", "the", " ",        "  ", "   ", "\n",   "\n\n",   "\t",     " \t ",
      "123",     "4",     "007", ".",        ",",  "!?",  "'s",   "'ll",    "(",      ")",
      "{}",      "->",    "::",  "\"",       "$",  "%",   "中文", "日本語", "한국어", "Ελληνικά",
      "Русский", "€",     "😀",   "👍🏽", "🚀",  "½",   "²",    "\u3000", "\u00a0", "٣"};
  static const std::vector<std::string> kLatin1 = {"é", "ß", "Füße", "ü", "ñ", "ø", "Á"};
  std::string text;
  const int pieces = static_cast<int>(rng() % 12);
  for (int i = 0; i < pieces; ++i) {
    const uint32_t pick = rng() % 100;
    if (alphabet.latin1 && pick < 10) {
      text += kLatin1[rng() % kLatin1.size()];
    } else if (alphabet.combining && pick < 13) {
      text += "e\u0301";
    } else {
      text += kCommon[rng() % kCommon.size()];
    }
  }
  return text;
}

void ExpectRoundTrip(const Tokenizer& tok, const Alphabet& alphabet, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  for (int i = 0; i < n; ++i) {
    const std::string text = RandomText(rng, alphabet);
    auto ids = tok.Encode(text, false);
    ASSERT_TRUE(ids.ok()) << ids.status();
    auto decoded = tok.Decode(*ids, false);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    ASSERT_EQ(*decoded, text);
  }
}

void ExpectInvalidUtf8Rejected(const Tokenizer& tok, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  for (int i = 0; i < n; ++i) {
    std::string text = RandomText(rng, Alphabet());
    for (int j = 0; j < 1 + static_cast<int>(rng() % 3); ++j) {
      text.insert(text.begin() + rng() % (text.size() + 1), static_cast<char>(0x80 + rng() % 0x80));
    }
    const size_t bad = common::utf8::FindFirstInvalid(text);
    auto ids = tok.Encode(text, false);
    if (bad == common::utf8::kValid) {
      EXPECT_TRUE(ids.ok());
      continue;
    }
    ASSERT_FALSE(ids.ok());
    EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(ids.status().message().find("offset " + std::to_string(bad)), std::string::npos);
  }
}

TEST(tokenizer_roundtrip, BuiltInByteLevel) {
  auto tok = Tokenizer::FromJson(testing::ByteLevelTokenizerJson(), "");
  ASSERT_TRUE(tok.ok()) << tok.status();
  ExpectRoundTrip(**tok, Alphabet(), 2000, 1);
  ExpectInvalidUtf8Rejected(**tok, 500, 2);
}

TEST(tokenizer_roundtrip, BuiltInSentencePiece) {
  auto tok = Tokenizer::FromJson(testing::SpmTokenizerJson(), testing::kSpmConfigJson);
  ASSERT_TRUE(tok.ok()) << tok.status();
  ExpectRoundTrip(**tok, Alphabet(), 2000, 3);
  ExpectInvalidUtf8Rejected(**tok, 500, 4);
}

TEST(tokenizer_roundtrip, TestdataVocabularies) {
  if (testing::TestdataDir().empty()) GTEST_SKIP() << "LLMSERVE_TESTDATA is not set";
  uint32_t seed = 100;
  for (const auto& dir : testing::TokenizerDirs()) {
    SCOPED_TRACE(dir.string());
    auto tok = Tokenizer::FromDirectory(dir.string());
    ASSERT_TRUE(tok.ok()) << tok.status();
    const std::string name = dir.filename().string();
    Alphabet alphabet;
    alphabet.latin1 = name.rfind("deepseek", 0) != 0;
    alphabet.combining = name != "mpt";
    ExpectRoundTrip(**tok, alphabet, 300, ++seed);
    ExpectInvalidUtf8Rejected(**tok, 100, ++seed);
  }
}

}  // namespace
}  // namespace llmserve::common::tokenizer
