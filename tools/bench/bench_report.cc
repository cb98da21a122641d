#include "tools/bench/bench_report.h"

#include <cmath>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tools/bench_load/bench_load.h"

namespace llmserve::tools {
namespace {

using Json = nlohmann::json;

// A percentile field in milliseconds for the table, "-" when absent.
std::string Millis(const Json& report, const char* metric, const char* field) {
  if (!report.contains(metric) || !report[metric].is_object()) return "-";
  return absl::StrFormat("%.1f", report[metric][field].get<double>() * 1000);
}

std::string Number(const Json& value, int decimals) {
  if (!value.is_number()) return "-";
  return absl::StrFormat("%.*f", decimals, value.get<double>());
}

}  // namespace

Json RateJson(double request_rate) {
  if (std::isinf(request_rate) || request_rate <= 0) return "inf";
  return request_rate;
}

Json SummarizeLoad(const RunDescription& description, const LoadResult& result) {
  std::vector<double> ttft, tpot, itl, e2e;
  int64_t completed = 0, failed = 0, good = 0, prompt_tokens = 0, output_tokens = 0;
  std::map<std::string, int64_t> failures;
  std::string first_error;
  for (const RequestOutcome& outcome : result.outcomes) {
    if (!outcome.ok) {
      ++failed;
      ++failures[outcome.status];
      if (first_error.empty()) {
        first_error = absl::StrCat(outcome.status, ": ", outcome.error);
      }
      continue;
    }
    ++completed;
    prompt_tokens += outcome.prompt_tokens;
    output_tokens += outcome.output_tokens;
    ttft.push_back(outcome.ttft_s);
    e2e.push_back(outcome.e2e_s);
    itl.insert(itl.end(), outcome.itl_s.begin(), outcome.itl_s.end());
    std::optional<double> request_tpot;
    if (outcome.output_tokens > 1) {
      request_tpot =
          (outcome.e2e_s - outcome.ttft_s) / static_cast<double>(outcome.output_tokens - 1);
      tpot.push_back(*request_tpot);
    }
    const bool ttft_ok = !description.slo_ttft_s || outcome.ttft_s <= *description.slo_ttft_s;
    const bool tpot_ok =
        !description.slo_tpot_s || !request_tpot || *request_tpot <= *description.slo_tpot_s;
    if (ttft_ok && tpot_ok) ++good;
  }
  const double seconds = result.elapsed_s > 0 ? result.elapsed_s : 1e-9;
  Json report = {
      {"api", description.api},
      {"target", description.target},
      {"model", description.model},
      {"rate", RateJson(description.request_rate)},
      {"max_concurrency", description.max_concurrency},
      {"client_threads", result.client_threads},
  };
  if (description.dataset.empty()) {
    report["prompt_len"] = description.prompt_len;
    report["output_len"] = description.output_len;
    report["range_ratio"] = description.range_ratio;
    report["shared_prefix"] = description.shared_prefix;
  } else {
    report["dataset"] = description.dataset;
  }
  report["requests"] = description.requests;
  report["sent"] = result.outcomes.size();
  report["completed"] = completed;
  report["failed"] = failed;
  report["errors"] = failed;
  report["failures"] = failures;
  if (!first_error.empty()) report["first_error"] = first_error;
  report["elapsed_s"] = result.elapsed_s;
  report["requests_per_s"] = static_cast<double>(completed) / seconds;
  report["prompt_tokens"] = prompt_tokens;
  report["output_tokens"] = output_tokens;
  report["output_tokens_per_s"] = static_cast<double>(output_tokens) / seconds;
  report["total_tokens_per_s"] = static_cast<double>(prompt_tokens + output_tokens) / seconds;
  if (description.slo_ttft_s || description.slo_tpot_s) {
    report["slo_ttft_s"] = description.slo_ttft_s ? Json(*description.slo_ttft_s) : Json(nullptr);
    report["slo_tpot_s"] = description.slo_tpot_s ? Json(*description.slo_tpot_s) : Json(nullptr);
    report["goodput_requests_per_s"] = static_cast<double>(good) / seconds;
  }
  report["ttft_s"] = Percentiles(std::move(ttft));
  report["tpot_s"] = Percentiles(std::move(tpot));
  report["itl_s"] = Percentiles(std::move(itl));
  report["e2e_s"] = Percentiles(std::move(e2e));
  return report;
}

std::string FormatTable(const std::vector<Json>& reports) {
  std::string out =
      absl::StrFormat("%8s %9s %6s %8s %10s %10s %8s | %17s | %17s | %17s | %17s\n", "rate",
                      "completed", "failed", "req/s", "out tok/s", "tot tok/s", "goodput",
                      "TTFT ms p50 p99", "TPOT ms p50 p99", "ITL ms p50 p99", "E2E ms p50 p99");
  for (const Json& report : reports) {
    const Json& rate = report["rate"];
    absl::StrAppendFormat(
        &out, "%8s %9d %6d %8s %10s %10s %8s | %8s %8s | %8s %8s | %8s %8s | %8s %8s\n",
        rate.is_string() ? rate.get<std::string>() : Number(rate, 2),
        report["completed"].get<int64_t>(), report["failed"].get<int64_t>(),
        Number(report["requests_per_s"], 2), Number(report["output_tokens_per_s"], 1),
        Number(report["total_tokens_per_s"], 1),
        report.contains("goodput_requests_per_s") ? Number(report["goodput_requests_per_s"], 2)
                                                  : std::string("-"),
        Millis(report, "ttft_s", "p50"), Millis(report, "ttft_s", "p99"),
        Millis(report, "tpot_s", "p50"), Millis(report, "tpot_s", "p99"),
        Millis(report, "itl_s", "p50"), Millis(report, "itl_s", "p99"),
        Millis(report, "e2e_s", "p50"), Millis(report, "e2e_s", "p99"));
  }
  return out;
}

}  // namespace llmserve::tools
