// Embedding requests through the real engine and CPU backend, against the double-precision
// reference model's final hidden states pooled by hand: chunked prefill, a batch that mixes them
// with generation, preemption in the middle of a prompt, and the prefix cache left alone.

#include <cmath>
#include <map>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tests/testing/test_model.h"
#include "tests/unit/worker/engine/reference_model.h"
#include "worker/engine/cpu_engine_builder.h"
#include "worker/engine/engine.h"
#include "worker/engine/pooler.h"
#include "worker/model/model_config.h"
#include "worker/model/model_files.h"

namespace llmserve::worker {
namespace {

// The embedding the pooling defines, in double, from the reference's hidden states.
std::vector<double> ReferencePooled(const std::vector<std::vector<double>>& hidden,
                                    const PoolingParams& params) {
  const size_t h = hidden[0].size();
  std::vector<double> pooled(h, 0.0);
  switch (params.method) {
    case PoolingMethod::kLast:
      pooled = hidden.back();
      break;
    case PoolingMethod::kCls:
      pooled = hidden.front();
      break;
    case PoolingMethod::kMean:
      for (const auto& row : hidden) {
        for (size_t i = 0; i < h; ++i) pooled[i] += row[i] / hidden.size();
      }
      break;
  }
  if (params.dimensions > 0) pooled.resize(params.dimensions);
  if (params.normalize) {
    double norm = 0;
    for (double v : pooled) norm += v * v;
    for (double& v : pooled) v /= std::sqrt(norm);
  }
  return pooled;
}

class EmbeddingEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(::llmserve::testing::WriteTinyModel(temp_.path(), /*seed=*/5).ok());
    auto files = ModelFiles::Open(temp_.path());
    ASSERT_TRUE(files.ok()) << files.status();
    files_ = *std::move(files);
    auto config = ParseModelConfig(files_->config_json(), "");
    ASSERT_TRUE(config.ok()) << config.status();
    config_ = *config;
  }

  std::unique_ptr<Engine> MakeEngine(int64_t kv_cache_bytes, int32_t max_batched_tokens,
                                     std::vector<StepStats>* steps = nullptr) {
    EngineConfig engine{.max_num_batched_tokens = max_batched_tokens, .max_num_seqs = 8};
    if (steps != nullptr) engine.on_step = [steps](const StepStats& s) { steps->push_back(s); };
    auto built = BuildCpuEngine({.model_dir = temp_.path(),
                                 .num_threads = 2,
                                 .kv_cache_bytes = kv_cache_bytes,
                                 .block_size = 4,
                                 .engine = engine});
    EXPECT_TRUE(built.ok()) << built.status();
    return built.ok() ? *std::move(built) : nullptr;
  }

  std::vector<int32_t> RandomPrompt(std::mt19937& rng, int length) const {
    std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(config_.vocab_size) - 1);
    std::vector<int32_t> prompt(length);
    for (int32_t& id : prompt) id = token(rng);
    return prompt;
  }

  // Expects `got` to be the reference's pooling of `prompt` within f32 rounding.
  void ExpectPooled(const std::vector<int32_t>& prompt, const PoolingParams& params,
                    const std::vector<float>& got) {
    const std::vector<double> want =
        ReferencePooled(testing::ReferenceModel(*files_, config_).Hidden(prompt), params);
    ASSERT_EQ(got.size(), want.size());
    double largest = 0;
    for (double v : want) largest = std::max(largest, std::abs(v));
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], 1e-4 * largest) << "dimension " << i;
    }
  }

  ::llmserve::testing::ScopedTempDir temp_{"embedding_engine_test"};
  std::unique_ptr<ModelFiles> files_;
  ModelConfig config_;
};

struct Finished {
  EngineOutput output;
  bool done = false;
};

TEST_F(EmbeddingEngineTest, EveryPoolingMatchesTheReferenceThroughChunkedPrefillBesideGeneration) {
  // 8 tokens a step: every prompt below is computed in several chunks, alongside a generation.
  std::unique_ptr<Engine> engine = MakeEngine(8 << 20, /*max_batched_tokens=*/8);
  ASSERT_NE(engine, nullptr);
  std::mt19937 rng(7);
  const std::vector<PoolingParams> cases = {
      {.method = PoolingMethod::kLast},
      {.method = PoolingMethod::kMean},
      {.method = PoolingMethod::kCls},
      {.method = PoolingMethod::kMean, .normalize = false},
      {.method = PoolingMethod::kLast, .normalize = true, .dimensions = 16},
  };
  std::map<RequestId, Finished> results;
  std::map<RequestId, std::pair<std::vector<int32_t>, PoolingParams>> asked;
  const auto on_output = [&results](const EngineOutput& output) {
    if (output.finish == FinishReason::kNone) return;
    results[output.id] = {output, true};
  };
  EngineRequest generation;
  generation.prompt = RandomPrompt(rng, 5);
  generation.sampling.temperature = 0;
  generation.stopping = {.max_tokens = 12, .ignore_eos = true};
  generation.on_output = on_output;
  auto generation_id = engine->AddRequest(std::move(generation));
  ASSERT_TRUE(generation_id.ok()) << generation_id.status();
  for (size_t i = 0; i < cases.size(); ++i) {
    EngineRequest request;
    request.prompt = RandomPrompt(rng, 13 + 5 * static_cast<int>(i));
    request.stopping.max_tokens = 0;
    request.pooling = cases[i];
    request.on_output = on_output;
    std::vector<int32_t> prompt = request.prompt;
    auto id = engine->AddRequest(std::move(request));
    ASSERT_TRUE(id.ok()) << id.status();
    asked[*id] = {std::move(prompt), cases[i]};
  }
  for (int step = 0; engine->StepOnce(); ++step) ASSERT_LT(step, 1000);
  ASSERT_EQ(results.size(), cases.size() + 1);
  EXPECT_EQ(results[*generation_id].output.output_tokens, 12);
  EXPECT_TRUE(results[*generation_id].output.embedding.empty());
  for (const auto& [id, prompt_and_params] : asked) {
    const EngineOutput& output = results[id].output;
    SCOPED_TRACE(::testing::Message()
                 << "pooling " << PoolingMethodName(prompt_and_params.second.method)
                 << " dimensions " << prompt_and_params.second.dimensions);
    EXPECT_EQ(output.finish, FinishReason::kStop);
    EXPECT_TRUE(output.tokens.empty());
    EXPECT_EQ(output.output_tokens, 0);
    EXPECT_EQ(output.prompt_tokens, static_cast<int32_t>(prompt_and_params.first.size()));
    ExpectPooled(prompt_and_params.first, prompt_and_params.second, output.embedding);
  }
}

TEST_F(EmbeddingEngineTest, APromptMayFillTheWholeContextAndCachesNothing) {
  std::vector<StepStats> steps;
  std::unique_ptr<Engine> engine = MakeEngine(8 << 20, 64, &steps);
  ASSERT_NE(engine, nullptr);
  std::mt19937 rng(3);
  // Prompts of whole blocks, twice the same: a generation would hit the cache the second time.
  const std::vector<int32_t> prompt = RandomPrompt(rng, static_cast<int>(engine->max_model_len()));
  for (int round = 0; round < 2; ++round) {
    Finished finished;
    EngineRequest request;
    request.prompt = prompt;
    request.stopping.max_tokens = 0;
    request.pooling = PoolingParams{.method = PoolingMethod::kMean};
    request.on_output = [&finished](const EngineOutput& output) {
      if (output.finish != FinishReason::kNone) finished = {output, true};
    };
    ASSERT_TRUE(engine->AddRequest(std::move(request)).ok());
    while (engine->StepOnce()) {
    }
    ASSERT_TRUE(finished.done);
    EXPECT_EQ(finished.output.cached_prompt_tokens, 0);
    if (round == 0)
      ExpectPooled(prompt, {.method = PoolingMethod::kMean}, finished.output.embedding);
  }
  EXPECT_EQ(engine->Counts().kv_blocks_free, engine->num_kv_blocks());
  for (const StepStats& step : steps) {
    EXPECT_TRUE(step.cache_events.empty());
    EXPECT_EQ(step.prefix_cache_hits, 0);
  }
}

TEST_F(EmbeddingEngineTest, APreemptedPromptIsPooledFromScratch) {
  // 20 blocks of 4 tokens. A generation of 60 + 16 tokens needs 19 of them; beside it, an
  // embedding of 48 tokens computed 7 tokens a step is preempted (the newer request) each time
  // the generation needs a block, after some of its chunks were pooled, until the generation ends.
  const int64_t block_bytes = int64_t{2} * config_.num_layers * config_.num_kv_heads *
                              config_.head_dim * 4 /*block_size*/ * sizeof(float);
  std::vector<StepStats> steps;
  std::unique_ptr<Engine> engine = MakeEngine(block_bytes * 20, 8, &steps);
  ASSERT_NE(engine, nullptr);
  ASSERT_LE(engine->num_kv_blocks(), 20);
  std::mt19937 rng(11);
  std::map<RequestId, Finished> results;
  const auto on_output = [&results](const EngineOutput& output) {
    if (output.finish != FinishReason::kNone) results[output.id] = {output, true};
  };
  EngineRequest generation;
  generation.prompt = RandomPrompt(rng, 60);
  generation.sampling.temperature = 0;
  generation.stopping = {.max_tokens = 16, .ignore_eos = true};
  generation.on_output = on_output;
  auto generation_id = engine->AddRequest(std::move(generation));
  ASSERT_TRUE(generation_id.ok()) << generation_id.status();
  const std::vector<int32_t> prompt = RandomPrompt(rng, 48);
  EngineRequest request;
  request.prompt = prompt;
  request.stopping.max_tokens = 0;
  request.pooling = PoolingParams{.method = PoolingMethod::kMean};
  request.on_output = on_output;
  auto id = engine->AddRequest(std::move(request));
  ASSERT_TRUE(id.ok()) << id.status();
  for (int step = 0; engine->StepOnce(); ++step) ASSERT_LT(step, 1000);
  int64_t preemptions = 0;
  for (const StepStats& step : steps) preemptions += step.preemptions;
  ASSERT_GT(preemptions, 0) << "the test did not preempt; its cache is too large";
  ASSERT_TRUE(results[*generation_id].done);
  EXPECT_EQ(results[*generation_id].output.output_tokens, 16);
  ASSERT_TRUE(results[*id].done);
  EXPECT_GT(results[*id].output.preemptions, 0);
  ExpectPooled(prompt, {.method = PoolingMethod::kMean}, results[*id].output.embedding);
}

TEST_F(EmbeddingEngineTest, RefusesGenerationFieldsOnAnEmbeddingRequest) {
  std::unique_ptr<Engine> engine = MakeEngine(8 << 20, 64);
  ASSERT_NE(engine, nullptr);
  EngineRequest request;
  request.prompt = {1, 2, 3};
  request.stopping.max_tokens = 4;
  request.pooling = PoolingParams{};
  request.on_output = [](const EngineOutput&) {};
  const absl::StatusOr<RequestId> added = engine->AddRequest(std::move(request));
  EXPECT_TRUE(absl::IsInvalidArgument(added.status())) << added.status();
}

TEST(PoolerTest, MeanOverChunksCutsThenNormalizes) {
  Pooler pooler({.method = PoolingMethod::kMean, .normalize = true, .dimensions = 2}, 3);
  const float first[] = {1, 2, 100, 3, 4, 100};
  const float second[] = {5, 0, 100};
  pooler.Add(first, 2, 0);
  pooler.Add(second, 1, 2);
  // Mean (3, 2, 100), cut to (3, 2), scaled to unit length.
  const std::vector<float> got = pooler.Finish(3);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_NEAR(got[0], 3 / std::sqrt(13.0), 1e-7);
  EXPECT_NEAR(got[1], 2 / std::sqrt(13.0), 1e-7);
}

TEST(PoolerTest, ClsKeepsPositionZeroAndResetForgetsEverything) {
  Pooler cls({.method = PoolingMethod::kCls, .normalize = false}, 2);
  const float rows[] = {7, 8, 9, 10};
  cls.Add(rows, 2, 0);
  cls.Add(rows + 2, 1, 2);  // a later chunk does not replace position 0
  EXPECT_EQ(cls.Finish(3), (std::vector<float>{7, 8}));
  Pooler mean({.method = PoolingMethod::kMean, .normalize = false}, 2);
  mean.Add(rows, 2, 0);
  mean.Reset();
  mean.Add(rows, 2, 0);
  EXPECT_EQ(mean.Finish(2), (std::vector<float>{8, 9}));
}

}  // namespace
}  // namespace llmserve::worker
