// RequestRunner against the in-memory FakeWorkerClient, with a sink that records the run's events:
// their order, the request counted before the last one, and cancellation at each step ending in
// exactly one last event.

#include "gateway/pipeline/request_runner.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gateway/admission/concurrency_limiter.h"
#include "gateway/metrics/gateway_metrics.h"
#include "gtest/gtest.h"
#include "tests/testing/fake_worker_client.h"

namespace llmserve::gateway {
namespace {

using ::llmserve::testing::FakeCall;
using ::llmserve::testing::FakeModelInfo;
using ::llmserve::testing::FakeWorkerClient;

constexpr absl::Duration kPatience = absl::Seconds(10);

// The run's events as lines ("started 2", "delta 0", "end 1 OK", "completed OK", "refused
// CANCELLED"), and whether the request had been counted when the last one came.
class RecordingSink final : public RequestSink {
 public:
  explicit RecordingSink(const GatewayMetrics* metrics) : metrics_(metrics) {}

  void OnRefused(const absl::Status& status, absl::Duration) override {
    Last(absl::StrCat("refused ", absl::StatusCodeToString(status.code())));
  }
  void OnStarted(const PreparedRun& run) override {
    Add(absl::StrCat("started ", run.choices.size()));
  }
  void OnDelta(int choice, GenerationDelta) override { Add(absl::StrCat("delta ", choice)); }
  void OnChoiceEnd(int choice, const GenerationResult* result, const absl::Status& error) override {
    Add(absl::StrCat("end ", choice, " ",
                     result != nullptr ? "OK" : absl::StatusCodeToString(error.code())));
  }
  void OnCompleted(const absl::Status& first_error) override {
    Last(absl::StrCat("completed ", absl::StatusCodeToString(first_error.code())));
  }

  bool WaitDone() { return done_.WaitForNotificationWithTimeout(kPatience); }
  std::vector<std::string> events() {
    absl::MutexLock lock(&mutex_);
    return events_;
  }
  // The requests metric when the last event came.
  std::string metrics_at_end() {
    absl::MutexLock lock(&mutex_);
    return metrics_at_end_;
  }

 private:
  void Add(std::string event) {
    absl::MutexLock lock(&mutex_);
    events_.push_back(std::move(event));
  }
  void Last(std::string event) {
    {
      absl::MutexLock lock(&mutex_);
      events_.push_back(std::move(event));
      metrics_at_end_ = metrics_->Render();
    }
    // A second last event would be a bug: the test sees it in events().
    if (!done_.HasBeenNotified()) done_.Notify();
  }

  const GatewayMetrics* const metrics_;
  absl::Notification done_;
  absl::Mutex mutex_;
  std::vector<std::string> events_ ABSL_GUARDED_BY(mutex_);
  std::string metrics_at_end_ ABSL_GUARDED_BY(mutex_);
};

class RequestRunnerTest : public ::testing::Test {
 protected:
  RequestRunnerTest() { fake_.AddWorker("a:1", FakeModelInfo("tiny")); }

  // A run of `n` choices of a short text prompt (prepared as the frontends do), or of whatever
  // `prepare` answers.
  struct Run {
    std::shared_ptr<RecordingSink> sink;
    std::shared_ptr<RequestRun> run;
  };
  Run NewRun() {
    auto sink = std::make_shared<RecordingSink>(&metrics_);
    return {sink, runner_.NewRun(tracker_.Begin("grpc"), sink)};
  }
  RunInput Input(int n, int max_tokens = 8) {
    RunInput input;
    input.prepare = [this, n,
                     max_tokens](RequestLifecycle& lifecycle) -> absl::StatusOr<PreparedRun> {
      ++prepared_;
      absl::StatusOr<std::shared_ptr<const ServedModel>> model = catalog_.Resolve("tiny");
      if (!model.ok()) return model.status();
      lifecycle.set_model("tiny");
      ::llmserve::v1::GenerateRequest request;
      request.set_text("hello there");
      request.mutable_stopping()->set_max_tokens(max_tokens);
      absl::StatusOr<std::vector<PreparedRequest>> choices =
          PrepareChoices(request, *model, n, prepare_->limits(), prepare_->render_chat());
      if (!choices.ok()) return choices.status();
      return PreparedRun{.model = *std::move(model), .choices = *std::move(choices)};
    };
    return input;
  }
  bool Counted(absl::string_view metrics, absl::string_view code) {
    return absl::StrContains(
        metrics, absl::StrCat(R"(llmserve_gateway_requests_total{api="grpc",code=")", code,
                              R"(",model="tiny"} 1)"));
  }

  FakeWorkerClient fake_;
  ModelCatalog catalog_{&fake_};
  GatewayMetrics metrics_{[] { return GatewayMetrics::LiveState{}; }};
  ConcurrencyLimiter concurrency_{1, 4};
  RequestAdmission admission_{nullptr, nullptr, &concurrency_, &metrics_};
  RequestTracker tracker_{&admission_, &metrics_};
  std::unique_ptr<PrepareStage> prepare_ = *PrepareStage::Create({.threads = 1});
  RequestRunner runner_{&fake_, &catalog_, &tracker_, prepare_.get(), {.metrics = &metrics_}};
  std::atomic<int> prepared_{0};

  void TearDown() override { prepare_->Shutdown(); }
};

TEST_F(RequestRunnerTest, EveryChoiceRunsAndTheRequestIsCountedBeforeTheLastEvent) {
  Run run = NewRun();
  run.run->Start(Input(/*n=*/2));
  for (size_t i = 0; i < 2; ++i) {
    std::shared_ptr<FakeCall> call = fake_.WaitForCall(i);
    ASSERT_NE(call, nullptr);
    ASSERT_TRUE(call->Send({'h', 'i'}, ::llmserve::v1::FINISH_REASON_LENGTH));
  }
  ASSERT_TRUE(run.sink->WaitDone());
  const std::vector<std::string> events = run.sink->events();
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.front(), "started 2");
  EXPECT_EQ(events.back(), "completed OK");
  EXPECT_EQ(std::count(events.begin(), events.end(), "end 0 OK"), 1);
  EXPECT_EQ(std::count(events.begin(), events.end(), "end 1 OK"), 1);
  EXPECT_TRUE(Counted(run.sink->metrics_at_end(), "ok")) << absl::StrJoin(events, "; ");
}

TEST_F(RequestRunnerTest, WhileDrainingNothingIsPreparedOrRun) {
  tracker_.StartDrain();
  Run run = NewRun();
  run.run->Start(Input(1));
  ASSERT_TRUE(run.sink->WaitDone());
  EXPECT_EQ(run.sink->events(), std::vector<std::string>{"refused UNAVAILABLE"});
  EXPECT_EQ(prepared_.load(), 0);
  EXPECT_EQ(fake_.calls_started(), 0u);
}

TEST_F(RequestRunnerTest, APreparationErrorIsTheAnswer) {
  Run run = NewRun();
  RunInput input = Input(1);
  input.prepare = [](RequestLifecycle&) -> absl::StatusOr<PreparedRun> {
    return absl::InvalidArgumentError("max_tokens: -1 is below 1");
  };
  run.run->Start(std::move(input));
  ASSERT_TRUE(run.sink->WaitDone());
  EXPECT_EQ(run.sink->events(), std::vector<std::string>{"refused INVALID_ARGUMENT"});
  EXPECT_EQ(fake_.calls_started(), 0u);
}

TEST_F(RequestRunnerTest, ARequestCancelledWhileQueuedForASlotEndsOnceAndFreesItsPlace) {
  // The one slot is taken by a running request...
  Run first = NewRun();
  first.run->Start(Input(1));
  std::shared_ptr<FakeCall> running = fake_.WaitForCall(0);
  ASSERT_NE(running, nullptr);
  // ... so the second waits in the queue until its client leaves.
  Run second = NewRun();
  second.run->Start(Input(1));
  const absl::Time deadline = absl::Now() + kPatience;
  while (prepared_.load() < 2 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
  second.run->Cancel();
  ASSERT_TRUE(second.sink->WaitDone());
  second.run->Cancel();  // idempotent
  EXPECT_EQ(second.sink->events(), std::vector<std::string>{"refused CANCELLED"});
  ASSERT_TRUE(running->Send({'o', 'k'}, ::llmserve::v1::FINISH_REASON_STOP));
  ASSERT_TRUE(first.sink->WaitDone());
  EXPECT_EQ(first.sink->events().back(), "completed OK");
  EXPECT_EQ(fake_.calls_started(), 1u);
}

TEST_F(RequestRunnerTest, ARequestCancelledWhileGeneratingCancelsItsWorkerCallsAndCompletes) {
  Run run = NewRun();
  run.run->Start(Input(2));
  std::shared_ptr<FakeCall> a = fake_.WaitForCall(0);
  std::shared_ptr<FakeCall> b = fake_.WaitForCall(1);
  ASSERT_TRUE(a != nullptr && b != nullptr);
  ASSERT_TRUE(a->Send({'x'}));
  run.run->Cancel();
  EXPECT_TRUE(a->WaitUntilCancelled(kPatience));
  EXPECT_TRUE(b->WaitUntilCancelled(kPatience));
  ASSERT_TRUE(run.sink->WaitDone());
  const std::vector<std::string> events = run.sink->events();
  EXPECT_EQ(events.back(), "completed CANCELLED") << absl::StrJoin(events, "; ");
  EXPECT_TRUE(Counted(run.sink->metrics_at_end(), "cancelled")) << absl::StrJoin(events, "; ");
}

}  // namespace
}  // namespace llmserve::gateway
