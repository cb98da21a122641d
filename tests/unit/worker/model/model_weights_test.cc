#include "worker/model/model_weights.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testing/scoped_temp_dir.h"
#include "worker/model/model_files.h"
#include "worker/model/model_writer.h"
#include "worker/model/safetensors_writer.h"

namespace llmserve::worker {
namespace {

ModelConfig TinyLlama() {
  ModelConfig c;
  c.architecture = "Qwen2ForCausalLM";  // Llama family with q/k/v biases
  c.family = ModelFamily::kLlama;
  c.vocab_size = 50;
  c.hidden_size = 16;
  c.intermediate_size = 24;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 4;
  c.max_position_embeddings = c.max_model_len = 64;
  c.qkv_bias = true;
  c.eos_token_ids = {1};
  return c;
}

ModelConfig TinyGpt2() {
  ModelConfig c;
  c.architecture = "GPT2LMHeadModel";
  c.family = ModelFamily::kGpt2;
  c.vocab_size = 40;
  c.hidden_size = 8;
  c.intermediate_size = 32;
  c.num_layers = 2;
  c.num_heads = 2;
  c.num_kv_heads = 2;
  c.head_dim = 4;
  c.max_position_embeddings = c.max_model_len = 16;
  c.norm = NormKind::kLayerNorm;
  c.activation = Activation::kGeluTanh;
  c.gated_mlp = false;
  c.position = PositionKind::kLearned;
  c.qkv_bias = c.o_bias = c.mlp_bias = c.norm_bias = true;
  c.tied_embeddings = true;
  return c;
}

class ModelWeightsTest : public ::testing::Test {
 protected:
  // A fresh subdirectory of this test's temporary directory.
  std::string Dir(const std::string& name) { return temp_.File(name); }

  // Loads `dir` as written, re-reading its config.json.
  absl::StatusOr<std::unique_ptr<ModelWeights>> Load(const std::string& dir, DType dtype) {
    auto files = ModelFiles::Open(dir);
    if (!files.ok()) return files.status();
    files_ = *std::move(files);
    auto config = ParseModelConfig(files_->config_json(), files_->generation_config_json());
    if (!config.ok()) return config.status();
    return LoadModelWeights(*files_, *config, dtype);
  }

  // Element `index` of checkpoint tensor `name` as a float (the test models are written in f32).
  float CheckpointValue(const std::string& name, int64_t index) {
    const SafetensorsTensor* tensor = files_->Find(name);
    EXPECT_NE(tensor, nullptr) << name;
    float value;
    std::memcpy(&value, tensor->data + index * 4, 4);
    return value;
  }

  ::llmserve::testing::ScopedTempDir temp_{"model_weights_test"};
  std::unique_ptr<ModelFiles> files_;
};

TEST_F(ModelWeightsTest, LlamaFamilyIsFusedIntoTheRuntimeLayout) {
  const ModelConfig c = TinyLlama();
  const std::string dir = Dir("llama");
  ASSERT_TRUE(WriteRandomModel(c, {.seed = 7}, dir).ok());
  const auto weights = Load(dir, DType::kF32);
  ASSERT_TRUE(weights.ok()) << weights.status();
  const LayerWeights& l = (*weights)->layers[1];
  const int64_t h = 16, q = 16, kv = 8, inter = 24;
  EXPECT_EQ(l.qkv_weight.shape(), (std::vector<int64_t>{q + 2 * kv, h}));
  const float* qkv = l.qkv_weight.data_as<float>();
  // Row 0 is q_proj's row 0; row q is k_proj's row 0; row q + kv is v_proj's row 0.
  EXPECT_EQ(qkv[3], CheckpointValue("model.layers.1.self_attn.q_proj.weight", 3));
  EXPECT_EQ(qkv[q * h + 5], CheckpointValue("model.layers.1.self_attn.k_proj.weight", 5));
  EXPECT_EQ(qkv[(q + kv) * h + 2 * h + 1],
            CheckpointValue("model.layers.1.self_attn.v_proj.weight", 2 * h + 1));
  EXPECT_EQ(l.qkv_bias.data_as<float>()[q + 1],
            CheckpointValue("model.layers.1.self_attn.k_proj.bias", 1));
  EXPECT_EQ(l.up_weight.shape(), (std::vector<int64_t>{2 * inter, h}));
  EXPECT_EQ(l.up_weight.data_as<float>()[inter * h + 9],
            CheckpointValue("model.layers.1.mlp.up_proj.weight", 9));
  EXPECT_EQ(l.attn_norm_weight.data_as<float>()[0], 1.0f);
  EXPECT_TRUE(l.o_bias.empty());
  EXPECT_FALSE((*weights)->lm_head.empty());  // not tied
  EXPECT_EQ((*weights)->SizeBytes(), static_cast<size_t>(c.NumParameters()) * 4);
}

// A draft-model pair for speculative decoding: the same seed with fewer layers writes the full
// model's first layers and embeddings, and damping scales only the residual outputs of the later
// layers.
TEST_F(ModelWeightsTest, FewerLayersAndDampedLayersMakeADraftModelPair) {
  auto value = [&](const std::string& dir, const std::string& name, int64_t index) {
    EXPECT_TRUE(Load(dir, DType::kF32).ok()) << dir;
    return CheckpointValue(name, index);
  };
  ModelConfig c = TinyLlama();
  c.num_layers = 4;
  ASSERT_TRUE(WriteRandomModel(c, {.seed = 3}, Dir("full")).ok());
  ASSERT_TRUE(
      WriteRandomModel(c, {.seed = 3, .damp_layers_from = 2, .layer_damping = 0.25f}, Dir("damped"))
          .ok());
  c.num_layers = 2;
  ASSERT_TRUE(WriteRandomModel(c, {.seed = 3}, Dir("draft")).ok());
  for (const std::string name :
       {"model.embed_tokens.weight", "model.layers.0.self_attn.o_proj.weight",
        "model.layers.1.mlp.down_proj.weight", "model.layers.1.self_attn.q_proj.weight"}) {
    EXPECT_EQ(value(Dir("draft"), name, 5), value(Dir("full"), name, 5)) << name;
    EXPECT_EQ(value(Dir("damped"), name, 5), value(Dir("full"), name, 5)) << name;
  }
  for (const std::string name :
       {"model.layers.2.self_attn.o_proj.weight", "model.layers.3.mlp.down_proj.weight"}) {
    EXPECT_FLOAT_EQ(value(Dir("damped"), name, 7), 0.25f * value(Dir("full"), name, 7)) << name;
  }
  for (const std::string name :
       {"model.layers.2.self_attn.q_proj.weight", "model.layers.3.mlp.up_proj.weight"}) {
    EXPECT_EQ(value(Dir("damped"), name, 7), value(Dir("full"), name, 7)) << name;
  }
  // GPT-2's residual outputs are c_proj.
  const ModelConfig g = TinyGpt2();
  ASSERT_TRUE(WriteRandomModel(g, {.seed = 3}, Dir("gpt2")).ok());
  ASSERT_TRUE(
      WriteRandomModel(g, {.seed = 3, .damp_layers_from = 1, .layer_damping = 0.5f}, Dir("gpt2d"))
          .ok());
  EXPECT_FLOAT_EQ(value(Dir("gpt2d"), "h.1.mlp.c_proj.weight", 3),
                  0.5f * value(Dir("gpt2"), "h.1.mlp.c_proj.weight", 3));
  EXPECT_EQ(value(Dir("gpt2d"), "h.0.attn.c_proj.weight", 3),
            value(Dir("gpt2"), "h.0.attn.c_proj.weight", 3));
}

TEST_F(ModelWeightsTest, LoadModelDirectoryCapsTheContextLengthWithinTheModels) {
  const ModelConfig c = TinyLlama();  // max_model_len 64
  const std::string dir = Dir("directory");
  ASSERT_TRUE(WriteRandomModel(c, {.seed = 5}, dir).ok());
  auto model_len = LoadModelDirectory(dir, 0, DType::kF32);
  ASSERT_TRUE(model_len.ok()) << model_len.status();
  EXPECT_EQ((*model_len)->config.max_model_len, 64);
  auto capped = LoadModelDirectory(dir, 32, DType::kF32);
  ASSERT_TRUE(capped.ok()) << capped.status();
  EXPECT_EQ((*capped)->config.max_model_len, 32);
  for (int64_t bad : {int64_t{-1}, int64_t{65}}) {
    auto rejected = LoadModelDirectory(dir, bad, DType::kF32);
    EXPECT_EQ(rejected.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(rejected.status().message().find(absl::StrCat("max_model_len ", bad, " is outside")),
              absl::string_view::npos)
        << rejected.status();
  }
  EXPECT_EQ(LoadModelDirectory(Dir("missing"), 0, DType::kF32).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(ModelWeightsTest, Gpt2Conv1DWeightsAreTransposed) {
  const ModelConfig c = TinyGpt2();
  const std::string dir = Dir("gpt2");
  ASSERT_TRUE(WriteRandomModel(c, {.seed = 3}, dir).ok());
  const auto weights = Load(dir, DType::kF32);
  ASSERT_TRUE(weights.ok()) << weights.status();
  const LayerWeights& l = (*weights)->layers[0];
  const int64_t h = 8, inter = 32;
  // Runtime [out, in][o][i] equals checkpoint [in, out][i][o].
  const int64_t o = 13, i = 5;
  EXPECT_EQ(l.qkv_weight.data_as<float>()[o * h + i],
            CheckpointValue("h.0.attn.c_attn.weight", i * 3 * h + o));
  EXPECT_EQ(l.down_weight.data_as<float>()[3 * inter + 17],
            CheckpointValue("h.0.mlp.c_proj.weight", 17 * h + 3));
  EXPECT_TRUE((*weights)->lm_head.empty());
  EXPECT_EQ(&(*weights)->LmHead(), &(*weights)->token_embedding);
  EXPECT_EQ((*weights)->position_embedding.shape(), (std::vector<int64_t>{16, 8}));
}

TEST_F(ModelWeightsTest, ConvertsToCompressedDTypes) {
  const std::string dir = Dir("bf16");
  ASSERT_TRUE(WriteRandomModel(TinyLlama(), {.dtype = DType::kF16, .seed = 1}, dir).ok());
  const auto weights = Load(dir, DType::kBF16);
  ASSERT_TRUE(weights.ok()) << weights.status();
  EXPECT_EQ((*weights)->layers[0].qkv_weight.dtype(), DType::kBF16);
  EXPECT_EQ((*weights)->layers[0].attn_norm_weight.dtype(), DType::kF32);
  const uint16_t half = *reinterpret_cast<const uint16_t*>(
      files_->Find("model.layers.0.self_attn.o_proj.weight")->data);
  const uint16_t bf16 = (*weights)->layers[0].o_weight.data_as<uint16_t>()[0];
  EXPECT_NEAR(BFloat16ToFloat(bf16), HalfToFloat(half), 1e-3);
}

TEST_F(ModelWeightsTest, ShardedCheckpointsLoad) {
  const std::string dir = Dir("sharded");
  ASSERT_TRUE(WriteRandomModel(TinyLlama(), {.seed = 2, .max_shard_bytes = 4096}, dir).ok());
  EXPECT_TRUE(std::filesystem::exists(dir + "/model.safetensors.index.json"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/model.safetensors"));
  const auto weights = Load(dir, DType::kF32);
  ASSERT_TRUE(weights.ok()) << weights.status();
}

// Rewrites the single-file checkpoint of `dir` through `edit`.
template <typename Edit>
void EditCheckpoint(const std::string& dir, Edit edit) {
  auto files = ModelFiles::Open(dir);
  ASSERT_TRUE(files.ok());
  SafetensorsWriter writer;
  for (const SafetensorsTensor* t : (*files)->AllTensors()) {
    writer.Add(t->name, t->dtype, t->shape,
               std::string(reinterpret_cast<const char*>(t->data), t->size));
  }
  edit(writer);
  files->reset();
  ASSERT_TRUE(writer.WriteFile(dir + "/model.safetensors").ok());
}

TEST_F(ModelWeightsTest, ReportsMissingWrongAndUnexpectedTensors) {
  const std::string dir = Dir("broken");
  ASSERT_TRUE(WriteRandomModel(TinyLlama(), {.seed = 5}, dir).ok());
  EditCheckpoint(dir, [](SafetensorsWriter& w) {
    w.Add("model.layers.0.self_attn.rotary_emb.inv_freq", "F32", {2}, std::string(8, '\0'));
  });
  EXPECT_TRUE(Load(dir, DType::kF32).ok()) << "known unused buffers are skipped";

  EditCheckpoint(dir, [](SafetensorsWriter& w) {
    w.Add("model.layers.0.mystery.weight", "F32", {2}, std::string(8, '\0'));
  });
  auto loaded = Load(dir, DType::kF32);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("unexpected tensors for this config: "
                                           "model.layers.0.mystery.weight"),
            absl::string_view::npos)
      << loaded.status();

  ASSERT_TRUE(WriteRandomModel(TinyLlama(), {.seed = 5}, dir).ok());
  EditCheckpoint(dir, [](SafetensorsWriter& w) {
    w.Add("model.layers.1.mlp.down_proj.weight", "F32", {16, 23}, std::string(16 * 23 * 4, '\0'));
  });
  loaded = Load(dir, DType::kF32);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(
      loaded.status().message().find(
          "tensor 'model.layers.1.mlp.down_proj.weight' has shape [16, 23], expected [16, 24]"),
      absl::string_view::npos)
      << loaded.status();

  ASSERT_TRUE(WriteRandomModel(TinyLlama(), {.seed = 5}, dir).ok());
  EditCheckpoint(dir, [](SafetensorsWriter& w) {
    w.Add("model.norm.weight", "I32", {16}, std::string(64, '\0'));
  });
  loaded = Load(dir, DType::kF32);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("'model.norm.weight': unsupported tensor dtype 'I32'"),
            absl::string_view::npos)
      << loaded.status();

  // A config that expects more layers than the checkpoint has.
  std::ofstream(dir + "/config.json") << ModelConfigToJson([] {
    ModelConfig c = TinyLlama();
    c.num_layers = 3;
    return c;
  }());
  loaded = Load(dir, DType::kF32);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(
      loaded.status().message().find("'model.layers.2.input_layernorm.weight' [16] is missing"),
      absl::string_view::npos)
      << loaded.status();
}

TEST_F(ModelWeightsTest, BadDirectoriesAndIndexes) {
  auto missing = ModelFiles::Open(Dir("nothing_here"));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);

  const std::string dir = Dir("index");
  ASSERT_TRUE(WriteRandomModel(TinyLlama(), {.seed = 2, .max_shard_bytes = 4096}, dir).ok());
  const std::string index = dir + "/model.safetensors.index.json";
  std::ofstream(index) << R"({"weight_map": {"model.norm.weight": "../../etc/passwd"}})";
  auto opened = ModelFiles::Open(dir);
  ASSERT_FALSE(opened.ok());
  EXPECT_NE(opened.status().message().find("must be a file name in the directory"),
            absl::string_view::npos)
      << opened.status();

  std::ofstream(index)
      << R"({"weight_map": {"model.norm.weight": "model-00001-of-00099.safetensors"}})";
  opened = ModelFiles::Open(dir);
  EXPECT_EQ(opened.status().code(), absl::StatusCode::kNotFound) << opened.status();

  std::ofstream(index) << R"({"weight_map": {"model.norm.weight": "model-00001-of-)"
                       << "00000.safetensors\"}}";
  opened = ModelFiles::Open(dir);
  EXPECT_FALSE(opened.ok());

  std::ofstream(index) << "{}";
  opened = ModelFiles::Open(dir);
  ASSERT_FALSE(opened.ok());
  EXPECT_NE(opened.status().message().find("'weight_map' must be a non-empty object"),
            absl::string_view::npos);
}

}  // namespace
}  // namespace llmserve::worker
