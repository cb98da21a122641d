// AWQ and GPTQ checkpoints: each format's packing read back against words written by hand from
// the formats' definitions (AutoAWQ's interleaved nibble order, GPTQ's sequential nibbles and
// zero - 1), the 4-bit quantizer's error bound, quantization_config parsing, and whole quantized
// model directories loading into the runtime layout, with errors naming the tensor or field.

#include "worker/model/quantized_checkpoint.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testing/scoped_temp_dir.h"
#include "worker/model/model_files.h"
#include "worker/model/model_weights.h"
#include "worker/model/model_writer.h"
#include "worker/model/quantization.h"
#include "worker/model/safetensors_writer.h"

namespace llmserve::worker {
namespace {

using Method = CheckpointQuantization::Method;

std::vector<unsigned char> Words(const std::vector<uint32_t>& words) {
  std::vector<unsigned char> bytes(words.size() * 4);
  std::memcpy(bytes.data(), words.data(), bytes.size());
  return bytes;
}

std::vector<unsigned char> HalfScales(const std::vector<float>& scales) {
  std::vector<unsigned char> bytes(scales.size() * 2);
  ConvertElements(scales.data(), DType::kF32, bytes.data(), DType::kF16, scales.size());
  return bytes;
}

// Input 0 of eight outputs with values 1..8: AutoAWQ packs output 8b + kAwqOrder[n] into nibble
// n, so the nibbles from the lowest hold outputs 0, 2, 4, 6, 1, 3, 5, 7 (values 1 3 5 7 2 4 6 8).
// Inputs 1..7 are 0; one group of 8.
TEST(QuantizedCheckpointTest, AwqNibblesAreInterleaved) {
  const auto qweight = Words({0x86427531u, 0, 0, 0, 0, 0, 0, 0});
  const auto qzeros = Words({0x00000003u});  // output 0's zero is 3, the others 0
  const auto scales = HalfScales({0.5f, 1, 1, 1, 1, 1, 1, 2});
  auto w = UnpackAwq({.qweight = qweight.data(), .qzeros = qzeros.data(), .scales = scales.data()},
                     /*in=*/8, /*out=*/8, /*group=*/8, "t");
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_EQ(w->rows, 8);
  ASSERT_EQ(w->cols, 8);
  for (int o = 0; o < 8; ++o) EXPECT_EQ(w->Value(o, 1), 0);
  for (int o = 0; o < 8; ++o) EXPECT_EQ(w->Value(o, 0), o + 1) << "output " << o;
  EXPECT_EQ(w->Zero(0, 0), 3);
  EXPECT_EQ(w->Zero(1, 0), 0);
  EXPECT_FLOAT_EQ(w->Dequantized(0, 0), (1 - 3) * 0.5f);
  EXPECT_FLOAT_EQ(w->Dequantized(7, 0), 8 * 2.0f);
}

// Eight inputs of one output with values 1..8 in nibbles 0..7; zeros stored minus one, so 7 reads
// as 8 and 15 (a zero point of 0, wrapped) as 16.
TEST(QuantizedCheckpointTest, GptqNibblesAreSequentialAndZerosAreStoredMinusOne) {
  std::vector<uint32_t> qweight(8), qzeros = {0xF7777777u};
  for (int o = 0; o < 8; ++o) qweight[o] = o == 0 ? 0x87654321u : 0x11111111u * o;
  const auto qweight_bytes = Words(qweight), qzeros_bytes = Words(qzeros);
  const auto scales = HalfScales({0.25f, 1, 1, 1, 1, 1, 1, 1});
  const auto g_idx = Words({0, 0, 0, 0, 0, 0, 0, 0});
  auto w = UnpackGptq({.qweight = qweight_bytes.data(),
                       .qzeros = qzeros_bytes.data(),
                       .scales = scales.data(),
                       .g_idx = g_idx.data()},
                      /*in=*/8, /*out=*/8, /*group=*/8, "t");
  ASSERT_TRUE(w.ok()) << w.status();
  for (int i = 0; i < 8; ++i) EXPECT_EQ(w->Value(0, i), i + 1) << "input " << i;
  for (int i = 0; i < 8; ++i) EXPECT_EQ(w->Value(3, i), 3);
  for (int o = 0; o < 7; ++o) EXPECT_EQ(w->Zero(o, 0), 8);
  EXPECT_EQ(w->Zero(7, 0), 16);
  EXPECT_FLOAT_EQ(w->Dequantized(0, 7), (8 - 8) * 0.25f);
  EXPECT_FLOAT_EQ(w->Dequantized(0, 0), (1 - 8) * 0.25f);
}

TEST(QuantizedCheckpointTest, GptqRefusesActOrderAndNonFiniteScales) {
  const auto qweight = Words(std::vector<uint32_t>(16, 0)), qzeros = Words({0, 0});
  const auto scales = HalfScales(std::vector<float>(16, 1.0f));
  auto g_idx = Words({0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1});
  auto w = UnpackGptq({.qweight = qweight.data(),
                       .qzeros = qzeros.data(),
                       .scales = scales.data(),
                       .g_idx = g_idx.data()},
                      16, 8, 8, "layer.q_proj");
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("layer.q_proj.g_idx[4] is 1, expected 0"), std::string::npos)
      << w.status();

  std::vector<float> bad(8, 1.0f);
  bad[5] = NAN;
  const auto bad_scales = HalfScales(bad);
  const auto zero_words = Words(std::vector<uint32_t>(8, 0));
  auto awq = UnpackAwq(
      {.qweight = zero_words.data(), .qzeros = zero_words.data(), .scales = bad_scales.data()},
      /*in=*/8, /*out=*/8, /*group=*/8, "o_proj");
  ASSERT_FALSE(awq.ok());
  EXPECT_NE(awq.status().message().find("o_proj.scales[0, 5] is nan"), std::string::npos)
      << awq.status();
}

std::vector<float> RandomWeights(int64_t rows, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  std::vector<float> w(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    const float magnitude = r == 2 ? 0.0f : std::ldexp(1.0f, static_cast<int>(r % 4) - 3);
    for (int64_t c = 0; c < cols; ++c) w[r * cols + c] = magnitude * normal(rng);
  }
  return w;
}

bool SameMatrix(const Int4Matrix& a, const Int4Matrix& b) {
  return a.rows == b.rows && a.cols == b.cols && a.group_size == b.group_size &&
         a.packed_values == b.packed_values && a.zeros == b.zeros && a.scales == b.scales;
}

// Quantize, pack in each format, unpack: the same matrix, and every weight within a step of its
// dequantization (half a step from rounding, up to another half where the top value clamps at 15).
TEST(QuantizedCheckpointTest, QuantizedWeightsSurviveBothFormats) {
  std::mt19937 rng(7);
  for (const int64_t group : {8, 16, 48}) {
    for (const bool symmetric : {false, true}) {
      const int64_t rows = 24, cols = 48;
      const std::vector<float> w = RandomWeights(rows, cols, rng);
      const Int4Matrix q = QuantizeInt4(w.data(), rows, cols, group, symmetric);
      ASSERT_EQ(q.groups(), cols / group);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
          const float scale = q.Scale(r, c / group);
          EXPECT_LE(std::abs(w[r * cols + c] - q.Dequantized(r, c)), 1.01f * scale + 1e-6f)
              << "row " << r << " col " << c;
          if (symmetric) {
            EXPECT_EQ(q.Zero(r, c / group), 8);
          }
        }
      }
      const std::string what = absl::StrCat("group ", group, symmetric ? " sym" : " asym");
      const PackedProjection gptq = PackGptq(q);
      ASSERT_EQ(gptq.qweight_shape, (std::vector<int64_t>{cols / 8, rows})) << what;
      ASSERT_EQ(gptq.qzeros_shape, (std::vector<int64_t>{cols / group, rows / 8})) << what;
      auto from_gptq =
          UnpackGptq({.qweight = reinterpret_cast<const unsigned char*>(gptq.qweight.data()),
                      .qzeros = reinterpret_cast<const unsigned char*>(gptq.qzeros.data()),
                      .scales = reinterpret_cast<const unsigned char*>(gptq.scales.data()),
                      .g_idx = reinterpret_cast<const unsigned char*>(gptq.g_idx.data())},
                     cols, rows, group, "t");
      ASSERT_TRUE(from_gptq.ok()) << from_gptq.status();
      EXPECT_TRUE(SameMatrix(*from_gptq, q)) << what;
      if (symmetric) continue;  // AWQ always has zero points
      const PackedProjection awq = PackAwq(q);
      ASSERT_EQ(awq.qweight_shape, (std::vector<int64_t>{cols, rows / 8})) << what;
      auto from_awq =
          UnpackAwq({.qweight = reinterpret_cast<const unsigned char*>(awq.qweight.data()),
                     .qzeros = reinterpret_cast<const unsigned char*>(awq.qzeros.data()),
                     .scales = reinterpret_cast<const unsigned char*>(awq.scales.data())},
                    cols, rows, group, "t");
      ASSERT_TRUE(from_awq.ok()) << from_awq.status();
      EXPECT_TRUE(SameMatrix(*from_awq, q)) << what;
    }
  }
}

// A Llama config.json with `quantization_config` spliced in.
std::string ConfigWith(const std::string& quantization_config, int64_t hidden = 64) {
  return absl::StrCat(R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 100,
    "hidden_size": )",
                      hidden, R"(, "intermediate_size": 128, "num_hidden_layers": 1,
    "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
    "quantization_config": )",
                      quantization_config, "}");
}

TEST(QuantizedCheckpointTest, QuantizationConfigIsParsedAndChecked) {
  auto awq = ParseModelConfig(
      ConfigWith(R"({"quant_method": "awq", "bits": 4, "group_size": 32, "zero_point": true,
                     "version": "GEMM", "modules_to_not_convert": null})"),
      "");
  ASSERT_TRUE(awq.ok()) << awq.status();
  EXPECT_EQ(awq->quantization.method, Method::kAwq);
  EXPECT_EQ(awq->quantization.group_size, 32);
  auto gptq = ParseModelConfig(
      ConfigWith(R"({"quant_method": "gptq", "bits": 4, "group_size": -1, "desc_act": false,
                     "sym": false, "damp_percent": 0.01, "true_sequential": true})"),
      "");
  ASSERT_TRUE(gptq.ok()) << gptq.status();
  EXPECT_EQ(gptq->quantization.method, Method::kGptq);
  EXPECT_FALSE(gptq->quantization.symmetric);
  EXPECT_EQ(gptq->quantization.GroupSizeFor(128), 128);
  EXPECT_FALSE(ParseModelConfig(ConfigWith("null"), "")->quantization.quantized());

  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"({"quant_method": "bitsandbytes"})", "quant_method 'bitsandbytes' is not supported"},
      {R"({"quant_method": "awq", "bits": 8, "group_size": 32})", "8-bit awq is not supported"},
      {R"({"quant_method": "awq", "bits": 4, "group_size": 32, "version": "gemv"})",
       "AWQ version 'gemv' is not supported"},
      {R"({"quant_method": "awq", "bits": 4, "group_size": 32, "zero_point": false})",
       "AWQ without zero points"},
      {R"({"quant_method": "awq", "bits": 4, "group_size": -1})", "'group_size' is -1"},
      {R"({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": true})",
       "desc_act true"},
      {R"({"quant_method": "gptq", "bits": 4, "group_size": 128, "checkpoint_format": "gptq_v2"})",
       "checkpoint_format 'gptq_v2'"},
      {R"({"quant_method": "gptq", "bits": 4, "group_size": 48})",
       "'group_size' is 48, which does not divide hidden_size (64)"},
      {R"({"quant_method": "gptq", "bits": 4, "group_size": 0})", "'group_size' is 0"},
      {R"({"quant_method": "gptq", "bits": "4", "group_size": 32})", "'bits' must be an integer"},
      {R"({"quant_method": "awq", "bits": 4, "group_size": 32, "modules_to_not_convert": ["x"]})",
       "modules_to_not_convert is not supported"},
      {R"("awq")", "quantization_config must be an object"},
  };
  for (const auto& [json, message] : bad) {
    auto config = ParseModelConfig(ConfigWith(json), "");
    ASSERT_FALSE(config.ok()) << json;
    EXPECT_NE(config.status().message().find(message), std::string::npos)
        << json << ": " << config.status();
  }
  auto gpt2 = ParseModelConfig(R"({"architectures": ["GPT2LMHeadModel"], "vocab_size": 10,
      "n_embd": 8, "n_layer": 1, "n_head": 2, "n_positions": 16,
      "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 8}})",
                               "");
  ASSERT_FALSE(gpt2.ok());
  EXPECT_EQ(gpt2.status().code(), absl::StatusCode::kUnimplemented);
}

TEST(QuantizedCheckpointTest, TheFlagAndTheCheckpointMustAgree) {
  const CheckpointQuantization none, awq{.method = Method::kAwq, .group_size = 32};
  EXPECT_EQ(*ResolveQuantization(Quantization::kNone, none), Quantization::kNone);
  EXPECT_EQ(*ResolveQuantization(Quantization::kInt8, none), Quantization::kInt8);
  EXPECT_EQ(*ResolveQuantization(Quantization::kNone, awq), Quantization::kAwq);
  EXPECT_EQ(*ResolveQuantization(Quantization::kAwq, awq), Quantization::kAwq);
  auto int8 = ResolveQuantization(Quantization::kInt8, awq);
  ASSERT_FALSE(int8.ok());
  EXPECT_NE(int8.status().message().find("this one is already awq"), std::string::npos);
  auto gptq = ResolveQuantization(Quantization::kGptq, none);
  ASSERT_FALSE(gptq.ok());
  EXPECT_NE(gptq.status().message().find("--quantization=gptq needs a gptq checkpoint"),
            std::string::npos)
      << gptq.status();
}

TEST(QuantizedCheckpointTest, AGgufFileRunsItsQ4ProjectionsAsTheyAreAndTakesInt8ForTheRest) {
  const CheckpointQuantization gguf{.method = Method::kGguf, .group_size = 32};
  EXPECT_EQ(*ResolveQuantization(Quantization::kNone, gguf), Quantization::kNone);
  EXPECT_EQ(*ResolveQuantization(Quantization::kInt8, gguf), Quantization::kInt8);
  auto awq = ResolveQuantization(Quantization::kAwq, gguf);
  ASSERT_FALSE(awq.ok());
  EXPECT_NE(awq.status().message().find("needs a awq checkpoint; this one is a GGUF file"),
            std::string::npos)
      << awq.status();
  EXPECT_EQ(RunningQuantizationName(Quantization::kNone, gguf), "gguf");
  EXPECT_EQ(RunningQuantizationName(Quantization::kInt8, gguf), "gguf+int8");
  EXPECT_EQ(RunningQuantizationName(Quantization::kInt8, {}), "int8");
  EXPECT_EQ(RunningQuantizationName(Quantization::kAwq, {.method = Method::kAwq}), "awq");
}

ModelConfig SmallLlama(bool qwen) {
  ModelConfig c;
  c.architecture = qwen ? "Qwen2ForCausalLM" : "LlamaForCausalLM";
  c.family = ModelFamily::kLlama;
  c.vocab_size = 50;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 8;
  c.max_position_embeddings = c.max_model_len = 64;
  c.qkv_bias = qwen;
  c.eos_token_ids = {1};
  return c;
}

// Rewrites `dir`'s model.safetensors through `edit` (which may add or replace tensors), leaving
// out `drop`.
template <typename Edit>
void EditCheckpoint(const std::string& dir, const std::string& drop, Edit edit) {
  auto files = ModelFiles::Open(dir);
  ASSERT_TRUE(files.ok()) << files.status();
  SafetensorsWriter writer;
  for (const SafetensorsTensor* t : (*files)->AllTensors()) {
    if (t->name == drop) continue;
    writer.Add(t->name, t->dtype, t->shape,
               std::string(reinterpret_cast<const char*>(t->data), t->size));
  }
  edit(writer);
  files->reset();
  ASSERT_TRUE(writer.WriteFile(dir + "/model.safetensors").ok());
}

class QuantizedModelTest : public ::testing::Test {
 protected:
  absl::StatusOr<std::unique_ptr<ModelWeights>> Load(const std::string& dir) {
    return LoadModelDirectory(dir, 0, DType::kF32);
  }
  ::llmserve::testing::ScopedTempDir temp_{"quantized_checkpoint_test"};
};

// A written AWQ/GPTQ model loads into fused 4-bit projections whose dequantization is exactly the
// dequantized twin the writer makes from the same seed.
TEST_F(QuantizedModelTest, QuantizedModelsLoadAsTheirDequantizedTwin) {
  for (const auto& q :
       {CheckpointQuantization{.method = Method::kAwq, .group_size = 16},
        CheckpointQuantization{.method = Method::kGptq, .group_size = 16, .symmetric = true},
        CheckpointQuantization{.method = Method::kGptq, .group_size = -1}}) {
    const std::string what = absl::StrCat(CheckpointQuantizationName(q.method), " ", q.group_size);
    const std::string dir = temp_.File("q"), twin = temp_.File("twin");
    ASSERT_TRUE(WriteRandomModel(SmallLlama(true), {.seed = 3, .quantization = q}, dir).ok());
    ASSERT_TRUE(WriteRandomModel(SmallLlama(true),
                                 {.seed = 3, .quantization = q, .dequantized = true}, twin)
                    .ok());
    auto quantized = Load(dir);
    ASSERT_TRUE(quantized.ok()) << what << ": " << quantized.status();
    auto reference = Load(twin);
    ASSERT_TRUE(reference.ok()) << what << ": " << reference.status();
    EXPECT_EQ((*quantized)->config.quantization.method, q.method);
    EXPECT_FALSE((*reference)->config.quantization.quantized());
    for (int i = 0; i < 2; ++i) {
      const LayerWeights& l = (*quantized)->layers[i];
      const LayerWeights& r = (*reference)->layers[i];
      EXPECT_TRUE(l.qkv_weight.empty());
      EXPECT_FALSE(l.qkv_bias.empty()) << "Qwen2's q/k/v biases load as usual";
      for (const auto& [w, dense] :
           {std::pair<const Int4Matrix*, const Tensor*>{&l.qkv_int4, &r.qkv_weight},
            {&l.o_int4, &r.o_weight},
            {&l.up_int4, &r.up_weight},
            {&l.down_int4, &r.down_weight}}) {
        ASSERT_EQ(w->rows, dense->shape()[0]) << what;
        ASSERT_EQ(w->cols, dense->shape()[1]) << what;
        for (int64_t row = 0; row < w->rows; ++row) {
          for (int64_t c = 0; c < w->cols; ++c) {
            ASSERT_EQ(w->Dequantized(row, c), dense->data_as<float>()[row * w->cols + c])
                << what << " layer " << i << " row " << row << " col " << c;
          }
        }
      }
    }
    EXPECT_GT((*quantized)->SizeBytes(), 0u);
    // Backends without 4-bit kernels get the same model as dense tensors.
    DequantizeInt4Projections(quantized->get());
    for (int i = 0; i < 2; ++i) {
      const LayerWeights& l = (*quantized)->layers[i];
      const LayerWeights& r = (*reference)->layers[i];
      EXPECT_TRUE(l.qkv_int4.empty() && l.o_int4.empty() && l.up_int4.empty() &&
                  l.down_int4.empty());
      for (const auto& [dense, want] :
           {std::pair<const Tensor*, const Tensor*>{&l.qkv_weight, &r.qkv_weight},
            {&l.o_weight, &r.o_weight},
            {&l.up_weight, &r.up_weight},
            {&l.down_weight, &r.down_weight}}) {
        ASSERT_EQ(dense->shape(), want->shape()) << what;
        EXPECT_EQ(std::memcmp(dense->data(), want->data(), want->SizeBytes()), 0) << what;
      }
    }
    EXPECT_EQ((*quantized)->config.quantization.method, q.method);
  }
}

TEST_F(QuantizedModelTest, BadTensorsAreNamed) {
  const CheckpointQuantization awq{.method = Method::kAwq, .group_size = 16};
  const std::string dir = temp_.File("bad");
  const auto rewrite = [&] {
    ASSERT_TRUE(WriteRandomModel(SmallLlama(false), {.seed = 4, .quantization = awq}, dir).ok());
  };
  const auto expect_error = [&](const std::string& message) {
    auto loaded = Load(dir);
    ASSERT_FALSE(loaded.ok()) << message;
    EXPECT_NE(loaded.status().message().find(message), std::string::npos) << loaded.status();
  };
  rewrite();
  EditCheckpoint(dir, "model.layers.1.mlp.down_proj.qzeros", [](SafetensorsWriter&) {});
  expect_error("tensor 'model.layers.1.mlp.down_proj.qzeros' [3, 4] is missing");
  rewrite();
  EditCheckpoint(dir, "", [](SafetensorsWriter& w) {
    w.Add("model.layers.0.self_attn.k_proj.qweight", "F32", {32, 2}, std::string(256, '\0'));
  });
  expect_error("'model.layers.0.self_attn.k_proj.qweight' has dtype F32, expected I32");
  rewrite();
  EditCheckpoint(dir, "", [](SafetensorsWriter& w) {
    w.Add("model.layers.0.self_attn.o_proj.scales", "F16", {3, 32}, std::string(192, '\0'));
  });
  expect_error("'model.layers.0.self_attn.o_proj.scales' has shape [3, 32], expected [2, 32]");
  rewrite();
  EditCheckpoint(dir, "", [](SafetensorsWriter& w) {
    w.Add("model.layers.0.self_attn.q_proj.weight", "F16", {32, 32}, std::string(2048, '\0'));
  });
  expect_error("unexpected tensors for this config: model.layers.0.self_attn.q_proj.weight");
  // AutoGPTQ saves all-zero biases for projections without one: taken when zero, else refused.
  rewrite();
  EditCheckpoint(dir, "", [](SafetensorsWriter& w) {
    w.Add("model.layers.0.mlp.up_proj.bias", "F16", {48}, std::string(96, '\0'));
  });
  EXPECT_TRUE(Load(dir).ok());
  EditCheckpoint(dir, "", [](SafetensorsWriter& w) {
    std::string one(96, '\0');
    one[1] = 0x3c;  // f16 1.0 in element 0
    w.Add("model.layers.0.mlp.up_proj.bias", "F16", {48}, one);
  });
  expect_error("'model.layers.0.mlp.up_proj.bias' is not zero");
}

// Older checkpoints keep their settings beside config.json: AutoGPTQ's quantize_config.json and
// AutoAWQ's quant_config.json, neither naming its method.
TEST_F(QuantizedModelTest, SettingsBesideConfigJsonAreRead) {
  const std::string dir = temp_.File("side");
  for (const auto& [method, file, settings] :
       {std::tuple<Method, const char*, const char*>{
            Method::kGptq, "quantize_config.json",
            R"({"bits": 4, "group_size": 16, "damp_percent": 0.01, "desc_act": false,
                "sym": true, "true_sequential": true, "model_file_base_name": "model"})"},
        {Method::kAwq, "quant_config.json",
         R"({"zero_point": true, "q_group_size": 16, "w_bit": 4, "version": "GEMM"})"}}) {
    std::filesystem::remove_all(dir);
    ASSERT_TRUE(WriteRandomModel(SmallLlama(false),
                                 {.seed = 6,
                                  .quantization = {.method = method,
                                                   .group_size = 16,
                                                   .symmetric = method == Method::kGptq}},
                                 dir)
                    .ok());
    ModelConfig plain = SmallLlama(false);
    std::ofstream(dir + "/config.json") << ModelConfigToJson(plain);
    EXPECT_FALSE(Load(dir).ok()) << "without its settings the checkpoint is not a plain one";
    std::ofstream(dir + "/" + file) << settings;
    auto loaded = Load(dir);
    ASSERT_TRUE(loaded.ok()) << file << ": " << loaded.status();
    EXPECT_EQ((*loaded)->config.quantization.method, method);
    EXPECT_EQ((*loaded)->config.quantization.group_size, 16);
    std::ofstream(dir + "/" + file) << "[1, 2]";
    loaded = Load(dir);
    ASSERT_FALSE(loaded.ok());
    EXPECT_NE(loaded.status().message().find(std::string(file) + ": not a JSON object"),
              std::string::npos)
        << loaded.status();
  }
}

TEST_F(QuantizedModelTest, TheWriterRefusesShapesTheFormatsCannotHold) {
  ModelConfig odd = SmallLlama(false);
  odd.intermediate_size = 44;  // not a multiple of 8
  auto written = WriteRandomModel(
      odd, {.quantization = {.method = Method::kGptq, .group_size = -1}}, temp_.File("odd"));
  ASSERT_FALSE(written.ok());
  EXPECT_NE(written.message().find("intermediate_size is 44"), std::string::npos) << written;
}

}  // namespace
}  // namespace llmserve::worker
