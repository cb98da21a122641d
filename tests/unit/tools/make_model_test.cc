#include <filesystem>
#include <string>

#include "common/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tools/make_model/bpe_builder.h"
#include "tools/make_model/presets.h"
#include "worker/model/model_files.h"
#include "worker/model/model_weights.h"
#include "worker/model/model_writer.h"

namespace llmserve::tools {
namespace {

TEST(BpeBuilderTest, BuildsALoadableDeterministicByteLevelTokenizer) {
  const BuiltTokenizer built = BuildByteLevelTokenizer(300);
  EXPECT_EQ(built.tokenizer_json, BuildByteLevelTokenizer(300).tokenizer_json);
  EXPECT_EQ(built.vocab_size, 256 + 300 + 4);
  auto tokenizer =
      common::tokenizer::Tokenizer::FromJson(built.tokenizer_json, built.tokenizer_config_json);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ((*tokenizer)->vocab_size(), built.vocab_size);
  EXPECT_EQ((*tokenizer)->bos_token_id(), built.bos_token_id);
  EXPECT_EQ((*tokenizer)->eos_token_id(), built.eos_token_id);
  const std::string text = "The quick brown fox says hello to the world, 42 times. Ünïcödé 😀";
  auto ids = (*tokenizer)->Encode(text, /*add_special_tokens=*/false);
  ASSERT_TRUE(ids.ok());
  // Merges were learned: common English compresses well below one token per byte.
  const std::string english = "The quick brown fox jumps over the lazy dog in the morning";
  EXPECT_LT((*tokenizer)->Encode(english, false)->size(), english.size() / 2);
  EXPECT_EQ(*(*tokenizer)->Decode(*ids, false), text);
  auto with_bos = (*tokenizer)->Encode("hi", /*add_special_tokens=*/true);
  ASSERT_TRUE(with_bos.ok());
  EXPECT_EQ(with_bos->front(), built.bos_token_id);
  auto chat = (*tokenizer)->Encode("<|im_start|>user", false);
  ASSERT_TRUE(chat.ok());
  EXPECT_EQ(chat->front(), built.vocab_size - 2);  // special tokens are matched whole
}

TEST(PresetsTest, ShapesAndUnknownNames) {
  auto small = PresetConfig("small", 700, 1, {2});
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->vocab_size, 128256);
  EXPECT_EQ(small->hidden_size, 576);
  EXPECT_EQ(small->num_layers, 30);
  EXPECT_EQ(small->num_kv_heads, 3);
  EXPECT_EQ(small->head_dim, 64);
  EXPECT_NEAR(static_cast<double>(small->NumParameters()), 180e6, 1e6);
  auto gpt2 = PresetConfig("gpt2", 700, 1, {2});
  ASSERT_TRUE(gpt2.ok());
  EXPECT_EQ(gpt2->NumParameters(), 124439808);  // GPT-2 small
  auto llama3 = PresetConfig("llama3-8b", 700, 1, {2});
  ASSERT_TRUE(llama3.ok());
  EXPECT_EQ(llama3->NumParameters(), 8030261248);  // Meta-Llama-3-8B
  EXPECT_EQ(llama3->head_dim, 128);
  EXPECT_EQ(llama3->num_kv_heads, 8);
  EXPECT_FALSE(llama3->tied_embeddings);
  auto tiny = PresetConfig("tiny", 700, 1, {2});
  ASSERT_TRUE(tiny.ok());
  EXPECT_EQ(tiny->vocab_size, 700);  // grows to the tokenizer
  auto unknown = PresetConfig("huge", 700, 1, {2});
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(unknown.status().message().find("tiny-gpt2"), absl::string_view::npos);
}

TEST(PresetsTest, EveryPresetWritesAModelThatLoads) {
  for (const std::string name : {"tiny", "tiny-gpt2"}) {
    const BuiltTokenizer built = BuildByteLevelTokenizer(100);
    auto config = PresetConfig(name, built.vocab_size, built.bos_token_id, {built.eos_token_id});
    ASSERT_TRUE(config.ok());
    const ::llmserve::testing::ScopedTempDir temp("make_model_test_" + name);
    const std::string& dir = temp.path();
    ASSERT_TRUE(worker::WriteRandomModel(*config, {.dtype = worker::DType::kBF16}, dir).ok());
    auto files = worker::ModelFiles::Open(dir);
    ASSERT_TRUE(files.ok()) << files.status();
    auto parsed =
        worker::ParseModelConfig((*files)->config_json(), (*files)->generation_config_json());
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(parsed->bos_token_id, built.bos_token_id);
    EXPECT_EQ(parsed->eos_token_ids, std::vector<int32_t>{built.eos_token_id});
    auto weights = worker::LoadModelWeights(**files, *parsed, worker::DType::kF32);
    EXPECT_TRUE(weights.ok()) << name << ": " << weights.status();
  }
}

}  // namespace
}  // namespace llmserve::tools
