// llmserve-bench's load runner (open loop, concurrency limit, duration) against a fake client,
// its report (throughput, goodput, failures, percentiles), datasets and the gnuplot chart.

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tools/bench/bench_report.h"
#include "tools/bench/dataset.h"
#include "tools/bench/load_runner.h"
#include "tools/bench/plot.h"
#include "tools/bench_load/bench_load.h"

namespace llmserve::tools {
namespace {

using Json = nlohmann::json;

// Answers every request after `latency` with output_len tokens, and records when each was sent
// and how many were in flight at most.
class FakeClient final : public BenchClient {
 public:
  explicit FakeClient(absl::Duration latency) : latency_(latency) {}

  RequestOutcome Send(const std::string& id, const BenchRequest& request,
                      absl::Time deadline) override {
    {
      absl::MutexLock lock(&mutex_);
      sent_at_.push_back(absl::Now());
      ids_.push_back(id);
      peak_ = std::max(peak_, ++in_flight_);
    }
    absl::SleepFor(std::min(latency_, deadline - absl::Now()));
    {
      absl::MutexLock lock(&mutex_);
      --in_flight_;
    }
    RequestOutcome outcome;
    outcome.ok = true;
    outcome.status = "ok";
    outcome.ttft_s = 0.010;
    outcome.e2e_s = 0.010 + 0.002 * (request.output_len - 1);
    outcome.itl_s.assign(static_cast<size_t>(request.output_len - 1), 0.002);
    outcome.output_tokens = request.output_len;
    outcome.prompt_tokens = static_cast<int64_t>(request.prompt_ids.size());
    return outcome;
  }

  int peak() {
    absl::MutexLock lock(&mutex_);
    return peak_;
  }
  std::vector<absl::Time> sent_at() {
    absl::MutexLock lock(&mutex_);
    std::vector<absl::Time> sorted = sent_at_;
    std::sort(sorted.begin(), sorted.end());
    return sorted;
  }
  std::vector<std::string> ids() {
    absl::MutexLock lock(&mutex_);
    return ids_;
  }

 private:
  const absl::Duration latency_;
  absl::Mutex mutex_;
  std::vector<absl::Time> sent_at_ ABSL_GUARDED_BY(mutex_);
  std::vector<std::string> ids_ ABSL_GUARDED_BY(mutex_);
  int in_flight_ ABSL_GUARDED_BY(mutex_) = 0;
  int peak_ ABSL_GUARDED_BY(mutex_) = 0;
};

std::vector<BenchRequest> Requests(int count, int output_len = 5) {
  std::vector<BenchRequest> requests(static_cast<size_t>(count));
  for (BenchRequest& request : requests) {
    request.prompt_ids = {7, 8, 9};
    request.output_len = output_len;
  }
  return requests;
}

TEST(LoadRunnerTest, MaxConcurrencyBoundsRequestsInFlight) {
  FakeClient client(absl::Milliseconds(20));
  const LoadResult result = RunLoad(&client, Requests(12), {.max_concurrency = 3});
  EXPECT_EQ(result.outcomes.size(), 12u);
  EXPECT_EQ(result.client_threads, 3);
  EXPECT_LE(client.peak(), 3);
  // 12 requests of 20 ms, 3 at a time: at least 4 rounds.
  EXPECT_GE(result.elapsed_s, 0.08);
  std::vector<std::string> ids = client.ids();
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids.front(), "bench-0");
}

TEST(LoadRunnerTest, OpenLoopSendsOnScheduleWhileEarlierRequestsRun) {
  // Each request takes 300 ms; they are due every 50 ms. A closed loop would send one at a time.
  FakeClient client(absl::Milliseconds(300));
  std::vector<absl::Duration> arrivals;
  for (int i = 0; i < 4; ++i) arrivals.push_back(absl::Milliseconds(50 * i));
  const absl::Time before = absl::Now();
  const LoadResult result = RunLoad(&client, Requests(4), {.arrivals = arrivals});
  EXPECT_EQ(result.outcomes.size(), 4u);
  EXPECT_EQ(client.peak(), 4);
  // Not before its time: the schedule starts when RunLoad does, after `before`. (Measured from
  // the first send instead, a late first send made the others look early.)
  const std::vector<absl::Time> sent = client.sent_at();
  ASSERT_EQ(sent.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_GE(sent[i] - before, arrivals[i]) << "request " << i;
}

TEST(LoadRunnerTest, DurationStopsSendingAndProgressIsReported) {
  FakeClient client(absl::Milliseconds(1));
  std::vector<absl::Duration> arrivals = {absl::ZeroDuration(), absl::Milliseconds(10),
                                          absl::Seconds(100), absl::Seconds(200)};
  std::atomic<int> reports{0};
  LoadProgress last;
  const absl::Time start = absl::Now();
  const LoadResult result = RunLoad(&client, Requests(4),
                                    {.arrivals = arrivals,
                                     .duration = absl::Milliseconds(500),
                                     .on_progress = [&](const LoadProgress& progress) {
                                       ++reports;
                                       last = progress;
                                     }});
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));  // did not wait for the far arrivals
  EXPECT_EQ(result.outcomes.size(), 2u);
  EXPECT_GE(reports.load(), 1);
  EXPECT_EQ(last.total, 4);
  EXPECT_EQ(last.sent, 2);
  EXPECT_EQ(last.succeeded, 2);
}

TEST(BenchReportTest, CountsThroughputGoodputAndFailuresByStatus) {
  LoadResult result;
  result.elapsed_s = 2.0;
  result.client_threads = 4;
  auto ok = [](double ttft, double e2e, int64_t tokens) {
    RequestOutcome outcome{.ok = true, .status = "ok", .ttft_s = ttft, .e2e_s = e2e};
    outcome.output_tokens = tokens;
    outcome.prompt_tokens = 10;
    outcome.itl_s.assign(static_cast<size_t>(tokens - 1), (e2e - ttft) / (tokens - 1));
    return outcome;
  };
  result.outcomes = {ok(0.1, 1.0, 10),
                     ok(0.5, 1.4, 10),
                     ok(0.1, 2.0, 11),
                     RequestOutcome{.status = "http 429", .error = "over the limit"},
                     RequestOutcome{.status = "http 429", .error = "over the limit"},
                     RequestOutcome{.status = "timeout", .error = "late"}};
  const Json report = SummarizeLoad({.api = "openai",
                                     .request_rate = 4,
                                     .requests = 6,
                                     .prompt_len = 10,
                                     .output_len = 10,
                                     .slo_ttft_s = 0.2,
                                     .slo_tpot_s = 0.15},
                                    result);
  EXPECT_EQ(report["rate"], 4.0);
  EXPECT_EQ(report["completed"], 3);
  EXPECT_EQ(report["failed"], 3);
  EXPECT_EQ(report["errors"], 3);
  EXPECT_EQ(report["failures"], Json::parse(R"({"http 429": 2, "timeout": 1})"));
  EXPECT_EQ(report["first_error"], "http 429: over the limit");
  EXPECT_DOUBLE_EQ(report["requests_per_s"].get<double>(), 1.5);
  EXPECT_EQ(report["output_tokens"], 31);
  EXPECT_DOUBLE_EQ(report["output_tokens_per_s"].get<double>(), 15.5);
  EXPECT_DOUBLE_EQ(report["total_tokens_per_s"].get<double>(), 30.5);
  // Only the first request meets both SLOs: the second's TTFT is 0.5 s, the third's TPOT 0.19 s.
  EXPECT_DOUBLE_EQ(report["goodput_requests_per_s"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(report["ttft_s"]["p50"].get<double>(), 0.1);
  EXPECT_DOUBLE_EQ(report["ttft_s"]["p99"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(report["tpot_s"]["p50"].get<double>(), 0.1);
  EXPECT_NEAR(report["itl_s"]["p50"].get<double>(), 0.1, 1e-9);
  EXPECT_DOUBLE_EQ(report["e2e_s"]["p99"].get<double>(), 2.0);

  // Nothing completed: no percentiles, no goodput SLO fields unless asked.
  const Json empty = SummarizeLoad({.request_rate = INFINITY}, LoadResult{.elapsed_s = 1});
  EXPECT_EQ(empty["rate"], "inf");
  EXPECT_TRUE(empty["ttft_s"].is_null());
  EXPECT_FALSE(empty.contains("goodput_requests_per_s"));

  const std::string table = FormatTable({report, empty});
  EXPECT_NE(table.find("TTFT ms p50 p99"), std::string::npos) << table;
  EXPECT_NE(table.find("4.00"), std::string::npos) << table;
  EXPECT_NE(table.find("inf"), std::string::npos) << table;
  EXPECT_NE(table.find("100.0"), std::string::npos) << table;  // TTFT p50 in ms
}

TEST(BenchLoadTest, RangeRatioDrawsLengthsInRangeAndKeepsFixedLoadsAsTheyWere) {
  absl::StatusOr<BenchLoad> fixed =
      MakeBenchLoad({.num_requests = 8, .prompt_len = 16, .output_len = 4}, 100);
  absl::StatusOr<BenchLoad> again =
      MakeBenchLoad({.num_requests = 8, .prompt_len = 16, .output_len = 4}, 100);
  ASSERT_TRUE(fixed.ok() && again.ok());
  EXPECT_EQ(fixed->prompts, again->prompts);
  EXPECT_EQ(fixed->output_lens, std::vector<int32_t>(8, 4));
  absl::StatusOr<BenchLoad> ranged = MakeBenchLoad(
      {.num_requests = 200, .prompt_len = 100, .output_len = 10, .range_ratio = 0.5}, 100);
  ASSERT_TRUE(ranged.ok());
  int32_t shortest = 1 << 30, longest = 0;
  for (const auto& prompt : ranged->prompts) {
    shortest = std::min<int32_t>(shortest, static_cast<int32_t>(prompt.size()));
    longest = std::max<int32_t>(longest, static_cast<int32_t>(prompt.size()));
  }
  EXPECT_GE(shortest, 50);
  EXPECT_LE(longest, 150);
  EXPECT_LT(shortest, 70);  // spread, not all the mean
  EXPECT_GT(longest, 130);
  for (int32_t length : ranged->output_lens) {
    EXPECT_GE(length, 5);
    EXPECT_LE(length, 15);
  }
  EXPECT_FALSE(MakeBenchLoad({.range_ratio = 1.0}, 100).ok());
  EXPECT_FALSE(MakeBenchLoad({.range_ratio = NAN}, 100).ok());
}

TEST(BenchLoadTest, PoissonArrivalsHaveTheRequestedRate) {
  const std::vector<absl::Duration> arrivals = PoissonArrivals(2000, 8.0, 5);
  ASSERT_EQ(arrivals.size(), 2000u);
  EXPECT_EQ(arrivals[0], absl::ZeroDuration());
  EXPECT_TRUE(std::is_sorted(arrivals.begin(), arrivals.end()));
  const double rate = 1999 / absl::ToDoubleSeconds(arrivals.back());
  EXPECT_NEAR(rate, 8.0, 0.8);
  EXPECT_TRUE(PoissonArrivals(5, INFINITY, 1).empty());
  EXPECT_TRUE(PoissonArrivals(5, 0, 1).empty());
}

TEST(DatasetTest, ParsesEachFormAndNamesTheBadLine) {
  absl::StatusOr<std::vector<BenchRequest>> parsed = ParseJsonlDataset(
      "{\"prompt\": \"hi\", \"output_len\": 3}\n\n{\"prompt_ids\": [1, 2]}\n"
      "{\"messages\": [{\"role\": \"user\", \"content\": \"yo\"}]}\n",
      "d.jsonl", 7);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->size(), 3u);
  EXPECT_EQ((*parsed)[0].prompt_text, "hi");
  EXPECT_EQ((*parsed)[0].output_len, 3);
  EXPECT_EQ((*parsed)[1].prompt_ids, std::vector<int32_t>({1, 2}));
  EXPECT_EQ((*parsed)[1].prompt_tokens, 2);
  EXPECT_EQ((*parsed)[1].output_len, 7);
  EXPECT_EQ((*parsed)[2].messages[0].content, "yo");

  auto error = [](const std::string& text) {
    return std::string(ParseJsonlDataset(text, "d.jsonl", 7).status().message());
  };
  EXPECT_EQ(error("{\"prompt\": \"a\"}\n{bad"), "d.jsonl:2: not valid JSON");
  EXPECT_NE(error("{\"prompt\": \"a\", \"messages\": []}").find("exactly one"), std::string::npos);
  EXPECT_NE(error("{\"prompt\": \"\"}").find("non-empty"), std::string::npos);
  EXPECT_NE(error("{\"prompt_ids\": [1, -2]}").find("token id"), std::string::npos);
  EXPECT_NE(error("{\"prompt\": \"a\", \"output_len\": 0}").find("output_len"), std::string::npos);
  EXPECT_NE(error("{\"messages\": [{\"role\": 1}]}").find("role"), std::string::npos);
  EXPECT_NE(error("\n\n").find("no request"), std::string::npos);
  EXPECT_TRUE(absl::IsNotFound(LoadJsonlDataset("/nonexistent/d.jsonl", 1).status()));
}

TEST(PlotTest, DrawsTheSweepWithGnuplot) {
  const Json fast = {{"rate", 1.0},
                     {"output_tokens_per_s", 100.0},
                     {"ttft_s", {{"p50", 0.01}, {"p99", 0.02}}},
                     {"tpot_s", {{"p50", 0.001}, {"p99", 0.002}}}};
  const Json slow = {{"rate", "inf"},
                     {"output_tokens_per_s", 300.0},
                     {"ttft_s", {{"p50", 0.1}, {"p99", 0.3}}},
                     {"tpot_s", {{"p50", 0.004}, {"p99", 0.009}}}};
  const std::string script = SweepPlotScript({fast, slow}, "it's a title", "/tmp/o'k.png");
  EXPECT_NE(script.find("\"1/s\" 100.000 10.000 20.000 1.000 2.000"), std::string::npos) << script;
  EXPECT_NE(script.find("\"inf\" 300.000 100.000 300.000 4.000 9.000"), std::string::npos);
  EXPECT_NE(script.find("set output '/tmp/o''k.png'"), std::string::npos);
  EXPECT_NE(script.find("'it''s a title'"), std::string::npos);

  const Json nothing = {{"rate", 2.0}, {"ttft_s", nullptr}, {"tpot_s", nullptr}};
  EXPECT_TRUE(absl::IsInvalidArgument(PlotSweep({nothing}, "t", "/tmp/x.png")));
  EXPECT_TRUE(absl::IsInvalidArgument(PlotSweep({fast}, "t", "/tmp/a\nb.png")));
  if (access("/usr/bin/gnuplot", X_OK) != 0) GTEST_SKIP() << "gnuplot is not installed";
  ::llmserve::testing::ScopedTempDir dir;
  const std::string png = dir.path() + "/sweep.png";
  ASSERT_TRUE(PlotSweep({fast, slow}, "sweep", png).ok());
  std::ifstream file(png, std::ios::binary);
  std::string magic(8, '\0');
  file.read(magic.data(), 8);
  EXPECT_EQ(magic, "\x89PNG\r\n\x1a\n");
}

}  // namespace
}  // namespace llmserve::tools
