// Draws a rate sweep with gnuplot (Debian's gnuplot-nox): latency against output-token
// throughput, one point per rate, TTFT and TPOT side by side (median and p99), so the knee where
// latency takes off is visible at a glance.
//
// Thread-safe: runs a gnuplot process per call.

#ifndef LLMSERVE_TOOLS_BENCH_PLOT_H_
#define LLMSERVE_TOOLS_BENCH_PLOT_H_

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace llmserve::tools {

// The gnuplot script that writes `png_path` from `reports` (SummarizeLoad objects). Exposed for
// tests.
std::string SweepPlotScript(const std::vector<nlohmann::json>& reports, const std::string& title,
                            const std::string& png_path);

// Runs gnuplot on SweepPlotScript. FAILED_PRECONDITION when gnuplot is not installed or fails
// (its messages go to stderr); INVALID_ARGUMENT for a path gnuplot cannot be given or reports
// with no completed request to draw.
absl::Status PlotSweep(const std::vector<nlohmann::json>& reports, const std::string& title,
                       const std::string& png_path);

}  // namespace llmserve::tools

#endif  // LLMSERVE_TOOLS_BENCH_PLOT_H_
