// The tracer: parent-based and ratio sampling, spans exported in batches, and a slow, failing or
// refusing exporter costing the callers nothing but counted drops.

#include "common/tracing/tracer.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace llmserve::common::tracing {
namespace {

struct ExportLog {
  absl::Mutex mutex;
  std::vector<SpanData> spans ABSL_GUARDED_BY(mutex);
  std::vector<absl::Status> outcomes ABSL_GUARDED_BY(mutex);  // popped per Export; OK after
  int exports ABSL_GUARDED_BY(mutex) = 0;
  bool block ABSL_GUARDED_BY(mutex) = false;  // Export waits until unblocked
};

class FakeExporter final : public SpanExporter {
 public:
  explicit FakeExporter(std::shared_ptr<ExportLog> log) : log_(std::move(log)) {}
  absl::Status Export(absl::Span<const SpanData> spans) override {
    absl::MutexLock lock(&log_->mutex);
    ++log_->exports;
    auto unblocked = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(log_->mutex) { return !log_->block; };
    log_->mutex.Await(absl::Condition(&unblocked));
    absl::Status outcome = absl::OkStatus();
    if (!log_->outcomes.empty()) {
      outcome = log_->outcomes.front();
      log_->outcomes.erase(log_->outcomes.begin());
    }
    if (outcome.ok()) log_->spans.insert(log_->spans.end(), spans.begin(), spans.end());
    return outcome;
  }
  std::string Describe() const override { return "fake"; }

 private:
  std::shared_ptr<ExportLog> log_;
};

TracerOptions Fast() {
  return {.export_interval = absl::Milliseconds(5), .retry_initial = absl::Milliseconds(1)};
}

TEST(TracerTest, ChildrenShareTheTraceAndPointAtTheirParent) {
  auto log = std::make_shared<ExportLog>();
  std::unique_ptr<Tracer> tracer = *Tracer::Start(std::make_unique<FakeExporter>(log), Fast());
  Span root = tracer->StartSpan("chat tiny", SpanKind::kServer, std::nullopt);
  ASSERT_TRUE(root.recording());
  Span child = tracer->StartSpan("attempt", SpanKind::kClient, root.context());
  child.SetAttribute("server.port", int64_t{50051});
  child.SetAttribute("server.port", int64_t{50052});  // replaces
  child.SetError("unavailable", "gone");
  child.End();
  child.End();  // once
  root.AddEvent("first_token");
  root.End();
  ASSERT_TRUE(tracer->WaitForFlush(absl::Now() + absl::Seconds(30)));
  absl::MutexLock lock(&log->mutex);
  ASSERT_EQ(log->spans.size(), 2u);
  const SpanData& c = log->spans[0];
  const SpanData& r = log->spans[1];
  EXPECT_EQ(c.context.trace_id, r.context.trace_id);
  EXPECT_EQ(c.parent_span_id, r.context.span_id);
  EXPECT_EQ(r.parent_span_id, SpanId{});
  ASSERT_EQ(c.attributes.size(), 2u);  // server.port once, error.type
  EXPECT_EQ(std::get<int64_t>(c.attributes[0].value), 50052);
  EXPECT_TRUE(c.error);
  EXPECT_EQ(r.events.size(), 1u);
  EXPECT_EQ(tracer->stats().exported, 2);
}

TEST(TracerTest, ACallersDecisionIsFollowedAndAnUnsampledSpanStillCarriesTheTrace) {
  auto log = std::make_shared<ExportLog>();
  TracerOptions options = Fast();
  options.sample_ratio = 0;  // no root would be sampled
  std::unique_ptr<Tracer> tracer = *Tracer::Start(std::make_unique<FakeExporter>(log), options);
  const TraceContext sampled =
      *ParseTraceParent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  Span followed = tracer->StartSpan("s", SpanKind::kServer, sampled);
  EXPECT_TRUE(followed.recording());
  EXPECT_EQ(followed.context().trace_id, sampled.trace_id);
  EXPECT_NE(followed.context().span_id, sampled.span_id);
  followed.End();
  TraceContext unsampled = sampled;
  unsampled.flags = 0;
  Span skipped = tracer->StartSpan("s", SpanKind::kServer, unsampled);
  EXPECT_FALSE(skipped.recording());
  EXPECT_TRUE(skipped.has_context());
  EXPECT_EQ(skipped.context().trace_id, sampled.trace_id);
  EXPECT_FALSE(skipped.context().sampled());
  skipped.SetAttribute("ignored", true);
  skipped.End();
  Span root = tracer->StartSpan("r", SpanKind::kServer, std::nullopt);
  EXPECT_FALSE(root.recording());
  EXPECT_FALSE(root.context().sampled());
  ASSERT_TRUE(tracer->WaitForFlush(absl::Now() + absl::Seconds(30)));
  absl::MutexLock lock(&log->mutex);
  EXPECT_EQ(log->spans.size(), 1u);
}

TEST(TracerTest, TheRatioSamplesAboutThatShareOfRootTraces) {
  auto log = std::make_shared<ExportLog>();
  TracerOptions options = Fast();
  options.sample_ratio = 0.25;
  std::unique_ptr<Tracer> tracer = *Tracer::Start(std::make_unique<FakeExporter>(log), options);
  int sampled = 0;
  for (int i = 0; i < 4000; ++i) {
    sampled += tracer->StartSpan("r", SpanKind::kServer, std::nullopt).context().sampled();
  }
  // Binomial(4000, 0.25): mean 1000, standard deviation 27; 8 deviations either side.
  EXPECT_GT(sampled, 780);
  EXPECT_LT(sampled, 1220);
}

TEST(TracerTest, AStuckExporterDropsSpansBeyondTheQueueAndNeverBlocksEndingOne) {
  auto log = std::make_shared<ExportLog>();
  {
    absl::MutexLock lock(&log->mutex);
    log->block = true;
  }
  TracerOptions options = Fast();
  options.max_queued_spans = 10;
  options.max_batch = 1;
  options.shutdown_flush = absl::ZeroDuration();
  std::unique_ptr<Tracer> tracer = *Tracer::Start(std::make_unique<FakeExporter>(log), options);
  tracer->StartSpan("first", SpanKind::kServer, std::nullopt).End();
  {
    absl::MutexLock lock(&log->mutex);
    auto exporting = [&log]()
                         ABSL_EXCLUSIVE_LOCKS_REQUIRED(log->mutex) { return log->exports > 0; };
    log->mutex.Await(absl::Condition(&exporting));
  }
  for (int i = 0; i < 30; ++i) tracer->StartSpan("s", SpanKind::kServer, std::nullopt).End();
  Tracer::Stats stats = tracer->stats();
  EXPECT_EQ(stats.dropped, 20);
  EXPECT_EQ(stats.queued, 11);
  {
    absl::MutexLock lock(&log->mutex);
    log->block = false;
  }
  tracer.reset();  // shutdown_flush 0: what is left is not waited for
}

TEST(TracerTest, AFailingExporterIsRetriedThenTheBatchDroppedAndARefusalIsNotRetried) {
  auto log = std::make_shared<ExportLog>();
  {
    absl::MutexLock lock(&log->mutex);
    log->outcomes = {absl::UnavailableError("down"), absl::UnavailableError("down"),
                     absl::UnavailableError("down"),           // batch 1: 3 attempts, dropped
                     absl::InvalidArgumentError("HTTP 400")};  // batch 2: not retried
  }
  TracerOptions options = Fast();
  options.max_batch = 1;
  std::unique_ptr<Tracer> tracer = *Tracer::Start(std::make_unique<FakeExporter>(log), options);
  tracer->StartSpan("a", SpanKind::kServer, std::nullopt).End();
  ASSERT_TRUE(tracer->WaitForFlush(absl::Now() + absl::Seconds(30)));
  tracer->StartSpan("b", SpanKind::kServer, std::nullopt).End();
  ASSERT_TRUE(tracer->WaitForFlush(absl::Now() + absl::Seconds(30)));
  tracer->StartSpan("c", SpanKind::kServer, std::nullopt).End();
  ASSERT_TRUE(tracer->WaitForFlush(absl::Now() + absl::Seconds(30)));
  const Tracer::Stats stats = tracer->stats();
  EXPECT_EQ(stats.dropped, 2);
  EXPECT_EQ(stats.export_failures, 4);
  EXPECT_EQ(stats.exported, 1);
  absl::MutexLock lock(&log->mutex);
  EXPECT_EQ(log->exports, 5);
  ASSERT_EQ(log->spans.size(), 1u);
  EXPECT_EQ(log->spans[0].name, "c");
}

TEST(TracerTest, ASpanEndedAfterTheTracerIsGoneIsDroppedSafely) {
  auto log = std::make_shared<ExportLog>();
  std::unique_ptr<Tracer> tracer = *Tracer::Start(std::make_unique<FakeExporter>(log), Fast());
  Span late = tracer->StartSpan("late", SpanKind::kServer, std::nullopt);
  tracer.reset();
  late.End();  // no crash, nothing exported
  absl::MutexLock lock(&log->mutex);
  EXPECT_TRUE(log->spans.empty());
}

TEST(TracerTest, BadFlagsAreRefusedByName) {
  EXPECT_TRUE(
      absl::StrContains(Tracer::Create({.endpoint = "collector:4318"}, "s", "1").status().message(),
                        "--otlp_traces_endpoint"));
  EXPECT_TRUE(absl::StrContains(
      Tracer::Create({.endpoint = "http://c:4318", .headers = "x"}, "s", "1").status().message(),
      "--otlp_headers"));
  EXPECT_TRUE(
      absl::StrContains(Tracer::Create({.endpoint = "http://c:4318", .sample_ratio = 1.5}, "s", "1")
                            .status()
                            .message(),
                        "--trace_sample_ratio"));
}

}  // namespace
}  // namespace llmserve::common::tracing
