// llmserve-run's benchmark mode: N requests of random prompt tokens (optionally sharing a common
// prefix) with fixed output lengths, all at once or arriving as a Poisson process, through
// continuous batching; one JSON object with throughput and TTFT / TPOT / end-to-end percentiles,
// comparable to vLLM's offline throughput benchmark and llama.cpp's llama-batched-bench.
//
// Thread-safe: pure functions (the run itself drives the engine on the calling thread).

#ifndef LLMSERVE_TOOLS_RUN_BENCH_H_
#define LLMSERVE_TOOLS_RUN_BENCH_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "worker/engine/engine.h"

namespace llmserve::tools {

struct BenchOptions {
  int32_t num_requests = 64;
  int32_t prompt_len = 128;
  int32_t output_len = 128;
  // Requests per second, Poisson arrivals; 0: all at once.
  double rate = 0;
  // Fraction of the prompt shared by every request, in [0, 1).
  double shared_prefix = 0;
  uint64_t seed = 1;
};

// Runs the benchmark and returns its JSON line.
absl::StatusOr<std::string> RunBenchmark(worker::Engine* engine, const BenchOptions& options);

}  // namespace llmserve::tools

#endif  // LLMSERVE_TOOLS_RUN_BENCH_H_
