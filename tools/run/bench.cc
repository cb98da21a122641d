#include "tools/run/bench.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tools/run/runner.h"

namespace llmserve::tools {
namespace {

nlohmann::json Percentiles(std::vector<double> values) {
  if (values.empty()) return nullptr;
  std::sort(values.begin(), values.end());
  auto at = [&values](double q) {
    return values[std::min(values.size() - 1, static_cast<size_t>(q * values.size()))];
  };
  double sum = 0;
  for (double v : values) sum += v;
  return {{"mean", sum / values.size()}, {"p50", at(0.5)}, {"p90", at(0.9)}, {"p99", at(0.99)}};
}

}  // namespace

absl::StatusOr<std::string> RunBenchmark(worker::Engine* engine, const BenchOptions& options) {
  if (options.num_requests < 1 || options.prompt_len < 1 || options.output_len < 1 ||
      options.rate < 0 || options.shared_prefix < 0 || options.shared_prefix >= 1) {
    return absl::InvalidArgumentError(
        "benchmark needs requests, prompt and output lengths >= 1, rate >= 0 and shared prefix "
        "in [0, 1)");
  }
  std::mt19937_64 rng(options.seed);
  const int64_t vocab = engine->model_config().vocab_size;
  const int32_t shared = static_cast<int32_t>(options.shared_prefix * options.prompt_len);
  std::vector<int32_t> prefix(shared);
  for (int32_t& id : prefix) id = static_cast<int32_t>(rng() % vocab);
  std::vector<RunPrompt> prompts(options.num_requests);
  std::vector<absl::Duration> arrivals;
  double at = 0;
  std::exponential_distribution<double> gap(options.rate > 0 ? options.rate : 1.0);
  for (RunPrompt& prompt : prompts) {
    std::vector<int32_t> ids = prefix;
    while (static_cast<int32_t>(ids.size()) < options.prompt_len) {
      ids.push_back(static_cast<int32_t>(rng() % vocab));
    }
    prompt.ids = std::move(ids);
    prompt.sampling.temperature = 0;
    prompt.stopping.max_tokens = options.output_len;
    prompt.stopping.ignore_eos = true;
    if (options.rate > 0) {
      arrivals.push_back(absl::Seconds(at));
      at += gap(rng);
    }
  }
  Runner runner(engine, /*tokenizer=*/nullptr);
  std::vector<double> ttft, tpot, e2e;
  int64_t generated = 0, errors = 0;
  runner.set_on_result([&](const RunResult& result) {
    if (result.finish == worker::FinishReason::kError) ++errors;
    generated += static_cast<int64_t>(result.token_ids.size());
    ttft.push_back(result.ttft_s);
    e2e.push_back(result.e2e_s);
    if (result.token_ids.size() > 1) {
      tpot.push_back((result.e2e_s - result.ttft_s) / (result.token_ids.size() - 1));
    }
  });
  const worker::EngineLoad before = engine->Load();
  absl::StatusOr<absl::Duration> elapsed = runner.Run(prompts, arrivals);
  if (!elapsed.ok()) return elapsed.status();
  const worker::EngineLoad after = engine->Load();
  const double seconds = absl::ToDoubleSeconds(*elapsed);
  const double overhead = after.overhead_s - before.overhead_s;
  const double forward = after.forward_s - before.forward_s;
  nlohmann::json report = {
      {"requests", options.num_requests},
      {"prompt_len", options.prompt_len},
      {"output_len", options.output_len},
      {"rate", options.rate},
      {"shared_prefix", options.shared_prefix},
      {"errors", errors},
      {"elapsed_s", seconds},
      {"requests_per_s", options.num_requests / seconds},
      {"output_tokens_per_s", generated / seconds},
      {"total_tokens_per_s",
       (generated + static_cast<double>(options.num_requests) * options.prompt_len) / seconds},
      {"ttft_s", Percentiles(ttft)},
      {"tpot_s", Percentiles(tpot)},
      {"e2e_s", Percentiles(e2e)},
      {"prefix_cache_hit_rate", after.prefix_cache_hit_rate},
      {"preemptions", after.preemptions - before.preemptions},
      {"steps", after.steps - before.steps},
      {"scheduler_overhead_pct", 100 * overhead / std::max(1e-9, overhead + forward)},
  };
  return report.dump();
}

}  // namespace llmserve::tools
