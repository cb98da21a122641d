// TokenizerFilesFromGguf: a GGUF file's tokenizer.ggml.* keys as tokenizer.json text that our
// Tokenizer loads. On stories260K (skipped without LLMSERVE_TESTDATA): the vocabulary is
// tok512.vocab's pieces, the reference prompts' texts tokenize to their prompt ids (BOS added) and
// every reference output decodes to its text. On files built here: merges derived from scores as
// Hugging Face's LlamaConverter does, a gpt2 vocabulary with its merges, special tokens and
// add_bos/add_eos, and the errors for what is missing or unsupported.

#include "worker/model/gguf_tokenizer.h"

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/tokenizer/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/gguf_writer.h"
#include "tests/testing/parsed_gguf.h"
#include "tests/testing/testdata_models.h"

namespace llmserve::worker {
namespace {

using ::llmserve::common::tokenizer::Tokenizer;
using ::llmserve::testing::GgufWriter;
using ::llmserve::testing::ParsedGguf;
using ::llmserve::testing::ParseGgufBytes;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

absl::StatusOr<std::unique_ptr<Tokenizer>> TokenizerOf(const GgufWriter& writer) {
  const ParsedGguf parsed = ParseGgufBytes(writer.Build(), "t.gguf");
  EXPECT_TRUE(parsed.file.ok()) << parsed.file.status();
  if (!parsed.file.ok()) return absl::InternalError("the test file does not parse");
  absl::StatusOr<GgufTokenizerFiles> files = TokenizerFilesFromGguf(**parsed.file);
  if (!files.ok()) return files.status();
  return Tokenizer::FromJson(files->tokenizer_json, files->tokenizer_config_json);
}

std::string StoriesDir(std::string* why) {
  return ::llmserve::testing::ModelsDir("stories260K", why);
}

// The tokenizer of `dir`/gguf/stories260K-f32.gguf.
absl::StatusOr<std::unique_ptr<Tokenizer>> StoriesGgufTokenizer(const std::string& dir) {
  absl::StatusOr<GgufTokenizerFiles> files =
      TokenizerFilesFromGgufPath(dir + "/gguf/stories260K-f32.gguf");
  if (!files.ok()) return files.status();
  return Tokenizer::FromJson(files->tokenizer_json, files->tokenizer_config_json);
}

TEST(GgufTokenizerTest, StoriesVocabularyIsTheSentencePieceModels) {
  std::string why;
  const std::string dir = StoriesDir(&why);
  if (dir.empty()) GTEST_SKIP() << why;
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = StoriesGgufTokenizer(dir);
  ASSERT_TRUE(tok.ok()) << tok.status();
  std::ifstream vocab(dir + "/tok512.vocab");
  std::string line;
  int32_t id = 0;
  while (std::getline(vocab, line)) {
    const std::string piece = line.substr(0, line.find('\t'));
    EXPECT_EQ((*tok)->IdToToken(id), piece) << "id " << id;
    ++id;
  }
  EXPECT_EQ(id, 512);
  EXPECT_EQ((*tok)->vocab_size(), 512);
}

TEST(GgufTokenizerTest, StoriesPromptsTokenizeToTheReferenceIdsAndDecodeBack) {
  std::string why;
  const std::string dir = StoriesDir(&why);
  if (dir.empty()) GTEST_SKIP() << why;
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = StoriesGgufTokenizer(dir);
  ASSERT_TRUE(tok.ok()) << tok.status();
  // llama.cpp's prompts (expected/llama_cpp_greedy.jsonl) are the reference's.
  const std::vector<std::pair<std::string, std::string>> prompts = {
      {"tom-60", "Tom and his dog went to the"}, {"bird-80", "The little bird wanted to fly"}};
  std::ifstream in(dir + "/expected/reference_greedy.jsonl");
  std::string line;
  int checked = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const nlohmann::json c = nlohmann::json::parse(line);
    std::vector<int32_t> ids = c["prompt_ids"].get<std::vector<int32_t>>();
    for (const auto& [name, text] : prompts) {
      if (c["case"] != name) continue;
      EXPECT_EQ(*(*tok)->Encode(text, /*add_special_tokens=*/true), ids) << name;
      ++checked;
    }
    const std::vector<int32_t> greedy = c["greedy_ids"].get<std::vector<int32_t>>();
    ids.insert(ids.end(), greedy.begin(), greedy.end());
    EXPECT_EQ(*(*tok)->Decode(ids, /*skip_special_tokens=*/true), c["text"].get<std::string>())
        << c["case"];
  }
  EXPECT_EQ(checked, 2);
}

// A SentencePiece-style vocabulary: <unk> <s> </s>, bytes <0x61> (a) and <0x62> (b), then
// pieces whose scores decide the merges.
GgufWriter LlamaVocab() {
  GgufWriter w;
  w.AddString("tokenizer.ggml.model", "llama");
  w.AddStringArray("tokenizer.ggml.tokens",
                   {"<unk>", "<s>", "</s>", "<0x61>", "<0x62>", "\xE2\x96\x81", "a", "b", "ab",
                    "\xE2\x96\x81"
                    "ab",
                    "ba", "bab"});
  w.AddF32Array("tokenizer.ggml.scores", {0, 0, 0, 0, 0, -1, -2, -3, -4, -5, -1.5f, -6});
  w.AddI32Array("tokenizer.ggml.token_type", {2, 3, 3, 6, 6, 1, 1, 1, 1, 1, 1, 1});
  w.AddU32("tokenizer.ggml.bos_token_id", 1).AddU32("tokenizer.ggml.eos_token_id", 2);
  w.AddU32("tokenizer.ggml.unknown_token_id", 0);
  return w;
}

TEST(GgufTokenizerTest, LlamaMergesFollowScoresAndBosIsAdded) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = TokenizerOf(LlamaVocab());
  ASSERT_TRUE(tok.ok()) << tok.status();
  // "bab": "ba" (score -1.5) merges before "ab" (-4), then "ba"+"b" -> "bab" (-6).
  EXPECT_THAT(*(*tok)->Encode("bab", true), ElementsAre(1, 5, 11));
  // " ab" -> "▁ab" through "▁"+"ab": "▁" comes from the prepended space.
  EXPECT_THAT(*(*tok)->Encode("ab", false), ElementsAre(9));
  EXPECT_EQ(*(*tok)->Decode({1, 9, 10}, true), "abba");
  // <s> is a special added token: matched in text, skipped in decoding.
  EXPECT_TRUE((*tok)->IsSpecial(1));
}

TEST(GgufTokenizerTest, AddBosAndAddEosFollowTheFile) {
  GgufWriter w = LlamaVocab();
  w.AddBool("tokenizer.ggml.add_bos_token", false).AddBool("tokenizer.ggml.add_eos_token", true);
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = TokenizerOf(w);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_THAT(*(*tok)->Encode("ab", true), ElementsAre(9, 2));
}

TEST(GgufTokenizerTest, Gpt2VocabularyUsesItsMerges) {
  GgufWriter w;
  w.AddString("tokenizer.ggml.model", "gpt2");
  // Byte-level: 'a', 'b', then "ab" and "Ġab" (Ġ is the space byte).
  w.AddStringArray("tokenizer.ggml.tokens", {"a", "b", "\xC4\xA0", "ab",
                                             "\xC4\xA0"
                                             "ab",
                                             "<|e|>"});
  w.AddStringArray("tokenizer.ggml.merges", {"a b", "\xC4\xA0 ab"});
  w.AddI32Array("tokenizer.ggml.token_type", {1, 1, 1, 1, 1, 3});
  w.AddU32("tokenizer.ggml.eos_token_id", 5);
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = TokenizerOf(w);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_THAT(*(*tok)->Encode("ab ab<|e|>", true), ElementsAre(3, 4, 5));
  EXPECT_EQ(*(*tok)->Decode({3, 4}, false), "ab ab");
}

TEST(GgufTokenizerTest, ErrorsNameWhatIsMissingOrUnsupported) {
  GgufWriter none;
  none.AddString("general.architecture", "llama");
  EXPECT_EQ(TokenizerOf(none).status().code(), absl::StatusCode::kNotFound);

  GgufWriter t5;
  t5.AddString("tokenizer.ggml.model", "t5");
  EXPECT_EQ(TokenizerOf(t5).status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(TokenizerOf(t5).status().message(), HasSubstr("tokenizer.ggml.model 't5'"));

  GgufWriter pre;
  pre.AddString("tokenizer.ggml.model", "gpt2").AddString("tokenizer.ggml.pre", "falcon");
  pre.AddStringArray("tokenizer.ggml.tokens", {"a"}).AddStringArray("tokenizer.ggml.merges", {});
  EXPECT_THAT(TokenizerOf(pre).status().message(), HasSubstr("tokenizer.ggml.pre 'falcon'"));

  GgufWriter short_scores;
  short_scores.AddString("tokenizer.ggml.model", "llama");
  short_scores.AddStringArray("tokenizer.ggml.tokens", {"a", "b"});
  short_scores.AddF32Array("tokenizer.ggml.scores", {0});
  EXPECT_THAT(TokenizerOf(short_scores).status().message(),
              HasSubstr("tokenizer.ggml.scores has 1 entries for 2 tokens"));

  GgufWriter out_of_range;
  out_of_range.AddString("tokenizer.ggml.model", "llama");
  out_of_range.AddStringArray("tokenizer.ggml.tokens", {"a"});
  out_of_range.AddF32Array("tokenizer.ggml.scores", {0});
  out_of_range.AddU32("tokenizer.ggml.bos_token_id", 7);
  EXPECT_THAT(TokenizerOf(out_of_range).status().message(),
              HasSubstr("tokenizer.ggml.bos_token_id 7 is outside the vocabulary of 1 tokens"));
}

}  // namespace
}  // namespace llmserve::worker
