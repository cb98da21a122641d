// Whole models under --quantization=int8 on the CPU backend:
//   - exactness: the int8 backend against the double-precision reference model run on a copy of
//     the checkpoint whose projections were replaced by their int8 dequantization (q * scale, per
//     output channel), through random request mixes (chunked prefill, batched decode, shared
//     prefix blocks). The int8 path must compute exactly that model, so the f32 tolerance applies.
//   - closeness to f32: the int8 engine's greedy tokens on the `tiny` preset are tokens the f32
//     model also ranks at the top, within a tolerance derived from the quantization step.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tests/testing/test_model.h"
#include "tests/unit/worker/engine/greedy_generation.h"
#include "tests/unit/worker/engine/random_request_mix.h"
#include "tests/unit/worker/engine/reference_model.h"
#include "tests/unit/worker/engine/reference_playback.h"
#include "tests/unit/worker/engine/small_model_configs.h"
#include "worker/engine/cpu/cpu_backend.h"
#include "worker/engine/cpu_engine_builder.h"
#include "worker/model/model_files.h"
#include "worker/model/model_weights.h"
#include "worker/model/model_writer.h"
#include "worker/model/quantization.h"
#include "worker/model/safetensors_writer.h"

namespace llmserve::worker {
namespace {

// Whether checkpoint tensor `name` is a projection the backend quantizes, and if so whether it is
// stored [in, out] (GPT-2's Conv1D), so that an output channel is a column rather than a row.
bool IsProjection(const std::string& name, bool with_lm_head, bool* transposed) {
  *transposed = false;
  for (const char* suffix : {"q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight",
                             "gate_proj.weight", "up_proj.weight", "down_proj.weight"}) {
    if (absl::EndsWith(name, suffix)) return true;
  }
  for (const char* suffix :
       {"attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight"}) {
    if (absl::EndsWith(name, suffix)) return *transposed = true;
  }
  return with_lm_head && name == "lm_head.weight";
}

// Copies the checkpoint in `files` to `out_dir` (f32), each projection replaced by its int8
// dequantization per output channel (QuantizeRowInt8 on each output channel, then q * scale).
absl::Status WriteDequantizedCopy(const ModelFiles& files, bool with_lm_head,
                                  const std::string& out_dir) {
  SafetensorsWriter writer;
  for (const SafetensorsTensor* t : files.AllTensors()) {
    std::vector<float> values(t->NumElements());
    absl::StatusOr<DType> dtype = ParseSafetensorsDType(t->dtype);
    if (!dtype.ok()) return dtype.status();
    ConvertElements(t->data, *dtype, values.data(), DType::kF32, values.size());
    bool transposed = false;
    if (IsProjection(t->name, with_lm_head, &transposed)) {
      const int64_t rows = t->shape[0], cols = t->shape[1];
      const int64_t channels = transposed ? cols : rows, k = transposed ? rows : cols;
      std::vector<float> channel(k);
      std::vector<int8_t> q(k);
      for (int64_t o = 0; o < channels; ++o) {
        for (int64_t i = 0; i < k; ++i) {
          channel[i] = transposed ? values[i * cols + o] : values[o * cols + i];
        }
        float scale = 0;
        QuantizeRowInt8(channel.data(), k, q.data(), &scale);
        for (int64_t i = 0; i < k; ++i) {
          (transposed ? values[i * cols + o] : values[o * cols + i]) = q[i] * scale;
        }
      }
    }
    std::string bytes(values.size() * sizeof(float), '\0');
    std::memcpy(bytes.data(), values.data(), bytes.size());
    writer.Add(t->name, "F32", t->shape, std::move(bytes));
  }
  std::ofstream(out_dir + "/config.json") << files.config_json();
  return writer.WriteFile(out_dir + "/model.safetensors");
}

// Greedy tokens of `prompt` from an engine over `dir`.
std::vector<int32_t> Generate(const std::string& dir, Quantization quantization,
                              bool quantize_lm_head, const std::vector<int32_t>& prompt,
                              int32_t max_tokens, bool quantized_activations = false) {
  return testing::GreedyTokens({.model_dir = dir,
                                .quantization = quantization,
                                .quantize_lm_head = quantize_lm_head,
                                .quantized_activations = quantized_activations,
                                .num_threads = 2,
                                .kv_cache_bytes = 8 << 20},
                               prompt, max_tokens);
}

struct Int8Case {
  std::string name;
  ModelConfig config;
  DType dtype;
  bool quantize_lm_head;
};

using testing::SmallGpt2;
using testing::SmallLlama;

class Int8ModelTest : public ::testing::TestWithParam<int> {};

// See QuantizedActivationsStayNearTheDequantizedModel.
constexpr double kQuantizedActivationTolerance = 0.15;

// Case `param` of the list below through a random request mix against the reference of its
// dequantized twin, every logit within `relative` of its row's largest; `largest_error` receives
// the largest miss (PlayAgainstReference).
void PlayInt8Case(int param, bool quantized_activations, double relative, double* largest_error) {
  const std::vector<Int8Case> cases = {
      {"gpt2 tied, f32", SmallGpt2(), DType::kF32, false},
      {"llama untied, head quantized, bf16", SmallLlama(false, false), DType::kBF16, true},
      {"qwen2 tied, f16", SmallLlama(true, true), DType::kF16, false},
      {"llama untied, head unquantized, f32", SmallLlama(false, false), DType::kF32, false},
  };
  const Int8Case& c = cases[param % cases.size()];
  std::mt19937 rng(param);
  const ::llmserve::testing::ScopedTempDir temp("int8_model_test");
  const std::string original = temp.path() + "/original", dequantized = temp.path() + "/dq";
  ASSERT_TRUE(WriteRandomModel(
                  c.config, {.dtype = c.dtype, .seed = static_cast<uint64_t>(param), .scale = 0.3f},
                  original)
                  .ok());
  std::filesystem::create_directories(dequantized);
  auto files = ModelFiles::Open(original);
  ASSERT_TRUE(files.ok()) << files.status();
  ASSERT_TRUE(WriteDequantizedCopy(**files, c.quantize_lm_head, dequantized).ok());
  auto dq_files = ModelFiles::Open(dequantized);
  ASSERT_TRUE(dq_files.ok()) << dq_files.status();
  auto config = ParseModelConfig((*files)->config_json(), "");
  ASSERT_TRUE(config.ok()) << config.status();

  auto weights = LoadModelWeights(**files, *config, c.dtype);
  ASSERT_TRUE(weights.ok()) << weights.status();
  const int32_t block_size = 4;
  auto backend =
      CpuBackend::Create(*std::move(weights), {.kv_cache_bytes = 8 << 20,
                                               .block_size = block_size,
                                               .num_threads = 1 + param % 3,
                                               .quantization = Quantization::kInt8,
                                               .quantize_lm_head = c.quantize_lm_head,
                                               .quantized_activations = quantized_activations});
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_EQ((*backend)->quantization(), Quantization::kInt8);
  EXPECT_EQ((*backend)->quantized_activations(), quantized_activations);
  EXPECT_EQ((*backend)->lm_head_quantized(), c.quantize_lm_head);

  testing::RandomRequestMix mix(rng, {.num_sequences = 5,
                                      .max_tokens = 60,
                                      .vocab_size = static_cast<int32_t>(c.config.vocab_size),
                                      .block_size = block_size,
                                      .num_blocks = (*backend)->num_kv_blocks()});
  testing::PlayAgainstReference(**backend, mix, testing::ReferenceModel(**dq_files, *config),
                                relative, c.name, largest_error);
}

// Every logit within 1e-4 of the row's largest, as for f32 weights (cpu_backend_test): the int8
// kernels multiply by exactly the dequantized weights, summing in f32.
TEST_P(Int8ModelTest, MatchesTheReferenceOfTheDequantizedModel) {
  double largest = 0;
  PlayInt8Case(GetParam(), false, 1e-4, &largest);
}

// With quantized activations, steps of up to 16 tokens compute with each token's activations
// rounded per block of 32 to s = max|x| / 127 (|error| <= s / 2 per element): the same relative
// step as the int8 weights' own rounding (max|w| / 254 per row). Through these models' few, narrow
// projections (hidden 24 and 40: one block and a tail per row, so one outlier sets the step for
// all) it moved logits by 2.3% to 8.7% of the row's largest over the 8 seeds (against 0.9% on the
// 576-wide `tiny` preset below). The tolerance is 15%, about twice the worst seen: a scale or
// block off by one moves outputs by tens of percent (an activation scale 27% too large failed it
// at every seed). And the logits must leave the f32 tolerance, or the integer path did not run.
TEST_P(Int8ModelTest, QuantizedActivationsStayNearTheDequantizedModel) {
  double largest = 0;
  PlayInt8Case(GetParam(), true, kQuantizedActivationTolerance, &largest);
  EXPECT_GT(largest, 1e-4);
  std::printf("case %d: largest logit error %.5f of the row's largest\n", GetParam(), largest);
}

INSTANTIATE_TEST_SUITE_P(Models, Int8ModelTest, ::testing::Range(0, 8));

TEST(Int8ModelTest, RefusesNonFiniteWeightsNamingTheProjection) {
  const ::llmserve::testing::ScopedTempDir temp("int8_model_nan");
  ASSERT_TRUE(WriteRandomModel(SmallLlama(false, true), {.seed = 3}, temp.path()).ok());
  auto files = ModelFiles::Open(temp.path());
  ASSERT_TRUE(files.ok());
  auto weights = LoadModelWeights(**files, SmallLlama(false, true), DType::kF32);
  ASSERT_TRUE(weights.ok());
  (*weights)->layers[1].down_weight.data_as<float>()[7] = NAN;
  auto backend = CpuBackend::Create(
      *std::move(weights), {.kv_cache_bytes = 1 << 20, .quantization = Quantization::kInt8});
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(backend.status().message().find("layer 1 down_proj: element 7 is nan"),
            absl::string_view::npos)
      << backend.status();
}

// The tiny preset (f32, random weights) generates under int8 through the engine, and every token
// it picks is one the f32 model ranks within `tolerance` of its top logit, at every step (the f32
// logits read with the int8 model's own tokens fed back). The tolerance: per-row symmetric int8
// rounds each weight by at most half a step, max|w| / 254; for these uniform weights that is an
// rms error of 1/254 of a weight's rms (0.4%), and the logits' error grows with the number of
// quantized products on the way (here 4 layers x 4 projections and the head): measured at 0.6%
// (0.7% with the head quantized) of the row's largest logit, so 5% leaves room for another seed
// or CPU without letting a wrong weight or scale (tens of percent) through.
TEST(Int8ModelTest, TinyPresetGreedyTokensAreTopTokensOfTheF32Model) {
  const ::llmserve::testing::ScopedTempDir temp("int8_tiny");
  ASSERT_TRUE(::llmserve::testing::WriteTinyModel(temp.path()).ok());
  const std::vector<int32_t> prompt = {5, 17, 42, 99, 3, 150, 7};
  const int32_t max_tokens = 24;
  for (bool quantize_lm_head : {false, true}) {
    const std::vector<int32_t> f32 =
        Generate(temp.path(), Quantization::kNone, false, prompt, max_tokens);
    const std::vector<int32_t> int8 =
        Generate(temp.path(), Quantization::kInt8, quantize_lm_head, prompt, max_tokens);
    ASSERT_EQ(int8.size(), static_cast<size_t>(max_tokens));
    ASSERT_EQ(f32.size(), static_cast<size_t>(max_tokens));

    // The f32 and int8 models' logits at every position of prompt + the int8 tokens.
    auto files = ModelFiles::Open(temp.path());
    ASSERT_TRUE(files.ok());
    auto config = ParseModelConfig((*files)->config_json(), "");
    ASSERT_TRUE(config.ok());
    std::vector<int32_t> sequence = prompt;
    sequence.insert(sequence.end(), int8.begin(), int8.end() - 1);
    ForwardBatch batch;
    batch.AddSequence(sequence, 0, {0, 1, 2}, /*all_logits=*/true);
    ForwardOutput outputs[2];
    for (int q = 0; q < 2; ++q) {
      auto weights = LoadModelWeights(**files, *config, DType::kF32);
      ASSERT_TRUE(weights.ok());
      auto backend = CpuBackend::Create(
          *std::move(weights), {.kv_cache_bytes = 8 << 20,
                                .quantization = q == 0 ? Quantization::kNone : Quantization::kInt8,
                                .quantize_lm_head = q == 1 && quantize_lm_head});
      ASSERT_TRUE(backend.ok());
      ASSERT_TRUE((*backend)->Forward(batch, &outputs[q]).ok());
    }
    int same = 0;
    double worst_gap = 0, worst_error = 0;
    for (int32_t i = 0; i < max_tokens; ++i) {
      const int32_t position = static_cast<int32_t>(prompt.size()) - 1 + i;
      const float* row = outputs[0].Row(position);
      const float* int8_row = outputs[1].Row(position);
      const float top = *std::max_element(row, row + config->vocab_size);
      float largest = 0, error = 0;
      for (int64_t v = 0; v < config->vocab_size; ++v) {
        largest = std::max(largest, std::abs(row[v]));
        error = std::max(error, std::abs(row[v] - int8_row[v]));
      }
      worst_gap = std::max(worst_gap, static_cast<double>(top - row[int8[i]]) / largest);
      worst_error = std::max(worst_error, static_cast<double>(error) / largest);
      EXPECT_LE(error, 0.05 * largest) << "step " << i << ": int8 logits far from f32";
      EXPECT_LE(top - row[int8[i]], 0.05 * largest)
          << "step " << i << ": int8 picked " << int8[i] << " (f32 logit " << row[int8[i]]
          << ", top " << top << ")";
      same += int8[i] == f32[i] ? 1 : 0;
    }
    // The first token follows the same prompt in both: it must agree unless its margin is tiny.
    EXPECT_EQ(int8[0], f32[0]) << "lm head " << quantize_lm_head;
    std::printf(
        "lm head quantized %d: %d of %d greedy tokens as f32; largest logit error %.4f and "
        "largest gap to the f32 top %.4f, of the row's largest logit\n",
        quantize_lm_head, same, max_tokens, worst_error, worst_gap);
  }
}

// The tiny preset with int8 weights and head generates through the engine with quantized
// activations (its one-token decode steps take the integer path), against the same int8 model
// without them. Greedy tokens may legitimately differ where the top two logits are closer than the
// error, so the logits are what is checked: at every position of prompt + the generated tokens,
// fed in chunks of at most 16 tokens so that every chunk takes the integer path, every logit is
// within 5% of the row's largest (the argument of QuantizedActivationsStayNearTheDequantizedModel)
// and so is the generated token's gap to the top; and where a generated token differs from the
// plain model's choice, that choice's margin over it must be within twice the step's largest
// logit error (what a correct perturbation can flip). Agreement is reported.
TEST(Int8ModelTest, TinyPresetQuantizedActivationsKeepTheLogits) {
  const ::llmserve::testing::ScopedTempDir temp("int8_tiny_qa");
  ASSERT_TRUE(::llmserve::testing::WriteTinyModel(temp.path()).ok());
  const std::vector<int32_t> prompt = {5, 17, 42, 99, 3, 150, 7};
  const int32_t max_tokens = 24;
  const std::vector<int32_t> generated =
      Generate(temp.path(), Quantization::kInt8, true, prompt, max_tokens, true);
  ASSERT_EQ(generated.size(), static_cast<size_t>(max_tokens));
  auto files = ModelFiles::Open(temp.path());
  ASSERT_TRUE(files.ok());
  auto config = ParseModelConfig((*files)->config_json(), "");
  ASSERT_TRUE(config.ok());
  std::vector<int32_t> sequence = prompt;
  sequence.insert(sequence.end(), generated.begin(), generated.end() - 1);
  std::vector<float> logits[2];  // [position][vocab]: plain int8, then with quantized activations
  for (int q = 0; q < 2; ++q) {
    auto weights = LoadModelWeights(**files, *config, DType::kF32);
    ASSERT_TRUE(weights.ok());
    auto backend = CpuBackend::Create(*std::move(weights), {.kv_cache_bytes = 8 << 20,
                                                            .block_size = 16,
                                                            .quantization = Quantization::kInt8,
                                                            .quantize_lm_head = true,
                                                            .quantized_activations = q == 1});
    ASSERT_TRUE(backend.ok());
    for (size_t start = 0; start < sequence.size(); start += 16) {
      const size_t end = std::min(sequence.size(), start + 16);
      ForwardBatch batch;
      batch.AddSequence(std::vector<int32_t>(sequence.begin() + start, sequence.begin() + end),
                        static_cast<int32_t>(start), {0, 1, 2}, /*want_all_logits=*/true);
      ForwardOutput output;
      ASSERT_TRUE((*backend)->Forward(batch, &output).ok());
      logits[q].insert(logits[q].end(), output.logits.begin(), output.logits.end());
    }
  }
  const int64_t vocab = config->vocab_size;
  int same = 0;
  double worst_error = 0;
  for (int32_t i = 0; i < max_tokens; ++i) {
    const int64_t position = static_cast<int64_t>(prompt.size()) - 1 + i;
    const float* plain = logits[0].data() + position * vocab;
    const float* quantized = logits[1].data() + position * vocab;
    const int64_t top = std::max_element(plain, plain + vocab) - plain;
    float largest = 0, error = 0;
    for (int64_t v = 0; v < vocab; ++v) {
      largest = std::max(largest, std::abs(plain[v]));
      error = std::max(error, std::abs(plain[v] - quantized[v]));
    }
    worst_error = std::max(worst_error, static_cast<double>(error) / largest);
    EXPECT_LE(error, 0.05 * largest) << "step " << i;
    EXPECT_LE(plain[top] - plain[generated[i]], 0.05 * largest) << "step " << i;
    if (generated[i] == top) {
      ++same;
    } else {
      EXPECT_LE(plain[top] - plain[generated[i]], 2 * error)
          << "step " << i << ": picked " << generated[i] << " over " << top;
    }
  }
  EXPECT_GT(worst_error, 1e-4) << "the integer path did not run";
  std::printf(
      "quantized activations: %d of %d greedy tokens are the plain int8 model's top token; "
      "largest logit error %.4f of the row's largest\n",
      same, max_tokens, worst_error);
}

// The flag needs weights it applies to.
TEST(Int8ModelTest, QuantizedActivationsNeedAQuantizedModel) {
  const ::llmserve::testing::ScopedTempDir temp("int8_qa_refused");
  ASSERT_TRUE(WriteRandomModel(SmallLlama(false, true), {.seed = 3}, temp.path()).ok());
  auto engine = BuildCpuEngine(
      {.model_dir = temp.path(), .quantized_activations = true, .kv_cache_bytes = 1 << 20});
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(engine.status().message().find("quantized_activations needs a quantized model"),
            std::string::npos)
      << engine.status();
}

}  // namespace
}  // namespace llmserve::worker
