#include "tools/bench_load/bench_load.h"

#include <algorithm>
#include <random>

namespace llmserve::tools {

absl::StatusOr<BenchLoad> MakeBenchLoad(const BenchOptions& options, int64_t vocab_size) {
  if (options.num_requests < 1 || options.prompt_len < 1 || options.output_len < 1 ||
      options.rate < 0 || options.shared_prefix < 0 || options.shared_prefix >= 1 ||
      vocab_size < 1) {
    return absl::InvalidArgumentError(
        "benchmark needs requests, prompt and output lengths >= 1, rate >= 0 and shared prefix "
        "in [0, 1)");
  }
  std::mt19937_64 rng(options.seed);
  const int32_t shared = static_cast<int32_t>(options.shared_prefix * options.prompt_len);
  std::vector<int32_t> prefix(shared);
  for (int32_t& id : prefix) id = static_cast<int32_t>(rng() % vocab_size);
  BenchLoad load;
  load.prompts.resize(options.num_requests);
  double at = 0;
  std::exponential_distribution<double> gap(options.rate > 0 ? options.rate : 1.0);
  for (std::vector<int32_t>& ids : load.prompts) {
    ids = prefix;
    while (static_cast<int32_t>(ids.size()) < options.prompt_len) {
      ids.push_back(static_cast<int32_t>(rng() % vocab_size));
    }
    if (options.rate > 0) {
      load.arrivals.push_back(absl::Seconds(at));
      at += gap(rng);
    }
  }
  return load;
}

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

}  // namespace llmserve::tools
