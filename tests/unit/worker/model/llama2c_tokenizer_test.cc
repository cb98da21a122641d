// The SentencePiece model next to the llama2.c checkpoint ($LLMSERVE_TESTDATA/models/stories260K:
// tok512.model) as the tokenizer a worker serves with `--model stories260K.bin`
// (ModelFileTokenizer): it has the vocabulary of tok512.vocab, tokenizes the reference prompts to
// the reference ids, decodes the reference text, and agrees with the GGUF file's embedded
// tokenizer (tokenizer.ggml.*, converted by llama.cpp from the same vocabulary) on spaces,
// newlines, unicode and byte fallback, except where tok512.model's normalizer_spec asks for
// remove_extra_whitespaces, which llama.cpp ignores. Skips without the test data.

#include <algorithm>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/tokenizer/sentencepiece_model.h"
#include "common/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "tests/testing/testdata_models.h"
#include "worker/model/gguf_tokenizer.h"
#include "worker/model/model_loader.h"

namespace llmserve::worker {
namespace {

using ::llmserve::common::tokenizer::Tokenizer;
using ::llmserve::common::tokenizer::TokenizerFiles;
using ::llmserve::testing::ModelsDir;

std::unique_ptr<Tokenizer> Build(const absl::StatusOr<TokenizerFiles>& files) {
  EXPECT_TRUE(files.ok()) << files.status();
  if (!files.ok()) return nullptr;
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok =
      Tokenizer::FromJson(files->tokenizer_json, files->tokenizer_config_json);
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? *std::move(tok) : nullptr;
}

class Llama2cTokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    dir_ = ModelsDir("stories260K", &why);
    if (dir_.empty()) GTEST_SKIP() << why;
    // What the worker serves next to the checkpoint: tok512.model is the only .model there.
    spm_ = Build(ModelFileTokenizer(dir_ + "/stories260K.bin"));
    gguf_ = Build(TokenizerFilesFromGgufPath(dir_ + "/gguf/stories260K-f32.gguf"));
    ASSERT_NE(spm_, nullptr);
    ASSERT_NE(gguf_, nullptr);
  }

  std::string dir_;
  std::unique_ptr<Tokenizer> spm_;
  std::unique_ptr<Tokenizer> gguf_;
};

TEST_F(Llama2cTokenizerTest, PiecesAreTok512Vocab) {
  std::ifstream vocab(dir_ + "/tok512.vocab");
  std::string line;
  int32_t id = 0;
  while (std::getline(vocab, line)) {
    EXPECT_EQ(spm_->IdToToken(id), line.substr(0, line.find('\t'))) << "id " << id;
    ++id;
  }
  EXPECT_EQ(id, 512);
  EXPECT_EQ(spm_->vocab_size(), 512);
  EXPECT_EQ(spm_->bos_token_id(), 1);
  EXPECT_EQ(spm_->eos_token_id(), 2);
  EXPECT_EQ(spm_->prefix_special_ids(), std::vector<int32_t>{1});
}

TEST_F(Llama2cTokenizerTest, PromptsTokenizeToTheReferenceIdsAndDecodeBack) {
  const std::vector<std::pair<std::string, std::string>> prompts = {
      {"tom-60", "Tom and his dog went to the"}, {"bird-80", "The little bird wanted to fly"}};
  std::ifstream in(dir_ + "/expected/reference_greedy.jsonl");
  std::string line;
  int checked = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const nlohmann::json c = nlohmann::json::parse(line);
    std::vector<int32_t> ids = c["prompt_ids"].get<std::vector<int32_t>>();
    for (const auto& [name, text] : prompts) {
      if (c["case"] != name) continue;
      EXPECT_EQ(*spm_->Encode(text, /*add_special_tokens=*/true), ids) << name;
      EXPECT_EQ(*gguf_->Encode(text, /*add_special_tokens=*/true), ids) << name;
      ++checked;
    }
    const std::vector<int32_t> greedy = c["greedy_ids"].get<std::vector<int32_t>>();
    ids.insert(ids.end(), greedy.begin(), greedy.end());
    EXPECT_EQ(*spm_->Decode(ids, /*skip_special_tokens=*/true), c["text"].get<std::string>())
        << c["case"];
  }
  EXPECT_EQ(checked, 2);
}

TEST_F(Llama2cTokenizerTest, AgreesWithTheGgufTokenizer) {
  const std::vector<std::string> texts = {
      "Once upon a time, there was a little girl named Lily.",
      "Tom said, \"Let's go!\"\nThey went to the park.\n\nThe end.",
      "tabs\tand\ttabs",
      "\n leading newline",
      "caf\xC3\xA9 na\xC3\xAFve \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x99\x82",  // byte fallback
      "<s>Once upon</s>",
      "12345 + 678 = 13023",
      "~]|{}^`@#$%&*",
      "",
  };
  for (const std::string& text : texts) {
    SCOPED_TRACE(text);
    absl::StatusOr<std::vector<int32_t>> ids = spm_->Encode(text, /*add_special_tokens=*/true);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*ids, *gguf_->Encode(text, /*add_special_tokens=*/true));
    EXPECT_EQ(*spm_->Decode(*ids, /*skip_special_tokens=*/false),
              *gguf_->Decode(*ids, /*skip_special_tokens=*/false));
  }
  // Byte fallback really happened: the emoji is four <0xAB> byte pieces (ids 3 + byte).
  const std::vector<int32_t> emoji = *spm_->Encode("\xF0\x9F\x99\x82", false);
  EXPECT_NE(std::find(emoji.begin(), emoji.end(), 3 + 0xF0), emoji.end());
}

TEST_F(Llama2cTokenizerTest, RemoveExtraWhitespacesCollapsesSpacesWhichTheGgufKeeps) {
  // tok512.model's normalizer_spec leaves remove_extra_whitespaces at its default, true:
  // SentencePiece strips leading and trailing spaces and collapses runs of them.
  const std::vector<int32_t> plain = *spm_->Encode("Tom and his dog", true);
  EXPECT_EQ(*spm_->Encode("  Tom   and his  dog ", true), plain);
  EXPECT_NE(*gguf_->Encode("  Tom   and his  dog ", true), plain);
  // Only spaces: a newline or tab is kept.
  EXPECT_NE(*spm_->Encode("Tom\nand his dog", true), plain);
}

}  // namespace
}  // namespace llmserve::worker
