#include "tools/bench_load/bench_load.h"

#include <algorithm>
#include <cmath>
#include <random>

namespace llmserve::tools {

absl::StatusOr<BenchLoad> MakeBenchLoad(const BenchOptions& options, int64_t vocab_size) {
  if (options.num_requests < 1 || options.prompt_len < 1 || options.output_len < 1 ||
      !(options.rate >= 0) || !(options.shared_prefix >= 0) || options.shared_prefix >= 1 ||
      !(options.range_ratio >= 0) || options.range_ratio >= 1 || vocab_size < 1) {
    return absl::InvalidArgumentError(
        "benchmark needs requests, prompt and output lengths >= 1, rate >= 0, and shared prefix "
        "and range ratio in [0, 1)");
  }
  std::mt19937_64 rng(options.seed);
  const int32_t shared = static_cast<int32_t>(options.shared_prefix * options.prompt_len);
  std::vector<int32_t> prefix(shared);
  for (int32_t& id : prefix) id = static_cast<int32_t>(rng() % vocab_size);
  BenchLoad load;
  load.prompts.resize(options.num_requests);
  double at = 0;
  const bool timed = options.rate > 0 && std::isfinite(options.rate);
  std::exponential_distribution<double> gap(timed ? options.rate : 1.0);
  // Lengths of a range are drawn from their own generator, so that range_ratio 0 gives the
  // prompts it always gave.
  std::mt19937_64 length_rng(options.seed ^ 0x9e3779b97f4a7c15ULL);
  auto length = [&](int32_t mean) {
    if (options.range_ratio == 0) return mean;
    const auto low = static_cast<int32_t>(std::floor(mean * (1 - options.range_ratio)));
    const auto high = static_cast<int32_t>(std::ceil(mean * (1 + options.range_ratio)));
    return std::max<int32_t>(
        1, std::uniform_int_distribution<int32_t>(std::max(1, low), std::max(1, high))(length_rng));
  };
  for (std::vector<int32_t>& ids : load.prompts) {
    ids = prefix;
    const int32_t prompt_len = std::max(length(options.prompt_len), shared);
    while (static_cast<int32_t>(ids.size()) < prompt_len) {
      ids.push_back(static_cast<int32_t>(rng() % vocab_size));
    }
    load.output_lens.push_back(length(options.output_len));
    if (timed) {
      load.arrivals.push_back(absl::Seconds(at));
      at += gap(rng);
    }
  }
  return load;
}

std::vector<absl::Duration> PoissonArrivals(int32_t count, double rate, uint64_t seed) {
  std::vector<absl::Duration> arrivals;
  if (!(rate > 0) || !std::isfinite(rate)) return arrivals;
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> gap(rate);
  double at = 0;
  for (int32_t i = 0; i < count; ++i) {
    arrivals.push_back(absl::Seconds(at));
    at += gap(rng);
  }
  return arrivals;
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
