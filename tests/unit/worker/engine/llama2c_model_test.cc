// The real llama2.c checkpoint ($LLMSERVE_TESTDATA/models/stories260K/stories260K.bin, README.md
// there) through LoadModel and the CPU engine:
// - it reproduces expected/reference_greedy.jsonl's greedy ids exactly in f32, each prompt alone
//   and all of them batched in one engine (the checks gguf_model_test makes of the GGUF file,
//   through the same helpers);
// - its weights equal, bit for bit, those of stories260K-f32.gguf, which llama.cpp converted from
//   the same checkpoint: the Q/K rows are permuted exactly as the GGUF loader permutes them.
// - written out as a Hugging Face directory (WriteHuggingFaceDirectory, what
//   `llmserve-make-model --from-llama2c` does) with tok512.model's tokenizer, it loads as a
//   directory and gives the same greedy ids, and its tokenizer.json the reference prompt ids.
// Skips with a message when LLMSERVE_TESTDATA is unset or lacks the model.

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/tokenizer/sentencepiece_model.h"
#include "common/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tests/testing/testdata_models.h"
#include "tests/unit/worker/engine/greedy_generation.h"
#include "tests/unit/worker/engine/stories_reference.h"
#include "worker/model/hf_export.h"
#include "worker/model/model_loader.h"

namespace llmserve::worker {
namespace {

using ::llmserve::testing::ModelsDir;
using ::llmserve::worker::testing::kStoriesContext;
using ::llmserve::worker::testing::ReadReference;
using ::llmserve::worker::testing::ReferenceCase;
using ::llmserve::worker::testing::StoriesOptions;

TEST(Llama2cStoriesEngineTest, ConfigComesFromTheHeader) {
  std::string why;
  const std::string dir = ModelsDir("stories260K", &why);
  if (dir.empty()) GTEST_SKIP() << why;
  absl::StatusOr<ModelConfig> config = LoadModelConfig(dir + "/stories260K.bin", 0);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->architecture, "LlamaForCausalLM");
  EXPECT_EQ(config->hidden_size, 64);
  EXPECT_EQ(config->intermediate_size, 172);
  EXPECT_EQ(config->num_layers, 5);
  EXPECT_EQ(config->num_heads, 8);
  EXPECT_EQ(config->num_kv_heads, 4);
  EXPECT_EQ(config->head_dim, 8);
  EXPECT_EQ(config->vocab_size, 512);
  EXPECT_EQ(config->max_model_len, kStoriesContext);
  EXPECT_TRUE(config->tied_embeddings);
  EXPECT_EQ(config->bos_token_id, 1);
  EXPECT_EQ(config->eos_token_ids, (std::vector<int32_t>{2, 1}));
}

TEST(Llama2cStoriesEngineTest, F32ReproducesTheReferenceGreedyIdsAlone) {
  std::string why;
  const std::string dir = ModelsDir("stories260K", &why);
  if (dir.empty()) GTEST_SKIP() << why;
  testing::ExpectTheReferenceGreedyIds(dir, dir + "/stories260K.bin", /*batched=*/false);
}

TEST(Llama2cStoriesEngineTest, F32ReproducesTheReferenceGreedyIdsBatched) {
  std::string why;
  const std::string dir = ModelsDir("stories260K", &why);
  if (dir.empty()) GTEST_SKIP() << why;
  testing::ExpectTheReferenceGreedyIds(dir, dir + "/stories260K.bin", /*batched=*/true);
}

// Tensors equal in shape, dtype and every byte (both hold the same f32 values).
void ExpectSameTensor(const Tensor& got, const Tensor& want, const std::string& name) {
  ASSERT_EQ(got.shape(), want.shape()) << name;
  ASSERT_EQ(got.dtype(), want.dtype()) << name;
  if (want.empty()) return;
  EXPECT_EQ(std::memcmp(got.data(), want.data(), want.SizeBytes()), 0) << name;
}

TEST(Llama2cStoriesEngineTest, WeightsEqualTheGgufConversionsBitForBit) {
  std::string why;
  const std::string dir = ModelsDir("stories260K", &why);
  if (dir.empty()) GTEST_SKIP() << why;
  absl::StatusOr<std::unique_ptr<ModelWeights>> bin =
      LoadModel(dir + "/stories260K.bin", kStoriesContext, DType::kF32);
  ASSERT_TRUE(bin.ok()) << bin.status();
  absl::StatusOr<std::unique_ptr<ModelWeights>> gguf =
      LoadModel(dir + "/gguf/stories260K-f32.gguf", kStoriesContext, DType::kF32);
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  ExpectSameTensor((*bin)->token_embedding, (*gguf)->token_embedding, "token_embedding");
  ExpectSameTensor((*bin)->final_norm_weight, (*gguf)->final_norm_weight, "final_norm");
  // The GGUF file stores a copy of the tied classifier as output.weight.
  ExpectSameTensor((*bin)->LmHead(), (*gguf)->LmHead(), "LM head");
  ASSERT_EQ((*bin)->layers.size(), (*gguf)->layers.size());
  for (size_t i = 0; i < (*bin)->layers.size(); ++i) {
    const LayerWeights& b = (*bin)->layers[i];
    const LayerWeights& g = (*gguf)->layers[i];
    const std::string layer = "layer " + std::to_string(i) + " ";
    ExpectSameTensor(b.attn_norm_weight, g.attn_norm_weight, layer + "attn_norm");
    ExpectSameTensor(b.qkv_weight, g.qkv_weight, layer + "qkv");
    ExpectSameTensor(b.o_weight, g.o_weight, layer + "o");
    ExpectSameTensor(b.mlp_norm_weight, g.mlp_norm_weight, layer + "mlp_norm");
    ExpectSameTensor(b.up_weight, g.up_weight, layer + "gate/up");
    ExpectSameTensor(b.down_weight, g.down_weight, layer + "down");
  }
}

TEST(Llama2cStoriesEngineTest, AsAHuggingFaceDirectoryItGivesTheSameIds) {
  std::string why;
  const std::string dir = ModelsDir("stories260K", &why);
  if (dir.empty()) GTEST_SKIP() << why;
  absl::StatusOr<std::unique_ptr<ModelWeights>> bin =
      LoadModel(dir + "/stories260K.bin", 0, DType::kF32);
  ASSERT_TRUE(bin.ok()) << bin.status();
  absl::StatusOr<common::tokenizer::SentencePieceModel> spm =
      common::tokenizer::ReadSentencePieceModel(dir + "/tok512.model");
  ASSERT_TRUE(spm.ok()) << spm.status();
  const common::tokenizer::TokenizerFiles files =
      common::tokenizer::TokenizerFilesFromSentencePiece(*spm);
  ::llmserve::testing::ScopedTempDir temp("llama2c_hf");
  const std::string out = temp.path() + "/stories260K";
  ASSERT_TRUE(WriteHuggingFaceDirectory(**bin, &files, out).ok());
  EXPECT_EQ(*DetectModelFormat(out), ModelFormat::kHuggingFaceDirectory);
  const std::vector<ReferenceCase> cases = ReadReference(dir);
  ASSERT_GE(cases.size(), 3u);
  for (const ReferenceCase& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(
        testing::GreedyTokens(StoriesOptions(out), c.prompt, static_cast<int32_t>(c.greedy.size())),
        c.greedy);
  }
  absl::StatusOr<std::unique_ptr<common::tokenizer::Tokenizer>> tok =
      common::tokenizer::Tokenizer::FromDirectory(out);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ(*(*tok)->Encode("Tom and his dog went to the", true), cases[1].prompt);
  EXPECT_EQ((*bin)->config.eos_token_ids, (*LoadModelConfig(out, 0)).eos_token_ids);
}

}  // namespace
}  // namespace llmserve::worker
