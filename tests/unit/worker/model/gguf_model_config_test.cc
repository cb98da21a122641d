// ModelConfigFromGguf: llama.cpp's metadata keys and tensor names to a ModelConfig, on files built
// by the test writer and on the real stories260K GGUF files (skipped without LLMSERVE_TESTDATA).

#include "worker/model/gguf_model_config.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/gguf_writer.h"
#include "tests/testing/parsed_gguf.h"
#include "tests/testing/testdata_models.h"

namespace llmserve::worker {
namespace {

using ::llmserve::testing::GgufWriter;
using ::llmserve::testing::ParsedGguf;
using ::llmserve::testing::ParseGgufBytes;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

absl::StatusOr<ModelConfig> ConfigOf(const GgufWriter& writer) {
  const ParsedGguf parsed = ParseGgufBytes(writer.Build(), "m.gguf");
  EXPECT_TRUE(parsed.file.ok()) << parsed.file.status();
  if (!parsed.file.ok()) return absl::InternalError("the test file does not parse");
  return ModelConfigFromGguf(**parsed.file);
}

// A Llama-shaped file: hidden 16, 4 heads of 4, 2 KV heads, FFN 24, 2 layers, vocabulary 10.
GgufWriter Llama(const std::string& arch = "llama") {
  GgufWriter w;
  w.AddString("general.architecture", arch);
  w.AddU32(arch + ".context_length", 256).AddU32(arch + ".embedding_length", 16);
  w.AddU32(arch + ".feed_forward_length", 24).AddU32(arch + ".block_count", 2);
  w.AddU32(arch + ".attention.head_count", 4).AddU32(arch + ".attention.head_count_kv", 2);
  w.AddF32(arch + ".attention.layer_norm_rms_epsilon", 1e-6f);
  w.AddU32("tokenizer.ggml.bos_token_id", 1).AddU32("tokenizer.ggml.eos_token_id", 2);
  w.AddF32Tensor("token_embd.weight", {16, 10});
  return w;
}

TEST(GgufModelConfigTest, Llama) {
  GgufWriter w = Llama();
  w.AddF32("llama.rope.freq_base", 500000.0f).AddU32("llama.rope.dimension_count", 4);
  w.AddU32("tokenizer.ggml.eot_token_id", 9).AddU32("tokenizer.ggml.padding_token_id", 0xffffffff);
  absl::StatusOr<ModelConfig> c = ConfigOf(w);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, "LlamaForCausalLM");
  EXPECT_EQ(c->family, ModelFamily::kLlama);
  EXPECT_EQ(c->hidden_size, 16);
  EXPECT_EQ(c->intermediate_size, 24);
  EXPECT_EQ(c->num_layers, 2);
  EXPECT_EQ(c->num_heads, 4);
  EXPECT_EQ(c->num_kv_heads, 2);
  EXPECT_EQ(c->head_dim, 4);
  EXPECT_EQ(c->vocab_size, 10);
  EXPECT_EQ(c->max_position_embeddings, 256);
  EXPECT_EQ(c->max_model_len, 256);
  EXPECT_EQ(c->norm, NormKind::kRmsNorm);
  EXPECT_EQ(c->norm_eps, static_cast<double>(1e-6f));
  EXPECT_EQ(c->rope_theta, 500000.0);
  EXPECT_EQ(c->rope_scaling.kind, RopeScaling::Kind::kNone);
  EXPECT_EQ(c->activation, Activation::kSilu);
  EXPECT_TRUE(c->gated_mlp);
  EXPECT_FALSE(c->qkv_bias || c->o_bias || c->mlp_bias);
  EXPECT_TRUE(c->tied_embeddings);  // no output.weight
  EXPECT_EQ(c->bos_token_id, 1);
  EXPECT_THAT(c->eos_token_ids, ElementsAre(2, 9));
}

TEST(GgufModelConfigTest, DefaultsAndTensorDerivedFields) {
  GgufWriter w;
  w.AddString("general.architecture", "llama");
  w.AddU32("llama.context_length", 64).AddU32("llama.embedding_length", 8);
  w.AddU32("llama.feed_forward_length", 8).AddU32("llama.block_count", 1);
  w.AddU32("llama.attention.head_count", 2);
  w.AddF32Tensor("token_embd.weight", {8, 5}).AddF32Tensor("output.weight", {8, 5});
  w.AddF32Tensor("blk.0.attn_q.bias", {8}).AddF32Tensor("blk.0.ffn_up.bias", {8});
  absl::StatusOr<ModelConfig> c = ConfigOf(w);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->num_kv_heads, 2);
  EXPECT_EQ(c->rope_theta, 10000.0);
  EXPECT_EQ(c->norm_eps, 1e-5);
  EXPECT_FALSE(c->tied_embeddings);
  EXPECT_TRUE(c->qkv_bias);
  EXPECT_FALSE(c->o_bias);
  EXPECT_TRUE(c->mlp_bias);
  EXPECT_EQ(c->bos_token_id, -1);
  EXPECT_TRUE(c->eos_token_ids.empty());
}

TEST(GgufModelConfigTest, Qwen2AndGpt2) {
  GgufWriter qwen2 = Llama("qwen2");
  qwen2.AddF32Tensor("blk.0.attn_q.bias", {16});
  absl::StatusOr<ModelConfig> c = ConfigOf(qwen2);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, "Qwen2ForCausalLM");
  EXPECT_TRUE(c->qkv_bias);

  GgufWriter gpt2;
  gpt2.AddString("general.architecture", "gpt2");
  gpt2.AddU32("gpt2.context_length", 32).AddU32("gpt2.embedding_length", 8);
  gpt2.AddU32("gpt2.feed_forward_length", 32).AddU32("gpt2.block_count", 1);
  gpt2.AddU32("gpt2.attention.head_count", 2).AddF32("gpt2.attention.layer_norm_epsilon", 1e-5f);
  gpt2.AddF32Tensor("token_embd.weight", {8, 7});
  c = ConfigOf(gpt2);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, "GPT2LMHeadModel");
  EXPECT_EQ(c->family, ModelFamily::kGpt2);
  EXPECT_EQ(c->norm, NormKind::kLayerNorm);
  EXPECT_EQ(c->position, PositionKind::kLearned);
  EXPECT_FALSE(c->gated_mlp);
  EXPECT_TRUE(c->qkv_bias && c->o_bias && c->mlp_bias && c->norm_bias);
  EXPECT_EQ(c->vocab_size, 7);
}

TEST(GgufModelConfigTest, RopeScaling) {
  GgufWriter linear = Llama();
  linear.AddString("llama.rope.scaling.type", "linear").AddF32("llama.rope.scaling.factor", 4);
  absl::StatusOr<ModelConfig> c = ConfigOf(linear);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_scaling.kind, RopeScaling::Kind::kLinear);
  EXPECT_EQ(c->rope_scaling.factor, 4.0);

  GgufWriter yarn = Llama();
  yarn.AddString("llama.rope.scaling.type", "yarn");
  EXPECT_EQ(ConfigOf(yarn).status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(ConfigOf(yarn).status().message(),
              HasSubstr("llama.rope.scaling.type 'yarn' is not supported (none, linear)"));
  GgufWriter llama3 = Llama();
  llama3.AddF32Tensor("rope_freqs.weight", {2});
  EXPECT_THAT(ConfigOf(llama3).status().message(), HasSubstr("rope_freqs.weight"));
  GgufWriter partial = Llama();
  partial.AddU32("llama.rope.dimension_count", 2);
  EXPECT_THAT(ConfigOf(partial).status().message(),
              HasSubstr("llama.rope.dimension_count 2 is a partial rotary embedding"));
}

TEST(GgufModelConfigTest, ErrorsNameTheKey) {
  GgufWriter other;
  other.AddString("general.architecture", "falcon");
  EXPECT_EQ(ConfigOf(other).status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(ConfigOf(other).status().message(),
              HasSubstr("m.gguf: general.architecture 'falcon' is not supported (llama, qwen2, "
                        "gpt2)"));
  EXPECT_THAT(ConfigOf(GgufWriter()).status().message(),
              HasSubstr("metadata key 'general.architecture' is missing"));

  GgufWriter missing;
  missing.AddString("general.architecture", "llama").AddU32("llama.embedding_length", 16);
  EXPECT_THAT(ConfigOf(missing).status().message(),
              HasSubstr("m.gguf: llama.feed_forward_length is required"));
  GgufWriter kv;
  kv.AddString("general.architecture", "llama").AddU32("llama.context_length", 8);
  kv.AddU32("llama.embedding_length", 12).AddU32("llama.feed_forward_length", 8);
  kv.AddU32("llama.block_count", 1).AddU32("llama.attention.head_count", 3);
  kv.AddU32("llama.attention.head_count_kv", 2);
  kv.AddF32Tensor("token_embd.weight", {12, 4});
  EXPECT_THAT(ConfigOf(kv).status().message(),
              HasSubstr("llama.attention.head_count must be a multiple of "
                        "attention.head_count_kv"));
  GgufWriter typed;
  typed.AddString("general.architecture", "llama").AddString("llama.embedding_length", "16");
  EXPECT_THAT(ConfigOf(typed).status().message(),
              HasSubstr("metadata key 'llama.embedding_length' has type string, expected an "
                        "integer"));
  GgufWriter wrong_embedding;
  wrong_embedding.AddString("general.architecture", "llama");
  wrong_embedding.AddU32("llama.context_length", 8).AddU32("llama.embedding_length", 16);
  wrong_embedding.AddU32("llama.feed_forward_length", 8).AddU32("llama.block_count", 1);
  wrong_embedding.AddU32("llama.attention.head_count", 4);
  wrong_embedding.AddF32Tensor("token_embd.weight", {8, 10});
  EXPECT_THAT(ConfigOf(wrong_embedding).status().message(),
              HasSubstr("token_embd.weight must be [16, vocabulary of at most 16777216], not "
                        "[8, 10]"));
  GgufWriter eos = Llama();
  eos.AddU32("tokenizer.ggml.eot_token_id", 10);
  EXPECT_THAT(ConfigOf(eos).status().message(),
              HasSubstr("tokenizer.ggml.eot_token_id 10 is outside the vocabulary of 10 tokens"));
  GgufWriter eps = Llama();
  eps.AddF32("llama.attention.layer_norm_epsilon", 2.0f);  // gpt2's key: ignored for llama
  EXPECT_TRUE(ConfigOf(eps).ok());
}

TEST(GgufModelConfigTest, Stories260K) {
  std::string why;
  const std::string dir = ::llmserve::testing::ModelsDir("stories260K", &why);
  if (dir.empty()) GTEST_SKIP() << why;
  for (const char* name : {"f32", "F16", "Q4_K_M"}) {
    SCOPED_TRACE(name);
    const std::string path = absl::StrCat(dir, "/gguf/stories260K-", name, ".gguf");
    absl::StatusOr<std::unique_ptr<gguf::GgufFile>> file = gguf::GgufFile::Open(path);
    if (!file.ok() && file.status().code() == absl::StatusCode::kNotFound) {
      GTEST_SKIP() << path << " does not exist";
    }
    ASSERT_TRUE(file.ok()) << file.status();
    absl::StatusOr<ModelConfig> c = ModelConfigFromGguf(**file);
    ASSERT_TRUE(c.ok()) << c.status();
    // The model card (README.md there): dim 64, FFN 172, 5 layers, 8 heads, 4 KV heads, head
    // size 8, vocabulary 512, RMSNorm eps 1e-5, RoPE theta 10000, BOS 1, EOS 2. The context is
    // llama.cpp's converter default (128); output.weight is stored, so not tied in the file.
    EXPECT_EQ(c->architecture, "LlamaForCausalLM");
    EXPECT_EQ(c->hidden_size, 64);
    EXPECT_EQ(c->intermediate_size, 172);
    EXPECT_EQ(c->num_layers, 5);
    EXPECT_EQ(c->num_heads, 8);
    EXPECT_EQ(c->num_kv_heads, 4);
    EXPECT_EQ(c->head_dim, 8);
    EXPECT_EQ(c->vocab_size, 512);
    EXPECT_EQ(c->max_position_embeddings, 128);
    EXPECT_NEAR(c->norm_eps, 1e-5, 1e-12);
    EXPECT_EQ(c->rope_theta, 10000.0);
    EXPECT_FALSE(c->tied_embeddings);
    EXPECT_FALSE(c->qkv_bias);
    EXPECT_EQ(c->bos_token_id, 1);
    EXPECT_THAT(c->eos_token_ids, ElementsAre(2));
  }
}

}  // namespace
}  // namespace llmserve::worker
