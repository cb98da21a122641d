#include "gateway/api/generation.h"

#include <atomic>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/status/grpc_status.h"

namespace llmserve::gateway {
namespace {

// Codes after which another worker may well succeed (the request never reached a token).
bool Retryable(grpc::StatusCode code) {
  return code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::UNKNOWN ||
         code == grpc::StatusCode::INTERNAL || code == grpc::StatusCode::RESOURCE_EXHAUSTED ||
         code == grpc::StatusCode::ABORTED;
}

std::atomic<int> live_generations{0};

// Worker request ids must be unique on the worker; clients' ids need not be.
std::string WorkerRequestId(const std::string& request_id) {
  static std::atomic<uint64_t> counter{0};
  return absl::StrCat(request_id.substr(0, 100), "#", counter++);
}

}  // namespace

class Generation::WorkerCall final : public grpc::ClientReadReactor<worker::v1::GenerateResponse>,
                                     public WatchedCall {
 public:
  WorkerCall(std::shared_ptr<Generation> owner, RoutedWorker worker,
             worker::v1::GenerateRequest request, absl::Time deadline)
      : owner_(std::move(owner)),
        worker_(std::move(worker)),
        request_(std::move(request)),
        stub_(worker::v1::Worker::NewStub(worker_.channel)) {
    if (deadline != absl::InfiniteFuture()) context_.set_deadline(absl::ToChronoTime(deadline));
  }

  void Start() {
    Touch();
    owner_->pool_->Watch(worker_.address, this);
    stub_->async()->Generate(&context_, &request_, this);
    StartRead(&response_);
    StartCall();
  }
  void Cancel() { context_.TryCancel(); }
  // The pool's watchdog: the worker fell silent.
  void Abort(const absl::Status& reason) override {
    {
      absl::MutexLock lock(&abort_mutex_);
      abort_reason_ = reason;
    }
    context_.TryCancel();
  }
  const std::string& address() const { return worker_.address; }
  bool received_tokens() const { return received_tokens_; }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // OnDone follows
    Touch();
    if (response_.tokens_size() > 0) received_tokens_ = true;
    owner_->OnWorkerMessage(this, response_);
    StartRead(&response_);
  }

  void OnDone(const grpc::Status& status) override {
    // No abort can reach this call once it is unwatched.
    owner_->pool_->Unwatch(this);
    absl::Status aborted;
    {
      absl::MutexLock lock(&abort_mutex_);
      aborted = abort_reason_;
    }
    owner_->OnWorkerDone(this, aborted.ok() ? status : common::ToGrpcStatus(aborted));
    delete this;
  }

 private:
  const std::shared_ptr<Generation> owner_;
  const RoutedWorker worker_;
  const worker::v1::GenerateRequest request_;
  std::unique_ptr<worker::v1::Worker::Stub> stub_;
  grpc::ClientContext context_;
  worker::v1::GenerateResponse response_;
  bool received_tokens_ = false;
  absl::Mutex abort_mutex_;
  absl::Status abort_reason_ ABSL_GUARDED_BY(abort_mutex_);
};

std::shared_ptr<Generation> Generation::Start(WorkerPool* pool, PreparedRequest request,
                                              const GenerationOptions& options,
                                              std::shared_ptr<GenerationObserver> observer) {
  std::shared_ptr<Generation> generation(
      new Generation(pool, std::move(request), options, std::move(observer)));
  generation->StartAttempt();
  return generation;
}

Generation::Generation(WorkerPool* pool, PreparedRequest request, const GenerationOptions& options,
                       std::shared_ptr<GenerationObserver> observer)
    : pool_(pool),
      request_(std::move(request)),
      options_(options),
      observer_(std::move(observer)),
      stop_matcher_(request_.stop_strings) {
  ++live_generations;
  if (request_.model->tokenizer() != nullptr) {
    const auto& prompt = request_.worker_request.prompt_token_ids();
    detokenizer_.emplace(request_.model->tokenizer(),
                         absl::MakeConstSpan(prompt.data(), prompt.size()),
                         request_.skip_special_tokens);
  }
}

Generation::~Generation() { --live_generations; }

int Generation::live_count() { return live_generations.load(); }

void Generation::Cancel() {
  absl::MutexLock lock(&mutex_);
  cancelled_ = true;
  if (call_ != nullptr) call_->Cancel();
}

void Generation::StartAttempt() {
  ++attempts_;
  const auto& prompt = request_.worker_request.prompt_token_ids();
  absl::StatusOr<RoutedWorker> routed =
      pool_->Route(request_.model->name(), absl::MakeConstSpan(prompt.data(), prompt.size()),
                   options_.cache_salt, excluded_);
  if (!routed.ok()) {
    if (excluded_.empty()) return Fail(routed.status());
    return Fail(absl::Status(
        routed.status().code(),
        absl::StrCat(routed.status().message(), " (after ", attempts_ - 1, " failed attempts)")));
  }
  if (options_.metrics != nullptr) {
    options_.metrics->OnRoutingDecision(RoutingPolicyName(pool_->routing_policy()),
                                        routed->decision.reason);
  }
  worker::v1::GenerateRequest request = request_.worker_request;
  request.set_request_id(WorkerRequestId(request_.request_id));
  request.set_cache_salt(options_.cache_salt);
  auto* call =
      new WorkerCall(shared_from_this(), *std::move(routed), std::move(request), options_.deadline);
  bool cancelled = false;
  {
    absl::MutexLock lock(&mutex_);
    cancelled = cancelled_;
    if (!cancelled) call_ = call;
  }
  if (cancelled) {
    delete call;  // never started
    return Fail(absl::CancelledError("the request was cancelled"));
  }
  call->Start();
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

void Generation::OnWorkerMessage(WorkerCall* call, const worker::v1::GenerateResponse& message) {
  {
    absl::MutexLock lock(&mutex_);
    if (done_) return;
  }
  const absl::Time now = absl::Now();
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
  result.worker = call->address();
  result.usage.set_prompt_tokens(request_.worker_request.prompt_token_ids_size());
  result.usage.set_completion_tokens(completion_tokens_);
  result.timing.set_time_to_first_token_s(first_token_time_ == absl::InfinitePast()
                                              ? 0
                                              : absl::ToDoubleSeconds(first_token_time_ - start_));
  result.timing.set_total_s(absl::ToDoubleSeconds(now - start_));
  if (stop_string.has_value()) {
    // The worker would go on: stop it (this frees its blocks) and finish here.
    call->Cancel();
    result.finish_reason = ::llmserve::v1::FINISH_REASON_STOP;
    result.matched_stop = *stop_string;
    return Complete(std::move(result));
  }
  if (!finished) return;
  result.finish_reason = message.finish_reason();
  result.usage.set_cached_prompt_tokens(message.usage().cached_prompt_tokens());
  result.timing.set_queue_s(message.timing().queue_s());
  if (result.finish_reason == ::llmserve::v1::FINISH_REASON_STOP && message.tokens_size() > 0) {
    const int32_t last = message.tokens(message.tokens_size() - 1).token_id();
    for (int32_t stop_id : request_.worker_request.stop_token_ids()) {
      if (stop_id == last) result.matched_stop = absl::StrCat(last);
    }
  }
  Complete(std::move(result));
}

void Generation::OnWorkerDone(WorkerCall* call, const grpc::Status& status) {
  bool cancelled = false;
  {
    absl::MutexLock lock(&mutex_);
    if (call_ == call) call_ = nullptr;
    if (done_) return;
    cancelled = cancelled_;
  }
  if (cancelled) return Fail(absl::CancelledError("the request was cancelled"));
  if (status.ok()) {
    return Fail(absl::UnavailableError(
        absl::StrCat("the worker ", call->address(), " ended the stream without a finish reason")));
  }
  if (!call->received_tokens() && attempts_ < options_.max_attempts &&
      Retryable(status.error_code())) {
    if (status.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED) {
      // Overload is not a failure of the worker; anything else marks it down until probed.
      pool_->ReportFailure(call->address(), status.error_message());
    }
    excluded_.insert(call->address());
    return StartAttempt();
  }
  if (call->received_tokens()) {
    return Fail(absl::UnavailableError(
        absl::StrCat("the worker ", call->address(), " failed after ", completion_tokens_,
                     " generated tokens: ", status.error_message())));
  }
  Fail(common::FromGrpcStatus(status));
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
