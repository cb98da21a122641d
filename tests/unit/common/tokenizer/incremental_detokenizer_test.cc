#include "common/tokenizer/incremental_detokenizer.h"

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

std::unique_ptr<Tokenizer> Spm() {
  auto tok = Tokenizer::FromJson(testing::SpmTokenizerJson(), testing::kSpmConfigJson);
  EXPECT_TRUE(tok.ok()) << tok.status();
  return *std::move(tok);
}

TEST(tokenizer_detokenizer, SplitByteFallbackCharacterWaitsForItsLastByte) {
  auto tok = Spm();
  const auto id = [&](const char* t) { return *tok->TokenToId(t); };
  IncrementalDetokenizer detok(tok.get(), {}, false);
  EXPECT_EQ(*detok.Step(id("▁hello")), "hello");
  EXPECT_EQ(*detok.Step(id("<0xE2>")), "");
  EXPECT_EQ(*detok.Step(id("<0x82>")), "");
  EXPECT_EQ(*detok.Step(id("<0xAC>")), "€");
  EXPECT_EQ(*detok.Step(id("▁world")), " world");
  EXPECT_EQ(*detok.Flush(), "");
}

TEST(tokenizer_detokenizer, FlushEmitsAnIncompleteTailLossily) {
  auto tok = Spm();
  IncrementalDetokenizer detok(tok.get(), {}, false);
  EXPECT_EQ(*detok.Step(*tok->TokenToId("<0xF0>")), "");
  EXPECT_EQ(*detok.Flush(), "\uFFFD");
  EXPECT_EQ(*detok.Flush(), "");
}

TEST(tokenizer_detokenizer, PromptContextKeepsTheLeadingSpace) {
  auto tok = Spm();
  const std::vector<int32_t> prompt = *tok->Encode("hello", true);
  const int32_t world = *tok->TokenToId("▁world");
  IncrementalDetokenizer with_context(tok.get(), prompt, false);
  EXPECT_EQ(*with_context.Step(world), " world");
  IncrementalDetokenizer without_context(tok.get(), {}, false);
  EXPECT_EQ(*without_context.Step(world), "world");
}

TEST(tokenizer_detokenizer, SkipsSpecialTokensAndRejectsBadIds) {
  auto tok = Spm();
  IncrementalDetokenizer detok(tok.get(), {}, /*skip_special_tokens=*/true);
  EXPECT_EQ(*detok.Step(*tok->TokenToId("▁hello")), "hello");
  EXPECT_EQ(*detok.Step(2), "");  // </s>
  EXPECT_EQ(detok.Step(tok->vocab_size()).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*detok.Step(*tok->TokenToId("▁world")), " world");
}

// Concatenated deltas + Flush == the lossy full decode, for random id sequences.
void ExpectDeltasEqualFullDecode(const Tokenizer& tok, int sequences, uint32_t seed) {
  std::mt19937 rng(seed);
  for (int s = 0; s < sequences; ++s) {
    std::vector<int32_t> ids;
    const int n = 1 + static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) ids.push_back(static_cast<int32_t>(rng() % tok.vocab_size()));
    for (const bool skip : {false, true}) {
      IncrementalDetokenizer detok(&tok, {}, skip);
      std::string streamed;
      for (const int32_t id : ids) {
        auto delta = detok.Step(id);
        if (!delta.ok()) continue;  // an id gap in the vocabulary
        EXPECT_TRUE(common::utf8::IsValid(*delta));
        streamed += *delta;
      }
      streamed += *detok.Flush();
      auto full = tok.DecodeBytes(detok.ids(), skip);
      ASSERT_TRUE(full.ok());
      ASSERT_EQ(streamed, common::utf8::SanitizeLossy(*full)) << "sequence " << s;
    }
  }
}

TEST(tokenizer_detokenizer, DeltasConcatenateToTheFullDecodeOnBuiltInVocabularies) {
  ExpectDeltasEqualFullDecode(*Spm(), 500, 7);
  auto byte_level = Tokenizer::FromJson(testing::ByteLevelTokenizerJson(), "");
  ASSERT_TRUE(byte_level.ok());
  ExpectDeltasEqualFullDecode(**byte_level, 500, 8);
}

TEST(tokenizer_detokenizer, DeltasConcatenateToTheFullDecodeOnTestdata) {
  if (testing::TestdataDir().empty()) GTEST_SKIP() << "LLMSERVE_TESTDATA is not set";
  uint32_t seed = 50;
  for (const auto& dir : testing::TokenizerDirs()) {
    SCOPED_TRACE(dir.string());
    auto tok = Tokenizer::FromDirectory(dir.string());
    ASSERT_TRUE(tok.ok()) << tok.status();
    ExpectDeltasEqualFullDecode(**tok, 100, ++seed);
  }
}

}  // namespace
}  // namespace llmserve::common::tokenizer
