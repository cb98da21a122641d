// Whole AWQ and GPTQ models on the CPU backend:
//   - exactness: the 4-bit backend against the double-precision reference model run on the
//     checkpoint's dequantized twin (the same seed written with every projection replaced by
//     (q - zero) * scale in f32), through random request mixes (chunked prefill, batched decode,
//     shared prefix blocks). The 4-bit kernels must compute exactly that model, so the f32
//     tolerance applies.
//   - the LM head quantized to int8 on top of a 4-bit checkpoint (--quantize_lm_head), and the
//     flag/checkpoint pairs that are refused.
//   - generation through the engine, greedy tokens equal to the dequantized twin's.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tests/unit/worker/engine/greedy_generation.h"
#include "tests/unit/worker/engine/random_request_mix.h"
#include "tests/unit/worker/engine/reference_model.h"
#include "tests/unit/worker/engine/reference_playback.h"
#include "tests/unit/worker/engine/small_model_configs.h"
#include "worker/engine/cpu/cpu_backend.h"
#include "worker/engine/cpu_engine_builder.h"
#include "worker/model/model_files.h"
#include "worker/model/model_loader.h"
#include "worker/model/model_weights.h"
#include "worker/model/model_writer.h"
#include "worker/model/quantization.h"

namespace llmserve::worker {
namespace {

using Method = CheckpointQuantization::Method;

// Greedy tokens of `prompt` from an engine over `dir`.
std::vector<int32_t> Generate(const std::string& dir, bool quantize_lm_head,
                              const std::vector<int32_t>& prompt, int32_t max_tokens) {
  return testing::GreedyTokens({.model_dir = dir,
                                .quantize_lm_head = quantize_lm_head,
                                .num_threads = 2,
                                .kv_cache_bytes = 8 << 20},
                               prompt, max_tokens);
}

// small_model_configs.h's Llama at hidden 64 (heads of 16) and `intermediate`: every group size
// used must divide hidden_size and `intermediate` (down_proj's inputs).
ModelConfig Llama(bool qwen, bool tied, int64_t intermediate) {
  ModelConfig c = testing::SmallLlama(qwen, tied);
  c.head_dim = 16;
  c.hidden_size = 64;
  c.intermediate_size = intermediate;
  return c;
}

struct Int4Case {
  std::string name;
  ModelConfig config;
  DType dtype;  // of the unquantized tensors
  CheckpointQuantization quantization;
};

std::vector<Int4Case> Cases() {
  return {
      {"awq g8 llama untied f16",
       Llama(false, false, 72),
       DType::kF16,
       {.method = Method::kAwq, .group_size = 8}},
      {"gptq sym g-1 qwen2 tied f32",
       Llama(true, true, 72),
       DType::kF32,
       {.method = Method::kGptq, .group_size = -1, .symmetric = true}},
      {"awq g32 qwen2 untied f32",
       Llama(true, false, 96),
       DType::kF32,
       {.method = Method::kAwq, .group_size = 32}},
      {"gptq asym g16 llama tied f16",
       Llama(false, true, 80),
       DType::kF16,
       {.method = Method::kGptq, .group_size = 16}},
  };
}

class Int4ModelTest : public ::testing::TestWithParam<int> {};

// Case `param` of Cases() through a random request mix against the reference of its dequantized
// twin, every logit within `relative` of its row's largest; `largest_error` receives the largest
// miss (PlayAgainstReference).
void PlayInt4Case(int param, bool quantized_activations, double relative, double* largest_error) {
  const std::vector<Int4Case> cases = Cases();
  const Int4Case& c = cases[param % cases.size()];
  std::mt19937 rng(param);
  const ::llmserve::testing::ScopedTempDir temp("int4_model_test");
  const std::string quantized = temp.path() + "/q", twin = temp.path() + "/twin";
  const RandomWeightsOptions options{.dtype = c.dtype,
                                     .seed = static_cast<uint64_t>(param),
                                     .scale = 0.3f,
                                     .quantization = c.quantization};
  ASSERT_TRUE(WriteRandomModel(c.config, options, quantized).ok());
  RandomWeightsOptions twin_options = options;
  twin_options.dequantized = true;
  ASSERT_TRUE(WriteRandomModel(c.config, twin_options, twin).ok());
  auto files = ModelFiles::Open(quantized);
  ASSERT_TRUE(files.ok()) << files.status();
  auto twin_files = ModelFiles::Open(twin);
  ASSERT_TRUE(twin_files.ok()) << twin_files.status();
  auto config = ParseModelConfig((*files)->config_json(), "");
  ASSERT_TRUE(config.ok()) << config.status();
  auto twin_config = ParseModelConfig((*twin_files)->config_json(), "");
  ASSERT_TRUE(twin_config.ok()) << twin_config.status();

  auto weights = LoadModelWeights(**files, *config, c.dtype);
  ASSERT_TRUE(weights.ok()) << weights.status();
  const int32_t block_size = 4;
  auto backend =
      CpuBackend::Create(*std::move(weights), {.kv_cache_bytes = 8 << 20,
                                               .block_size = block_size,
                                               .num_threads = 1 + param % 3,
                                               // The reference dequantizes the projections only.
                                               .quantize_lm_head = false,
                                               .quantized_activations = quantized_activations});
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_EQ((*backend)->quantization(),
            c.quantization.method == Method::kAwq ? Quantization::kAwq : Quantization::kGptq);
  EXPECT_FALSE((*backend)->lm_head_quantized());

  testing::RandomRequestMix mix(rng, {.num_sequences = 5,
                                      .max_tokens = 60,
                                      .vocab_size = static_cast<int32_t>(c.config.vocab_size),
                                      .block_size = block_size,
                                      .num_blocks = (*backend)->num_kv_blocks()});
  testing::PlayAgainstReference(**backend, mix, testing::ReferenceModel(**twin_files, *twin_config),
                                relative, c.name, largest_error);
}

// Every logit within 1e-4 of the row's largest, as for f32 weights (cpu_backend_test).
TEST_P(Int4ModelTest, MatchesTheReferenceOfTheDequantizedModel) {
  double largest = 0;
  PlayInt4Case(GetParam(), false, 1e-4, &largest);
}

// With quantized activations (steps of up to 16 tokens; activations rounded per block of 8 to 32
// columns within each group, |error| <= max|x| / 254 per element): 15% of the row's largest
// logit, as int8_model_test argues for the same rounding through the same narrow models (measured
// here: 3.2% to 5.5% over the 8 seeds); the logits must also leave the f32 tolerance, or the
// integer path did not run.
TEST_P(Int4ModelTest, QuantizedActivationsStayNearTheDequantizedModel) {
  double largest = 0;
  PlayInt4Case(GetParam(), true, 0.15, &largest);
  EXPECT_GT(largest, 1e-4);
  std::printf("case %d: largest logit error %.5f of the row's largest\n", GetParam(), largest);
}

INSTANTIATE_TEST_SUITE_P(Models, Int4ModelTest, ::testing::Range(0, 8));

// Through the engine (scheduler, sampler, paged cache) an AWQ model generates what its
// dequantized twin does; with the LM head quantized to int8 as well, it still generates a full
// answer and says so.
TEST(Int4ModelTest, GeneratesTheTwinsGreedyTokensThroughTheEngine) {
  const ::llmserve::testing::ScopedTempDir temp("int4_engine");
  const RandomWeightsOptions options{
      .seed = 11, .scale = 0.3f, .quantization = {.method = Method::kAwq, .group_size = 16}};
  ASSERT_TRUE(WriteRandomModel(Llama(false, true, 80), options, temp.path() + "/q").ok());
  RandomWeightsOptions twin = options;
  twin.dequantized = true;
  ASSERT_TRUE(WriteRandomModel(Llama(false, true, 80), twin, temp.path() + "/twin").ok());
  const std::vector<int32_t> prompt = {5, 17, 42, 99, 3, 50, 7};
  const std::vector<int32_t> from_awq = Generate(temp.path() + "/q", false, prompt, 16);
  const std::vector<int32_t> from_twin = Generate(temp.path() + "/twin", false, prompt, 16);
  ASSERT_EQ(from_awq.size(), 16u);
  // Both compute the same model in f32, in different orders of summation: the tokens agree
  // unless two logits tie to within rounding, which these random weights do not produce.
  EXPECT_EQ(from_awq, from_twin);
  EXPECT_EQ(Generate(temp.path() + "/q", true, prompt, 16).size(), 16u);

  auto files = ModelFiles::Open(temp.path() + "/q");
  ASSERT_TRUE(files.ok());
  auto config = ParseModelConfig((*files)->config_json(), "");
  ASSERT_TRUE(config.ok());
  auto weights = LoadModelWeights(**files, *config, DType::kF32);
  ASSERT_TRUE(weights.ok());
  auto head = CpuBackend::Create(*std::move(weights),
                                 {.kv_cache_bytes = 1 << 20, .quantize_lm_head = true});
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_TRUE((*head)->lm_head_quantized());
  EXPECT_EQ((*head)->quantization(), Quantization::kAwq);
  EXPECT_LT((*head)->weight_bytes(), 150000);  // f32 would be 285 kB

  for (const Quantization asked : {Quantization::kInt8, Quantization::kGptq}) {
    auto refused = BuildCpuEngine(
        {.model_dir = temp.path() + "/q", .quantization = asked, .kv_cache_bytes = 1 << 20});
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(refused.status().message().find("this one is"), std::string::npos)
        << refused.status();
  }
  auto unquantized = BuildCpuEngine(
      {.model_dir = temp.path() + "/twin", .quantize_lm_head = true, .kv_cache_bytes = 1 << 20});
  ASSERT_FALSE(unquantized.ok());
  EXPECT_NE(unquantized.status().message().find("quantize_lm_head needs a quantized model"),
            std::string::npos)
      << unquantized.status();
  // Unset, the head follows the projections: int8 on the AWQ checkpoint, f32 on its twin.
  for (const auto& [model, int8_head] :
       {std::pair<std::string, bool>{"/q", true}, {"/twin", false}}) {
    auto weights = LoadModel(temp.path() + model, /*max_model_len=*/0, DType::kF32);
    ASSERT_TRUE(weights.ok()) << weights.status();
    auto backend = CpuBackend::Create(*std::move(weights), {.kv_cache_bytes = 1 << 20});
    ASSERT_TRUE(backend.ok()) << backend.status();
    EXPECT_EQ((*backend)->lm_head_quantized(), int8_head) << model;
  }
}

}  // namespace
}  // namespace llmserve::worker
