// Real GGUF files made by llama.cpp ($LLMSERVE_TESTDATA/models, README.md there) through
// LoadModel and the CPU backend:
// - stories260K-f32.gguf reproduces expected/reference_greedy.jsonl's greedy ids exactly, each
//   prompt alone and all of them batched in one engine (served with max_model_len 512, the
//   checkpoint's context: the file declares llama.cpp's converter default of 128, and bos-200
//   needs 201 positions);
// - the F16 and "Q4_K_M" (Q5_0/Q8_0/F16) files pick the f32 file's greedy ids until the first step
//   where the f32 logits' top two are within the greedy margin
//   (tests/unit/worker/engine/cuda/greedy_margin.h);
// - every gguf-quant-zoo file loads and generates, and its logits for a fixed prompt are near the
//   zoo-f32 file's by a normalised MSE bound per type (the values are printed);
// - the zoo's Q4 files run their Q4 projections on the 4-bit kernels: the same logits (to f32
//   rounding) and greedy tokens as their dequantized twin (the same weights as dense f32), in
//   fewer bytes; with int8 (their other projections quantized) and quantized activations too.
// Skips with a message when LLMSERVE_TESTDATA is unset or lacks the models.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/testdata_models.h"
#include "tests/unit/worker/engine/cuda/greedy_margin.h"
#include "tests/unit/worker/engine/greedy_generation.h"
#include "tests/unit/worker/engine/stories_reference.h"
#include "worker/engine/cpu/cpu_backend.h"
#include "worker/engine/cpu_engine_builder.h"
#include "worker/model/model_loader.h"
#include "worker/model/model_weights.h"
#include "worker/model/quantization.h"

namespace llmserve::worker {
namespace {

using ::llmserve::worker::cuda::testing::GreedyTokenIsDecided;

using ::llmserve::testing::ModelsDir;
using ::llmserve::worker::testing::kStoriesContext;
using ::llmserve::worker::testing::ReadReference;
using ::llmserve::worker::testing::ReferenceCase;
using ::llmserve::worker::testing::StoriesOptions;

// A CPU backend on the GGUF file at `path`, with room for one sequence of `max_model_len`; with
// `dequantize`, its 4-bit projections are replaced by their dequantization in f32 first.
std::unique_ptr<CpuBackend> Backend(const std::string& path, int64_t max_model_len,
                                    bool dequantize = false,
                                    Quantization quantization = Quantization::kNone,
                                    bool quantized_activations = false) {
  absl::StatusOr<std::unique_ptr<ModelWeights>> weights =
      LoadModel(path, max_model_len, DType::kF32);
  EXPECT_TRUE(weights.ok()) << weights.status();
  if (!weights.ok()) return nullptr;
  if (dequantize) DequantizeInt4Projections(weights->get());
  const int64_t blocks = (max_model_len + 15) / 16;
  const ModelConfig config = (*weights)->config;
  absl::StatusOr<std::unique_ptr<CpuBackend>> backend = CpuBackend::Create(
      *std::move(weights), {.kv_cache_bytes = blocks * CpuBackend::KvBytesPerBlock(config, 16),
                            .num_threads = 1,
                            .quantization = quantization,
                            .quantized_activations = quantized_activations});
  EXPECT_TRUE(backend.ok()) << backend.status();
  return backend.ok() ? *std::move(backend) : nullptr;
}

struct Trajectory {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> rows;  // the logits each token was picked from
};

// `steps` greedy tokens after `prompt`, one forward pass per token, with their logits.
Trajectory Greedy(CpuBackend& backend, const std::vector<int32_t>& prompt, int steps) {
  Trajectory out;
  std::vector<int32_t> blocks(backend.num_kv_blocks());
  for (int32_t i = 0; i < backend.num_kv_blocks(); ++i) blocks[i] = i;
  ForwardBatch batch;
  ForwardOutput output;
  batch.AddSequence(prompt, 0, blocks);
  int32_t computed = 0;
  for (int step = 0; step < steps; ++step) {
    const absl::Status status = backend.Forward(batch, &output);
    EXPECT_TRUE(status.ok()) << status;
    if (!status.ok()) break;
    const float* row = output.LastRow(0);
    out.rows.emplace_back(row, row + output.vocab_size);
    out.tokens.push_back(
        static_cast<int32_t>(std::max_element(row, row + output.vocab_size) - row));
    computed += batch.num_tokens();
    batch.Clear();
    batch.AddSequence({out.tokens.back()}, computed, blocks);
  }
  return out;
}

TEST(GgufStoriesEngineTest, F32ReproducesTheReferenceGreedyIdsAlone) {
  std::string why;
  const std::string dir = ModelsDir("stories260K", &why);
  if (dir.empty()) GTEST_SKIP() << why;
  testing::ExpectTheReferenceGreedyIds(dir, dir + "/gguf/stories260K-f32.gguf", /*batched=*/false);
}

TEST(GgufStoriesEngineTest, F32ReproducesTheReferenceGreedyIdsBatched) {
  std::string why;
  const std::string dir = ModelsDir("stories260K", &why);
  if (dir.empty()) GTEST_SKIP() << why;
  testing::ExpectTheReferenceGreedyIds(dir, dir + "/gguf/stories260K-f32.gguf", /*batched=*/true);
}

TEST(GgufStoriesEngineTest, TheFileDeclaresTheConvertersContextOf128) {
  std::string why;
  const std::string dir = ModelsDir("stories260K", &why);
  if (dir.empty()) GTEST_SKIP() << why;
  const std::string path = dir + "/gguf/stories260K-f32.gguf";
  absl::StatusOr<ModelConfig> config = LoadModelConfig(path, 0);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->max_model_len, 128);
  EXPECT_EQ(LoadModelConfig(path, kStoriesContext)->max_model_len, kStoriesContext);
}

TEST(GgufStoriesEngineTest, F16AndQ4KMPickTheF32TokensUntilANearTie) {
  std::string why;
  const std::string dir = ModelsDir("stories260K", &why);
  if (dir.empty()) GTEST_SKIP() << why;
  const std::vector<ReferenceCase> cases = ReadReference(dir);
  std::unique_ptr<CpuBackend> f32 = Backend(dir + "/gguf/stories260K-f32.gguf", kStoriesContext);
  ASSERT_NE(f32, nullptr);
  for (const char* name : {"stories260K-F16.gguf", "stories260K-Q4_K_M.gguf"}) {
    std::unique_ptr<CpuBackend> quantized = Backend(dir + "/gguf/" + name, kStoriesContext);
    ASSERT_NE(quantized, nullptr);
    for (const ReferenceCase& c : cases) {
      const int steps = static_cast<int>(c.greedy.size());
      const Trajectory want = Greedy(*f32, c.prompt, steps);
      ASSERT_EQ(want.tokens, c.greedy) << c.name;
      const Trajectory got = Greedy(*quantized, c.prompt, steps);
      int agreed = 0;
      for (; agreed < steps; ++agreed) {
        const std::vector<float>& row = want.rows[agreed];
        if (!GreedyTokenIsDecided(row.data(), static_cast<int64_t>(row.size()))) break;
        ASSERT_EQ(got.tokens[agreed], want.tokens[agreed])
            << name << " " << c.name << ": step " << agreed << " of a decided f32 token";
      }
      int identical = 0;
      while (identical < steps && got.tokens[identical] == want.tokens[identical]) ++identical;
      std::printf("%s %s: %d/%d tokens checked before a near tie; %d identical\n", name,
                  c.name.c_str(), agreed, steps, identical);
      EXPECT_GT(agreed, 0) << "no decided token at all: the check checked nothing";
    }
  }
}

// Normalised MSE of `got` against `want`: sum((got - want)^2) / sum(want^2).
double Nmse(const std::vector<float>& got, const std::vector<float>& want) {
  double error = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    error += (double{got[i]} - want[i]) * (double{got[i]} - want[i]);
    norm += double{want[i]} * want[i];
  }
  return error / norm;
}

struct ZooCase {
  const char* file;
  // About 3x what each type gave here (printed); weights of fewer bits must give larger errors.
  double max_nmse;
  int bits_rank;  // 0: F16, 1: BF16, 2: 8-bit, 3: 6-bit, 4: 5-bit, 5: 4-bit
};

TEST(GgufQuantZooEngineTest, EveryTypeLoadsGeneratesAndNearsTheF32Logits) {
  std::string why;
  const std::string dir = ModelsDir("gguf-quant-zoo", &why);
  if (dir.empty()) GTEST_SKIP() << why;
  // "Tom and his dog went to the" (the stories prompt; the zoo shares the vocabulary).
  const std::vector<int32_t> prompt = {1, 274, 287, 269, 345, 400, 428, 263, 377, 267, 265};
  auto logits = [&](const std::string& file) {
    std::unique_ptr<CpuBackend> backend = Backend(dir + "/" + file, 64);
    std::vector<float> all;
    if (backend == nullptr) return all;
    std::vector<int32_t> blocks(backend->num_kv_blocks());
    for (int32_t i = 0; i < backend->num_kv_blocks(); ++i) blocks[i] = i;
    ForwardBatch batch;
    batch.AddSequence(prompt, 0, blocks, /*want_all_logits=*/true);
    ForwardOutput output;
    const absl::Status status = backend->Forward(batch, &output);
    EXPECT_TRUE(status.ok()) << status;
    return output.logits;
  };
  const std::vector<float> reference = logits("zoo-f32.gguf");
  ASSERT_FALSE(reference.empty());
  const ZooCase cases[] = {
      {"zoo-F16.gguf", 1e-6, 0},    {"zoo-BF16.gguf", 6e-5, 1}, {"zoo-Q8_0.gguf", 6e-4, 2},
      {"zoo-Q6_K.gguf", 6e-3, 3},   {"zoo-Q5_0.gguf", 3e-2, 4}, {"zoo-Q5_1.gguf", 3e-2, 4},
      {"zoo-Q5_K_S.gguf", 3e-2, 4}, {"zoo-Q4_0.gguf", 0.12, 5}, {"zoo-Q4_1.gguf", 0.12, 5},
      {"zoo-Q4_K_S.gguf", 0.1, 5},  {"zoo-Q4_K_M.gguf", 0.1, 5}};
  std::vector<double> worst(6, 0), best(6, 1e9);
  for (const ZooCase& c : cases) {
    const std::vector<float> got = logits(c.file);
    ASSERT_EQ(got.size(), reference.size()) << c.file;
    for (float value : got) ASSERT_TRUE(std::isfinite(value)) << c.file;
    const double nmse = Nmse(got, reference);
    std::printf("%-16s logits NMSE vs zoo-f32: %.3g\n", c.file, nmse);
    EXPECT_LT(nmse, c.max_nmse) << c.file;
    worst[c.bits_rank] = std::max(worst[c.bits_rank], nmse);
    best[c.bits_rank] = std::min(best[c.bits_rank], nmse);
    // And the whole engine generates from it.
    const std::vector<int32_t> tokens = testing::GreedyTokens(
        {.model_dir = dir + "/" + c.file, .num_threads = 1, .kv_cache_bytes = 16 << 20}, prompt, 8);
    EXPECT_EQ(tokens.size(), 8u) << c.file;
  }
  for (int rank = 1; rank < 6; ++rank) {
    EXPECT_LT(worst[rank - 1], best[rank])
        << "bits rank " << rank << " is not worse than " << rank - 1;
  }
}

// The largest |got - want| over all logits, relative to the largest |want|.
double RelativeMaxError(const std::vector<float>& got, const std::vector<float>& want) {
  double error = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    error = std::max(error, std::abs(double{got[i]} - want[i]));
    scale = std::max(scale, std::abs(double{want[i]}));
  }
  return error / scale;
}

TEST(GgufQuantZooEngineTest, Q4ProjectionsRunIn4BitsAsTheirDequantizedTwin) {
  std::string why;
  const std::string dir = ModelsDir("gguf-quant-zoo", &why);
  if (dir.empty()) GTEST_SKIP() << why;
  const std::vector<int32_t> prompt = {1, 274, 287, 269, 345, 400, 428, 263, 377, 267, 265};
  for (const char* name : {"zoo-Q4_0.gguf", "zoo-Q4_1.gguf", "zoo-Q4_K_M.gguf"}) {
    SCOPED_TRACE(name);
    const std::string path = dir + "/" + name;
    std::unique_ptr<CpuBackend> four_bit = Backend(path, 64);
    std::unique_ptr<CpuBackend> twin = Backend(path, 64, /*dequantize=*/true);
    ASSERT_NE(four_bit, nullptr);
    ASSERT_NE(twin, nullptr);
    // 0.75 bytes a weight instead of 4 for every 4-bit projection.
    EXPECT_LT(four_bit->weight_bytes(), twin->weight_bytes() * 3 / 4);
    const Trajectory want = Greedy(*twin, prompt, 12);
    const Trajectory got = Greedy(*four_bit, prompt, 12);
    ASSERT_EQ(got.rows.size(), want.rows.size());
    for (size_t step = 0; step < want.rows.size(); ++step) {
      // The f32 tolerance of the CPU kernels (different summation orders, the same weights).
      EXPECT_LT(RelativeMaxError(got.rows[step], want.rows[step]), 1e-4) << "step " << step;
      const std::vector<float>& row = want.rows[step];
      if (!GreedyTokenIsDecided(row.data(), static_cast<int64_t>(row.size()))) break;
      ASSERT_EQ(got.tokens[step], want.tokens[step]) << "step " << step;
    }
    // --quantization int8 quantizes the projections that are not in 4 bits (Q4_K_M's layer-1
    // q/k/v and down) and leaves the others; quantized activations take both integer paths.
    std::unique_ptr<CpuBackend> int8 = Backend(path, 64, false, Quantization::kInt8, true);
    ASSERT_NE(int8, nullptr);
    const Trajectory mixed = Greedy(*int8, prompt, 4);
    ASSERT_EQ(mixed.rows.size(), 4u);
    EXPECT_LT(RelativeMaxError(mixed.rows[0], want.rows[0]), 0.05);
    EXPECT_LE(int8->weight_bytes(), four_bit->weight_bytes());
  }
}

}  // namespace
}  // namespace llmserve::worker
