#include "gateway/frontends/grpc/inference_service.h"

#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/grpc/single_write_stream.h"
#include "common/status/grpc_raw_message.h"
#include "common/status/grpc_status.h"
#include "common/status/retry_after.h"
#include "gateway/frontends/grpc/unary_response.h"
#include "gateway/pipeline/prepare_stage.h"

namespace llmserve::gateway {
namespace {

using ::llmserve::v1::GenerateStreamResponse;

// Forwards a run's events to a call until the call is done (then they are dropped): gRPC deletes
// nothing of ours, but the call deletes itself in OnDone, and a run may outlive it.
template <typename Call>
class CallSink final : public RequestSink {
 public:
  explicit CallSink(Call* call) : call_(call) {}

  void OnRefused(const absl::Status& status, absl::Duration retry_after) override {
    absl::MutexLock lock(&mutex_);
    if (call_ != nullptr) call_->OnRefused(status, retry_after);
  }
  void OnStarted(const PreparedRun& run) override {
    absl::MutexLock lock(&mutex_);
    if (call_ != nullptr) call_->OnStarted(run);
  }
  void OnDelta(int, GenerationDelta delta) override {
    absl::MutexLock lock(&mutex_);
    if (call_ != nullptr) call_->OnDelta(std::move(delta));
  }
  void OnChoiceEnd(int, const GenerationResult* result, const absl::Status&) override {
    absl::MutexLock lock(&mutex_);
    if (call_ != nullptr && result != nullptr) call_->OnResult(*result);
  }
  void OnCompleted(const absl::Status& first_error) override {
    absl::MutexLock lock(&mutex_);
    if (call_ != nullptr) call_->OnCompleted(first_error);
  }
  // The call is done: nothing reaches it after this returns.
  void Detach() {
    absl::MutexLock lock(&mutex_);
    call_ = nullptr;
  }

 private:
  absl::Mutex mutex_;
  Call* call_ ABSL_GUARDED_BY(mutex_);
};

// The retry-after trailer (whole seconds, rounded up) of a call refused for a while.
void AddRetryAfter(grpc::CallbackServerContext* context, absl::Duration retry_after) {
  if (std::string seconds = common::RetryAfterValue(retry_after); !seconds.empty()) {
    context->AddTrailingMetadata("retry-after", seconds);
  }
}

// GenerateStream: the run's deltas as stream messages, one write in flight; deltas that come
// meanwhile are merged into the next message, so a slow client never blocks the worker stream,
// and the buffer holds at most the request's tokens.
class StreamCall final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  explicit StreamCall(grpc::CallbackServerContext* context) : context_(context) {}

  std::shared_ptr<CallSink<StreamCall>> sink() const { return sink_; }
  void set_run(std::shared_ptr<RequestRun> run) { run_ = std::move(run); }

  // The sink's events (one at a time, while the call lives).
  void OnRefused(const absl::Status& status, absl::Duration retry_after) {
    grpc::CallbackServerContext* const context = context_;
    stream_.FinishAfterPending(common::ToGrpcStatus(status),
                               [context, retry_after] { AddRetryAfter(context, retry_after); });
  }
  void OnStarted(const PreparedRun& run) {
    request_id_ = run.choices[0].request_id;
    model_ = run.model->name();
  }
  void OnDelta(GenerationDelta delta) {
    Add([&](GenerateStreamResponse& message) {
      message.mutable_reasoning_text()->append(delta.reasoning);
      message.mutable_text()->append(delta.text);
      for (::llmserve::v1::GeneratedToken& token : delta.tokens) {
        *message.add_tokens() = std::move(token);
      }
    });
  }
  void OnResult(const GenerationResult& result) {
    Add([&](GenerateStreamResponse& message) {
      message.set_finish_reason(result.finish_reason);
      message.set_matched_stop(result.matched_stop);
      // The calls go out whole, with the last message.
      for (const ::llmserve::v1::ToolCall& call : result.tool_calls) {
        *message.add_tool_calls() = call;
      }
      *message.mutable_usage() = result.usage;
      *message.mutable_timing() = result.timing;
    });
  }
  // After the request was counted: the last message (if any) and the status go out.
  void OnCompleted(const absl::Status& error) {
    stream_.FinishAfterPending(common::ToGrpcStatus(error));
  }

  void OnWriteDone(bool ok) override {
    if (stream_.OnWriteDone(ok)) run_->Cancel();
  }
  void OnCancel() override {
    stream_.ClientGone();
    run_->Cancel();
  }
  void OnDone() override {
    sink_->Detach();
    run_->Cancel();  // no-op when it already ended
    delete this;
  }

 private:
  // Adds to the next message, which carries the request id (and, the first one, the model).
  template <typename Update>
  void Add(Update update) {
    const bool first = !added_;
    added_ = true;
    stream_.Add([&](GenerateStreamResponse& message) {
      message.set_request_id(request_id_);
      if (first) message.set_model(model_);
      update(message);
    });
  }

  grpc::CallbackServerContext* const context_;
  const std::shared_ptr<CallSink<StreamCall>> sink_ = std::make_shared<CallSink<StreamCall>>(this);
  // Set before the run starts; the run holds the sink, not the call.
  std::shared_ptr<RequestRun> run_;
  common::SingleWriteStream<GenerateStreamResponse> stream_{this};
  // Written by the sink's events, which come one at a time (CallSink's lock).
  std::string request_id_;
  std::string model_;
  bool added_ = false;
};

// Generate (unary): the run's deltas collected into one response.
class UnaryCall final : public grpc::ServerUnaryReactor {
 public:
  // `response` receives the serialized GenerateResponse when the call succeeds.
  UnaryCall(grpc::CallbackServerContext* context, grpc::ByteBuffer* response)
      : context_(context), raw_response_(response) {}

  std::shared_ptr<CallSink<UnaryCall>> sink() const { return sink_; }
  void set_run(std::shared_ptr<RequestRun> run) { run_ = std::move(run); }

  // The sink's events (one at a time, while the call lives). The run ends with exactly one of
  // OnRefused and OnCompleted, which finishes the call.
  void OnRefused(const absl::Status& status, absl::Duration retry_after) {
    AddRetryAfter(context_, retry_after);
    Finish(common::ToGrpcStatus(status));
  }
  void OnStarted(const PreparedRun& run) {
    response_.set_request_id(run.choices[0].request_id);
    response_.set_model(run.model->name());
  }
  void OnDelta(GenerationDelta delta) {
    collected_.AppendText(delta.text);
    reasoning_text_.append(delta.reasoning);
    for (const ::llmserve::v1::GeneratedToken& token : delta.tokens) collected_.AppendToken(token);
  }
  void OnResult(const GenerationResult& result) {
    response_.set_finish_reason(result.finish_reason);
    response_.set_matched_stop(result.matched_stop);
    response_.set_reasoning_text(std::move(reasoning_text_));
    for (const ::llmserve::v1::ToolCall& tool_call : result.tool_calls) {
      *response_.add_tool_calls() = tool_call;
    }
    *response_.mutable_usage() = result.usage;
    *response_.mutable_timing() = result.timing;
  }
  void OnCompleted(const absl::Status& error) {
    if (!error.ok()) return Finish(common::ToGrpcStatus(error));
    *raw_response_ = collected_.Build(std::move(response_));
    Finish(grpc::Status::OK);
  }

  // The run still ends (CANCELLED, or its generation's end), which finishes the call.
  void OnCancel() override { run_->Cancel(); }
  void OnDone() override {
    sink_->Detach();
    delete this;
  }

 private:
  grpc::CallbackServerContext* const context_;
  grpc::ByteBuffer* const raw_response_;
  const std::shared_ptr<CallSink<UnaryCall>> sink_ = std::make_shared<CallSink<UnaryCall>>(this);
  std::shared_ptr<RequestRun> run_;
  // Everything but the text and tokens, which collected_ holds serialized.
  ::llmserve::v1::GenerateResponse response_;
  UnaryResponse collected_;
  // Chats with a reasoning parser: the reasoning, set into response_ at the end.
  std::string reasoning_text_;
};

std::string MetadataOf(const grpc::CallbackServerContext& context, const char* key) {
  const auto& metadata = context.client_metadata();
  const auto it = metadata.find(key);
  return it == metadata.end() ? std::string() : std::string(it->second.data(), it->second.size());
}

// The caller's W3C trace context, from the `traceparent` and `tracestate` metadata.
std::optional<common::tracing::TraceContext> CallerTrace(
    const grpc::CallbackServerContext& context) {
  return common::tracing::ParseTraceParent(MetadataOf(context, "traceparent"),
                                           MetadataOf(context, "tracestate"));
}

// A generation call's lifecycle, named by what the request says (before it is authenticated).
std::shared_ptr<RequestLifecycle> BeginCall(RequestTracker& tracker,
                                            const grpc::CallbackServerContext& context,
                                            absl::string_view method,
                                            const ::llmserve::v1::GenerateRequest& request) {
  std::shared_ptr<RequestLifecycle> lifecycle = tracker.Begin("grpc", method, CallerTrace(context));
  lifecycle->set_model(request.model());
  lifecycle->set_operation(request.has_chat() ? "chat" : "text_completion");
  return lifecycle;
}

// Starts `call`'s run: the call holds the run (to cancel it), the run holds the call's sink.
template <typename Call>
void StartRun(const RequestRunner& runner, Call* call, std::shared_ptr<RequestLifecycle> lifecycle,
              RunInput input) {
  std::shared_ptr<RequestRun> run = runner.NewRun(std::move(lifecycle), call->sink());
  call->set_run(run);
  run->Start(std::move(input));
}

}  // namespace

std::string AuthorizationOf(const grpc::CallbackServerContext& context) {
  return MetadataOf(context, "authorization");
}

RunInput InferenceService::MakeRunInput(grpc::CallbackServerContext* context, absl::Status parsed,
                                        ::llmserve::v1::GenerateRequest request) const {
  RunInput input;
  input.authorization = AuthorizationOf(*context);
  input.client_deadline = absl::FromChrono(context->deadline());
  input.prompt_bytes = PromptBytes(request);
  input.prepare = [runner = runner_, parsed = std::move(parsed), request = std::move(request)](
                      RequestLifecycle& lifecycle) mutable -> absl::StatusOr<PreparedRun> {
    if (!parsed.ok()) return parsed;
    absl::StatusOr<std::shared_ptr<const ServedModel>> model =
        runner->ResolveModel(lifecycle, request.model());
    if (!model.ok()) return model.status();
    lifecycle.set_model((*model)->name());
    absl::StatusOr<std::string> id = ResolveRequestId(request.request_id());
    if (!id.ok()) return id.status();
    request.set_request_id(*std::move(id));
    lifecycle.set_request_id(request.request_id());
    lifecycle.set_input_content(request);
    absl::StatusOr<std::vector<PreparedRequest>> choices = PrepareChoices(
        request, *model, /*n=*/1, runner->prepare().limits(), runner->prepare().render_chat());
    if (!choices.ok()) return choices.status();
    return PreparedRun{.model = *std::move(model), .choices = *std::move(choices)};
  };
  return input;
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* InferenceService::GenerateStream(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* bytes) {
  ::llmserve::v1::GenerateRequest request;
  absl::Status parsed = common::ParseRawRequest(*bytes, &request);
  std::shared_ptr<RequestLifecycle> lifecycle =
      BeginCall(runner_->tracker(), *context, "/llmserve.v1.Inference/GenerateStream", request);
  auto* call = new StreamCall(context);
  StartRun(*runner_, call, std::move(lifecycle),
           MakeRunInput(context, std::move(parsed), std::move(request)));
  return call;
}

grpc::ServerUnaryReactor* InferenceService::Generate(grpc::CallbackServerContext* context,
                                                     const grpc::ByteBuffer* bytes,
                                                     grpc::ByteBuffer* response) {
  ::llmserve::v1::GenerateRequest request;
  absl::Status parsed = common::ParseRawRequest(*bytes, &request);
  std::shared_ptr<RequestLifecycle> lifecycle =
      BeginCall(runner_->tracker(), *context, "/llmserve.v1.Inference/Generate", request);
  auto* call = new UnaryCall(context, response);
  StartRun(*runner_, call, std::move(lifecycle),
           MakeRunInput(context, std::move(parsed), std::move(request)));
  return call;
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
      runner_->tracker().admission().Authenticate(AuthorizationOf(*context));
  if (!principal.ok()) return fail(principal.status());
  absl::StatusOr<std::shared_ptr<const ServedModel>> model = runner_->catalog().Resolve(
      request->model(),
      [&principal](absl::string_view name) { return principal->MayUseModel(name); });
  if (!model.ok()) return fail(model.status());
  if (absl::Status allowed = CheckModelAccess(*principal, (*model)->name()); !allowed.ok()) {
    return fail(allowed);
  }
  size_t prompt_bytes = request->text().size();
  for (const ::llmserve::v1::ChatMessage& message : request->chat().messages()) {
    prompt_bytes += message.content().size();
  }
  // The template and tokenizer run on the prepare stage, like Generate's. The call is finished
  // from there (gRPC keeps `context` and `raw_response` until then).
  const RequestRunner::Refusal refused = runner_->RunPromptWork(
      prompt_bytes, nullptr,
      [this, reactor, raw_response, request, model = *std::move(model)](absl::Status ready) {
        absl::StatusOr<::llmserve::v1::TokenizeResponse> response =
            ready.ok() ? TokenizePrompt(*request, *model)
                       : absl::StatusOr<::llmserve::v1::TokenizeResponse>(ready);
        if (!response.ok()) return reactor->Finish(common::ToGrpcStatus(response.status()));
        common::SerializeRawResponse(*response, raw_response);
        reactor->Finish(grpc::Status::OK);
      });
  if (!refused.status.ok()) {
    AddRetryAfter(context, refused.retry_after);
    return fail(refused.status);
  }
  return reactor;
}

absl::StatusOr<::llmserve::v1::TokenizeResponse> InferenceService::TokenizePrompt(
    const ::llmserve::v1::TokenizeRequest& request, const ServedModel& model) const {
  absl::StatusOr<std::vector<int32_t>> ids;
  if (request.has_chat()) {
    // What Generate does (PrepareRequest), so the ids are the ones a worker would get.
    ids = TokenizeChat(model, request.chat(), runner_->options().limits,
                       runner_->prepare().render_chat());
  } else if (request.has_text()) {
    ids = TokenizeText(model, request.text(),
                       request.has_add_special_tokens() ? request.add_special_tokens() : true,
                       runner_->options().limits);
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
  absl::StatusOr<std::vector<ModelCatalog::ModelSummary>> models =
      runner_->ListModels(AuthorizationOf(*context));
  if (!models.ok()) {
    reactor->Finish(common::ToGrpcStatus(models.status()));
    return reactor;
  }
  ::llmserve::v1::ListModelsResponse message;
  for (const ModelCatalog::ModelSummary& summary : *models) {
    ::llmserve::v1::ModelCard* card = message.add_models();
    card->set_id(summary.name);
    card->set_parent(summary.parent);
    card->set_max_model_len(summary.info->max_model_len());
    card->set_ready_workers(summary.ready_workers);
    card->set_vocab_size(summary.info->vocab_size());
  }
  common::SerializeRawResponse(message, raw_response);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace llmserve::gateway
