// Tokenizer::TokenBytes and TokenVocabulary::FromTokenizer against the real tokenizers: the
// bytes of Encode(text) concatenate back to text (no leading-space stripping: see
// vocabulary.h), and special tokens are not text.
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/unit/worker/structured/test_util.h"

namespace llmserve::worker::structured {
namespace {

using testing::LoadTokenizer;
using testing::TestdataDir;

class TokenBytesTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenBytesTest, BytesOfEncodeConcatenateToTheText) {
  if (TestdataDir().empty()) GTEST_SKIP() << "LLMSERVE_TESTDATA is not set";
  auto tok = LoadTokenizer(GetParam());
  ASSERT_NE(tok, nullptr);
  std::ifstream cases(TestdataDir() + "/tokenizers/" + GetParam() + "/cases.jsonl");
  ASSERT_TRUE(cases.good());
  std::string line;
  int checked = 0;
  int mismatched = 0;
  while (std::getline(cases, line)) {
    const nlohmann::json c = nlohmann::json::parse(line, nullptr, false);
    if (c.is_discarded() || !c.contains("text")) continue;
    const std::string text = c["text"].get<std::string>();
    auto ids = tok->Encode(text, false);
    ASSERT_TRUE(ids.ok()) << ids.status();
    std::string joined;
    for (const int32_t id : *ids) {
      std::optional<std::string> bytes = tok->TokenBytes(id);
      ASSERT_TRUE(bytes.has_value()) << id;
      joined += *bytes;
    }
    // Tokenizers that add a prefix space (SentencePiece) give " " + text; normalizers
    // (e.g. NFC, lowercasing) may change the text: compare with the decoder's own output.
    auto decoded = tok->DecodeBytes(*ids, false);
    ASSERT_TRUE(decoded.ok());
    ++checked;
    if (joined != text && joined != " " + text && joined != *decoded && joined != " " + *decoded) {
      ++mismatched;
      ADD_FAILURE() << GetParam() << ": \"" << text << "\" gave \"" << joined << "\"";
    }
  }
  EXPECT_GT(checked, 0);
  EXPECT_EQ(mismatched, 0);
}

TEST_P(TokenBytesTest, SpecialTokensAreNotText) {
  if (TestdataDir().empty()) GTEST_SKIP() << "LLMSERVE_TESTDATA is not set";
  auto tok = LoadTokenizer(GetParam());
  ASSERT_NE(tok, nullptr);
  auto vocab = TokenVocabulary::FromTokenizer(*tok, tok->vocab_size() + 5, {});
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  EXPECT_EQ((*vocab)->size(), tok->vocab_size() + 5);
  for (int32_t id = 0; id < tok->vocab_size(); ++id) {
    if (tok->IsSpecial(id)) {
      EXPECT_FALSE((*vocab)->is_text(id)) << id;
    }
  }
  for (int32_t id = tok->vocab_size(); id < (*vocab)->size(); ++id) {
    EXPECT_FALSE((*vocab)->is_text(id));
  }
  EXPECT_FALSE(tok->TokenBytes(tok->vocab_size() + 1).has_value());
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, TokenBytesTest,
                         ::testing::Values("deepseek-llm", "llama-spm", "gpt-2", "falcon",
                                           "starcoder", "mpt", "deepseek-coder", "refact"));

TEST(TokenBytesTest, ByteLevelAndByteFallbackPieces) {
  if (TestdataDir().empty()) GTEST_SKIP() << "LLMSERVE_TESTDATA is not set";
  auto spm = LoadTokenizer("llama-spm");
  ASSERT_NE(spm, nullptr);
  auto id = spm->TokenToId("<0x41>");
  ASSERT_TRUE(id.has_value());
  EXPECT_EQ(spm->TokenBytes(*id), "A");
  auto space = spm->TokenToId("\xE2\x96\x81the");  // "▁the"
  ASSERT_TRUE(space.has_value());
  EXPECT_EQ(spm->TokenBytes(*space), " the");
  auto gpt2 = LoadTokenizer("gpt-2");
  ASSERT_NE(gpt2, nullptr);
  auto g = gpt2->TokenToId("\xC4\xA0the");  // "Ġthe"
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(gpt2->TokenBytes(*g), " the");
}

}  // namespace
}  // namespace llmserve::worker::structured
