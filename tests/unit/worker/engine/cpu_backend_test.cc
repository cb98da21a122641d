// The CPU backend against the naive reference: random tiny GPT-2 and Llama-family models, random
// mixes of requests (prompt lengths, prefill split into chunks at random points, decode steps
// interleaved, cached prefix blocks shared between requests, block ids scattered).

#include "worker/engine/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/huge_page_memory.h"
#include "gtest/gtest.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tests/unit/worker/engine/random_request_mix.h"
#include "tests/unit/worker/engine/reference_model.h"
#include "worker/model/model_files.h"
#include "worker/model/model_weights.h"
#include "worker/model/model_writer.h"

namespace llmserve::worker {
namespace {

ModelConfig RandomConfig(std::mt19937& rng, bool gpt2) {
  auto pick = [&rng](std::vector<int64_t> options) { return options[rng() % options.size()]; };
  ModelConfig c;
  c.vocab_size = pick({37, 64, 101});
  c.num_layers = pick({1, 2, 3});
  c.max_position_embeddings = c.max_model_len = 96;
  c.eos_token_ids = {0};
  if (gpt2) {
    c.architecture = "GPT2LMHeadModel";
    c.family = ModelFamily::kGpt2;
    c.num_heads = c.num_kv_heads = pick({1, 2, 4});
    c.head_dim = pick({4, 8});
    c.hidden_size = c.num_heads * c.head_dim;
    c.intermediate_size = 4 * c.hidden_size;
    c.norm = NormKind::kLayerNorm;
    c.activation = Activation::kGeluTanh;
    c.gated_mlp = false;
    c.position = PositionKind::kLearned;
    c.qkv_bias = c.o_bias = c.mlp_bias = c.norm_bias = true;
    c.tied_embeddings = true;
    return c;
  }
  c.architecture = rng() % 2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM";
  c.family = ModelFamily::kLlama;
  c.num_kv_heads = pick({1, 2});
  c.num_heads = c.num_kv_heads * pick({1, 2, 3});
  c.head_dim = pick({4, 8, 16});
  c.hidden_size = pick({16, 24});
  c.intermediate_size = pick({20, 32});
  c.qkv_bias = c.architecture == "Qwen2ForCausalLM";
  c.tied_embeddings = rng() % 2;
  c.rope_theta = pick({10000, 500000});
  if (rng() % 2) {
    c.rope_scaling.kind = RopeScaling::Kind::kLlama3;
    c.rope_scaling.factor = 8;
    c.rope_scaling.low_freq_factor = 1;
    c.rope_scaling.high_freq_factor = 4;
    c.rope_scaling.original_max_position_embeddings = 32;
  }
  return c;
}

double MaxAbs(const std::vector<double>& row) {
  double m = 0;
  for (double v : row) m = std::max(m, std::abs(v));
  return m;
}

// Expects backend logits `got` to match reference row `want` within `relative` of the row's
// largest logit: 1e-4 for f32 work. bf16 weights also round the projections' inputs to bf16, in
// the backend and in the reference alike; but an input that lies within f32 noise of a rounding
// boundary can round one way in the reference (double) and the other in the backend (f32), which
// moves it by a bf16 ulp (2^-8 relative). Such flips cost up to about 2e-4 here, hence 1e-3.
void ExpectClose(const float* got, const std::vector<double>& want, const std::string& where,
                 double relative = 1e-4) {
  const double tolerance = relative * MaxAbs(want) + 1e-6;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tolerance) << where << " logit " << i;
  }
}

class CpuBackendPropertyTest : public ::testing::TestWithParam<int> {};

TEST_P(CpuBackendPropertyTest, PagedBatchedForwardMatchesReference) {
  const int seed = GetParam();
  std::mt19937 rng(seed);
  const bool gpt2 = seed % 2 == 0;
  const ModelConfig config = RandomConfig(rng, gpt2);
  const DType dtype = seed % 3 == 0 ? DType::kBF16 : seed % 3 == 1 ? DType::kF32 : DType::kF16;
  const ::llmserve::testing::ScopedTempDir temp("cpu_backend_test");
  const std::string& dir = temp.path();
  ASSERT_TRUE(WriteRandomModel(
                  config, {.dtype = dtype, .seed = static_cast<uint64_t>(seed), .scale = 0.3f}, dir)
                  .ok());
  auto files = ModelFiles::Open(dir);
  ASSERT_TRUE(files.ok()) << files.status();
  auto loaded_config = ParseModelConfig((*files)->config_json(), "");
  ASSERT_TRUE(loaded_config.ok()) << loaded_config.status();
  auto weights = LoadModelWeights(**files, *loaded_config, dtype);
  ASSERT_TRUE(weights.ok()) << weights.status();
  const int32_t block_size = static_cast<int32_t>(std::vector<int>{1, 4, 16}[rng() % 3]);
  auto backend =
      CpuBackend::Create(*std::move(weights), {.kv_cache_bytes = 8 << 20,
                                               .block_size = block_size,
                                               .num_threads = 1 + static_cast<int>(rng() % 3)});
  ASSERT_TRUE(backend.ok()) << backend.status();

  // Requests, some sharing the first blocks of an earlier one's prompt.
  const int num_sequences = 2 + static_cast<int>(rng() % 6);
  testing::RandomRequestMix mix(rng, {.num_sequences = num_sequences,
                                      .max_tokens = 60,
                                      .vocab_size = static_cast<int32_t>(config.vocab_size),
                                      .block_size = block_size,
                                      .num_blocks = (*backend)->num_kv_blocks()});
  std::vector<std::vector<std::vector<double>>> references;  // [sequence][position][token]
  for (const testing::RandomRequestMix::Sequence& seq : mix.sequences()) {
    references.push_back(testing::ReferenceModel(**files, *loaded_config,
                                                 {.bf16_matmul_inputs = dtype == DType::kBF16})
                             .Logits(seq.tokens));
  }

  ForwardBatch batch;
  ForwardOutput output;
  std::vector<int> in_batch;
  for (int step = 0; step < 1000 && !mix.Done(); ++step) {
    ASSERT_TRUE(mix.NextBatch(&batch, &in_batch)) << "out of KV blocks";
    if (in_batch.empty()) continue;
    ASSERT_TRUE((*backend)->Forward(batch, &output).ok());
    for (size_t i = 0; i < in_batch.size(); ++i) {
      const int32_t computed = mix.sequences()[in_batch[i]].computed;
      const int32_t chunk = batch.query_start[i + 1] - batch.query_start[i];
      const int32_t rows = output.row_start[i + 1] - output.row_start[i];
      ASSERT_TRUE(rows == 1 || rows == chunk);
      for (int32_t r = 0; r < rows; ++r) {
        const int32_t position = computed + chunk - rows + r;
        ExpectClose(output.Row(output.row_start[i] + r), references[in_batch[i]][position],
                    absl::StrCat("seed ", seed, " step ", step, " seq ", in_batch[i], " position ",
                                 position),
                    dtype == DType::kBF16 ? 1e-3 : 1e-4);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
    mix.Advance(batch, in_batch);
  }
  EXPECT_TRUE(mix.Done());
}

INSTANTIATE_TEST_SUITE_P(RandomModelsAndBatches, CpuBackendPropertyTest, ::testing::Range(0, 24));

TEST(CpuBackendTest, OneChunkOrManyGiveTheSameLogits) {
  ModelConfig config;
  std::mt19937 rng(99);
  config = RandomConfig(rng, /*gpt2=*/false);
  const ::llmserve::testing::ScopedTempDir temp("cpu_backend_chunks");
  const std::string& dir = temp.path();
  ASSERT_TRUE(WriteRandomModel(config, {.seed = 4, .scale = 0.3f}, dir).ok());
  auto files = ModelFiles::Open(dir);
  ASSERT_TRUE(files.ok());
  std::vector<int32_t> prompt;
  for (int i = 0; i < 37; ++i) prompt.push_back(rng() % config.vocab_size);
  std::vector<std::vector<float>> results;
  for (int32_t chunk : {37, 1, 5, 16}) {
    auto weights = LoadModelWeights(**files, config, DType::kF32);
    ASSERT_TRUE(weights.ok());
    auto backend = CpuBackend::Create(*std::move(weights), {.kv_cache_bytes = 1 << 20});
    ASSERT_TRUE(backend.ok());
    const std::vector<int32_t> blocks = {7, 2, 5};  // 48 slots
    ForwardBatch batch;
    ForwardOutput output;
    for (int32_t done = 0; done < 37; done += chunk) {
      const int32_t n = std::min<int32_t>(chunk, 37 - done);
      batch.Clear();
      batch.AddSequence(std::vector<int32_t>(prompt.begin() + done, prompt.begin() + done + n),
                        done, blocks);
      ASSERT_TRUE((*backend)->Forward(batch, &output).ok());
    }
    results.emplace_back(output.LastRow(0), output.LastRow(0) + config.vocab_size);
  }
  for (size_t r = 1; r < results.size(); ++r) {
    for (int64_t i = 0; i < config.vocab_size; ++i) {
      EXPECT_NEAR(results[r][i], results[0][i], 1e-5) << "chunking " << r << " logit " << i;
    }
  }
}

// A request admitted in the same step as the one filling its prefix blocks reads them in the
// same forward pass: every layer writes all new K/V before any attention reads them.
TEST(CpuBackendTest, SequencesShareBlocksWrittenInTheSameForwardPass) {
  std::mt19937 rng(11);
  const ModelConfig config = RandomConfig(rng, /*gpt2=*/false);
  const ::llmserve::testing::ScopedTempDir temp("cpu_backend_same_step");
  const std::string& dir = temp.path();
  ASSERT_TRUE(WriteRandomModel(config, {.seed = 8, .scale = 0.3f}, dir).ok());
  auto files = ModelFiles::Open(dir);
  ASSERT_TRUE(files.ok());
  auto weights = LoadModelWeights(**files, config, DType::kF32);
  ASSERT_TRUE(weights.ok());
  auto backend =
      CpuBackend::Create(*std::move(weights), {.kv_cache_bytes = 1 << 20, .block_size = 4});
  ASSERT_TRUE(backend.ok());
  std::vector<int32_t> a(11), b(10);
  for (int32_t& t : a) t = rng() % config.vocab_size;
  std::copy_n(a.begin(), 8, b.begin());  // two shared blocks
  b[8] = 1;
  b[9] = 2;
  ForwardBatch batch;
  batch.AddSequence(a, 0, {3, 7, 1});
  batch.AddSequence({b[8], b[9]}, 8, {3, 7, 5});
  ForwardOutput output;
  ASSERT_TRUE((*backend)->Forward(batch, &output).ok());
  const auto reference_b = testing::ReferenceModel(**files, config).Logits(b);
  ExpectClose(output.LastRow(1), reference_b.back(), "shared in the same step");
}

// The profile accounts for each decode step's time by phase, and each projection's weights once
// per layer per step; it counts nothing until enabled and after it is disabled.
TEST(CpuBackendTest, ProfileSplitsForwardTimeByPhaseAndCountsWeightBytes) {
  std::mt19937 rng(21);
  ModelConfig config = RandomConfig(rng, /*gpt2=*/false);
  config.num_layers = 2;
  const ::llmserve::testing::ScopedTempDir temp("cpu_backend_profile");
  ASSERT_TRUE(WriteRandomModel(config, {.seed = 3, .scale = 0.3f}, temp.path()).ok());
  auto files = ModelFiles::Open(temp.path());
  ASSERT_TRUE(files.ok());
  auto weights = LoadModelWeights(**files, config, DType::kF32);
  ASSERT_TRUE(weights.ok());
  auto backend =
      CpuBackend::Create(*std::move(weights), {.kv_cache_bytes = 1 << 20, .num_threads = 2});
  ASSERT_TRUE(backend.ok());
  ForwardBatch batch;
  ForwardOutput output;
  batch.AddSequence({1, 2, 3}, 0, {0});
  ASSERT_TRUE((*backend)->Forward(batch, &output).ok());
  EXPECT_EQ((*backend)->profile().forwards, 0);

  (*backend)->EnableProfile(true);
  for (int32_t step = 0; step < 3; ++step) {
    batch.Clear();
    batch.AddSequence({4 + step}, 3 + step, {0});
    ASSERT_TRUE((*backend)->Forward(batch, &output).ok());
  }
  (*backend)->EnableProfile(false);
  batch.Clear();
  batch.AddSequence({9}, 6, {0});
  ASSERT_TRUE((*backend)->Forward(batch, &output).ok());

  const cpu::ForwardProfile& profile = (*backend)->profile();
  EXPECT_EQ(profile.forwards, 3);
  int64_t phase_nanos = 0;
  for (int i = 0; i < cpu::kNumForwardPhases; ++i) {
    EXPECT_GE(profile.nanos[i], 0) << ForwardPhaseName(static_cast<cpu::ForwardPhase>(i));
    phase_nanos += profile.nanos[i];
  }
  // The marks tile the pass: the phases add up to the whole but for the clock read that starts it.
  EXPECT_GT(profile.forward_nanos, 0);
  EXPECT_LE(phase_nanos, profile.forward_nanos);
  EXPECT_GT(profile.nanos[static_cast<int>(cpu::ForwardPhase::kAttention)], 0);
  EXPECT_GT(profile.nanos[static_cast<int>(cpu::ForwardPhase::kLmHead)], 0);
  // f32 weights, packed as held: rows x cols x 4 bytes, padded to whole panels of 32 rows.
  const auto packed_bytes = [](int64_t rows, int64_t cols) {
    return (rows + 31) / 32 * 32 * cols * 4;
  };
  const int64_t h = config.hidden_size, d = config.head_dim;
  const int64_t qkv_rows = (config.num_heads + 2 * config.num_kv_heads) * d;
  const auto bytes = [&](cpu::ForwardPhase phase) {
    return profile.weight_bytes[static_cast<int>(phase)];
  };
  EXPECT_EQ(bytes(cpu::ForwardPhase::kQkv), 3 * config.num_layers * packed_bytes(qkv_rows, h));
  EXPECT_EQ(bytes(cpu::ForwardPhase::kO),
            3 * config.num_layers * packed_bytes(h, config.num_heads * d));
  EXPECT_EQ(bytes(cpu::ForwardPhase::kMlpUp),
            3 * config.num_layers * packed_bytes(2 * config.intermediate_size, h));
  EXPECT_EQ(bytes(cpu::ForwardPhase::kMlpDown),
            3 * config.num_layers * packed_bytes(h, config.intermediate_size));
  EXPECT_EQ(bytes(cpu::ForwardPhase::kLmHead), 3 * packed_bytes(config.vocab_size, h));
  EXPECT_EQ(bytes(cpu::ForwardPhase::kAttention), 0);
  // Two threads: the step's loops went through the pool (the norms of one token run inline and
  // count as loops too).
  EXPECT_GE(profile.pool_loops, 3 * config.num_layers);
  EXPECT_GE(profile.pool_wait_nanos, 0);
  // Every loop runs inside some phase, so the phases' waits are the pool's waits, split.
  int64_t phase_waits = 0;
  for (int i = 0; i < cpu::kNumForwardPhases; ++i) {
    EXPECT_GE(profile.wait_nanos[i], 0);
    EXPECT_LE(profile.wait_nanos[i], profile.nanos[i]);
    phase_waits += profile.wait_nanos[i];
  }
  EXPECT_EQ(phase_waits, profile.pool_wait_nanos);

  (*backend)->ResetProfile();
  EXPECT_EQ((*backend)->profile().forwards, 0);
  EXPECT_EQ((*backend)->profile().weight_bytes[static_cast<int>(cpu::ForwardPhase::kQkv)], 0);
}

TEST(CpuBackendTest, TheKvCacheAndPackedWeightsLiveOnHugePageMemoryUntilTheBackendGoes) {
  std::mt19937 rng(9);
  const ModelConfig config = RandomConfig(rng, /*gpt2=*/false);
  const ::llmserve::testing::ScopedTempDir temp("cpu_backend_huge_pages");
  ASSERT_TRUE(WriteRandomModel(config, {.seed = 2}, temp.path()).ok());
  auto files = ModelFiles::Open(temp.path());
  ASSERT_TRUE(files.ok());
  const HugePageMemoryStats before = GetHugePageMemoryStats();
  {
    auto weights = LoadModelWeights(**files, config, DType::kF32);
    ASSERT_TRUE(weights.ok());
    auto backend = CpuBackend::Create(
        *std::move(weights), {.kv_cache_bytes = 1 << 20, .quantization = Quantization::kInt8});
    ASSERT_TRUE(backend.ok());
    const HugePageMemoryStats during = GetHugePageMemoryStats();
    // K, V and the int8 projections (always packed), four per layer.
    EXPECT_GE(during.buffers, before.buffers + 2 + 4 * config.num_layers);
    EXPECT_GE(during.mapped_bytes, (1 << 20) / 2);
    ForwardBatch batch;
    ForwardOutput output;
    batch.AddSequence({1, 2, 3}, 0, {0});
    ASSERT_TRUE((*backend)->Forward(batch, &output).ok());
  }
  EXPECT_EQ(GetHugePageMemoryStats().buffers, before.buffers);
}

TEST(CpuBackendTest, RejectsMalformedBatchesAndBudgets) {
  std::mt19937 rng(5);
  const ModelConfig config = RandomConfig(rng, /*gpt2=*/true);
  const ::llmserve::testing::ScopedTempDir temp("cpu_backend_malformed");
  const std::string& dir = temp.path();
  ASSERT_TRUE(WriteRandomModel(config, {.seed = 1}, dir).ok());
  auto files = ModelFiles::Open(dir);
  ASSERT_TRUE(files.ok());
  auto weights = LoadModelWeights(**files, config, DType::kF32);
  ASSERT_TRUE(weights.ok());
  auto too_small = CpuBackend::Create(*std::move(weights), {.kv_cache_bytes = 10});
  ASSERT_FALSE(too_small.ok());
  EXPECT_NE(too_small.status().message().find("holds no block"), absl::string_view::npos);

  weights = LoadModelWeights(**files, config, DType::kF32);
  auto backend =
      CpuBackend::Create(*std::move(weights), {.kv_cache_bytes = 1 << 20, .block_size = 4});
  ASSERT_TRUE(backend.ok());
  ForwardBatch batch;
  ForwardOutput output;
  auto expect_error = [&](const std::string& fragment) {
    const absl::Status status = (*backend)->Forward(batch, &output);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << fragment;
    EXPECT_NE(status.message().find(fragment), absl::string_view::npos) << status.message();
  };
  batch.Clear();
  expect_error("no sequences");
  batch.AddSequence({1, 2, 3, 4, 5}, 0, {0});  // 5 tokens, 4 slots
  expect_error("has 1 blocks for 5 tokens");
  batch.Clear();
  batch.AddSequence({1, static_cast<int32_t>(config.vocab_size)}, 0, {0});
  expect_error("outside the vocabulary");
  batch.Clear();
  batch.AddSequence({1}, 0, {(*backend)->num_kv_blocks()});
  expect_error("block id");
  batch.Clear();
  batch.AddSequence({1}, static_cast<int32_t>(config.max_model_len), std::vector<int32_t>(40, 0));
  expect_error("beyond max_model_len");
  batch.Clear();
  batch.AddSequence({}, 0, {0});
  expect_error("has no tokens");
}

}  // namespace
}  // namespace llmserve::worker
