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
#include "tools/bench_load/bench_load.h"
#include "worker/engine/engine.h"
#include "worker/service/load_accountant.h"

namespace llmserve::tools {

// Runs the benchmark and returns its JSON line; `accountant` is what the engine reports to (its
// step counts and times are reported as the difference over the run). Requests are greedy when
// `temperature` is 0; otherwise sampled at that temperature, request i with seed i + 1, so that two
// runs (with and without speculative decoding, say) generate the same tokens.
absl::StatusOr<std::string> RunBenchmark(worker::Engine* engine,
                                         const worker::LoadAccountant& accountant,
                                         const BenchOptions& options, float temperature = 0);

}  // namespace llmserve::tools

#endif  // LLMSERVE_TOOLS_RUN_BENCH_H_
