// The GGUF reader on files made by llama.cpp ($LLMSERVE_TESTDATA/models, README.md there):
// - gguf-quant-zoo: every tensor of every file has the type, shape and element count recorded in
//   dequantized_samples.json, and dequantizes to llama.cpp's own reference values at 512 fixed
//   positions (exactly, as f32) with the same f64 sum and sum of squares;
// - stories260K: the metadata a loader needs (architecture, hyper-parameters, tokenizer arrays)
//   and tensors equal, byte for byte, to the llama2.c checkpoint they were converted from.
// Skips with a message when LLMSERVE_TESTDATA is unset or lacks the models.

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/testdata_models.h"
#include "worker/model/gguf/gguf_dequantize.h"
#include "worker/model/gguf/gguf_file.h"

namespace llmserve::worker::gguf {
namespace {

using ::testing::ElementsAre;

using ::llmserve::testing::ModelsDir;

const nlohmann::json& Samples(const std::string& dir) {
  static const nlohmann::json* samples = [&dir] {
    std::ifstream in(dir + "/dequantized_samples.json");
    return new nlohmann::json(nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false));
  }();
  return *samples;
}

constexpr const char* kZooFiles[] = {"zoo-f32.gguf",    "zoo-F16.gguf",    "zoo-BF16.gguf",
                                     "zoo-Q8_0.gguf",   "zoo-Q4_0.gguf",   "zoo-Q4_1.gguf",
                                     "zoo-Q5_0.gguf",   "zoo-Q5_1.gguf",   "zoo-Q4_K_S.gguf",
                                     "zoo-Q4_K_M.gguf", "zoo-Q5_K_S.gguf", "zoo-Q6_K.gguf"};

TEST(GgufQuantZooTest, SamplesCoverExactlyTheZooFiles) {
  std::string why;
  const std::string dir = ModelsDir("gguf-quant-zoo", &why);
  if (dir.empty()) GTEST_SKIP() << why;
  const nlohmann::json& samples = Samples(dir);
  ASSERT_TRUE(samples.is_object()) << "dequantized_samples.json is not a JSON object";
  std::vector<std::string> names;
  for (const auto& [name, unused] : samples.items()) names.push_back(name);
  EXPECT_THAT(names, ::testing::UnorderedElementsAreArray(kZooFiles));
}

class GgufQuantZooFileTest : public ::testing::TestWithParam<const char*> {};

TEST_P(GgufQuantZooFileTest, EveryTensorMatchesLlamaCppsDequantization) {
  std::string why;
  const std::string dir = ModelsDir("gguf-quant-zoo", &why);
  if (dir.empty()) GTEST_SKIP() << why;
  const nlohmann::json& expected = Samples(dir)[GetParam()];
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(dir + "/" + GetParam());
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ((*file)->tensors().size(), expected.size());
  for (const auto& [name, want] : expected.items()) {
    SCOPED_TRACE(name);
    const GgufTensor* tensor = (*file)->FindTensor(name);
    ASSERT_NE(tensor, nullptr);
    EXPECT_EQ(GgmlTypeInfoOf(tensor->type).name, want["type"].get<std::string>());
    EXPECT_EQ(tensor->dims, want["shape"].get<std::vector<int64_t>>());
    EXPECT_EQ(tensor->num_elements, want["n"].get<int64_t>());
    absl::StatusOr<std::vector<float>> values = DequantizeTensor(*tensor);
    ASSERT_TRUE(values.ok()) << values.status();
    const std::vector<int64_t> idx = want["idx"].get<std::vector<int64_t>>();
    const std::vector<double> val = want["val"].get<std::vector<double>>();
    ASSERT_EQ(idx.size(), val.size());
    int mismatches = 0;
    for (size_t i = 0; i < idx.size(); ++i) {
      // The reference values are f32 printed as f64: converting back is exact.
      if ((*values)[idx[i]] != static_cast<float>(val[i]) && ++mismatches <= 5) {
        ADD_FAILURE() << "element " << idx[i] << ": " << (*values)[idx[i]] << " != " << val[i];
      }
    }
    EXPECT_EQ(mismatches, 0);
    double sum = 0;
    double sum_squares = 0;
    for (const float value : *values) {
      sum += value;
      sum_squares += static_cast<double>(value) * value;
    }
    // Summation order differs (numpy sums pairwise): tolerances far above that, far below any
    // wrong value.
    const double want_sum_squares = want["sumsq"].get<double>();
    EXPECT_NEAR(sum, want["sum"].get<double>(), 1e-9 * (std::sqrt(want_sum_squares) + 1));
    EXPECT_NEAR(sum_squares, want_sum_squares, 1e-9 * want_sum_squares);
  }
}

INSTANTIATE_TEST_SUITE_P(Files, GgufQuantZooFileTest, ::testing::ValuesIn(kZooFiles),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string name = info.param;
                           name = name.substr(4, name.size() - 9);  // "zoo-" ... ".gguf"
                           return name;
                         });

class GgufStoriesTest : public ::testing::TestWithParam<const char*> {};

TEST_P(GgufStoriesTest, MetadataIsTheStories260KModel) {
  std::string why;
  const std::string dir = ModelsDir("stories260K", &why);
  if (dir.empty()) GTEST_SKIP() << why;
  absl::StatusOr<std::unique_ptr<GgufFile>> file =
      GgufFile::Open(dir + "/gguf/stories260K-" + GetParam() + ".gguf");
  ASSERT_TRUE(file.ok()) << file.status();
  const GgufMetadata& metadata = (*file)->metadata();
  EXPECT_EQ((*file)->version(), 3u);
  EXPECT_EQ((*file)->alignment(), 32u);  // no general.alignment: the default
  EXPECT_FALSE(metadata.Has("general.alignment"));
  EXPECT_EQ(*metadata.GetString("general.architecture"), "llama");
  EXPECT_EQ(*metadata.GetInt("llama.embedding_length"), 64);
  EXPECT_EQ(*metadata.GetInt("llama.feed_forward_length"), 172);
  EXPECT_EQ(*metadata.GetInt("llama.block_count"), 5);
  EXPECT_EQ(*metadata.GetInt("llama.attention.head_count"), 8);
  EXPECT_EQ(*metadata.GetInt("llama.attention.head_count_kv"), 4);
  EXPECT_EQ(*metadata.GetInt("llama.rope.dimension_count"), 8);
  // llama.cpp's llama2.c converter writes its own default context (128), not the checkpoint's
  // seq_len (512).
  EXPECT_EQ(*metadata.GetInt("llama.context_length"), 128);
  EXPECT_EQ(*metadata.GetFloat("llama.attention.layer_norm_rms_epsilon"),
            static_cast<double>(1e-5f));
  EXPECT_FALSE(metadata.Has("llama.rope.freq_base"));  // the loader's default, 10000
  EXPECT_EQ(*metadata.GetString("tokenizer.ggml.model"), "llama");
  const auto tokens = *metadata.GetStringArray("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.size(), 512u);
  EXPECT_THAT(std::vector<absl::string_view>(tokens.begin(), tokens.begin() + 4),
              ElementsAre("<unk>", "<s>", "</s>", "<0x00>"));
  const std::vector<float> scores = *metadata.GetFloatArray("tokenizer.ggml.scores");
  ASSERT_EQ(scores.size(), 512u);
  EXPECT_EQ(scores[0], 0.0f);
  EXPECT_EQ(scores[511], -252.0f);
  const std::vector<int64_t> types = *metadata.GetIntArray("tokenizer.ggml.token_type");
  ASSERT_EQ(types.size(), 512u);
  EXPECT_THAT(std::vector<int64_t>(types.begin(), types.begin() + 4), ElementsAre(2, 3, 3, 6));
  EXPECT_EQ(types[511], 1);
  EXPECT_EQ(*metadata.GetInt("tokenizer.ggml.unknown_token_id"), 0);
  EXPECT_EQ(*metadata.GetInt("tokenizer.ggml.bos_token_id"), 1);
  EXPECT_EQ(*metadata.GetInt("tokenizer.ggml.eos_token_id"), 2);
  EXPECT_EQ(*metadata.GetInt("tokenizer.ggml.padding_token_id"), 0xffffffff);  // "none"
  EXPECT_FALSE(metadata.Has("tokenizer.ggml.add_bos_token"));
  EXPECT_FALSE(metadata.Has("tokenizer.chat_template"));
  ASSERT_EQ((*file)->tensors().size(), 48u);
  const GgufTensor* embedding = *(*file)->GetTensor("token_embd.weight");
  EXPECT_THAT(embedding->dims, ElementsAre(64, 512));
  EXPECT_THAT((*(*file)->GetTensor("blk.4.attn_k.weight"))->dims, ElementsAre(64, 32));
  EXPECT_THAT((*(*file)->GetTensor("blk.0.ffn_down.weight"))->dims, ElementsAre(172, 64));
  EXPECT_EQ((*(*file)->GetTensor("output_norm.weight"))->type, GgmlType::kF32);
}

INSTANTIATE_TEST_SUITE_P(Files, GgufStoriesTest, ::testing::Values("f32", "F16", "Q4_K_M"));

TEST(GgufStoriesTest, QuantizedFileHasLlamaCppsFallbackTypes) {
  std::string why;
  const std::string dir = ModelsDir("stories260K", &why);
  if (dir.empty()) GTEST_SKIP() << why;
  absl::StatusOr<std::unique_ptr<GgufFile>> file =
      GgufFile::Open(dir + "/gguf/stories260K-Q4_K_M.gguf");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(*(*file)->metadata().GetInt("general.file_type"), 15);  // LLAMA_FTYPE_MOSTLY_Q4_K_M
  // Rows of 64 or 172 are no whole number of 256-element K-quant blocks.
  EXPECT_EQ((*(*file)->GetTensor("output.weight"))->type, GgmlType::kQ8_0);
  EXPECT_EQ((*(*file)->GetTensor("token_embd.weight"))->type, GgmlType::kQ5_0);
  EXPECT_EQ((*(*file)->GetTensor("blk.0.attn_q.weight"))->type, GgmlType::kQ5_0);
  EXPECT_EQ((*(*file)->GetTensor("blk.0.ffn_down.weight"))->type, GgmlType::kF16);
}

// llama.cpp's llama2.c converter copies the checkpoint's f32 arrays unchanged: the embedding,
// the tied classifier (written again as output.weight) and the Q projection in llama2.c's own
// row order (RoPE on adjacent pairs, as GGUF's llama expects; no Hugging Face permutation).
TEST(GgufStoriesTest, F32TensorsAreTheLlama2cCheckpointsBytes) {
  std::string why;
  const std::string dir = ModelsDir("stories260K", &why);
  if (dir.empty()) GTEST_SKIP() << why;
  std::ifstream in(dir + "/stories260K.bin", std::ios::binary);
  const std::string checkpoint((std::istreambuf_iterator<char>(in)),
                               std::istreambuf_iterator<char>());
  constexpr size_t kHeader = 7 * 4;
  constexpr size_t kDim = 64, kVocab = 512, kLayers = 5;
  ASSERT_GT(checkpoint.size(), kHeader + (kVocab + kLayers + kDim) * kDim * 4);
  const char* embedding = checkpoint.data() + kHeader;
  const char* wq = embedding + (kVocab * kDim + kLayers * kDim) * 4;  // after the attention norms
  absl::StatusOr<std::unique_ptr<GgufFile>> file =
      GgufFile::Open(dir + "/gguf/stories260K-f32.gguf");
  ASSERT_TRUE(file.ok()) << file.status();
  auto bytes_of = [&](const char* name) {
    const GgufTensor* tensor = *(*file)->GetTensor(name);
    return std::string(reinterpret_cast<const char*>(tensor->data), tensor->size);
  };
  EXPECT_EQ(bytes_of("token_embd.weight"), std::string(embedding, kVocab * kDim * 4));
  EXPECT_EQ(bytes_of("output.weight"), std::string(embedding, kVocab * kDim * 4));
  EXPECT_EQ(bytes_of("blk.0.attn_q.weight"), std::string(wq, kDim * kDim * 4));
}

}  // namespace
}  // namespace llmserve::worker::gguf
