// llmserve-run's pieces: prompt files, the runner over a real engine on a generated tiny model,
// and the benchmark report.

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tools/make_model/bpe_builder.h"
#include "tools/make_model/presets.h"
#include "tools/run/bench.h"
#include "tools/run/prompts.h"
#include "tools/run/runner.h"
#include "worker/engine/cpu_engine_builder.h"
#include "worker/model/model_writer.h"

namespace llmserve::tools {
namespace {

TEST(PromptsTest, LinesOverrideDefaultsAndErrorsNameLineAndField) {
  RunPrompt defaults;
  defaults.stopping.max_tokens = 9;
  defaults.sampling.temperature = 0.5f;
  auto text =
      ParsePromptLine(R"({"prompt": "hi", "top_p": 0.9, "seed": 18446744073709551615})", defaults);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text->text, "hi");
  EXPECT_EQ(text->stopping.max_tokens, 9);
  EXPECT_FLOAT_EQ(text->sampling.top_p, 0.9f);
  EXPECT_EQ(*text->sampling.seed, 18446744073709551615ull);
  auto ids = ParsePromptLine(R"({"prompt_ids": [1, 2], "max_tokens": 3, "logprobs": 2})", defaults);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids->ids, (std::vector<int32_t>{1, 2}));
  EXPECT_TRUE(ids->sampling.return_logprobs);

  for (const auto& [line, fragment] : std::vector<std::pair<std::string, std::string>>{
           {"[1]", "not a JSON object"},
           {R"({"prompt": "a", "prompt_ids": [1]})", "exactly one"},
           {R"({"prompt": 5})", "'prompt' must be a string"},
           {R"({"prompt_ids": [-1]})", "non-negative"},
           {R"({"prompt": "a", "max_tokens": 1.5})", "'max_tokens' must be an integer"},
           {R"({"prompt": "a", "top_k": 99999999999})", "'top_k' is out of range"},
           {R"({"prompt": "a", "temprature": 1})", "'temprature' is not a known field"},
       }) {
    auto parsed = ParsePromptLine(line, defaults);
    ASSERT_FALSE(parsed.ok()) << line;
    EXPECT_NE(parsed.status().message().find(fragment), absl::string_view::npos)
        << parsed.status().message();
  }
  const ::llmserve::testing::ScopedTempDir temp;
  const std::string path = temp.File("prompts_test.jsonl");
  std::ofstream(path) << "{\"prompt\": \"a\"}\n\n{\"prompt\": 1}\n";
  auto file = ReadPromptsFile(path, defaults);
  ASSERT_FALSE(file.ok());
  EXPECT_NE(file.status().message().find("prompts_test.jsonl:3: 'prompt' must be a string"),
            absl::string_view::npos)
      << file.status().message();
  EXPECT_EQ(*ParseIds("1, 2 3"), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_FALSE(ParseIds("1 x").ok());
  EXPECT_FALSE(ParseIds("").ok());
}

class RunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = temp_.path();
    const BuiltTokenizer built = BuildByteLevelTokenizer(200);
    auto config = PresetConfig("tiny", built.vocab_size, built.bos_token_id, {built.eos_token_id});
    ASSERT_TRUE(config.ok());
    ASSERT_TRUE(worker::WriteRandomModel(*config, {.seed = 9}, dir_).ok());
    std::ofstream(dir_ + "/tokenizer.json") << built.tokenizer_json;
    std::ofstream(dir_ + "/tokenizer_config.json") << built.tokenizer_config_json;
    auto engine = worker::BuildCpuEngine(
        {.model_dir = dir_,
         .num_threads = 1,
         .kv_cache_bytes = 8 << 20,
         .engine = {.on_step = [this](const worker::StepStats& step) { load_.Record(step); }}});
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = *std::move(engine);
    auto tokenizer = common::tokenizer::Tokenizer::FromDirectory(dir_);
    ASSERT_TRUE(tokenizer.ok());
    tokenizer_ = *std::move(tokenizer);
  }

  ::llmserve::testing::ScopedTempDir temp_{"runner_test_model"};
  std::string dir_;
  worker::LoadAccountant load_;
  std::unique_ptr<worker::Engine> engine_;
  std::unique_ptr<common::tokenizer::Tokenizer> tokenizer_;
};

TEST_F(RunnerTest, RunsABatchAndStreamsTextThatMatchesTheTokens) {
  std::vector<RunPrompt> prompts(4);
  for (size_t i = 0; i < prompts.size(); ++i) {
    prompts[i].text = "Hello world number " + std::to_string(i);
    prompts[i].sampling.seed = i;
    prompts[i].stopping.max_tokens = 6 + static_cast<int32_t>(i);
    prompts[i].stopping.ignore_eos = true;
  }
  prompts[3].text = std::string("bad \xff utf8");
  Runner runner(engine_.get(), tokenizer_.get());
  std::map<size_t, std::string> streamed;
  std::vector<RunResult> results;
  runner.set_on_text([&](size_t index, const std::string& delta) { streamed[index] += delta; });
  runner.set_on_result([&](const RunResult& result) { results.push_back(result); });
  ASSERT_TRUE(runner.Run(prompts).ok());
  ASSERT_EQ(results.size(), 4u);
  for (const RunResult& r : results) {
    if (r.index == 3) {
      EXPECT_EQ(r.finish, worker::FinishReason::kError);
      EXPECT_NE(r.error.find("UTF-8"), std::string::npos) << r.error;
      continue;
    }
    EXPECT_EQ(r.finish, worker::FinishReason::kLength);
    EXPECT_EQ(r.token_ids.size(), 6 + r.index);
    EXPECT_EQ(r.text, streamed[r.index]);
    EXPECT_EQ(r.text, *tokenizer_->Decode(r.token_ids, /*skip_special_tokens=*/true));
    EXPECT_GT(r.prompt_tokens, 1);  // BOS + text
  }
}

TEST_F(RunnerTest, BenchmarkReportsThroughputLatencyAndPrefixHits) {
  const auto report = RunBenchmark(
      engine_.get(), load_,
      {.num_requests = 6, .prompt_len = 40, .output_len = 5, .rate = 200, .shared_prefix = 0.5});
  ASSERT_TRUE(report.ok()) << report.status();
  const nlohmann::json json = nlohmann::json::parse(*report);
  EXPECT_EQ(json["requests"], 6);
  EXPECT_EQ(json["errors"], 0);
  EXPECT_GT(json["output_tokens_per_s"].get<double>(), 0);
  EXPECT_GT(json["ttft_s"]["p50"].get<double>(), 0);
  EXPECT_GE(json["tpot_s"]["p99"].get<double>(), json["tpot_s"]["p50"].get<double>());
  // 20 of 40 tokens are shared: one block of 16 can be served from the cache for 5 requests.
  EXPECT_GT(json["prefix_cache_hit_rate"].get<double>(), 0);
  EXPECT_FALSE(RunBenchmark(engine_.get(), load_, {.num_requests = 0}).ok());
}

}  // namespace
}  // namespace llmserve::tools
