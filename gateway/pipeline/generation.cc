#include "gateway/pipeline/generation.h"

#include <atomic>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gateway/pipeline/reasoning_observer.h"
#include "gateway/pipeline/request_fingerprint.h"
#include "gateway/pipeline/retry_policy.h"
#include "gateway/pipeline/tool_call_observer.h"
#include "gateway/router/worker_call_failure.h"

namespace llmserve::gateway {
namespace {

// Worker request ids must be unique on the worker; clients' ids need not be.
std::string WorkerRequestId(const std::string& request_id) {
  static std::atomic<uint64_t> counter{0};
  return absl::StrCat(request_id.substr(0, 100), "#", counter++);
}

}  // namespace

class Generation::Attempt final : public WorkerCallObserver {
 public:
  Attempt(std::shared_ptr<Generation> owner, std::string address, common::tracing::Span span)
      : owner_(std::move(owner)), address_(std::move(address)), span_(std::move(span)) {}
  // A span left open ends with its attempt (a call never started, a generation torn down).
  ~Attempt() override { span_.End(); }

  void OnMessage(const worker::v1::GenerateResponse& message) override {
    if (message.tokens_size() > 0 && !received_tokens_) {
      received_tokens_ = true;
      span_.AddEvent("first_token");
    }
    owner_->OnWorkerMessage(this, message);
  }
  void OnDone(const absl::Status& status) override { owner_->OnWorkerDone(this, status); }

  const std::string& address() const { return address_; }
  bool received_tokens() const { return received_tokens_; }
  const common::tracing::Span& span() const { return span_; }

 private:
  const std::shared_ptr<Generation> owner_;
  const std::string address_;
  const common::tracing::Span span_;
  // Touched only from the call's callbacks (serialized).
  bool received_tokens_ = false;
};

std::shared_ptr<Generation> Generation::Start(WorkerClient* workers, PreparedRequest request,
                                              const GenerationOptions& options,
                                              std::shared_ptr<GenerationObserver> observer) {
  if (request.tool_calling.has_value()) {
    observer = WithToolCallParsing(std::move(observer), *request.tool_calling);
  }
  // Outermost: the tool-call parsing reads only the content after the reasoning.
  if (request.reasoning.has_value()) {
    observer = WithReasoningParsing(std::move(observer), *request.reasoning);
  }
  std::shared_ptr<Generation> generation(
      new Generation(workers, std::move(request), options, std::move(observer)));
  if (options.query_of_death != nullptr) {
    // Refused before any worker is touched.
    if (absl::Status refused = options.query_of_death->Check(generation->fingerprint_,
                                                             generation->request_.request_id);
        !refused.ok()) {
      generation->Fail(refused);
      return generation;
    }
  }
  generation->StartAttempt();
  return generation;
}

Generation::Generation(WorkerClient* workers, PreparedRequest request,
                       const GenerationOptions& options,
                       std::shared_ptr<GenerationObserver> observer)
    : in_flight_(options.in_flight != nullptr ? options.in_flight->Enter()
                                              : InFlightCount::Guard()),
      workers_(workers),
      request_(std::move(request)),
      options_(options),
      prompt_hashes_(absl::MakeConstSpan(request_.worker_request.prompt_token_ids().data(),
                                         request_.worker_request.prompt_token_ids_size()),
                     options_.cache_salt, request_.worker_request.lora_adapter()),
      observer_(std::move(observer)),
      fingerprint_(RequestFingerprint(request_.model->name(), request_.worker_request)),
      stop_matcher_(request_.stop_strings) {
  if (request_.model->tokenizer() != nullptr) {
    const auto& prompt = request_.worker_request.prompt_token_ids();
    detokenizer_.emplace(request_.model->tokenizer(),
                         absl::MakeConstSpan(prompt.data(), prompt.size()),
                         request_.skip_special_tokens);
  }
}

void Generation::Cancel() {
  bool awaiting_adapter = false;
  {
    absl::MutexLock lock(&mutex_);
    cancelled_ = true;
    if (call_ != nullptr) call_->Cancel();
    awaiting_adapter = awaiting_adapter_;
  }
  // No call to cancel yet: an adapter load may take long, the client should not wait for it.
  if (awaiting_adapter) Fail(absl::CancelledError("the request was cancelled"));
}

void Generation::StartAttempt() {
  ++attempts_;
  const std::string& adapter = request_.worker_request.lora_adapter();
  if (adapter.empty() || options_.lora_adapters == nullptr) return RouteAttempt();
  bool cancelled = false;
  {
    absl::MutexLock lock(&mutex_);
    cancelled = cancelled_;
    awaiting_adapter_ = !cancelled;
  }
  if (cancelled) return Fail(absl::CancelledError("the request was cancelled"));
  options_.lora_adapters->EnsureLoaded(
      request_.model->base_name(), adapter, excluded_,
      [self = shared_from_this()](absl::Status loaded) {
        bool cancelled = false;
        {
          absl::MutexLock lock(&self->mutex_);
          self->awaiting_adapter_ = false;
          cancelled = self->cancelled_;
        }
        // A cancel while it loaded ended the generation already (Fail is once only).
        if (cancelled) return self->Fail(absl::CancelledError("the request was cancelled"));
        if (!loaded.ok()) return self->Fail(loaded);
        self->RouteAttempt();
      });
}

void Generation::RouteAttempt() {
  absl::StatusOr<RoutedWorker> routed =
      workers_->Route(request_.model->base_name(), prompt_hashes_, excluded_);
  if (!routed.ok()) {
    if (excluded_.empty()) return Fail(routed.status());
    return Fail(absl::Status(
        routed.status().code(),
        absl::StrCat(routed.status().message(), " (after ", attempts_ - 1, " failed attempts)")));
  }
  if (options_.metrics != nullptr) {
    options_.metrics->OnRoutingDecision(RoutingPolicyName(workers_->routing_policy()),
                                        routed->decision.reason);
  }
  worker::v1::GenerateRequest request = request_.worker_request;
  request.set_request_id(WorkerRequestId(request_.request_id));
  request.set_cache_salt(options_.cache_salt);
  // One client span per attempt, so that a retried request shows every worker it tried.
  common::tracing::Span span = common::tracing::StartChildSpan(
      options_.tracer, options_.parent_span, absl::StrCat("generate ", request_.model->name()),
      common::tracing::SpanKind::kClient);
  if (span.recording()) {
    const size_t colon = routed->address.rfind(':');
    span.SetAttribute("server.address", routed->address.substr(0, colon));
    int64_t port = 0;
    if (colon != std::string::npos && absl::SimpleAtoi(routed->address.substr(colon + 1), &port)) {
      span.SetAttribute("server.port", port);
    }
    span.SetAttribute("llmserve.attempt", int64_t{attempts_});
    span.SetAttribute("llmserve.routing.policy",
                      std::string(RoutingPolicyName(workers_->routing_policy())));
    span.SetAttribute("llmserve.routing.reason", routed->decision.reason);
    span.SetAttribute("gen_ai.request.model", request_.model->name());
  }
  WorkerCallOptions call_options{.deadline = options_.deadline};
  if (span.has_context()) {
    call_options.traceparent = common::tracing::FormatTraceParent(span.context());
    call_options.tracestate = span.context().trace_state;
  }
  std::unique_ptr<WorkerCall> call = workers_->NewCall(
      *routed, std::move(request), call_options,
      std::make_shared<Attempt>(shared_from_this(), routed->address, std::move(span)));
  bool cancelled = false;
  {
    absl::MutexLock lock(&mutex_);
    cancelled = cancelled_;
    if (!cancelled) call_ = call.get();
  }
  if (cancelled) {
    call.reset();  // never started: destroyed here, with its attempt
    return Fail(absl::CancelledError("the request was cancelled"));
  }
  call.release()->Start();  // owns itself from here
}

::llmserve::v1::GeneratedToken Generation::ToPublicToken(
    const worker::v1::GeneratedToken& token) const {
  ::llmserve::v1::GeneratedToken out;
  out.set_token_id(token.token_id());
  if (token.has_logprob()) out.set_logprob(token.logprob());
  for (const worker::v1::TokenLogprob& alternative : token.top_logprobs()) {
    ::llmserve::v1::TokenLogprob* top = out.add_top_logprobs();
    top->set_token_id(alternative.token_id());
    top->set_logprob(alternative.logprob());
    top->set_text(request_.model->TokenText(alternative.token_id()));
  }
  const common::tokenizer::Tokenizer* tokenizer = request_.model->tokenizer();
  out.set_special(tokenizer != nullptr && tokenizer->IsSpecial(token.token_id()));
  return out;
}

void Generation::OnWorkerMessage(Attempt* attempt, const worker::v1::GenerateResponse& message) {
  {
    absl::MutexLock lock(&mutex_);
    if (done_) return;
  }
  const absl::Time now = clock_->Now();
  const bool finished = message.finish_reason() != ::llmserve::v1::FINISH_REASON_UNSPECIFIED;
  if (options_.metrics != nullptr && message.tokens_size() > 0) {
    if (completion_tokens_ == 0) {
      options_.metrics->OnFirstToken(options_.api, absl::ToDoubleSeconds(now - start_));
    } else {
      options_.metrics->OnInterToken(options_.api, message.tokens_size(),
                                     absl::ToDoubleSeconds(now - last_token_time_));
    }
  }
  if (message.tokens_size() > 0) last_token_time_ = now;
  GenerationDelta delta;
  std::optional<std::string> matched;
  // Token by token, so that a stop string ends the count at the token that completed it (the
  // worker may have sent more in the same message): usage stays exact.
  for (const worker::v1::GeneratedToken& token : message.tokens()) {
    if (completion_tokens_++ == 0) first_token_time_ = now;
    delta.tokens.push_back(ToPublicToken(token));
    if (!detokenizer_.has_value()) continue;
    absl::StatusOr<std::string> piece = detokenizer_->Step(token.token_id());
    StopMatcher::Step step = stop_matcher_.Add(piece.ok() ? *piece : std::string());
    delta.text += step.text;
    if (step.matched.has_value()) {
      matched = std::move(step.matched);
      break;
    }
  }
  if (finished && !matched.has_value() && detokenizer_.has_value()) {
    absl::StatusOr<std::string> rest = detokenizer_->Flush();
    StopMatcher::Step step = stop_matcher_.Add(rest.ok() ? *rest : std::string());
    delta.text += step.text;
    matched = std::move(step.matched);
    if (!matched.has_value()) delta.text += stop_matcher_.Flush();
  }
  if (!delta.text.empty() || !delta.tokens.empty()) observer_->OnDelta(std::move(delta));
  const std::optional<std::string>& stop_string = matched;

  GenerationResult result;
  result.worker = attempt->address();
  result.usage.set_prompt_tokens(request_.worker_request.prompt_token_ids_size());
  result.usage.set_completion_tokens(completion_tokens_);
  result.timing.set_time_to_first_token_s(first_token_time_ == absl::InfinitePast()
                                              ? 0
                                              : absl::ToDoubleSeconds(first_token_time_ - start_));
  result.timing.set_total_s(absl::ToDoubleSeconds(now - start_));
  if (stop_string.has_value()) {
    // The worker would go on: stop it (this frees its blocks) and finish here. The call is alive:
    // this is one of its callbacks, and its OnDone comes after.
    {
      absl::MutexLock lock(&mutex_);
      if (call_ != nullptr) call_->Cancel();
    }
    result.finish_reason = ::llmserve::v1::FINISH_REASON_STOP;
    result.matched_stop = *stop_string;
    return Complete(std::move(result));
  }
  if (!finished) return;
  result.finish_reason = message.finish_reason();
  result.usage.set_cached_prompt_tokens(message.usage().cached_prompt_tokens());
  result.timing.set_queue_s(message.timing().queue_s());
  result.embedding.assign(message.embedding().begin(), message.embedding().end());
  if (result.finish_reason == ::llmserve::v1::FINISH_REASON_STOP && message.tokens_size() > 0) {
    const int32_t last = message.tokens(message.tokens_size() - 1).token_id();
    for (int32_t stop_id : request_.worker_request.stop_token_ids()) {
      if (stop_id == last) result.matched_stop = absl::StrCat(last);
    }
  }
  Complete(std::move(result));
}

void Generation::OnWorkerDone(Attempt* attempt, const absl::Status& status) {
  bool cancelled = false;
  bool done = false;
  {
    absl::MutexLock lock(&mutex_);
    // Attempts run one after another: the call that ends is the current one.
    call_ = nullptr;
    done = done_;
    cancelled = cancelled_;
  }
  // A call that ended the generation, or was stopped by it (a stop string), did its job.
  if (!status.ok() && !done) {
    attempt->span().SetError(absl::StatusCodeToString(status.code()), status.message());
  }
  attempt->span().End();
  if (done) return;
  if (cancelled) return Fail(absl::CancelledError("the request was cancelled"));
  if (status.ok()) {
    return Fail(absl::UnavailableError(absl::StrCat("the worker ", attempt->address(),
                                                    " ended the stream without a finish reason")));
  }
  const std::string& adapter = request_.worker_request.lora_adapter();
  if (absl::IsNotFound(status) && !adapter.empty() && !attempt->received_tokens() &&
      options_.lora_adapters != nullptr && !adapter_missing_seen_) {
    // The worker lost the request's adapter since its last load report said it had it (a
    // restart, an unload behind this gateway's back): routing learns it, and the next attempt
    // goes to a worker that has it or loads it on demand (this worker too: it is not excluded).
    adapter_missing_seen_ = true;
    workers_->OnLoraAdapterMissing(attempt->address(), adapter);
    if (attempts_ < options_.max_attempts) return StartAttempt();
  }
  QueryOfDeathGuard* const guard = options_.query_of_death;
  const bool crashed = IsWorkerConnectionLost(status);
  if (crashed) ++crashes_;
  const RetryVerdict verdict =
      DecideRetry({.status = status,
                   .received_tokens = attempt->received_tokens(),
                   .attempts = attempts_,
                   .crashes = crashes_},
                  {.max_attempts = options_.max_attempts,
                   .crash_retries = guard == nullptr ? 0 : guard->crash_retries()});
  if (verdict.report_failure) {
    workers_->ReportFailure(attempt->address(), std::string(status.message()));
  }
  if (verdict.worker_crashed && guard != nullptr) {
    guard->OnWorkerCrash(fingerprint_, request_.request_id, attempt->address(),
                         WorkerConnectionLostCause(status), verdict.retry);
  }
  if (verdict.retry) {
    excluded_.insert(attempt->address());
    return StartAttempt();
  }
  // Said to the client, so that it knows not to resend the request as it is.
  const std::string crash_note =
      !verdict.worker_crashed ? std::string()
      : guard != nullptr      ? absl::StrCat("; ", guard->GiveUpMessage())
                              : std::string(
                                    "; the worker failed while running this request (its connection "
                                         "dropped), so the request is not retried on another worker");
  if (attempt->received_tokens() && absl::IsInvalidArgument(status)) {
    // The worker judged the request itself at fault mid-generation (a constraint past its
    // per-token work budget): the client's error, said as such, not the worker's.
    return Fail(status);
  }
  if (attempt->received_tokens()) {
    return Fail(absl::UnavailableError(
        absl::StrCat("the worker ", attempt->address(), " failed after ", completion_tokens_,
                     " generated tokens: ", status.message(), crash_note)));
  }
  if (verdict.worker_crashed) {
    return Fail(absl::UnavailableError(absl::StrCat(status.message(), crash_note)));
  }
  Fail(status);
}

void Generation::Fail(const absl::Status& status) {
  {
    absl::MutexLock lock(&mutex_);
    if (done_) return;
    done_ = true;
  }
  observer_->OnError(status);
}

void Generation::Complete(GenerationResult result) {
  {
    absl::MutexLock lock(&mutex_);
    if (done_) return;
    done_ = true;
  }
  observer_->OnFinish(result);
}

}  // namespace llmserve::gateway
