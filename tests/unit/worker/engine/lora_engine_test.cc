// LoRA adapters through the whole engine: requests of three adapters and of the base model, more
// adapters than slots, each generate exactly the greedy tokens of an engine over the checkpoint
// with its adapter merged; blocks cached under one adapter are never reused for another or the
// base; an adapter in use cannot be removed, and a removed one is refused.

#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tests/unit/worker/engine/greedy_generation.h"
#include "tests/unit/worker/engine/lora_test_adapters.h"
#include "worker/engine/cpu_engine_builder.h"
#include "worker/engine/engine.h"
#include "worker/model/lora_adapter.h"
#include "worker/model/model_files.h"
#include "worker/model/model_writer.h"

namespace llmserve::worker {
namespace {

using testing::AdapterSpec;

constexpr int kTokens = 12;

class LoraEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(WriteRandomModel(config_, {.seed = 4, .scale = 0.3f}, base_).ok());
    auto files = ModelFiles::Open(base_);
    ASSERT_TRUE(files.ok()) << files.status();
    files_ = *std::move(files);
    const std::vector<AdapterSpec> specs = {
        {{"q_proj", "v_proj"}, 8, 16, false, 1},
        {{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"},
         16,
         8,
         true,
         2},
        {{"o_proj", "down_proj"}, 4, 4, false, 3},
    };
    for (size_t i = 0; i < specs.size(); ++i) {
      const std::string dir = absl::StrCat(temp_.path(), "/adapter", i);
      const auto deltas = testing::WriteAdapter(config_, specs[i], dir);
      const std::string merged = absl::StrCat(temp_.path(), "/merged", i);
      testing::WriteMerged(*files_, deltas, testing::ModulesOf(config_, specs[i].targets), merged);
      adapter_dirs_.push_back(dir);
      merged_dirs_.push_back(merged);
    }
  }

  std::unique_ptr<Engine> MakeEngine(int32_t max_loras,
                                     std::function<void(const StepStats&)> on_step = nullptr) {
    auto engine = BuildCpuEngine({.model_dir = base_,
                                  .num_threads = 2,
                                  .kv_cache_bytes = 4 << 20,
                                  .block_size = 4,
                                  .max_lora_rank = 16,
                                  .engine = {.max_num_batched_tokens = 64,
                                             .max_num_seqs = 8,
                                             .max_loras = max_loras,
                                             .on_step = std::move(on_step)}});
    EXPECT_TRUE(engine.ok()) << engine.status();
    if (!engine.ok()) return nullptr;
    for (size_t i = 0; i < adapter_dirs_.size(); ++i) {
      auto adapter = LoadLoraAdapter(adapter_dirs_[i], config_, 16);
      EXPECT_TRUE(adapter.ok()) << adapter.status();
      EXPECT_TRUE((*engine)->AddLoraAdapter(absl::StrCat("a", i), *std::move(adapter)).ok());
    }
    return *std::move(engine);
  }

  struct Result {
    std::vector<int32_t> tokens;
    int32_t cached = -1;
    bool done = false;
    absl::Status error;
  };
  // Adds a greedy request of `adapter` ("" for the base model) whose output lands in `result`.
  absl::StatusOr<RequestId> Add(Engine& engine, const std::vector<int32_t>& prompt,
                                const std::string& adapter, Result* result) {
    EngineRequest request;
    request.prompt = prompt;
    request.sampling.temperature = 0;
    request.stopping = {.max_tokens = kTokens, .ignore_eos = true};
    request.lora_adapter = adapter;
    request.on_output = [result](const EngineOutput& output) {
      for (const GeneratedToken& t : output.tokens) result->tokens.push_back(t.token_id);
      if (output.finish == FinishReason::kNone) return;
      result->done = true;
      result->cached = output.cached_prompt_tokens;
      result->error = output.error;
    };
    return engine.AddRequest(std::move(request));
  }

  std::vector<int32_t> Prompt(uint32_t seed) const {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int32_t> token(1, static_cast<int32_t>(config_.vocab_size) - 1);
    std::vector<int32_t> prompt(9);
    for (int32_t& id : prompt) id = token(rng);
    return prompt;
  }

  const ModelConfig config_ = testing::SmallLlama();
  const ::llmserve::testing::ScopedTempDir temp_{"lora_engine_test"};
  const std::string base_ = temp_.path() + "/base";
  std::unique_ptr<ModelFiles> files_;
  std::vector<std::string> adapter_dirs_, merged_dirs_;
};

TEST_F(LoraEngineTest, AdaptersMixedInBatchesGenerateWhatTheirMergedModelsGenerate) {
  // Two slots for three adapters: the scheduler holds back the third until one is free, and slots
  // are reused.
  std::unique_ptr<Engine> engine = MakeEngine(/*max_loras=*/2);
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(engine->LoraAdapters(), (std::vector<std::string>{"a0", "a1", "a2"}));
  std::map<std::string, Result> results;
  const std::vector<std::string> adapters = {"", "a0", "a1", "a2", "a0", ""};
  for (size_t i = 0; i < adapters.size(); ++i) {
    Result& result = results[absl::StrCat(i, adapters[i])];
    ASSERT_TRUE(Add(*engine, Prompt(static_cast<uint32_t>(i)), adapters[i], &result).ok());
  }
  for (int step = 0; engine->StepOnce(); ++step) ASSERT_LT(step, 1000);
  for (size_t i = 0; i < adapters.size(); ++i) {
    const Result& result = results[absl::StrCat(i, adapters[i])];
    ASSERT_TRUE(result.done && result.error.ok()) << i << " " << result.error;
    const std::string dir = adapters[i].empty() ? base_ : merged_dirs_[adapters[i][1] - '0'];
    const std::vector<int32_t> want = testing::GreedyTokens(
        {.model_dir = dir, .num_threads = 1, .kv_cache_bytes = 1 << 20, .block_size = 4},
        Prompt(static_cast<uint32_t>(i)), kTokens);
    EXPECT_EQ(result.tokens, want) << "request " << i << " adapter '" << adapters[i] << "'";
  }
  // Adapter a2 changes the output (else the comparison above proves little for it).
  EXPECT_NE(testing::GreedyTokens(
                {.model_dir = base_, .num_threads = 1, .kv_cache_bytes = 1 << 20, .block_size = 4},
                Prompt(3), kTokens),
            results["3a2"].tokens);
}

TEST_F(LoraEngineTest, CachedBlocksAreNeverSharedAcrossAdapters) {
  std::unique_ptr<Engine> engine = MakeEngine(2);
  ASSERT_NE(engine, nullptr);
  const std::vector<int32_t> prompt = Prompt(42);  // 9 tokens: two full blocks of 4
  for (const auto& [adapter, cached] : std::vector<std::pair<std::string, int32_t>>{
           {"", 0}, {"a0", 0}, {"a1", 0}, {"a0", 8}, {"", 8}}) {
    Result result;
    ASSERT_TRUE(Add(*engine, prompt, adapter, &result).ok());
    while (engine->StepOnce()) {
    }
    ASSERT_TRUE(result.done);
    EXPECT_EQ(result.cached, cached) << "adapter '" << adapter << "'";
  }
}

TEST_F(LoraEngineTest, AnAdapterInUseCannotBeRemovedAndARemovedOneIsRefused) {
  std::unique_ptr<Engine> engine = MakeEngine(2);
  ASSERT_NE(engine, nullptr);
  Result result;
  ASSERT_TRUE(Add(*engine, Prompt(1), "a1", &result).ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(engine->RemoveLoraAdapter("a1")));
  while (engine->StepOnce()) {
  }
  ASSERT_TRUE(result.done);
  EXPECT_TRUE(engine->RemoveLoraAdapter("a1").ok());
  EXPECT_TRUE(absl::IsNotFound(engine->RemoveLoraAdapter("a1")));
  Result refused;
  EXPECT_TRUE(absl::IsNotFound(Add(*engine, Prompt(1), "a1", &refused).status()));
  EXPECT_EQ(engine->LoraAdapters(), (std::vector<std::string>{"a0", "a2"}));
  // Loaded again under the same name, it serves again.
  auto adapter = LoadLoraAdapter(adapter_dirs_[1], config_, 16);
  ASSERT_TRUE(adapter.ok());
  ASSERT_TRUE(engine->AddLoraAdapter("a1", *std::move(adapter)).ok());
  EXPECT_TRUE(absl::IsAlreadyExists(
      engine->AddLoraAdapter("a1", *LoadLoraAdapter(adapter_dirs_[1], config_, 16))));
  Result again;
  ASSERT_TRUE(Add(*engine, Prompt(1), "a1", &again).ok());
  while (engine->StepOnce()) {
  }
  EXPECT_EQ(again.tokens, result.tokens);
}

TEST_F(LoraEngineTest, EveryReportCountsEachAdaptersRunningAndWaitingRequests) {
  std::vector<std::vector<LoraAdapterLoad>> reports;
  std::vector<Result> results(5);  // before the engine, which reports into them
  std::unique_ptr<Engine> engine =
      MakeEngine(2, [&](const StepStats& step) { reports.push_back(step.lora_adapters); });
  ASSERT_NE(engine, nullptr);
  const std::vector<std::string> adapters = {"", "a0", "a0", "a1", "a2"};
  for (size_t i = 0; i < adapters.size(); ++i) {
    ASSERT_TRUE(Add(*engine, Prompt(static_cast<uint32_t>(i)), adapters[i], &results[i]).ok());
  }
  ASSERT_TRUE(engine->StepOnce());
  ASSERT_FALSE(reports.empty());
  // Two slots: a0 and a1 run, a2 waits for one; the base model's request is no adapter's.
  const std::vector<LoraAdapterLoad>& first = reports.back();
  ASSERT_EQ(first.size(), 3u);
  EXPECT_EQ(first[0].name, "a0");
  EXPECT_EQ(first[0].running, 2);
  EXPECT_EQ(first[0].waiting, 0);
  EXPECT_EQ(first[1].name, "a1");
  EXPECT_EQ(first[1].running, 1);
  EXPECT_EQ(first[2].name, "a2");
  EXPECT_EQ(first[2].running, 0);
  EXPECT_EQ(first[2].waiting, 1);
  for (int step = 0; engine->StepOnce(); ++step) ASSERT_LT(step, 1000);
  EXPECT_TRUE(reports.back().empty());
  // An engine without slots counts nothing.
  std::vector<StepStats> plain;
  Result base;  // before the engine, which reports into it until it is destroyed
  auto no_lora =
      BuildCpuEngine({.model_dir = base_,
                      .kv_cache_bytes = 1 << 20,
                      .block_size = 4,
                      .engine = {.on_step = [&](const StepStats& s) { plain.push_back(s); }}});
  ASSERT_TRUE(no_lora.ok()) << no_lora.status();
  ASSERT_TRUE(Add(**no_lora, Prompt(1), "", &base).ok());
  ASSERT_TRUE((*no_lora)->StepOnce());
  ASSERT_FALSE(plain.empty());
  EXPECT_TRUE(plain.back().lora_adapters.empty());
  for (int step = 0; (*no_lora)->StepOnce(); ++step) ASSERT_LT(step, 1000);
}

TEST_F(LoraEngineTest, AnEngineWithoutSlotsTakesNoAdapter) {
  auto engine = BuildCpuEngine({.model_dir = base_, .kv_cache_bytes = 1 << 20, .block_size = 4});
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto adapter = LoadLoraAdapter(adapter_dirs_[0], config_, 16);
  ASSERT_TRUE(adapter.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition((*engine)->AddLoraAdapter("a0", *std::move(adapter))));
  Result result;
  EXPECT_TRUE(absl::IsNotFound(Add(**engine, Prompt(1), "a0", &result).status()));
}

}  // namespace
}  // namespace llmserve::worker
