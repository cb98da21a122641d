// Sends a benchmark's requests to a BenchClient the way a serving benchmark must: open loop,
// each request at its arrival time whether or not earlier ones have finished, with at most
// max_concurrency in flight (a request whose time has come waits for a free slot, as in vLLM's
// benchmark_serving), until every request was sent or the duration is over. Reports progress to
// the calling thread.
//
// Thread-safe: RunLoad may be called from any thread; it starts its own client threads.

#ifndef LLMSERVE_TOOLS_BENCH_LOAD_RUNNER_H_
#define LLMSERVE_TOOLS_BENCH_LOAD_RUNNER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "tools/bench/bench_client.h"

namespace llmserve::tools {

// Client threads, and so requests in flight, when max_concurrency is 0 (unlimited).
inline constexpr int kMaxClientThreads = 1024;

struct LoadProgress {
  int total = 0;      // requests in the load
  int sent = 0;       // sent so far
  int succeeded = 0;  // ended well
  int failed = 0;     // ended with an error
  absl::Duration elapsed;
};

struct LoadOptions {
  // When each request is sent, from the start (as many as requests); empty: all at once.
  std::vector<absl::Duration> arrivals;
  // Most requests in flight; 0: min(requests, kMaxClientThreads).
  int max_concurrency = 0;
  // No request is sent after this long from the start (those in flight finish).
  absl::Duration duration = absl::InfiniteDuration();
  absl::Duration request_timeout = absl::Minutes(10);
  // Request ids are id_prefix + index.
  std::string id_prefix = "bench-";
  // Called on the calling thread about every progress_interval while the load runs, and once at
  // the end.
  std::function<void(const LoadProgress&)> on_progress;
  absl::Duration progress_interval = absl::Milliseconds(250);
};

struct LoadResult {
  // The outcome of every request sent, in request order (requests not sent are left out).
  std::vector<RequestOutcome> outcomes;
  // From the start to the end of the last request.
  double elapsed_s = 0;
  int client_threads = 0;
};

LoadResult RunLoad(BenchClient* client, const std::vector<BenchRequest>& requests,
                   const LoadOptions& options);

}  // namespace llmserve::tools

#endif  // LLMSERVE_TOOLS_BENCH_LOAD_RUNNER_H_
