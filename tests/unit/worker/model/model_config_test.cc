#include "worker/model/model_config.h"

#include <string>

#include "gtest/gtest.h"
#include "worker/model/model_writer.h"

namespace llmserve::worker {
namespace {

// openai-community/gpt2's config.json, abridged to the fields that matter.
constexpr char kGpt2Config[] = R"({
  "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": 50257,
  "n_embd": 768, "n_head": 12, "n_layer": 12, "n_positions": 1024, "n_inner": null,
  "activation_function": "gelu_new", "layer_norm_epsilon": 1e-05,
  "bos_token_id": 50256, "eos_token_id": 50256})";

// meta-llama/Llama-3.2-1B's config.json, abridged.
constexpr char kLlama32Config[] = R"({
  "architectures": ["LlamaForCausalLM"], "vocab_size": 128256, "hidden_size": 2048,
  "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32,
  "num_key_value_heads": 8, "head_dim": 64, "max_position_embeddings": 131072,
  "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "hidden_act": "silu",
  "attention_bias": false, "mlp_bias": false, "tie_word_embeddings": true,
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "bos_token_id": 128000, "eos_token_id": 128001})";

TEST(ModelConfigTest, Gpt2) {
  const auto c = ParseModelConfig(kGpt2Config, "");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->family, ModelFamily::kGpt2);
  EXPECT_EQ(c->hidden_size, 768);
  EXPECT_EQ(c->intermediate_size, 3072);  // n_inner null: 4 * n_embd
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_EQ(c->num_kv_heads, 12);
  EXPECT_EQ(c->norm, NormKind::kLayerNorm);
  EXPECT_EQ(c->activation, Activation::kGeluTanh);
  EXPECT_EQ(c->position, PositionKind::kLearned);
  EXPECT_FALSE(c->gated_mlp);
  EXPECT_TRUE(c->qkv_bias && c->o_bias && c->mlp_bias && c->norm_bias);
  EXPECT_TRUE(c->tied_embeddings);
  EXPECT_EQ(c->max_model_len, 1024);
  EXPECT_EQ(c->eos_token_ids, std::vector<int32_t>{50256});
  EXPECT_EQ(c->NumParameters(), 124439808);  // GPT-2 small's published parameter count
}

TEST(ModelConfigTest, Llama3WithRopeScalingAndGenerationConfigEos) {
  const auto c = ParseModelConfig(kLlama32Config, R"({"eos_token_id": [128001, 128008, 128009]})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->family, ModelFamily::kLlama);
  EXPECT_EQ(c->num_kv_heads, 8);
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_EQ(c->rope_theta, 500000.0);
  EXPECT_EQ(c->rope_scaling.kind, RopeScaling::Kind::kLlama3);
  EXPECT_EQ(c->rope_scaling.factor, 32.0);
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(c->bos_token_id, 128000);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int32_t>{128001, 128008, 128009}));
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_EQ(c->NumParameters(), 1235814400);  // Llama-3.2-1B
}

TEST(ModelConfigTest, MistralSlidingWindowCapsContextAndQwen2HasQkvBias) {
  const auto mistral = ParseModelConfig(R"({
    "architectures": ["MistralForCausalLM"], "vocab_size": 32000, "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "max_position_embeddings": 32768, "sliding_window": 4096})",
                                        "");
  ASSERT_TRUE(mistral.ok()) << mistral.status();
  EXPECT_EQ(mistral->max_model_len, 4096);
  EXPECT_EQ(mistral->head_dim, 16);

  const auto qwen = ParseModelConfig(R"({
    "architectures": ["Qwen2ForCausalLM"], "vocab_size": 151936, "hidden_size": 896,
    "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
    "num_key_value_heads": 2, "max_position_embeddings": 32768, "sliding_window": 32768,
    "use_sliding_window": false, "rope_theta": 1000000.0, "rms_norm_eps": 1e-06,
    "tie_word_embeddings": true})",
                                     "");
  ASSERT_TRUE(qwen.ok()) << qwen.status();
  EXPECT_TRUE(qwen->qkv_bias);
  EXPECT_FALSE(qwen->o_bias);
  EXPECT_EQ(qwen->max_model_len, 32768);
  EXPECT_EQ(qwen->NumParameters(), 494032768);  // Qwen2-0.5B
}

void ExpectError(const std::string& config, absl::StatusCode code, const std::string& fragment) {
  const auto parsed = ParseModelConfig(config, "");
  ASSERT_FALSE(parsed.ok()) << config;
  EXPECT_EQ(parsed.status().code(), code) << parsed.status();
  EXPECT_NE(parsed.status().message().find(fragment), absl::string_view::npos)
      << parsed.status().message();
}

TEST(ModelConfigTest, ClearErrors) {
  using absl::StatusCode;
  ExpectError("not json", StatusCode::kInvalidArgument, "config.json is not JSON");
  ExpectError("[]", StatusCode::kInvalidArgument, "not a JSON object");
  ExpectError("{}", StatusCode::kInvalidArgument, "'architectures'");
  ExpectError(R"({"architectures": ["BertModel"], "vocab_size": 10})", StatusCode::kUnimplemented,
              "architecture 'BertModel' is not supported");
  ExpectError(R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 10})",
              StatusCode::kInvalidArgument, "'hidden_size' is required");
  ExpectError(R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 10, "hidden_size": -4})",
              StatusCode::kInvalidArgument, "'hidden_size' is -4, outside");
  ExpectError(R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 10, "hidden_size": "x"})",
              StatusCode::kInvalidArgument, "'hidden_size' must be an integer");
  const std::string base = R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 10,
      "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
      "max_position_embeddings": 128, )";
  ExpectError(base + R"("num_attention_heads": 6, "num_key_value_heads": 4})",
              StatusCode::kInvalidArgument, "multiple of num_key_value_heads");
  ExpectError(base + R"("num_attention_heads": 4, "hidden_act": "relu"})",
              StatusCode::kUnimplemented, "hidden_act 'relu'");
  ExpectError(base + R"("num_attention_heads": 4, "rope_scaling": {"type": "yarn", "factor": 2}})",
              StatusCode::kUnimplemented, "rope_scaling type 'yarn'");
  ExpectError(base + R"("num_attention_heads": 4, "rms_norm_eps": 0})",
              StatusCode::kInvalidArgument, "'rms_norm_eps'");
  ExpectError(base + R"("num_attention_heads": 4, "eos_token_id": 10})",
              StatusCode::kInvalidArgument, "eos_token_id 10 is outside the vocabulary");
  ExpectError(base + R"("num_attention_heads": 4, "eos_token_id": "2"})",
              StatusCode::kInvalidArgument, "'eos_token_id' must be a non-negative token id");
}

TEST(ModelConfigTest, WriterOutputParsesBackToTheSameConfig) {
  const auto original = ParseModelConfig(kLlama32Config, R"({"eos_token_id": [128001, 128009]})");
  ASSERT_TRUE(original.ok());
  const auto again = ParseModelConfig(ModelConfigToJson(*original), "");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->NumParameters(), original->NumParameters());
  EXPECT_EQ(again->rope_scaling.kind, RopeScaling::Kind::kLlama3);
  EXPECT_EQ(again->eos_token_ids, original->eos_token_ids);
  EXPECT_EQ(again->max_model_len, original->max_model_len);
  const auto gpt2 = ParseModelConfig(kGpt2Config, "");
  const auto gpt2_again = ParseModelConfig(ModelConfigToJson(*gpt2), "");
  ASSERT_TRUE(gpt2_again.ok()) << gpt2_again.status();
  EXPECT_EQ(gpt2_again->NumParameters(), gpt2->NumParameters());
}

}  // namespace
}  // namespace llmserve::worker
