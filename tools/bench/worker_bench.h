// llmserve-bench against a worker: the load of llmserve-run --bench (same options, same prompts)
// sent over llmserve.worker.v1.Worker/Generate, one stream per request, timed on the client.
// Comparing the two JSON reports for the same options gives the service's overhead.
//
// Thread-safe: RunWorkerBenchmark may be called from any thread; it starts its own.

#ifndef LLMSERVE_TOOLS_BENCH_WORKER_BENCH_H_
#define LLMSERVE_TOOLS_BENCH_WORKER_BENCH_H_

#include <string>

#include "absl/status/statusor.h"
#include "llmserve/v1/inference.grpc.pb.h"
#include "llmserve/worker/v1/worker.grpc.pb.h"
#include "tools/bench_load/bench_load.h"

namespace llmserve::tools {

// Runs the load against `stub` with at most `concurrency` streams open at once (0: no limit)
// and returns one JSON object: throughput and TTFT / TPOT / end-to-end percentiles, with the
// same field names as llmserve-run --bench.
absl::StatusOr<std::string> RunWorkerBenchmark(worker::v1::Worker::StubInterface* stub,
                                               const BenchOptions& options, int concurrency);

// The same load through a gateway's public API (llmserve.v1.Inference/GenerateStream, prompts as
// token ids), `api_key` sent as a bearer token when not empty; the report has "api": "inference".
absl::StatusOr<std::string> RunInferenceBenchmark(::llmserve::v1::Inference::StubInterface* stub,
                                                  const BenchOptions& options, int concurrency,
                                                  const std::string& api_key);

}  // namespace llmserve::tools

#endif  // LLMSERVE_TOOLS_BENCH_WORKER_BENCH_H_
