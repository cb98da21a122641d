// The synthetic load both benchmarks generate — llmserve-run --bench (the engine in process) and
// llmserve-bench (a worker over gRPC) — so that the same options give the same prompts and
// arrival times, and the two reports compare the service's overhead and nothing else.
//
// Thread-safe: pure functions.

#ifndef LLMSERVE_TOOLS_BENCH_LOAD_BENCH_LOAD_H_
#define LLMSERVE_TOOLS_BENCH_LOAD_BENCH_LOAD_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace llmserve::tools {

struct BenchOptions {
  int32_t num_requests = 64;
  int32_t prompt_len = 128;
  int32_t output_len = 128;
  // Requests per second, Poisson arrivals; 0: all at once.
  double rate = 0;
  // Fraction of the prompt shared by every request, in [0, 1).
  double shared_prefix = 0;
  // In [0, 1): each request's prompt and output lengths are drawn uniformly from
  // [len * (1 - range_ratio), len * (1 + range_ratio)] (at least 1); 0: every request the same.
  double range_ratio = 0;
  uint64_t seed = 1;
};

struct BenchLoad {
  // Random token ids in [0, vocab_size), the first shared_prefix of each the same.
  std::vector<std::vector<int32_t>> prompts;
  // Output length of each request (all options.output_len unless range_ratio > 0).
  std::vector<int32_t> output_lens;
  // When each request is sent, from the start; empty when all go at once.
  std::vector<absl::Duration> arrivals;
};

// INVALID_ARGUMENT for options out of range.
absl::StatusOr<BenchLoad> MakeBenchLoad(const BenchOptions& options, int64_t vocab_size);

// `count` arrival times of a Poisson process of `rate` per second (exponential gaps, seeded),
// the first at 0. Empty when rate is 0 or infinite (all at once).
std::vector<absl::Duration> PoissonArrivals(int32_t count, double rate, uint64_t seed);

// {"mean", "p50", "p90", "p99"} of `values`, or null when empty.
nlohmann::json Percentiles(std::vector<double> values);

}  // namespace llmserve::tools

#endif  // LLMSERVE_TOOLS_BENCH_LOAD_BENCH_LOAD_H_
