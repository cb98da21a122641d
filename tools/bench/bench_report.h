// Turns one load's outcomes into the benchmark's report — completed and failed requests (by
// status), request and token throughput, goodput under latency SLOs, and mean / median / p90 /
// p99 of TTFT, TPOT, inter-token latency and end-to-end latency — as JSON, and a sweep of
// reports as a table.
//
// Thread-safe: pure functions.

#ifndef LLMSERVE_TOOLS_BENCH_BENCH_REPORT_H_
#define LLMSERVE_TOOLS_BENCH_BENCH_REPORT_H_

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tools/bench/load_runner.h"

namespace llmserve::tools {

// What the report says about how the load was made (echoed in it).
struct RunDescription {
  std::string api;
  std::string target;
  std::string model;
  // Requests per second; infinity: all at once.
  double request_rate = 0;
  int max_concurrency = 0;
  int requests = 0;  // in the load (some may not have been sent when a duration ended it)
  // Synthetic loads: the mean lengths, range ratio and shared prefix; 0 for a dataset.
  int prompt_len = 0;
  int output_len = 0;
  double range_ratio = 0;
  double shared_prefix = 0;
  std::string dataset;  // the dataset's path, or empty
  // A request counts towards goodput when its TTFT and TPOT are within these (when set).
  std::optional<double> slo_ttft_s;
  std::optional<double> slo_tpot_s;
};

// One JSON object: the description, then (names kept from llmserve-run --bench, so the two
// compare) "requests", "completed", "failed" (also as "errors"), "failures" {status: count},
// "first_error", "elapsed_s", "requests_per_s", "prompt_tokens", "output_tokens",
// "output_tokens_per_s", "total_tokens_per_s", "goodput_requests_per_s" (with an SLO),
// and {"mean", "p50", "p90", "p99"} of "ttft_s", "tpot_s", "itl_s", "e2e_s" over the completed
// requests (null when none completed). Throughputs count completed requests only.
nlohmann::json SummarizeLoad(const RunDescription& description, const LoadResult& result);

// A fixed-width table, one row per report (a sweep): rate, completed / failed, throughputs,
// goodput, and median and p99 of TTFT, TPOT, ITL and E2E in milliseconds.
std::string FormatTable(const std::vector<nlohmann::json>& reports);

// The rate as the reports write it: the number, or "inf".
nlohmann::json RateJson(double request_rate);

}  // namespace llmserve::tools

#endif  // LLMSERVE_TOOLS_BENCH_BENCH_REPORT_H_
