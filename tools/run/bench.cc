#include "tools/run/bench.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tools/run/runner.h"

namespace llmserve::tools {
absl::StatusOr<std::string> RunBenchmark(worker::Engine* engine,
                                         const worker::LoadAccountant& accountant,
                                         const BenchOptions& options, float temperature) {
  if (!(temperature >= 0 && temperature <= 100)) {
    return absl::InvalidArgumentError("the benchmark's temperature must be in [0, 100]");
  }
  absl::StatusOr<BenchLoad> load = MakeBenchLoad(options, engine->model_config().vocab_size);
  if (!load.ok()) return load.status();
  std::vector<RunPrompt> prompts(options.num_requests);
  for (size_t i = 0; i < prompts.size(); ++i) {
    prompts[i].ids = std::move(load->prompts[i]);
    prompts[i].sampling.temperature = temperature;
    prompts[i].sampling.seed = static_cast<uint64_t>(i) + 1;
    prompts[i].stopping.max_tokens = options.output_len;
    prompts[i].stopping.ignore_eos = true;
  }
  const std::vector<absl::Duration>& arrivals = load->arrivals;
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
  const worker::EngineLoad before = accountant.Load();
  absl::StatusOr<absl::Duration> elapsed = runner.Run(prompts, arrivals);
  if (!elapsed.ok()) return elapsed.status();
  const worker::EngineLoad after = accountant.Load();
  const double seconds = absl::ToDoubleSeconds(*elapsed);
  const double overhead = after.overhead_s - before.overhead_s;
  const double forward = after.forward_s - before.forward_s;
  nlohmann::json report = {
      {"requests", options.num_requests},
      {"prompt_len", options.prompt_len},
      {"output_len", options.output_len},
      {"rate", options.rate},
      {"shared_prefix", options.shared_prefix},
      {"temperature", temperature},
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
  if (!after.spec_accepted_per_position.empty()) {
    const int64_t drafts = after.spec_drafts - before.spec_drafts;
    const int64_t draft_tokens = after.spec_draft_tokens - before.spec_draft_tokens;
    const int64_t accepted = after.spec_accepted_tokens - before.spec_accepted_tokens;
    std::vector<int64_t> per_position(after.spec_accepted_per_position.size());
    for (size_t j = 0; j < per_position.size(); ++j) {
      per_position[j] =
          after.spec_accepted_per_position[j] -
          (j < before.spec_accepted_per_position.size() ? before.spec_accepted_per_position[j] : 0);
    }
    // vLLM's figures: acceptance rate = accepted / drafted tokens; mean acceptance length =
    // tokens emitted per verification (accepted drafts + the model's own token).
    report["speculative"] = {
        {"verifications", drafts},
        {"draft_tokens", draft_tokens},
        {"accepted_tokens", accepted},
        {"acceptance_rate", draft_tokens == 0 ? 0.0 : static_cast<double>(accepted) / draft_tokens},
        {"mean_acceptance_length",
         drafts == 0 ? 0.0 : 1.0 + static_cast<double>(accepted) / drafts},
        {"accepted_per_position", per_position},
    };
  }
  return report.dump();
}

}  // namespace llmserve::tools
