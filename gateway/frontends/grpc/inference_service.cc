#include "gateway/frontends/grpc/inference_service.h"

#include <atomic>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status/grpc_raw_message.h"
#include "common/status/grpc_status.h"
#include "gateway/frontends/grpc/unary_response.h"

namespace llmserve::gateway {
namespace {

using ::llmserve::v1::GenerateStreamResponse;

// What StreamCall and UnaryCall share: the request's lifecycle (admission, the end counted once),
// reference counting (gRPC holds one reference until OnDone, a pending admission another until
// its callback ran or was withdrawn), and starting the Generation once admitted.
template <typename Call>
class AdmittedCall {
 public:
  explicit AdmittedCall(std::shared_ptr<RequestLifecycle> lifecycle)
      : lifecycle_(std::move(lifecycle)) {}
  RequestLifecycle& lifecycle() { return *lifecycle_; }

  // The call's context, for the retry-after trailer. gRPC keeps it only until the call is done,
  // so it is touched only by whoever finishes the call, right before Finish.
  void set_context(grpc::CallbackServerContext* context) { context_ = context; }
  // Ends the call with `status`, telling the client when to retry (seconds, rounded up) when
  // `retry_after` is positive. From any thread: the trailer is added by the call's own Finish,
  // which a cancel may already have done (then the client is gone and nothing is added).
  void FailWith(const absl::Status& status, absl::Duration retry_after) {
    if (retry_after > absl::ZeroDuration()) {
      retry_after_seconds_.store(absl::ToInt64Seconds(absl::Ceil(retry_after, absl::Seconds(1))));
    }
    static_cast<Call*>(this)->observer()->OnError(status);
  }
  // Called by the call before it finishes with an error.
  void AddRetryAfterTrailer() {
    const int64_t seconds = retry_after_seconds_.load();
    if (seconds > 0 && context_ != nullptr) {
      context_->AddTrailingMetadata("retry-after", absl::StrCat(seconds));
    }
  }

  void Ref() {
    absl::MutexLock lock(&lifetime_mutex_);
    ++refs_;
  }
  void Unref() {
    bool last = false;
    {
      absl::MutexLock lock(&lifetime_mutex_);
      last = --refs_ == 0;
    }
    if (last) delete static_cast<Call*>(this);
  }
  void set_prepare_ticket(std::shared_ptr<PrepareStage::Ticket> ticket) {
    {
      absl::MutexLock lock(&lifetime_mutex_);
      prepare_ticket_ = ticket;
    }
    // A cancel that came before the ticket was stored did not see it (CancelQueuedAdmission).
    if (static_cast<Call*>(this)->cancelled()) ticket->Cancel();
  }
  // Starts the generation `start()` returns, unless the client left while the call was queued.
  template <typename StartFn>
  void StartGeneration(StartFn start) {
    Call* call = static_cast<Call*>(this);
    if (call->cancelled()) {
      return call->observer()->OnError(absl::CancelledError("the call was cancelled"));
    }
    call->set_generation(start());
  }

 protected:
  // Withdraws a queued admission; true when its callback will never run (its reference is
  // dropped here).
  bool CancelQueuedAdmission() {
    std::shared_ptr<PrepareStage::Ticket> ticket;
    {
      absl::MutexLock lock(&lifetime_mutex_);
      ticket = prepare_ticket_;
    }
    // A prompt still waiting for a prepare thread is skipped; its callback then sees the cancel.
    if (ticket != nullptr) ticket->Cancel();
    if (!lifecycle_->CancelAdmission()) return false;
    Unref();
    return true;
  }
  // The request ended: counted, charged and its slot released, once.
  void Ended(const GenerationResult* result, const absl::Status& status) {
    if (result != nullptr) lifecycle_->AddResult(0, *result);
    lifecycle_->Finish(
        status,
        result == nullptr ? 0 : result->usage.prompt_tokens() + result->usage.completion_tokens());
  }

 private:
  absl::Mutex lifetime_mutex_;
  int refs_ ABSL_GUARDED_BY(lifetime_mutex_) = 1;
  const std::shared_ptr<RequestLifecycle> lifecycle_;
  std::shared_ptr<PrepareStage::Ticket> prepare_ticket_ ABSL_GUARDED_BY(lifetime_mutex_);
  grpc::CallbackServerContext* context_ = nullptr;
  std::atomic<int64_t> retry_after_seconds_{0};
};

// A server-streaming call fed by a Generation: deltas are merged while a write is in flight, so
// a slow client never blocks the worker stream, and the buffer holds at most the request's
// tokens.
class StreamCall final : public grpc::ServerWriteReactor<grpc::ByteBuffer>,
                         public AdmittedCall<StreamCall> {
 public:
  StreamCall(std::string request_id, std::string model, std::shared_ptr<RequestLifecycle> lifecycle)
      : AdmittedCall(std::move(lifecycle)),
        request_id_(std::move(request_id)),
        model_(std::move(model)) {}

  // Forwards the Generation's events while the call lives.
  class Observer final : public GenerationObserver {
   public:
    explicit Observer(StreamCall* call) : call_(call) {}
    void OnDelta(GenerationDelta delta) override {
      absl::MutexLock lock(&mutex_);
      if (call_ != nullptr) call_->Add(std::move(delta), nullptr, absl::OkStatus());
    }
    void OnFinish(const GenerationResult& result) override {
      absl::MutexLock lock(&mutex_);
      if (call_ != nullptr) call_->Add({}, &result, absl::OkStatus());
    }
    void OnError(const absl::Status& status) override {
      absl::MutexLock lock(&mutex_);
      if (call_ != nullptr) call_->Add({}, nullptr, status);
    }
    void Detach() {
      absl::MutexLock lock(&mutex_);
      call_ = nullptr;
    }

   private:
    absl::Mutex mutex_;
    StreamCall* call_ ABSL_GUARDED_BY(mutex_);
  };

  std::shared_ptr<Observer> observer() { return observer_; }
  void set_generation(std::shared_ptr<Generation> generation) {
    absl::MutexLock lock(&mutex_);
    generation_ = std::move(generation);
  }
  bool cancelled() {
    absl::MutexLock lock(&mutex_);
    return cancelled_;
  }

  void OnWriteDone(bool ok) override {
    {
      absl::MutexLock lock(&mutex_);
      writing_ = false;
      if (!ok) cancelled_ = true;
    }
    Pump();
  }
  void OnCancel() override {
    std::shared_ptr<Generation> generation;
    {
      absl::MutexLock lock(&mutex_);
      cancelled_ = true;
      generation = generation_;
    }
    CancelQueuedAdmission();
    if (generation != nullptr) generation->Cancel();
    Pump();
  }
  void OnDone() override {
    observer_->Detach();
    std::shared_ptr<Generation> generation;
    {
      absl::MutexLock lock(&mutex_);
      cancelled_ = true;
      generation = generation_;
    }
    CancelQueuedAdmission();
    if (generation != nullptr) generation->Cancel();  // no-op when it already finished
    Unref();
  }

 private:
  void Add(GenerationDelta delta, const GenerationResult* result, const absl::Status& error) {
    lifecycle().AppendOutputText(0, delta.text);
    {
      absl::MutexLock lock(&mutex_);
      pending_.set_request_id(request_id_);
      if (!sent_model_) pending_.set_model(model_);
      pending_.mutable_reasoning_text()->append(delta.reasoning);
      pending_.mutable_text()->append(delta.text);
      for (::llmserve::v1::GeneratedToken& token : delta.tokens) {
        *pending_.add_tokens() = std::move(token);
      }
      has_pending_ = true;
      if (result != nullptr) {
        pending_.set_finish_reason(result->finish_reason);
        pending_.set_matched_stop(result->matched_stop);
        // The calls go out whole, with the last message.
        for (const ::llmserve::v1::ToolCall& call : result->tool_calls) {
          *pending_.add_tool_calls() = call;
        }
        *pending_.mutable_usage() = result->usage;
        *pending_.mutable_timing() = result->timing;
        finish_status_ = grpc::Status::OK;
      }
      if (!error.ok()) {
        has_pending_ = pending_.tokens_size() > 0 || !pending_.text().empty() ||
                       !pending_.reasoning_text().empty();
        finish_status_ = common::ToGrpcStatus(error);
      }
    }
    if (result != nullptr || !error.ok()) Ended(result, error);
    Pump();
  }

  void Pump() {
    enum { kNone, kWrite, kFinish } action = kNone;
    grpc::Status status;
    {
      absl::MutexLock lock(&mutex_);
      if (writing_ || finish_called_) return;
      if (cancelled_) {
        finish_called_ = true;
        status = grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
        action = kFinish;
      } else if (has_pending_) {
        in_flight_.Clear();
        in_flight_.Swap(&pending_);
        has_pending_ = false;
        sent_model_ = true;
        writing_ = true;
        action = kWrite;
      } else if (finish_status_.has_value()) {
        finish_called_ = true;
        status = *finish_status_;
        action = kFinish;
      }
    }
    if (action == kWrite) {
      common::SerializeRawResponse(in_flight_, &in_flight_bytes_);
      StartWrite(&in_flight_bytes_);
    }
    if (action == kFinish) {
      // Only this thread finishes the call, and it has not yet: the context is alive.
      if (!status.ok()) AddRetryAfterTrailer();
      Finish(status);
    }
  }

  const std::string request_id_;
  const std::string model_;
  const std::shared_ptr<Observer> observer_ = std::make_shared<Observer>(this);
  absl::Mutex mutex_;
  std::shared_ptr<Generation> generation_ ABSL_GUARDED_BY(mutex_);
  GenerateStreamResponse pending_ ABSL_GUARDED_BY(mutex_);
  bool has_pending_ ABSL_GUARDED_BY(mutex_) = false;
  bool sent_model_ ABSL_GUARDED_BY(mutex_) = false;
  bool writing_ ABSL_GUARDED_BY(mutex_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mutex_) = false;
  bool finish_called_ ABSL_GUARDED_BY(mutex_) = false;
  std::optional<grpc::Status> finish_status_ ABSL_GUARDED_BY(mutex_);
  GenerateStreamResponse in_flight_;
  grpc::ByteBuffer in_flight_bytes_;
};

// A refused streaming call.
class RefusedStream final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  explicit RefusedStream(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

// Generate (unary): the Generation's deltas collected into one response.
class UnaryCall final : public grpc::ServerUnaryReactor, public AdmittedCall<UnaryCall> {
 public:
  // `response` receives the serialized GenerateResponse when the call succeeds.
  UnaryCall(grpc::ByteBuffer* response, std::string request_id, std::string model,
            std::shared_ptr<RequestLifecycle> lifecycle)
      : AdmittedCall(std::move(lifecycle)), raw_response_(response) {
    response_.set_request_id(std::move(request_id));
    response_.set_model(std::move(model));
  }

  class Observer final : public GenerationObserver {
   public:
    explicit Observer(UnaryCall* call) : call_(call) {}
    void OnDelta(GenerationDelta delta) override {
      absl::MutexLock lock(&mutex_);
      if (call_ == nullptr) return;
      call_->lifecycle().AppendOutputText(0, delta.text);
      call_->collected_.AppendText(delta.text);
      call_->reasoning_text_.append(delta.reasoning);
      for (const ::llmserve::v1::GeneratedToken& token : delta.tokens) {
        call_->collected_.AppendToken(token);
      }
    }
    void OnFinish(const GenerationResult& result) override {
      UnaryCall* call = nullptr;
      {
        absl::MutexLock lock(&mutex_);
        std::swap(call, call_);
      }
      if (call == nullptr) return;
      call->response_.set_finish_reason(result.finish_reason);
      call->response_.set_matched_stop(result.matched_stop);
      call->response_.set_reasoning_text(std::move(call->reasoning_text_));
      for (const ::llmserve::v1::ToolCall& tool_call : result.tool_calls) {
        *call->response_.add_tool_calls() = tool_call;
      }
      *call->response_.mutable_usage() = result.usage;
      *call->response_.mutable_timing() = result.timing;
      call->Ended(&result, absl::OkStatus());
      *call->raw_response_ = call->collected_.Build(std::move(call->response_));
      call->Finish(grpc::Status::OK);
    }
    void OnError(const absl::Status& status) override {
      UnaryCall* call = nullptr;
      {
        absl::MutexLock lock(&mutex_);
        std::swap(call, call_);
      }
      if (call == nullptr) return;
      call->Ended(nullptr, status);
      call->AddRetryAfterTrailer();  // the one Finish is ours: the context is alive
      call->Finish(common::ToGrpcStatus(status));
    }

   private:
    absl::Mutex mutex_;
    UnaryCall* call_ ABSL_GUARDED_BY(mutex_);
  };

  std::shared_ptr<Observer> observer() { return observer_; }
  void set_generation(std::shared_ptr<Generation> generation) {
    absl::MutexLock lock(&mutex_);
    generation_ = std::move(generation);
  }
  bool cancelled() {
    absl::MutexLock lock(&mutex_);
    return cancelled_;
  }

  void OnCancel() override {
    std::shared_ptr<Generation> generation;
    {
      absl::MutexLock lock(&mutex_);
      cancelled_ = true;
      generation = generation_;
    }
    // Queued: nothing will finish the call but us. Running: the Generation ends with CANCELLED,
    // which finishes it. About to start: StartGeneration sees the cancel and finishes it.
    if (CancelQueuedAdmission()) {
      observer_->OnError(absl::CancelledError("the call was cancelled"));
    }
    if (generation != nullptr) generation->Cancel();
  }
  void OnDone() override { Unref(); }

 private:
  // Everything but the text and tokens, which collected_ holds serialized.
  ::llmserve::v1::GenerateResponse response_;
  UnaryResponse collected_;
  // Chats with a reasoning parser: the reasoning, set into response_ at the end.
  std::string reasoning_text_;
  grpc::ByteBuffer* const raw_response_;
  const std::shared_ptr<Observer> observer_ = std::make_shared<Observer>(this);
  absl::Mutex mutex_;
  std::shared_ptr<Generation> generation_ ABSL_GUARDED_BY(mutex_);
  bool cancelled_ ABSL_GUARDED_BY(mutex_) = false;
};

}  // namespace

std::string MetadataOf(const grpc::CallbackServerContext& context, const char* key) {
  const auto& metadata = context.client_metadata();
  const auto it = metadata.find(key);
  return it == metadata.end() ? std::string() : std::string(it->second.data(), it->second.size());
}

std::string AuthorizationOf(const grpc::CallbackServerContext& context) {
  return MetadataOf(context, "authorization");
}

// The caller's W3C trace context, from the `traceparent` and `tracestate` metadata.
std::optional<common::tracing::TraceContext> CallerTrace(
    const grpc::CallbackServerContext& context) {
  return common::tracing::ParseTraceParent(MetadataOf(context, "traceparent"),
                                           MetadataOf(context, "tracestate"));
}

InferenceService::InferenceService(WorkerClient* workers, ModelCatalog* catalog,
                                   RequestTracker* tracker, PrepareStage* prepare,
                                   RequestOptions options)
    : workers_(workers),
      catalog_(catalog),
      tracker_(tracker),
      prepare_(prepare),
      options_(std::move(options)) {}

absl::StatusOr<InferenceService::Accepted> InferenceService::Accept(
    grpc::CallbackServerContext* context, ::llmserve::v1::GenerateRequest& request,
    RequestLifecycle& lifecycle) {
  lifecycle.set_model(request.model());
  lifecycle.set_operation(request.has_chat() ? "chat" : "text_completion");
  if (absl::Status accepting = tracker_->CheckAccepting(); !accepting.ok()) return accepting;
  absl::StatusOr<Principal> principal =
      tracker_->admission().Authenticate(AuthorizationOf(*context));
  if (!principal.ok()) return principal.status();
  lifecycle.set_principal(*principal);
  absl::StatusOr<std::shared_ptr<const ServedModel>> model = catalog_->Resolve(request.model());
  if (!model.ok()) return model.status();
  lifecycle.set_model((*model)->name());
  // Resolved here, so that the call knows its id before the prompt is prepared.
  absl::StatusOr<std::string> id = ResolveRequestId(request.request_id());
  if (!id.ok()) return id.status();
  request.set_request_id(*std::move(id));
  lifecycle.set_request_id(request.request_id());
  lifecycle.set_input_content(request);
  return Accepted{.principal = *std::move(principal),
                  .model = *std::move(model),
                  .client_deadline = absl::FromChrono(context->deadline())};
}

InferenceService::Started InferenceService::MakeStarted(PreparedRequest request,
                                                        const Accepted& accepted,
                                                        absl::Time arrival) const {
  const int64_t tokens = request.worker_request.prompt_token_ids_size() +
                         static_cast<int64_t>(request.worker_request.max_tokens());
  Started started{.request = std::move(request), .principal = accepted.principal, .tokens = tokens};
  started.generation.deadline =
      std::min(accepted.client_deadline, arrival + options_.request_timeout);
  started.generation.max_attempts = options_.max_attempts;
  started.generation.metrics = options_.metrics;
  started.generation.query_of_death = options_.query_of_death_guard;
  started.generation.api = "grpc";
  started.generation.in_flight = tracker_->generations();
  started.generation.tracer = tracker_->tracer();
  if (options_.isolate_cache_per_principal) {
    started.generation.cache_salt = started.principal.name;
  }
  return started;
}

template <typename Call>
void InferenceService::PrepareThenLaunch(Call* call, ::llmserve::v1::GenerateRequest request,
                                         Accepted accepted) {
  std::shared_ptr<const ServedModel> model = accepted.model;
  // Stored before the work is queued, so that a cancel at any time reaches it.
  auto ticket = std::make_shared<PrepareStage::Ticket>();
  call->set_prepare_ticket(ticket);
  call->Ref();  // the prepare callback's, dropped when it ran
  common::tracing::Span prepare_span = call->lifecycle().StartChildSpan("prepare");
  const absl::Status submitted = prepare_->Submit(
      std::move(request), std::move(model), /*n=*/1, ticket,
      [this, call, accepted = std::move(accepted),
       prepare_span](absl::StatusOr<std::vector<PreparedRequest>> prepared) mutable {
        if (prepared.ok() && call->cancelled()) {
          prepared = absl::CancelledError("the call was cancelled");
        }
        if (!prepared.ok()) {
          prepare_span.SetError(absl::StatusCodeToString(prepared.status().code()),
                                prepared.status().message());
        }
        prepare_span.End();
        if (!prepared.ok()) {
          call->FailWith(prepared.status(), absl::ZeroDuration());
        } else {
          call->lifecycle().set_request_parameters(prepared->front().worker_request, 1);
          Launch(call,
                 MakeStarted(std::move(prepared->front()), accepted, call->lifecycle().arrival()));
        }
        call->Unref();
      });
  if (!submitted.ok()) {
    // Refused at once (the prepare queue is full, or shutdown): the callback will never run.
    if (absl::IsResourceExhausted(submitted) && options_.metrics != nullptr) {
      options_.metrics->OnRateLimited();
    }
    prepare_span.End();
    call->Unref();
    call->FailWith(submitted,
                   absl::IsResourceExhausted(submitted) ? absl::Seconds(1) : absl::ZeroDuration());
  }
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* InferenceService::GenerateStream(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* bytes) {
  std::shared_ptr<RequestLifecycle> lifecycle =
      tracker_->Begin("grpc", "/llmserve.v1.Inference/GenerateStream", CallerTrace(*context));
  ::llmserve::v1::GenerateRequest request;
  absl::Status parsed = common::ParseRawRequest(*bytes, &request);
  absl::StatusOr<Accepted> accepted =
      parsed.ok() ? Accept(context, request, *lifecycle) : absl::StatusOr<Accepted>(parsed);
  if (!accepted.ok()) {
    lifecycle->Finish(accepted.status());
    return new RefusedStream(common::ToGrpcStatus(accepted.status()));
  }
  auto* call = new StreamCall(request.request_id(), accepted->model->name(), std::move(lifecycle));
  call->set_context(context);
  PrepareThenLaunch(call, std::move(request), *std::move(accepted));
  return call;
}

grpc::ServerUnaryReactor* InferenceService::Generate(grpc::CallbackServerContext* context,
                                                     const grpc::ByteBuffer* bytes,
                                                     grpc::ByteBuffer* response) {
  std::shared_ptr<RequestLifecycle> lifecycle =
      tracker_->Begin("grpc", "/llmserve.v1.Inference/Generate", CallerTrace(*context));
  ::llmserve::v1::GenerateRequest request;
  absl::Status parsed = common::ParseRawRequest(*bytes, &request);
  absl::StatusOr<Accepted> accepted =
      parsed.ok() ? Accept(context, request, *lifecycle) : absl::StatusOr<Accepted>(parsed);
  if (!accepted.ok()) {
    lifecycle->Finish(accepted.status());
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(common::ToGrpcStatus(accepted.status()));
    return reactor;
  }
  auto* call =
      new UnaryCall(response, request.request_id(), accepted->model->name(), std::move(lifecycle));
  call->set_context(context);
  PrepareThenLaunch(call, std::move(request), *std::move(accepted));
  return call;
}

template <typename Call>
void InferenceService::Launch(Call* call, Started started) {
  started.generation.parent_span = call->lifecycle().span();
  call->Ref();  // the admission callback's, dropped when it ran (or was cancelled)
  WorkerClient* workers = workers_;
  call->lifecycle().Admit(
      started.principal, started.tokens,
      [call, workers, request = std::move(started.request), options = started.generation](
          absl::Status admitted, absl::Duration retry_after) mutable {
        if (!admitted.ok()) {
          // The trailer is added by the call's own Finish: a stream cancelled meanwhile may be
          // finished already, its context gone.
          call->FailWith(admitted, retry_after);
        } else {
          call->StartGeneration([&] {
            return Generation::Start(workers, std::move(request), options, call->observer());
          });
        }
        call->Unref();
      });
}

grpc::ServerUnaryReactor* InferenceService::Tokenize(grpc::CallbackServerContext* context,
                                                     const grpc::ByteBuffer* bytes,
                                                     grpc::ByteBuffer* raw_response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  auto fail = [reactor](const absl::Status& status) {
    reactor->Finish(common::ToGrpcStatus(status));
    return reactor;
  };
  auto request = std::make_shared<::llmserve::v1::TokenizeRequest>();
  if (absl::Status status = common::ParseRawRequest(*bytes, request.get()); !status.ok()) {
    return fail(status);
  }
  absl::StatusOr<Principal> principal =
      tracker_->admission().Authenticate(AuthorizationOf(*context));
  if (!principal.ok()) return fail(principal.status());
  absl::StatusOr<std::shared_ptr<const ServedModel>> model = catalog_->Resolve(request->model());
  if (!model.ok()) return fail(model.status());
  size_t prompt_bytes = request->text().size();
  for (const ::llmserve::v1::ChatMessage& message : request->chat().messages()) {
    prompt_bytes += message.content().size();
  }
  // The template and tokenizer run on the prepare stage, like Generate's. The call is finished
  // from there (gRPC keeps `context` and `raw_response` until then).
  const absl::Status submitted = prepare_->Run(
      prompt_bytes, nullptr,
      [this, reactor, raw_response, request, model = *std::move(model)](absl::Status ready) {
        absl::StatusOr<::llmserve::v1::TokenizeResponse> response =
            ready.ok() ? TokenizePrompt(*request, *model)
                       : absl::StatusOr<::llmserve::v1::TokenizeResponse>(ready);
        if (!response.ok()) return reactor->Finish(common::ToGrpcStatus(response.status()));
        common::SerializeRawResponse(*response, raw_response);
        reactor->Finish(grpc::Status::OK);
      });
  if (!submitted.ok()) {
    if (absl::IsResourceExhausted(submitted)) {
      if (options_.metrics != nullptr) options_.metrics->OnRateLimited();
      context->AddTrailingMetadata("retry-after", "1");
    }
    return fail(submitted);
  }
  return reactor;
}

absl::StatusOr<::llmserve::v1::TokenizeResponse> InferenceService::TokenizePrompt(
    const ::llmserve::v1::TokenizeRequest& request, const ServedModel& model) const {
  absl::StatusOr<std::vector<int32_t>> ids;
  if (request.has_chat()) {
    // What Generate does (PrepareRequest), so the ids are the ones a worker would get.
    ids = TokenizeChat(model, request.chat(), options_.limits, prepare_->render_chat());
  } else if (request.has_text()) {
    ids = TokenizeText(model, request.text(),
                       request.has_add_special_tokens() ? request.add_special_tokens() : true,
                       options_.limits);
  } else {
    return absl::InvalidArgumentError("input: set one of text or chat");
  }
  if (!ids.ok()) return ids.status();
  ::llmserve::v1::TokenizeResponse response;
  for (int32_t id : *ids) {
    response.add_token_ids(id);
    response.add_tokens(model.tokenizer()->IdToToken(id).value_or(""));
  }
  response.set_max_model_len(model.max_model_len());
  return response;
}

grpc::ServerUnaryReactor* InferenceService::ListModels(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* bytes,
                                                       grpc::ByteBuffer* raw_response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  ::llmserve::v1::ListModelsRequest request;
  if (absl::Status status = common::ParseRawRequest(*bytes, &request); !status.ok()) {
    reactor->Finish(common::ToGrpcStatus(status));
    return reactor;
  }
  ::llmserve::v1::ListModelsResponse message;
  ::llmserve::v1::ListModelsResponse* response = &message;
  absl::StatusOr<Principal> principal =
      tracker_->admission().Authenticate(AuthorizationOf(*context));
  if (!principal.ok()) {
    reactor->Finish(common::ToGrpcStatus(principal.status()));
    return reactor;
  }
  for (const ModelCatalog::ModelSummary& summary : catalog_->List()) {
    if (summary.ready_workers == 0) continue;
    ::llmserve::v1::ModelCard* card = response->add_models();
    card->set_id(summary.info->model_name());
    card->set_max_model_len(summary.info->max_model_len());
    card->set_ready_workers(summary.ready_workers);
    card->set_vocab_size(summary.info->vocab_size());
  }
  common::SerializeRawResponse(message, raw_response);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace llmserve::gateway
