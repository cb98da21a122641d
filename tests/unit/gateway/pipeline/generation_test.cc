// Generation (one request on the workers: route, call, retry before the first token, cancel,
// stop strings) against the in-memory FakeWorkerClient: every worker behaviour is scripted.

#include "gateway/pipeline/generation.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gateway/pipeline/query_of_death.h"
#include "gateway/router/worker_call_failure.h"
#include "gtest/gtest.h"
#include "tests/testing/fake_worker_client.h"
#include "tests/testing/simulated_clock.h"

namespace llmserve::gateway {
namespace {

using ::llmserve::testing::FakeCall;
using ::llmserve::testing::FakeModelInfo;
using ::llmserve::testing::FakeWorkerClient;
using ::llmserve::v1::FINISH_REASON_LENGTH;
using ::llmserve::v1::FINISH_REASON_STOP;

constexpr absl::Duration kPatience = absl::Seconds(10);

// What the frontend would see.
class RecordingObserver final : public GenerationObserver {
 public:
  void OnDelta(GenerationDelta delta) override {
    absl::MutexLock lock(&mutex_);
    text_ += delta.text;
    tokens_ += static_cast<int>(delta.tokens.size());
  }
  void OnFinish(const GenerationResult& result) override {
    absl::MutexLock lock(&mutex_);
    ++ends_;
    result_ = result;
    done_.Notify();
  }
  void OnError(const absl::Status& status) override {
    absl::MutexLock lock(&mutex_);
    ++ends_;
    error_ = status;
    done_.Notify();
  }

  bool WaitDone() { return done_.WaitForNotificationWithTimeout(kPatience); }
  bool WaitDoneFor(absl::Duration timeout) { return done_.WaitForNotificationWithTimeout(timeout); }
  std::string text() {
    absl::MutexLock lock(&mutex_);
    return text_;
  }
  int tokens() {
    absl::MutexLock lock(&mutex_);
    return tokens_;
  }
  int ends() {
    absl::MutexLock lock(&mutex_);
    return ends_;
  }
  std::optional<GenerationResult> result() {
    absl::MutexLock lock(&mutex_);
    return result_;
  }
  absl::Status error() {
    absl::MutexLock lock(&mutex_);
    return error_;
  }

 private:
  absl::Notification done_;
  absl::Mutex mutex_;
  std::string text_ ABSL_GUARDED_BY(mutex_);
  int tokens_ ABSL_GUARDED_BY(mutex_) = 0;
  int ends_ ABSL_GUARDED_BY(mutex_) = 0;
  std::optional<GenerationResult> result_ ABSL_GUARDED_BY(mutex_);
  absl::Status error_ ABSL_GUARDED_BY(mutex_);
};

class GenerationTest : public ::testing::Test {
 protected:
  GenerationTest() {
    fake_.AddWorker("a:1", FakeModelInfo("tiny"));
    fake_.AddWorker("b:1", FakeModelInfo("tiny"));
    absl::StatusOr<std::shared_ptr<const ServedModel>> model =
        ServedModel::Create(FakeModelInfo("tiny"));
    model_ = *model;
  }

  // The ids of `text` in the tiny model's tokenizer.
  std::vector<int32_t> Ids(const std::string& text) {
    return *model_->tokenizer()->Encode(text, /*add_special_tokens=*/false);
  }

  PreparedRequest Request(std::vector<std::string> stop_strings = {}) {
    PreparedRequest request{.request_id = "req", .model = model_};
    for (int32_t id : Ids("a prompt of sixteen or so tokens to hash")) {
      request.worker_request.add_prompt_token_ids(id);
    }
    request.worker_request.set_max_tokens(16);
    request.stop_strings = std::move(stop_strings);
    return request;
  }

  std::shared_ptr<Generation> Start(PreparedRequest request, int max_attempts = 3) {
    return Generation::Start(&fake_, std::move(request), {.max_attempts = max_attempts}, observer_);
  }

  FakeWorkerClient fake_;
  std::shared_ptr<const ServedModel> model_;
  std::shared_ptr<RecordingObserver> observer_ = std::make_shared<RecordingObserver>();
};

TEST_F(GenerationTest, StreamsTextAndFinishesWithUsage) {
  std::shared_ptr<Generation> generation = Start(Request());
  std::shared_ptr<FakeCall> call = fake_.WaitForCall(0);
  ASSERT_NE(call, nullptr);
  // The worker gets the prompt under a request id of its own (unique on the worker).
  EXPECT_EQ(static_cast<size_t>(call->request().prompt_token_ids_size()),
            Ids("a prompt of sixteen or so tokens to hash").size());
  EXPECT_NE(call->request().request_id(), "req");
  ASSERT_TRUE(call->Send(Ids("Hello")));
  ASSERT_TRUE(call->Send(Ids(", world"), FINISH_REASON_LENGTH));
  ASSERT_TRUE(observer_->WaitDone());
  EXPECT_EQ(observer_->text(), "Hello, world");
  ASSERT_TRUE(observer_->result().has_value());
  EXPECT_EQ(observer_->result()->finish_reason, FINISH_REASON_LENGTH);
  EXPECT_EQ(observer_->result()->usage.completion_tokens(), observer_->tokens());
  EXPECT_EQ(observer_->result()->worker, call->address());
  EXPECT_TRUE(fake_.reported_failures().empty());
}

TEST_F(GenerationTest, LatenciesFollowTheGenerationsClock) {
  ::llmserve::testing::SimulatedClock clock;
  std::shared_ptr<Generation> generation =
      Generation::Start(&fake_, Request(), {.clock = &clock}, observer_);
  std::shared_ptr<FakeCall> call = fake_.WaitForCall(0);
  ASSERT_NE(call, nullptr);
  clock.Advance(absl::Milliseconds(1500));
  ASSERT_TRUE(call->Send(Ids("Hello")));
  // Messages are delivered on the fake's own thread: the first is read before the clock moves.
  const absl::Time deadline = absl::Now() + kPatience;
  while (observer_->tokens() == 0 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
  clock.Advance(absl::Milliseconds(500));
  ASSERT_TRUE(call->Send(Ids(", world"), FINISH_REASON_LENGTH));
  ASSERT_TRUE(observer_->WaitDone());
  ASSERT_TRUE(observer_->result().has_value());
  EXPECT_DOUBLE_EQ(observer_->result()->timing.time_to_first_token_s(), 1.5);
  EXPECT_DOUBLE_EQ(observer_->result()->timing.total_s(), 2);
}

TEST_F(GenerationTest, AFailureBeforeTheFirstTokenIsRetriedOnAnotherWorker) {
  std::shared_ptr<Generation> generation = Start(Request());
  std::shared_ptr<FakeCall> first = fake_.WaitForCall(0);
  ASSERT_NE(first, nullptr);
  ASSERT_TRUE(first->Finish(absl::UnavailableError("connection reset")));
  std::shared_ptr<FakeCall> second = fake_.WaitForCall(1);
  ASSERT_NE(second, nullptr);
  EXPECT_NE(second->address(), first->address());
  // The failed worker is reported (marked down until probed); the prompt was hashed once.
  EXPECT_EQ(fake_.reported_failures(), std::vector<std::string>{first->address()});
  EXPECT_EQ(fake_.last_hash_passes(), 1);
  ASSERT_TRUE(second->Send(Ids("ok"), FINISH_REASON_STOP));
  ASSERT_TRUE(observer_->WaitDone());
  EXPECT_EQ(observer_->text(), "ok");
  EXPECT_EQ(observer_->result()->worker, second->address());
  EXPECT_EQ(observer_->ends(), 1);
}

// Keeps exported spans.
class SpanLog final : public common::tracing::SpanExporter {
 public:
  explicit SpanLog(std::shared_ptr<std::vector<common::tracing::SpanData>> spans)
      : spans_(std::move(spans)) {}
  absl::Status Export(absl::Span<const common::tracing::SpanData> spans) override {
    absl::MutexLock lock(&mutex_);
    spans_->insert(spans_->end(), spans.begin(), spans.end());
    return absl::OkStatus();
  }
  std::string Describe() const override { return "memory"; }

 private:
  absl::Mutex mutex_;
  std::shared_ptr<std::vector<common::tracing::SpanData>> spans_;
};

TEST_F(GenerationTest, EachAttemptIsAClientSpanWhoseContextTheWorkerGets) {
  auto spans = std::make_shared<std::vector<common::tracing::SpanData>>();
  std::unique_ptr<common::tracing::Tracer> tracer =
      *common::tracing::Tracer::Start(std::make_unique<SpanLog>(spans), {});
  const common::tracing::Span request_span =
      tracer->StartSpan("chat tiny", common::tracing::SpanKind::kServer, std::nullopt);
  std::shared_ptr<Generation> generation = Generation::Start(
      &fake_, Request(), {.tracer = tracer.get(), .parent_span = request_span}, observer_);
  std::shared_ptr<FakeCall> first = fake_.WaitForCall(0);
  ASSERT_NE(first, nullptr);
  ASSERT_TRUE(first->Finish(absl::UnavailableError("connection reset")));
  std::shared_ptr<FakeCall> second = fake_.WaitForCall(1);
  ASSERT_NE(second, nullptr);
  ASSERT_TRUE(second->Send(Ids("ok"), FINISH_REASON_STOP));
  ASSERT_TRUE(observer_->WaitDone());
  generation.reset();
  ASSERT_TRUE(tracer->WaitForFlush(absl::Now() + kPatience));
  ASSERT_EQ(spans->size(), 2u);
  for (int i = 0; i < 2; ++i) {
    const common::tracing::SpanData& attempt = (*spans)[i];
    const std::shared_ptr<FakeCall>& call = i == 0 ? first : second;
    EXPECT_EQ(attempt.kind, common::tracing::SpanKind::kClient);
    EXPECT_EQ(attempt.context.trace_id, request_span.context().trace_id);
    EXPECT_EQ(attempt.parent_span_id, request_span.context().span_id);
    // The worker's span will be the attempt's child.
    EXPECT_EQ(call->traceparent(), common::tracing::FormatTraceParent(attempt.context));
  }
  EXPECT_TRUE((*spans)[0].error);
  EXPECT_FALSE((*spans)[1].error);
}

TEST_F(GenerationTest, WithoutATracerTheCallersContextGoesToTheWorkerAsItIs) {
  const common::tracing::TraceContext caller =
      *common::tracing::ParseTraceParent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  std::shared_ptr<Generation> generation = Generation::Start(
      &fake_, Request(), {.parent_span = common::tracing::Span::Unrecorded(caller)}, observer_);
  std::shared_ptr<FakeCall> call = fake_.WaitForCall(0);
  ASSERT_NE(call, nullptr);
  EXPECT_EQ(call->traceparent(), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  ASSERT_TRUE(call->Send(Ids("ok"), FINISH_REASON_STOP));
  ASSERT_TRUE(observer_->WaitDone());
  // No trace at all: no traceparent.
  auto plain_observer = std::make_shared<RecordingObserver>();
  std::shared_ptr<Generation> plain_generation =
      Generation::Start(&fake_, Request(), {}, plain_observer);
  std::shared_ptr<FakeCall> plain = fake_.WaitForCall(1);
  ASSERT_NE(plain, nullptr);
  EXPECT_EQ(plain->traceparent(), "");
  // Ended, so that the generation and its call let go of each other.
  ASSERT_TRUE(plain->Send(Ids("ok"), FINISH_REASON_STOP));
  ASSERT_TRUE(plain_observer->WaitDone());
}

TEST_F(GenerationTest, AnOverloadedWorkerIsSkippedButNotMarkedDown) {
  std::shared_ptr<Generation> generation = Start(Request());
  std::shared_ptr<FakeCall> first = fake_.WaitForCall(0);
  ASSERT_NE(first, nullptr);
  ASSERT_TRUE(first->Finish(absl::ResourceExhaustedError("queue full")));
  std::shared_ptr<FakeCall> second = fake_.WaitForCall(1);
  ASSERT_NE(second, nullptr);
  EXPECT_NE(second->address(), first->address());
  EXPECT_TRUE(fake_.reported_failures().empty());
  ASSERT_TRUE(second->Send(Ids("x"), FINISH_REASON_STOP));
  ASSERT_TRUE(observer_->WaitDone());
  EXPECT_TRUE(observer_->result().has_value());
}

TEST_F(GenerationTest, AFailureAfterTheFirstTokenIsNeverRetried) {
  std::shared_ptr<Generation> generation = Start(Request());
  std::shared_ptr<FakeCall> call = fake_.WaitForCall(0);
  ASSERT_NE(call, nullptr);
  ASSERT_TRUE(call->Send(Ids("partial")));
  ASSERT_TRUE(call->Finish(absl::UnavailableError("worker died")));
  ASSERT_TRUE(observer_->WaitDone());
  // A retry would repeat text the client already has: the error says how far it got instead.
  EXPECT_EQ(observer_->error().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(observer_->error().message().find(absl::StrCat("failed after ", observer_->tokens(),
                                                           " generated tokens: worker died")),
            absl::string_view::npos)
      << observer_->error();
  EXPECT_EQ(fake_.calls_started(), 1u);
}

TEST_F(GenerationTest, ARequestErrorIsFinalAndAttemptsAreBounded) {
  {
    std::shared_ptr<Generation> generation = Start(Request());
    ASSERT_TRUE(fake_.WaitForCall(0)->Finish(absl::InvalidArgumentError("max_tokens too large")));
    ASSERT_TRUE(observer_->WaitDone());
    EXPECT_EQ(observer_->error(), absl::InvalidArgumentError("max_tokens too large"));
    EXPECT_EQ(fake_.calls_started(), 1u);
  }
  // Two attempts allowed, both fail: the second failure is the answer.
  auto observer = std::make_shared<RecordingObserver>();
  std::shared_ptr<Generation> generation =
      Generation::Start(&fake_, Request(), {.max_attempts = 2}, observer);
  ASSERT_TRUE(fake_.WaitForCall(1)->Finish(absl::UnavailableError("first")));
  ASSERT_TRUE(fake_.WaitForCall(2)->Finish(absl::UnavailableError("second")));
  ASSERT_TRUE(observer->WaitDone());
  EXPECT_EQ(observer->error(), absl::UnavailableError("second"));
  EXPECT_EQ(fake_.calls_started(), 3u);
}

TEST_F(GenerationTest, RunningOutOfWorkersSaysHowManyAttemptsFailed) {
  fake_.SetReady("b:1", false);
  std::shared_ptr<Generation> generation = Start(Request());
  ASSERT_TRUE(fake_.WaitForCall(0)->Finish(absl::UnavailableError("reset")));
  ASSERT_TRUE(observer_->WaitDone());
  EXPECT_EQ(observer_->error().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(observer_->error().message().find("left to try (after 1 failed attempts)"),
            absl::string_view::npos)
      << observer_->error();
}

TEST_F(GenerationTest, AnUnknownModelIsNotFoundWithoutACall) {
  PreparedRequest request = Request();
  request.model = *ServedModel::Create(FakeModelInfo("other"));
  std::shared_ptr<Generation> generation = Start(std::move(request));
  ASSERT_TRUE(observer_->WaitDone());
  EXPECT_EQ(observer_->error().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(fake_.calls_started(), 0u);
}

TEST_F(GenerationTest, CancelReachesTheWorkerCall) {
  std::shared_ptr<Generation> generation = Start(Request());
  std::shared_ptr<FakeCall> call = fake_.WaitForCall(0);
  ASSERT_NE(call, nullptr);
  ASSERT_TRUE(call->Send(Ids("some")));
  generation->Cancel();
  EXPECT_TRUE(call->WaitUntilCancelled(kPatience));
  ASSERT_TRUE(observer_->WaitDone());
  EXPECT_EQ(observer_->error().code(), absl::StatusCode::kCancelled);
  // Nothing the worker sends after the cancel reaches the client; nothing is retried.
  EXPECT_FALSE(call->Send(Ids("more"), FINISH_REASON_STOP));
  EXPECT_EQ(fake_.calls_started(), 1u);
  EXPECT_EQ(observer_->ends(), 1);
}

TEST_F(GenerationTest, ACancelDuringARetryStartsNoNewCall) {
  std::shared_ptr<Generation> generation = Start(Request());
  std::shared_ptr<FakeCall> first = fake_.WaitForCall(0);
  ASSERT_NE(first, nullptr);
  generation->Cancel();
  ASSERT_TRUE(first->WaitUntilCancelled(kPatience));
  ASSERT_TRUE(observer_->WaitDone());
  EXPECT_EQ(observer_->error().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(fake_.calls_started(), 1u);
  EXPECT_TRUE(fake_.reported_failures().empty());
}

// A request whose LoRA adapter is being loaded on demand ends at once when cancelled (the load
// may take up to --lora_load_timeout); the load's later answer starts no call.
TEST_F(GenerationTest, ACancelWhileItsAdapterLoadsEndsAtOnce) {
  fake_.AddWorker("r:1", ::llmserve::testing::FakeLoraModelInfo("tiny", 4, {}, true));
  fake_.SetLoraAnswer([](const ::llmserve::testing::FakeLoraCall&) { return absl::OkStatus(); });
  LoraAdapterManager manager(&fake_, absl::Seconds(30));
  absl::Notification loaded;
  manager.Load({.name = "sql", .path = "/p", .base_model = "tiny"},
               [&](absl::StatusOr<LoraAdapterChangeResult> result) {
                 EXPECT_TRUE(result.ok()) << result.status();
                 loaded.Notify();
               });
  ASSERT_TRUE(loaded.WaitForNotificationWithTimeout(kPatience));
  // The worker lost it; the next load is held.
  absl::Notification dropped;
  fake_.UnloadLoraAdapter("r:1", "sql", absl::InfiniteFuture(),
                          [&](absl::Status) { dropped.Notify(); });
  ASSERT_TRUE(dropped.WaitForNotificationWithTimeout(kPatience));
  fake_.SetLoraAnswer(nullptr);
  PreparedRequest request = Request();
  request.worker_request.set_lora_adapter("sql");
  std::shared_ptr<Generation> generation =
      Generation::Start(&fake_, std::move(request), {.lora_adapters = &manager}, observer_);
  ASSERT_TRUE(fake_.WaitForLoraCall(2));
  EXPECT_FALSE(observer_->WaitDoneFor(absl::Milliseconds(50)));
  generation->Cancel();
  ASSERT_TRUE(observer_->WaitDone());
  EXPECT_EQ(observer_->error().code(), absl::StatusCode::kCancelled);
  fake_.AnswerLoraCall(2, absl::OkStatus());
  // The answer lands on the fake's delivery thread; a call would follow it there at once.
  EXPECT_EQ(fake_.WaitForCall(0, absl::Milliseconds(200)), nullptr);
  EXPECT_EQ(observer_->ends(), 1);
}

TEST_F(GenerationTest, AStopStringEndsTheRequestAndCancelsTheWorker) {
  std::shared_ptr<Generation> generation = Start(Request({"STOP"}));
  std::shared_ptr<FakeCall> call = fake_.WaitForCall(0);
  ASSERT_NE(call, nullptr);
  ASSERT_TRUE(call->Send(Ids("one two ")));
  ASSERT_TRUE(call->Send(Ids("STOP three")));
  ASSERT_TRUE(observer_->WaitDone());
  EXPECT_EQ(observer_->text(), "one two ");
  ASSERT_TRUE(observer_->result().has_value());
  EXPECT_EQ(observer_->result()->finish_reason, FINISH_REASON_STOP);
  EXPECT_EQ(observer_->result()->matched_stop, "STOP");
  // The worker would go on generating: the gateway stops it, which frees its blocks.
  EXPECT_TRUE(call->WaitUntilCancelled(kPatience));
  EXPECT_EQ(observer_->ends(), 1);
}

TEST_F(GenerationTest, ConcurrentRequestsSpreadOverIdleWorkers) {
  // The gateway counts its own open calls as load: requests that arrive together spread even
  // though no load report says the first worker got busy.
  std::vector<std::shared_ptr<RecordingObserver>> observers;
  std::vector<std::shared_ptr<Generation>> generations;
  for (int i = 0; i < 8; ++i) {
    observers.push_back(std::make_shared<RecordingObserver>());
    generations.push_back(Generation::Start(&fake_, Request(), {}, observers.back()));
  }
  absl::flat_hash_map<std::string, int> per_worker;
  for (int i = 0; i < 8; ++i) {
    std::shared_ptr<FakeCall> call = fake_.WaitForCall(i);
    ASSERT_NE(call, nullptr);
    ++per_worker[call->address()];
  }
  EXPECT_EQ(per_worker["a:1"], 4);
  EXPECT_EQ(per_worker["b:1"], 4);
  for (int i = 0; i < 8; ++i) fake_.WaitForCall(i)->Send({}, FINISH_REASON_STOP);
  for (const auto& observer : observers) ASSERT_TRUE(observer->WaitDone());
}

// Query-of-death protection (query_of_death.h): a worker that went away while running the request
// (the fake's call ends with WorkerConnectionLost, as WorkerPool's does when the connection
// breaks) is not tried again, and identical requests are then refused without any worker call.
class QueryOfDeathGenerationTest : public GenerationTest {
 protected:
  std::shared_ptr<Generation> StartGuarded(PreparedRequest request,
                                           std::shared_ptr<RecordingObserver> observer) {
    return Generation::Start(&fake_, std::move(request),
                             {.max_attempts = 3, .query_of_death = &guard_}, observer);
  }
  static absl::Status Lost(const std::string& address) {
    return WorkerConnectionLost(address, "Socket closed");
  }

  QueryOfDeathOptions options_{.crash_retries = 0, .quarantine = absl::Minutes(5)};
  QueryOfDeathGuard guard_{options_, nullptr};
};

TEST_F(QueryOfDeathGenerationTest, ARequestThatKillsItsWorkerIsNotRetriedAndThenRefused) {
  std::shared_ptr<Generation> generation = StartGuarded(Request(), observer_);
  std::shared_ptr<FakeCall> call = fake_.WaitForCall(0);
  ASSERT_NE(call, nullptr);
  ASSERT_TRUE(call->Finish(Lost(call->address())));
  ASSERT_TRUE(observer_->WaitDone());
  EXPECT_EQ(observer_->error().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(observer_->error().message().find("failed while running this request"),
            absl::string_view::npos)
      << observer_->error();
  EXPECT_EQ(fake_.calls_started(), 1u);
  EXPECT_EQ(fake_.reported_failures(), std::vector<std::string>{call->address()});
  EXPECT_EQ(guard_.quarantined(), 1u);

  // The same request again (another request id): refused before any worker call.
  auto again = std::make_shared<RecordingObserver>();
  PreparedRequest same = Request();
  same.request_id = "another";
  std::shared_ptr<Generation> second = StartGuarded(std::move(same), again);
  ASSERT_TRUE(again->WaitDone());
  EXPECT_EQ(again->error().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(again->error().message().find("identical request"), absl::string_view::npos)
      << again->error();
  EXPECT_EQ(fake_.calls_started(), 1u);

  // A different request still goes to a worker.
  auto different = std::make_shared<RecordingObserver>();
  PreparedRequest other = Request();
  other.worker_request.set_max_tokens(15);
  std::shared_ptr<Generation> third = StartGuarded(std::move(other), different);
  std::shared_ptr<FakeCall> served = fake_.WaitForCall(1);
  ASSERT_NE(served, nullptr);
  ASSERT_TRUE(served->Send(Ids("ok"), FINISH_REASON_STOP));
  ASSERT_TRUE(different->WaitDone());
  EXPECT_TRUE(different->result().has_value());
}

TEST_F(QueryOfDeathGenerationTest, ADrainingRefusalOrOverloadIsStillRetried) {
  fake_.AddWorker("c:1", FakeModelInfo("tiny"));
  std::shared_ptr<Generation> generation = StartGuarded(Request(), observer_);
  ASSERT_TRUE(fake_.WaitForCall(0)->Finish(absl::UnavailableError(
      "the worker is draining (shutting down) and accepts no new requests")));
  ASSERT_TRUE(fake_.WaitForCall(1)->Finish(absl::ResourceExhaustedError("queue full")));
  std::shared_ptr<FakeCall> third = fake_.WaitForCall(2);
  ASSERT_NE(third, nullptr);
  ASSERT_TRUE(third->Send(Ids("ok"), FINISH_REASON_STOP));
  ASSERT_TRUE(observer_->WaitDone());
  EXPECT_TRUE(observer_->result().has_value());
  EXPECT_EQ(guard_.quarantined(), 0u);
}

TEST_F(QueryOfDeathGenerationTest, AWorkerThatDiesAfterTheFirstTokenQuarantinesTheRequest) {
  std::shared_ptr<Generation> generation = StartGuarded(Request(), observer_);
  std::shared_ptr<FakeCall> call = fake_.WaitForCall(0);
  ASSERT_NE(call, nullptr);
  ASSERT_TRUE(call->Send(Ids("partial")));
  ASSERT_TRUE(call->Finish(Lost(call->address())));
  ASSERT_TRUE(observer_->WaitDone());
  EXPECT_NE(observer_->error().message().find("failed after"), absl::string_view::npos)
      << observer_->error();
  EXPECT_EQ(guard_.quarantined(), 1u);
}

TEST_F(QueryOfDeathGenerationTest, WithOneCrashRetryTheSecondWorkerIsTheLast) {
  QueryOfDeathGuard lenient({.crash_retries = 1, .quarantine = absl::Minutes(5)}, nullptr);
  fake_.AddWorker("c:1", FakeModelInfo("tiny"));
  std::shared_ptr<Generation> generation = Generation::Start(
      &fake_, Request(), {.max_attempts = 3, .query_of_death = &lenient}, observer_);
  std::shared_ptr<FakeCall> first = fake_.WaitForCall(0);
  ASSERT_NE(first, nullptr);
  ASSERT_TRUE(first->Finish(Lost(first->address())));
  std::shared_ptr<FakeCall> second = fake_.WaitForCall(1);
  ASSERT_NE(second, nullptr);
  EXPECT_NE(second->address(), first->address());
  EXPECT_EQ(lenient.quarantined(), 0u);
  ASSERT_TRUE(second->Finish(Lost(second->address())));
  ASSERT_TRUE(observer_->WaitDone());
  EXPECT_EQ(observer_->error().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(observer_->error().message().find("not retried again"), absl::string_view::npos)
      << observer_->error();
  EXPECT_EQ(fake_.calls_started(), 2u);
  EXPECT_EQ(lenient.quarantined(), 1u);
}

}  // namespace
}  // namespace llmserve::gateway
