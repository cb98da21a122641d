// WorkerMetrics through what /metrics serves: its collectables rendered in the Prometheus text
// format, with a fixed engine load snapshot and events reported as the service reports them.

#include "worker/service/worker_metrics.h"

#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/text_serializer.h"

namespace llmserve::worker {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// One sample line of the text format: name{labels} value.
struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

std::string Render(const WorkerMetrics& metrics) {
  std::vector<prometheus::MetricFamily> families;
  for (const auto& collectable : metrics.collectables()) {
    for (prometheus::MetricFamily& family : collectable->Collect()) {
      families.push_back(std::move(family));
    }
  }
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, families);
  return out.str();
}

// Every sample line of `text` (label values here never hold commas or quotes).
std::vector<Sample> Samples(const std::string& text) {
  std::vector<Sample> samples;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (absl::StartsWith(line, "#")) continue;
    Sample sample;
    const size_t space = line.rfind(' ');
    absl::string_view series = line.substr(0, space);
    EXPECT_TRUE(absl::SimpleAtod(line.substr(space + 1), &sample.value)) << line;
    const size_t brace = series.find('{');
    sample.name = std::string(series.substr(0, brace));
    if (brace != absl::string_view::npos) {
      absl::string_view labels = series.substr(brace + 1);
      EXPECT_TRUE(absl::ConsumeSuffix(&labels, "}")) << line;
      for (absl::string_view pair : absl::StrSplit(labels, ',')) {
        std::pair<std::string, std::string> kv = absl::StrSplit(pair, absl::MaxSplits('=', 1));
        sample.labels[kv.first] =
            std::string(absl::StripSuffix(absl::StripPrefix(kv.second, "\""), "\""));
      }
    }
    samples.push_back(std::move(sample));
  }
  return samples;
}

std::string Key(const std::string& name, const std::map<std::string, std::string>& labels) {
  return absl::StrCat(name, "{", absl::StrJoin(labels, ",", absl::PairFormatter("=")), "}");
}

// A snapshot with every load field non-zero and distinct, so a swapped series shows.
EngineLoad FixedLoad() {
  EngineLoad load;
  load.running = 3;
  load.waiting = 5;
  load.kv_blocks_total = 100;
  load.kv_blocks_free = 25;
  load.prefix_cache_queries = 64;
  load.prefix_cache_hits = 32;
  load.preemptions = 2;
  return load;
}

// Some of every event, so every event-fed series has samples.
void ReportTraffic(WorkerMetrics& metrics) {
  // Reports between passes (queued work taken) are no steps.
  metrics.OnStep({.forward = false, .running = 2});
  metrics.OnStep({.forward = true,
                  .num_seqs = 2,
                  .num_tokens = 40,
                  .prompt_tokens = 38,
                  .generated_tokens = 2,
                  .duration_s = 0.02});
  metrics.OnStep({.forward = true,
                  .num_seqs = 2,
                  .num_tokens = 2,
                  .prompt_tokens = 0,
                  .generated_tokens = 2,
                  .duration_s = 0.004});
  metrics.OnFirstToken(0.03);
  metrics.OnFirstToken(0.5);
  metrics.OnInterToken(1, 0.004);
  metrics.OnInterToken(2, 0.01);
  EngineOutput stop{.finish = FinishReason::kStop, .queue_s = 0.001, .total_s = 0.2};
  metrics.OnFinished(stop, 20, 2);
  EngineOutput length{.finish = FinishReason::kLength, .queue_s = 0.002, .total_s = 1.5};
  metrics.OnFinished(length, 18, 3);
  metrics.OnFailed(absl::StatusCode::kResourceExhausted);
}

WorkerMetrics MakeMetrics(bool vllm_names) {
  return WorkerMetrics(
      {.model_name = "m", .block_size = 16, .num_blocks = 100, .vllm_names = vllm_names},
      FixedLoad);
}

// vLLM's names as vLLM serves them (vllm/v1/metrics/loggers.py), spelled out here rather than
// read from the code under test.
const std::vector<std::pair<std::string, std::string>>& OursAndVllms() {
  static const auto* const kPairs = new std::vector<std::pair<std::string, std::string>>{
      {"llmserve_num_requests_running", "vllm:num_requests_running"},
      {"llmserve_num_requests_waiting", "vllm:num_requests_waiting"},
      {"llmserve_kv_cache_usage_ratio", "vllm:kv_cache_usage_perc"},
      {"llmserve_kv_cache_usage_ratio", "vllm:gpu_cache_usage_perc"},
      {"llmserve_prefix_cache_queries_total", "vllm:prefix_cache_queries_total"},
      {"llmserve_prefix_cache_hits_total", "vllm:prefix_cache_hits_total"},
      {"llmserve_num_preemptions_total", "vllm:num_preemptions_total"},
      {"llmserve_prompt_tokens_total", "vllm:prompt_tokens_total"},
      {"llmserve_generation_tokens_total", "vllm:generation_tokens_total"},
      {"llmserve_request_success_total", "vllm:request_success_total"},
      {"llmserve_time_to_first_token_seconds", "vllm:time_to_first_token_seconds"},
      {"llmserve_inter_token_latency_seconds", "vllm:inter_token_latency_seconds"},
      {"llmserve_inter_token_latency_seconds", "vllm:time_per_output_token_seconds"},
      {"llmserve_e2e_request_latency_seconds", "vllm:e2e_request_latency_seconds"},
      {"llmserve_request_queue_time_seconds", "vllm:request_queue_time_seconds"},
      {"llmserve_request_prompt_tokens", "vllm:request_prompt_tokens"},
      {"llmserve_request_generation_tokens", "vllm:request_generation_tokens"},
      {"llmserve_iteration_tokens", "vllm:iteration_tokens_total"},
      {"llmserve_cache_config_info", "vllm:cache_config_info"},
  };
  return *kPairs;
}

TEST(WorkerMetricsTest, VllmNamesCarryTheSameSamplesAsOurs) {
  WorkerMetrics metrics = MakeMetrics(/*vllm_names=*/true);
  ReportTraffic(metrics);
  const std::vector<Sample> samples = Samples(Render(metrics));
  std::map<std::string, double> by_key;
  for (const Sample& s : samples) by_key[Key(s.name, s.labels)] = s.value;

  for (const auto& [ours, vllm] : OursAndVllms()) {
    int matched = 0;
    for (const Sample& s : samples) {
      // The family's own samples, or its histogram's _bucket, _sum and _count.
      absl::string_view suffix = s.name;
      if (!absl::ConsumePrefix(&suffix, ours)) continue;
      if (!suffix.empty() && suffix != "_bucket" && suffix != "_sum" && suffix != "_count") {
        continue;
      }
      std::map<std::string, std::string> labels = s.labels;
      labels["model_name"] = labels["model"];
      labels.erase("model");
      if (labels.count("num_blocks") > 0) {
        labels["num_gpu_blocks"] = labels["num_blocks"];
        labels.erase("num_blocks");
      }
      labels["engine"] = "0";
      const std::string key = Key(absl::StrCat(vllm, suffix), labels);
      ASSERT_EQ(by_key.count(key), 1u) << "no " << key << " for " << Key(s.name, s.labels);
      EXPECT_EQ(by_key[key], s.value) << key;
      ++matched;
    }
    EXPECT_GT(matched, 0) << ours << " has no samples";
    int vllm_samples = 0;
    for (const Sample& s : samples) {
      if (absl::StartsWith(s.name, vllm) &&
          (s.name == vllm || s.name == vllm + "_bucket" || s.name == vllm + "_sum" ||
           s.name == vllm + "_count")) {
        ++vllm_samples;
      }
    }
    EXPECT_EQ(vllm_samples, matched) << vllm << ": samples without a counterpart of ours";
  }
}

TEST(WorkerMetricsTest, VllmSeriesReadAsVllmWritesThem) {
  WorkerMetrics metrics = MakeMetrics(/*vllm_names=*/true);
  ReportTraffic(metrics);
  const std::string text = Render(metrics);
  // What consumers written for vLLM select on: names, label names and values, types, units.
  EXPECT_THAT(text, HasSubstr("\nvllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 5\n"));
  EXPECT_THAT(text, HasSubstr("\nvllm:num_requests_running{engine=\"0\",model_name=\"m\"} 3\n"));
  // A 0..1 fraction, as vLLM's (75 of 100 blocks held).
  EXPECT_THAT(text, HasSubstr("\nvllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.75\n"));
  EXPECT_THAT(text, HasSubstr("\nvllm:gpu_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.75\n"));
  EXPECT_THAT(text, HasSubstr("\nvllm:cache_config_info{block_size=\"16\",engine=\"0\","
                              "model_name=\"m\",num_gpu_blocks=\"100\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("\nvllm:request_success_total{engine=\"0\",finished_reason="
                              "\"stop\",model_name=\"m\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("\nvllm:generation_tokens_total{engine=\"0\",model_name=\"m\"} 4\n"));
  EXPECT_THAT(text, HasSubstr("\nllmserve_iteration_tokens_count{model=\"m\"} 2\n"))
      << "two forward passes; the report between them is no step";
  EXPECT_THAT(text, HasSubstr("\nvllm:time_to_first_token_seconds_count{engine=\"0\","
                              "model_name=\"m\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE vllm:num_requests_waiting gauge\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE vllm:prompt_tokens_total counter\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE vllm:inter_token_latency_seconds histogram\n"));
  // Series vLLM has no counterpart for stay under our names only.
  EXPECT_THAT(text, Not(HasSubstr("vllm:request_failure")));
  EXPECT_THAT(text, Not(HasSubstr("vllm:step_duration")));
  EXPECT_THAT(text, Not(HasSubstr("vllm:worker_draining")));
  EXPECT_THAT(text, HasSubstr("\nllmserve_num_requests_waiting{model=\"m\"} 5\n"));
}

TEST(WorkerMetricsTest, VllmNamesAreOffByDefault) {
  WorkerMetrics metrics(WorkerMetricsConfig{.model_name = "m", .num_blocks = 100}, FixedLoad);
  ReportTraffic(metrics);
  const std::string text = Render(metrics);
  EXPECT_THAT(text, Not(HasSubstr("vllm:")));
  EXPECT_THAT(text, Not(HasSubstr("model_name")));
  for (const auto& [ours, vllm] : OursAndVllms()) {
    EXPECT_THAT(text, HasSubstr(absl::StrCat("# TYPE ", ours, " "))) << ours;
  }
}

TEST(WorkerMetricsTest, SpeculativeDecodingCountersAppearOnlyWhenItIsOn) {
  for (bool vllm_names : {false, true}) {
    EXPECT_THAT(Render(MakeMetrics(vllm_names)), Not(HasSubstr("spec_decode")));
  }
  const auto speculating = [] {
    EngineLoad load = FixedLoad();
    load.spec_drafts = 7;
    load.spec_draft_tokens = 20;
    load.spec_accepted_tokens = 9;
    load.spec_accepted_per_position = {5, 3, 1};
    return load;
  };
  WorkerMetrics metrics({.model_name = "m", .num_blocks = 100, .vllm_names = true}, speculating);
  const std::string text = Render(metrics);
  EXPECT_THAT(text, HasSubstr("\nllmserve_spec_decode_num_drafts_total{model=\"m\"} 7\n"));
  EXPECT_THAT(text, HasSubstr("\nllmserve_spec_decode_num_draft_tokens_total{model=\"m\"} 20\n"));
  EXPECT_THAT(text, HasSubstr("\nllmserve_spec_decode_num_accepted_tokens_total{model=\"m\"} 9\n"));
  EXPECT_THAT(text, HasSubstr("\nllmserve_spec_decode_num_accepted_tokens_per_pos_total{model="
                              "\"m\",position=\"1\"} 3\n"));
  // As vLLM's SpecDecodingProm writes them.
  EXPECT_THAT(text, HasSubstr("# TYPE vllm:spec_decode_num_drafts_total counter\n"));
  EXPECT_THAT(text,
              HasSubstr("\nvllm:spec_decode_num_drafts_total{engine=\"0\",model_name=\"m\"} 7\n"));
  EXPECT_THAT(text, HasSubstr("\nvllm:spec_decode_num_draft_tokens_total{engine=\"0\","
                              "model_name=\"m\"} 20\n"));
  EXPECT_THAT(text, HasSubstr("\nvllm:spec_decode_num_accepted_tokens_total{engine=\"0\","
                              "model_name=\"m\"} 9\n"));
  for (const char* position : {"0", "1", "2"}) {
    EXPECT_THAT(text, HasSubstr(absl::StrCat("\nvllm:spec_decode_num_accepted_tokens_per_pos_total{"
                                             "engine=\"0\",model_name=\"m\",position=\"",
                                             position, "\"}")));
  }
}

TEST(WorkerMetricsTest, LoraSeriesAppearWithAdapterSlotsAsVllmAndTheInferenceGatewayReadThem) {
  for (bool vllm_names : {false, true}) {
    EXPECT_THAT(Render(MakeMetrics(vllm_names)), Not(HasSubstr("lora")));
  }
  const auto with_adapters = [] {
    EngineLoad load = FixedLoad();
    load.lora_adapters = {{.name = "chat", .running = 2, .waiting = 0},
                          {.name = "sql", .running = 1, .waiting = 3},
                          {.name = "summary", .running = 0, .waiting = 1}};
    load.lora_adapters_time = absl::FromUnixSeconds(1700000000);
    return load;
  };
  WorkerMetrics metrics({.model_name = "m", .num_blocks = 100, .vllm_names = true, .max_loras = 4},
                        with_adapters);
  const std::string text = Render(metrics);
  EXPECT_THAT(text,
              HasSubstr("\nllmserve_lora_requests_running{lora_adapter=\"sql\",model=\"m\"} 1\n"));
  EXPECT_THAT(text,
              HasSubstr("\nllmserve_lora_requests_waiting{lora_adapter=\"sql\",model=\"m\"} 3\n"));
  EXPECT_THAT(text,
              HasSubstr("\nllmserve_lora_requests_running{lora_adapter=\"chat\",model=\"m\"} 2\n"));
  // vLLM's gauge: the adapters as comma-separated labels, the value when they were counted.
  EXPECT_THAT(text, HasSubstr("# TYPE vllm:lora_requests_info gauge\n"));
  EXPECT_THAT(text, HasSubstr("\nvllm:lora_requests_info{engine=\"0\",max_lora=\"4\","
                              "model_name=\"m\",running_lora_adapters=\"chat,sql\","
                              "waiting_lora_adapters=\"sql,summary\"} 1700000000\n"));
  // Idle: one info sample with empty lists.
  WorkerMetrics idle({.model_name = "m", .num_blocks = 100, .max_loras = 2}, FixedLoad);
  EXPECT_THAT(Render(idle),
              HasSubstr("\nllmserve_lora_requests_info{max_lora=\"2\",model=\"m\","
                        "running_lora_adapters=\"\",waiting_lora_adapters=\"\"} 0\n"));
}

TEST(WorkerMetricsTest, DrainingGaugeIsZeroUntilTheDrainStarts) {
  WorkerMetrics metrics = MakeMetrics(/*vllm_names=*/false);
  EXPECT_THAT(Render(metrics), HasSubstr("\nllmserve_worker_draining{model=\"m\"} 0\n"));
  metrics.OnDrainStarted();
  EXPECT_THAT(Render(metrics), HasSubstr("\nllmserve_worker_draining{model=\"m\"} 1\n"));
  metrics.OnDrainStarted();  // a second signal changes nothing
  EXPECT_THAT(Render(metrics), HasSubstr("\nllmserve_worker_draining{model=\"m\"} 1\n"));
}

}  // namespace
}  // namespace llmserve::worker
