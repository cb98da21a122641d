// RequestLifecycle and RequestTracker: the one place where a request is counted in flight,
// admitted, and ended exactly once (metric, token charge, concurrency slot).

#include "gateway/pipeline/request_lifecycle.h"

#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "gateway/admission/concurrency_limiter.h"
#include "gateway/admission/rate_limiter.h"
#include "gateway/metrics/gateway_metrics.h"
#include "gtest/gtest.h"

namespace llmserve::gateway {
namespace {

class RequestLifecycleTest : public ::testing::Test {
 protected:
  // One request per minute at most one at a time would be too tight: tokens are what is tested.
  std::unique_ptr<RateLimiter> rate_ = *RateLimiter::Create(
      {.default_limits = {.requests_per_minute = 1000, .tokens_per_minute = 100}});
  ConcurrencyLimiter concurrency_{1, 4};
  GatewayMetrics metrics_{[] { return GatewayMetrics::LiveState{}; }};
  RequestAdmission admission_{nullptr, rate_.get(), &concurrency_, &metrics_};
  RequestTracker tracker_{&admission_, &metrics_};
  const Principal alice_{.name = "alice"};

  // Admits `lifecycle` for `tokens`; the status its callback got ("" while it has not run).
  std::shared_ptr<std::string> Admit(RequestLifecycle& lifecycle, int64_t tokens) {
    auto outcome = std::make_shared<std::string>();
    lifecycle.Admit(alice_, tokens, [outcome](absl::Status status, absl::Duration) {
      *outcome = status.ok() ? "admitted" : std::string(status.message());
    });
    return outcome;
  }

  bool MetricsSay(const std::string& series) {
    return absl::StrContains(metrics_.Render(), series);
  }
};

TEST(InFlightCountTest, AGuardCountsOnceWhereverItIsMovedAndMayOutliveItsCount) {
  std::shared_ptr<InFlightCount> count = InFlightCount::Create();
  InFlightCount::Guard first = count->Enter();
  InFlightCount::Guard second = count->Enter();
  EXPECT_EQ(count->count(), 2);
  InFlightCount::Guard moved = std::move(first);
  EXPECT_EQ(count->count(), 2);
  moved = std::move(second);  // releases what `moved` held
  EXPECT_EQ(count->count(), 1);
  InFlightCount::Guard none;  // counts nothing
  none = InFlightCount::Guard();
  std::weak_ptr<InFlightCount> weak = count;
  count.reset();  // the guard keeps the count alive
  EXPECT_FALSE(weak.expired());
  moved = InFlightCount::Guard();
  EXPECT_TRUE(weak.expired());
}

TEST(InFlightCountTest, WaitForZeroReturnsWhenTheLastGuardGoesOrAtItsDeadline) {
  std::shared_ptr<InFlightCount> count = InFlightCount::Create();
  EXPECT_EQ(count->WaitForZero(absl::InfinitePast()), 0);
  auto guard = std::make_unique<InFlightCount::Guard>(count->Enter());
  EXPECT_EQ(count->WaitForZero(absl::InfinitePast()), 1);  // the deadline has passed
  // Released on another thread while this one waits without a deadline it could reach.
  std::thread releaser([&guard] { guard.reset(); });
  EXPECT_EQ(count->WaitForZero(absl::InfiniteFuture()), 0);
  releaser.join();
}

TEST_F(RequestLifecycleTest, GenerationsAreCountedApartFromRequests) {
  std::shared_ptr<RequestLifecycle> request = tracker_.Begin("grpc");
  InFlightCount::Guard generation = tracker_.generations()->Enter();
  request.reset();
  EXPECT_EQ(tracker_.WaitForRequests(absl::InfinitePast()), 0);
  EXPECT_EQ(tracker_.WaitForGenerations(absl::InfinitePast()), 1);
  generation = InFlightCount::Guard();
  EXPECT_EQ(tracker_.WaitForGenerations(absl::InfinitePast()), 0);
}

TEST_F(RequestLifecycleTest, CountsInFlightUntilDestroyedAndRefusesWhileDraining) {
  std::shared_ptr<RequestLifecycle> first = tracker_.Begin("grpc");
  std::shared_ptr<RequestLifecycle> second = tracker_.Begin("http");
  EXPECT_EQ(tracker_.active(), 2);
  EXPECT_EQ(tracker_.active("grpc"), 1);
  EXPECT_EQ(tracker_.active("http"), 1);
  first.reset();
  EXPECT_EQ(tracker_.active(), 1);
  EXPECT_EQ(tracker_.active("grpc"), 0);
  EXPECT_TRUE(tracker_.CheckAccepting().ok());
  tracker_.StartDrain();
  EXPECT_TRUE(tracker_.draining());
  EXPECT_EQ(tracker_.CheckAccepting().code(), absl::StatusCode::kUnavailable);
  second.reset();
  EXPECT_EQ(tracker_.active(), 0);
}

TEST_F(RequestLifecycleTest, EndsOnceChargingCompletionTokensAgainstTheReservation) {
  std::shared_ptr<RequestLifecycle> lifecycle = tracker_.Begin("http");
  lifecycle->set_model("tiny");
  EXPECT_EQ(*Admit(*lifecycle, 90), "admitted");
  // 90 of 100 tokens reserved: another 20 do not fit.
  {
    std::shared_ptr<RequestLifecycle> other = tracker_.Begin("http");
    EXPECT_NE(*Admit(*other, 20), "admitted");
  }
  // It used 10: the other 80 come back.
  lifecycle->Finish(absl::StatusCode::kOk, 10);
  lifecycle->Finish(absl::StatusCode::kInternal, 10);  // ignored
  lifecycle.reset();                                   // and so is the destructor's
  EXPECT_TRUE(
      MetricsSay(R"(llmserve_gateway_requests_total{api="http",code="ok",model="tiny"} 1)"));
  EXPECT_FALSE(MetricsSay(R"(code="internal")"));
  EXPECT_FALSE(MetricsSay(R"(api="http",code="cancelled",model="tiny")"));
  std::shared_ptr<RequestLifecycle> next = tracker_.Begin("http");
  EXPECT_EQ(*Admit(*next, 80), "admitted");
}

TEST_F(RequestLifecycleTest, ARequestDroppedWithoutAnEndIsCancelledAndFreesItsSlot) {
  std::shared_ptr<RequestLifecycle> first = tracker_.Begin("grpc");
  first->set_model("tiny");
  EXPECT_EQ(*Admit(*first, 10), "admitted");
  // The one slot is taken: the next waits in the queue.
  std::shared_ptr<RequestLifecycle> second = tracker_.Begin("grpc");
  std::shared_ptr<std::string> second_outcome = Admit(*second, 10);
  EXPECT_EQ(*second_outcome, "");
  // The first one's client left without the request ending: cancelled, and its slot goes on.
  first.reset();
  EXPECT_TRUE(
      MetricsSay(R"(llmserve_gateway_requests_total{api="grpc",code="cancelled",model="tiny"} 1)"));
  EXPECT_EQ(*second_outcome, "admitted");
}

TEST_F(RequestLifecycleTest, AClientThatLeavesTheQueueIsNeverAdmitted) {
  std::shared_ptr<RequestLifecycle> first = tracker_.Begin("grpc");
  EXPECT_EQ(*Admit(*first, 10), "admitted");
  std::shared_ptr<RequestLifecycle> queued = tracker_.Begin("http");
  std::shared_ptr<std::string> queued_outcome = Admit(*queued, 10);
  EXPECT_TRUE(queued->CancelAdmission());
  EXPECT_FALSE(queued->CancelAdmission());
  first->Finish(absl::StatusCode::kOk);
  EXPECT_EQ(*queued_outcome, "");
  // The slot went to nobody: the next request gets it at once.
  std::shared_ptr<RequestLifecycle> next = tracker_.Begin("http");
  EXPECT_EQ(*Admit(*next, 10), "admitted");
}

TEST_F(RequestLifecycleTest, ARequestThatEndsWhileQueuedGivesItsSlotBackWhenItComes) {
  std::shared_ptr<RequestLifecycle> first = tracker_.Begin("grpc");
  EXPECT_EQ(*Admit(*first, 10), "admitted");
  std::shared_ptr<RequestLifecycle> queued = tracker_.Begin("http");
  std::shared_ptr<std::string> queued_outcome = Admit(*queued, 10);
  // Ended without leaving the queue (a cancel that lost a race): when the slot reaches it, it is
  // told so and the slot goes on.
  queued->Finish(absl::StatusCode::kCancelled);
  first->Finish(absl::StatusCode::kOk);
  EXPECT_EQ(*queued_outcome, "the request ended while it waited for a slot");
  std::shared_ptr<RequestLifecycle> next = tracker_.Begin("http");
  EXPECT_EQ(*Admit(*next, 10), "admitted");
}

}  // namespace
}  // namespace llmserve::gateway
