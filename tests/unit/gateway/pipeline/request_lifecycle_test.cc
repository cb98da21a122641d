// RequestLifecycle and RequestTracker: the one place where a request is counted in flight,
// admitted, and ended exactly once (metric, token charge, concurrency slot).

#include "gateway/pipeline/request_lifecycle.h"

#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "gateway/admission/concurrency_limiter.h"
#include "gateway/admission/rate_limiter.h"
#include "gateway/metrics/gateway_metrics.h"
#include "gateway/request_log/request_log.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

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

// Keeps what the request log wrote.
class CapturingSink final : public RequestLogSink {
 public:
  explicit CapturingSink(std::shared_ptr<std::vector<RequestRecord>> records)
      : records_(std::move(records)) {}
  absl::Status Write(absl::Span<const RequestRecord> records) override {
    records_->insert(records_->end(), records.begin(), records.end());
    return absl::OkStatus();
  }
  std::string Describe() const override { return "capture"; }

 private:
  std::shared_ptr<std::vector<RequestRecord>> records_;
};

GenerationResult Result(v1::FinishReason reason, int prompt, int cached, int completion,
                        double ttft, std::string worker) {
  GenerationResult result;
  result.finish_reason = reason;
  result.usage.set_prompt_tokens(prompt);
  result.usage.set_cached_prompt_tokens(cached);
  result.usage.set_completion_tokens(completion);
  result.timing.set_time_to_first_token_s(ttft);
  result.worker = std::move(worker);
  return result;
}

TEST_F(RequestLifecycleTest, EveryEndingWritesOneRecordOfWhatTheFrontendToldIt) {
  auto records = std::make_shared<std::vector<RequestRecord>>();
  std::unique_ptr<RequestLog> log =
      *RequestLog::Start(std::make_unique<CapturingSink>(records), RequestLogOptions());
  RequestTracker tracker(&admission_, &metrics_, log.get());
  {
    std::shared_ptr<RequestLifecycle> chat = tracker.Begin("http", "/v1/chat/completions");
    chat->set_model("tiny");
    chat->set_request_id("chatcmpl-1");
    EXPECT_EQ(*Admit(*chat, 50), "admitted");
    // Choices finish out of order; the record lists them in choice order.
    chat->AddResult(1, Result(v1::FINISH_REASON_LENGTH, 12, 8, 5, 0.30, "w2:1"));
    chat->AddResult(0, Result(v1::FINISH_REASON_STOP, 12, 8, 3, 0.20, "w1:1"));
    chat->Finish(absl::OkStatus(), 8);
    // A refused request: no principal (authentication failed), its error kept.
    std::shared_ptr<RequestLifecycle> refused = tracker.Begin("grpc", "/x/Generate");
    refused->Finish(absl::UnauthenticatedError("bad key"));
    // A client that left: cancelled.
    std::shared_ptr<RequestLifecycle> left = tracker.Begin("grpc", "/x/GenerateStream");
    left->set_principal({.name = "bob", .kind = Principal::Kind::kJwt});
  }
  ASSERT_TRUE(log->WaitForFlush(absl::Now() + absl::Seconds(30)));
  log.reset();
  ASSERT_EQ(records->size(), 3u);
  const RequestRecord& chat = (*records)[0];
  EXPECT_EQ(chat.api, "http");
  EXPECT_EQ(chat.endpoint, "/v1/chat/completions");
  EXPECT_EQ(chat.request_id, "chatcmpl-1");
  EXPECT_EQ(chat.principal, "alice");
  EXPECT_EQ(chat.principal_kind, "anonymous");
  EXPECT_EQ(chat.model, "tiny");
  EXPECT_EQ(chat.status, "OK");
  EXPECT_EQ(chat.error, "");
  EXPECT_EQ(chat.choices, 2);
  EXPECT_EQ(chat.finish_reasons, "stop,length");
  EXPECT_EQ(chat.prompt_tokens, 12);
  EXPECT_EQ(chat.cached_prompt_tokens, 8);
  EXPECT_EQ(chat.completion_tokens, 8);
  ASSERT_TRUE(chat.time_to_first_token_s.has_value());
  EXPECT_DOUBLE_EQ(*chat.time_to_first_token_s, 0.20);
  EXPECT_EQ(chat.worker, "w1:1,w2:1");
  EXPECT_GE(chat.duration_s, 0);
  const RequestRecord& refused = (*records)[1];
  EXPECT_EQ(refused.status, "UNAUTHENTICATED");
  EXPECT_EQ(refused.error, "bad key");
  EXPECT_EQ(refused.principal, "");
  EXPECT_EQ(refused.choices, 0);
  EXPECT_FALSE(refused.time_to_first_token_s.has_value());
  const RequestRecord& left = (*records)[2];
  EXPECT_EQ(left.status, "CANCELLED");
  EXPECT_EQ(left.principal, "bob");
  EXPECT_EQ(left.principal_kind, "jwt");
}

TEST_F(RequestLifecycleTest, WithContentTheRecordHoldsThePromptAndOutputsCutToTheBudget) {
  auto records = std::make_shared<std::vector<RequestRecord>>();
  RequestLogOptions options;
  options.content_max_bytes = 8;
  std::unique_ptr<RequestLog> log =
      *RequestLog::Start(std::make_unique<CapturingSink>(records), options);
  RequestTracker tracker(&admission_, &metrics_, log.get());
  {
    std::shared_ptr<RequestLifecycle> chat = tracker.Begin("http", "/v1/chat/completions");
    ASSERT_TRUE(chat->collects_content());
    v1::GenerateRequest request;
    v1::ChatMessage* system = request.mutable_chat()->add_messages();
    system->set_role("system");
    system->set_content("be brief");  // 8 bytes: the whole budget
    v1::ChatMessage* user = request.mutable_chat()->add_messages();
    user->set_role("user");
    user->set_content("hello there");
    chat->set_input_content(request);
    chat->AppendOutputText(0, "héllo");  // 6 bytes
    chat->AppendOutputText(0, "wörld");  // 2 bytes left: "w", and "ö" is not cut in two
    chat->Finish(absl::OkStatus());
  }
  {
    RequestTracker plain(&admission_, &metrics_, nullptr);
    EXPECT_FALSE(plain.Begin("http", "/v1/completions")->collects_content());
  }
  ASSERT_TRUE(log->WaitForFlush(absl::Now() + absl::Seconds(30)));
  log.reset();
  ASSERT_EQ(records->size(), 1u);
  const RequestRecord& record = (*records)[0];
  ASSERT_TRUE(record.prompt.has_value() && record.output.has_value());
  EXPECT_EQ(nlohmann::json::parse(*record.prompt),
            nlohmann::json::parse(R"([{"role": "system", "parts": [{"type": "text",
            "content": "be brief"}]}, {"role": "user", "parts": [{"type": "text",
            "content": ""}]}])"));
  EXPECT_EQ(nlohmann::json::parse(*record.output),
            nlohmann::json::parse(R"([{"role": "assistant", "parts": [{"type": "text",
            "content": "héllow"}]}])"));
}

}  // namespace
}  // namespace llmserve::gateway
