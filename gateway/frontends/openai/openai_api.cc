#include "gateway/frontends/openai/openai_api.h"

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/status/http_error.h"
#include "gateway/frontends/openai/openai_logprobs.h"
#include "gateway/http/sse.h"

namespace llmserve::gateway {
namespace {

using Json = nlohmann::json;

const char* FinishReasonName(::llmserve::v1::FinishReason reason) {
  switch (reason) {
    case ::llmserve::v1::FINISH_REASON_STOP:
      return "stop";
    case ::llmserve::v1::FINISH_REASON_LENGTH:
      return "length";
    case ::llmserve::v1::FINISH_REASON_ABORT:
      return "abort";
    case ::llmserve::v1::FINISH_REASON_TOOL_CALLS:
      return "tool_calls";
    default:
      return nullptr;
  }
}

// A streamed piece of a call, as OpenAI sends it: id, type and name with the first piece only.
Json ToolCallDeltaJson(const tool_calls::ToolCallDelta& delta) {
  Json function = {{"arguments", delta.arguments}};
  Json out = {{"index", delta.index}};
  if (!delta.id.empty()) {
    out["id"] = delta.id;
    out["type"] = "function";
  }
  if (!delta.name.empty()) function["name"] = delta.name;
  out["function"] = std::move(function);
  return out;
}

Json ToolCallJson(const ::llmserve::v1::ToolCall& call) {
  return {{"id", call.id()},
          {"type", "function"},
          {"function", {{"name", call.name()}, {"arguments", call.arguments()}}}};
}

// One OpenAI request: n generations, their results, and the response (whole or streamed).
class OpenAiJob : public std::enable_shared_from_this<OpenAiJob> {
 public:
  OpenAiJob(OpenAiEndpoint endpoint, OpenAiRequest parsed, std::shared_ptr<const ServedModel> model,
            std::shared_ptr<http::ResponseWriter> writer, std::string id, int prompt_tokens,
            std::shared_ptr<RequestLifecycle> lifecycle)
      : endpoint_(endpoint),
        parsed_(std::move(parsed)),
        model_(std::move(model)),
        writer_(std::move(writer)),
        id_(std::move(id)),
        created_(absl::ToUnixSeconds(absl::Now())),
        prompt_tokens_(prompt_tokens),
        lifecycle_(std::move(lifecycle)),
        choices_(parsed_.n) {}

  class Observer final : public GenerationObserver {
   public:
    Observer(std::shared_ptr<OpenAiJob> job, int index) : job_(std::move(job)), index_(index) {}
    void OnDelta(GenerationDelta delta) override { job_->OnDelta(index_, std::move(delta)); }
    void OnFinish(const GenerationResult& result) override { job_->OnFinish(index_, &result, {}); }
    void OnError(const absl::Status& status) override { job_->OnFinish(index_, nullptr, status); }

   private:
    std::shared_ptr<OpenAiJob> job_;
    const int index_;
  };

  // Starts the n generations. A streamed response starts with the first output of any of them
  // (see OpenStreamLocked), so that what fails before it (no worker to route to, a worker refusing
  // the request) is answered with its real status.
  void Start(WorkerClient* workers, const std::vector<PreparedRequest>& requests,
             const GenerationOptions& options) {
    for (int i = 0; i < parsed_.n; ++i) {
      std::shared_ptr<Generation> generation = Generation::Start(
          workers, requests[i], options, std::make_shared<Observer>(shared_from_this(), i));
      absl::MutexLock lock(&mutex_);
      // Every choice may already have ended (at once, with no worker to route to, or faster than
      // this loop): keeping its generation then would hold this job forever through the cycle
      // that Complete breaks, and a drain would wait for a request that is over.
      if (!completed_) generations_.push_back(std::move(generation));
    }
    bool failed = false;
    {
      absl::MutexLock lock(&mutex_);
      failed = FailsAsAWholeLocked();
    }
    // The client may have left while the job waited for admission (its on_close already ran). A
    // choice that failed before the first byte fails the request: the others, including those
    // started after OnFinish cancelled the rest, have no reason to run.
    if (writer_->closed() || failed) Cancel();
  }

  // A client that leaves (even while queued for admission) cancels everything of its request.
  void WatchClose() {
    std::weak_ptr<OpenAiJob> weak = weak_from_this();
    writer_->SetOnClose([weak] {
      if (std::shared_ptr<OpenAiJob> job = weak.lock()) job->Cancel();
    });
  }

  void Cancel() {
    std::vector<std::shared_ptr<Generation>> generations;
    {
      absl::MutexLock lock(&mutex_);
      generations = generations_;
    }
    // Queued for a slot: leaves the queue (the job, held only by the admission callback, then
    // ends as cancelled).
    lifecycle_->CancelAdmission();
    for (const auto& generation : generations) generation->Cancel();
  }

  RequestLifecycle& lifecycle() { return *lifecycle_; }

  // Admission refused: the error is the whole response.
  void Refuse(const absl::Status& status, absl::Duration retry_after) {
    lifecycle_->Finish(status);
    SendOpenAiError(*writer_, status, retry_after);
  }

 private:
  struct Choice {
    std::string text;
    // Chats with a reasoning parser: the reply's reasoning (not streamed: all of it).
    std::string reasoning;
    bool reasoning_parsed = false;
    bool reasoned = false;
    int64_t reasoning_tokens = 0;
    // Not streamed, with logprobs: every token's, until the response is rendered.
    TokenLogprobs logprobs;
    const char* finish_reason = nullptr;
    std::vector<::llmserve::v1::ToolCall> tool_calls;
    int64_t completion_tokens = 0;
    bool done = false;
  };

  Json Chunk(int index, const Json& delta_or_text, const char* finish_reason,
             const Json& logprobs) const {
    Json choice = {{"index", index},
                   {"logprobs", logprobs.is_null() ? Json() : logprobs},
                   {"finish_reason", finish_reason ? Json(finish_reason) : Json()}};
    if (endpoint_ == OpenAiEndpoint::kChatCompletions) {
      choice["delta"] = delta_or_text;
    } else {
      choice["text"] = delta_or_text;
    }
    return {{"id", id_},
            {"object", endpoint_ == OpenAiEndpoint::kChatCompletions ? "chat.completion.chunk"
                                                                     : "text_completion"},
            {"created", created_},
            {"model", model_->name()},
            {"choices", Json::array({choice})}};
  }

  Json Usage(int64_t completion_tokens) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    Json usage = {{"prompt_tokens", prompt_tokens_},
                  {"completion_tokens", completion_tokens},
                  {"total_tokens", prompt_tokens_ + completion_tokens}};
    // Only where a reasoning parser read the reply: without one the usage is as it always was.
    bool parsed = false;
    int64_t reasoning_tokens = 0;
    for (const Choice& choice : choices_) {
      parsed = parsed || choice.reasoning_parsed;
      reasoning_tokens += choice.reasoning_tokens;
    }
    if (parsed) {
      usage["completion_tokens_details"] = {{"reasoning_tokens", reasoning_tokens}};
    }
    return usage;
  }

  // Sends the stream's headers (and chat's role chunks) unless done already; false when the stream
  // will never start because the request failed before its first byte.
  bool OpenStreamLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    if (stream_started_) return true;
    if (!first_error_.ok()) return false;
    stream_started_ = true;
    writer_->StartStream(200,
                         {{"content-type", "text/event-stream"}, {"cache-control", "no-cache"}});
    if (endpoint_ == OpenAiEndpoint::kChatCompletions) {
      for (int i = 0; i < parsed_.n; ++i) {
        Json delta = {{"role", "assistant"}, {"content", ""}};
        writer_->Write(http::FormatSseEvent(DumpJson(Chunk(i, delta, nullptr, Json()))));
      }
    }
    return true;
  }

  // Whether an error ends the request before anything was sent: every response that is not
  // streamed, and a stream not yet started.
  bool FailsAsAWholeLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    return !first_error_.ok() && (!parsed_.stream || !stream_started_);
  }

  void OnDelta(int index, GenerationDelta delta) {
    lifecycle_->AppendOutputText(index, delta.text);
    absl::MutexLock lock(&mutex_);
    if (completed_) return;  // choices_ is gone with the response
    Choice& choice = choices_[index];
    choice.completion_tokens += static_cast<int64_t>(delta.tokens.size());
    if (!parsed_.stream) {
      choice.reasoning += delta.reasoning;
      choice.text += delta.text;
      if (parsed_.logprobs) {
        for (const auto& token : delta.tokens) choice.logprobs.Add(token);
      }
      return;
    }
    Json logprobs;
    if (parsed_.logprobs && !delta.tokens.empty()) {
      TokenLogprobs tokens;
      for (const auto& token : delta.tokens) tokens.Add(token);
      logprobs = endpoint_ == OpenAiEndpoint::kChatCompletions
                     ? ChatLogprobsJson(*model_, tokens)
                     : CompletionLogprobsJson(*model_, tokens, choice.text.size());
    }
    choice.text += delta.text;  // kept for text offsets
    if (!delta.reasoning.empty()) {
      if (!OpenStreamLocked()) return;
      // Its own chunk, before the delta's content: clients read the reasoning first.
      const Json reasoning = {{"reasoning_content", delta.reasoning}};
      writer_->Write(http::FormatSseEvent(DumpJson(Chunk(index, reasoning, nullptr, logprobs))));
      logprobs = Json();
      if (delta.text.empty() && delta.tool_calls.empty()) return;
    }
    if (delta.text.empty() && logprobs.is_null() && delta.tool_calls.empty()) return;
    if (!OpenStreamLocked()) return;
    Json content = endpoint_ == OpenAiEndpoint::kChatCompletions ? Json{{"content", delta.text}}
                                                                 : Json(delta.text);
    if (!delta.tool_calls.empty()) {
      if (delta.text.empty()) content.erase("content");
      Json calls = Json::array();
      for (const tool_calls::ToolCallDelta& call : delta.tool_calls) {
        calls.push_back(ToolCallDeltaJson(call));
      }
      content["tool_calls"] = std::move(calls);
    }
    writer_->Write(http::FormatSseEvent(DumpJson(Chunk(index, content, nullptr, logprobs))));
  }

  void OnFinish(int index, const GenerationResult* result, const absl::Status& error) {
    if (result != nullptr) lifecycle_->AddResult(index, *result);
    bool all_done = false;
    bool failed = false;
    {
      absl::MutexLock lock(&mutex_);
      if (completed_) return;  // choices_ is gone with the response
      Choice& choice = choices_[index];
      choice.done = true;
      if (result != nullptr) {
        choice.finish_reason = FinishReasonName(result->finish_reason);
        choice.completion_tokens = result->usage.completion_tokens();
        choice.tool_calls = result->tool_calls;
        choice.reasoning_parsed = result->reasoning_parsed;
        choice.reasoned = result->reasoned;
        choice.reasoning_tokens = result->usage.reasoning_tokens();
      } else if (first_error_.ok()) {
        first_error_ = error;
      }
      if (parsed_.stream) {
        if (result != nullptr) {
          if (OpenStreamLocked()) {
            const Json empty =
                endpoint_ == OpenAiEndpoint::kChatCompletions ? Json::object() : Json("");
            writer_->Write(
                http::FormatSseEvent(DumpJson(Chunk(index, empty, choice.finish_reason, Json()))));
          }
        } else if (stream_started_) {
          // Past the first byte an error can only be an event of the stream.
          const common::HttpError http_error = common::ToHttpError(error);
          writer_->Write(http::FormatSseEvent(http_error.body));
        }
      }
      failed = result == nullptr && FailsAsAWholeLocked();
      all_done = ++finished_ == parsed_.n;
    }
    if (all_done) return Complete();
    // The response will be this error: the other choices need not run on.
    if (failed) Cancel();
  }

  void Complete() {
    absl::MutexLock lock(&mutex_);
    // The generations hold observers that hold this job: let go of them to break the cycle.
    completed_ = true;
    generations_.clear();
    int64_t completion_tokens = 0;
    for (const Choice& choice : choices_) completion_tokens += choice.completion_tokens;
    // The rate limits count prompt and completion; a request that generated nothing (it failed
    // before any worker ran it) gives its whole reservation back.
    const bool generated = completion_tokens > 0 || first_error_.ok();
    lifecycle_->Finish(first_error_, generated ? prompt_tokens_ + completion_tokens : 0);
    // Nothing was sent yet: the first error is the whole response, with its HTTP status.
    if (FailsAsAWholeLocked()) return SendOpenAiError(*writer_, first_error_);
    if (parsed_.stream) {
      OpenStreamLocked();
      if (parsed_.include_usage) {
        Json usage_chunk = Chunk(0, Json(), nullptr, Json());
        usage_chunk["choices"] = Json::array();
        usage_chunk["usage"] = Usage(completion_tokens);
        writer_->Write(http::FormatSseEvent(DumpJson(usage_chunk)));
      }
      writer_->Write(std::string(http::kSseDone));
      writer_->Finish();
      return;
    }
    std::string body = RenderResponseLocked(completion_tokens);
    // The response is all in `body` now: what built it goes before the body is sent.
    choices_.clear();
    choices_.shrink_to_fit();
    writer_->Send(200, {{"content-type", "application/json"}}, std::move(body));
  }

  // The whole response of a request that is not streamed, written straight into one string: each
  // logprob entry is rendered from the choice's compact form and appended, never held as a JSON
  // tree of the whole response. Keys in the order a JSON object writes them (sorted), as before.
  std::string RenderResponseLocked(int64_t completion_tokens)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    const bool chat = endpoint_ == OpenAiEndpoint::kChatCompletions;
    int64_t tokens_left = 0;
    for (const Choice& choice : choices_) tokens_left += choice.completion_tokens;
    const int64_t all_tokens = tokens_left;
    std::string body = R"({"choices":[)";
    for (int i = 0; i < parsed_.n; ++i) {
      Choice& choice = choices_[i];
      if (i > 0) {
        body.push_back(',');
        // The rest at the rate so far, with room: growing a body of tens of MB by doubling would
        // hold the old copy and the new one at once (capacity never written costs no memory).
        const int64_t done = all_tokens - tokens_left;
        if (done > 0) {
          const size_t rest = body.size() / done * tokens_left;
          if (body.capacity() < body.size() + rest) body.reserve(body.size() + rest / 4 * 5);
        }
      }
      tokens_left -= choice.completion_tokens;
      absl::StrAppend(&body, R"({"finish_reason":)",
                      DumpJson(choice.finish_reason ? Json(choice.finish_reason) : Json()),
                      R"(,"index":)", i, R"(,"logprobs":)");
      if (!parsed_.logprobs) {
        body.append("null");
      } else if (chat) {
        AppendChatLogprobs(*model_, choice.logprobs, &body);
      } else {
        AppendCompletionLogprobs(*model_, choice.logprobs, 0, &body);
      }
      choice.logprobs = TokenLogprobs();  // rendered: let it go at once
      if (chat) {
        Json message = {{"role", "assistant"}, {"content", choice.text}};
        if (choice.reasoned) {
          message["reasoning_content"] = choice.reasoning;
          // As vLLM: a reply that ended in or right after its reasoning has no answer.
          if (choice.text.empty()) message["content"] = nullptr;
        }
        if (!choice.tool_calls.empty()) {
          // OpenAI's shape: null content when the turn is only calls.
          if (choice.text.empty()) message["content"] = nullptr;
          Json calls = Json::array();
          for (const ::llmserve::v1::ToolCall& call : choice.tool_calls) {
            calls.push_back(ToolCallJson(call));
          }
          message["tool_calls"] = std::move(calls);
        }
        absl::StrAppend(&body, R"(,"message":)", DumpJson(message), "}");
      } else {
        absl::StrAppend(&body, R"(,"text":)", DumpJson(Json(choice.text)), "}");
      }
    }
    absl::StrAppend(&body, R"(],"created":)", created_, R"(,"id":)", DumpJson(Json(id_)),
                    R"(,"model":)", DumpJson(Json(model_->name())), R"(,"object":)",
                    chat ? R"("chat.completion")" : R"("text_completion")", R"(,"usage":)",
                    DumpJson(Usage(completion_tokens)), "}");
    return body;
  }

  const OpenAiEndpoint endpoint_;
  const OpenAiRequest parsed_;
  const std::shared_ptr<const ServedModel> model_;
  std::shared_ptr<http::ResponseWriter> writer_;
  const std::string id_;
  const int64_t created_;
  const int64_t prompt_tokens_;
  const std::shared_ptr<RequestLifecycle> lifecycle_;
  absl::Mutex mutex_;
  std::vector<Choice> choices_ ABSL_GUARDED_BY(mutex_);
  int finished_ ABSL_GUARDED_BY(mutex_) = 0;
  bool completed_ ABSL_GUARDED_BY(mutex_) = false;
  // The first choice to fail, in time.
  absl::Status first_error_ ABSL_GUARDED_BY(mutex_);
  // Streamed: whether the headers (200, text/event-stream) were sent.
  bool stream_started_ ABSL_GUARDED_BY(mutex_) = false;
  std::vector<std::shared_ptr<Generation>> generations_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace

void SendOpenAiError(http::ResponseWriter& writer, const absl::Status& status,
                     absl::Duration retry_after) {
  const common::HttpError error = common::ToHttpError(status);
  http::HttpHeaders headers = {{"content-type", "application/json"}};
  if (retry_after > absl::ZeroDuration()) {
    headers.push_back({"retry-after", absl::StrCat(absl::ToInt64Seconds(
                                          absl::Ceil(retry_after, absl::Seconds(1))))});
  }
  writer.Send(error.http_status, std::move(headers), error.body);
}

OpenAiApi::OpenAiApi(WorkerClient* workers, ModelCatalog* catalog, RequestTracker* tracker,
                     PrepareStage* prepare, RequestOptions options,
                     std::function<std::string()> metrics_text)
    : workers_(workers),
      catalog_(catalog),
      tracker_(tracker),
      prepare_(prepare),
      options_(std::move(options)),
      metrics_text_(std::move(metrics_text)) {}

void OpenAiApi::Handle(http::HttpRequest request, std::shared_ptr<http::ResponseWriter> writer) {
  const std::string& path = request.path;
  const bool get = request.method == "GET" || request.method == "HEAD";
  const bool post = request.method == "POST";
  if (path == "/healthz" && get) {
    return writer->Send(200, {{"content-type", "application/json"}}, R"({"status":"ok"})");
  }
  if (path == "/readyz" && get) {
    if (!tracker_->draining() && workers_->AnyReady()) {
      return writer->Send(200, {{"content-type", "application/json"}}, R"({"status":"ready"})");
    }
    return SendOpenAiError(*writer,
                           absl::UnavailableError(tracker_->draining() ? "the gateway is draining"
                                                                       : "no worker is ready"));
  }
  if (path == "/metrics" && get && metrics_text_) {
    return writer->Send(200, {{"content-type", "text/plain; version=0.0.4"}}, metrics_text_());
  }
  if (path == "/v1/models" && get) return HandleModels(request, *writer);
  if (path == "/v1/completions" && post) {
    return HandleGeneration(OpenAiEndpoint::kCompletions, std::move(request), std::move(writer));
  }
  if (path == "/v1/chat/completions" && post) {
    return HandleGeneration(OpenAiEndpoint::kChatCompletions, std::move(request),
                            std::move(writer));
  }
  // Without metrics_text_ (a separate metrics port serves them) /metrics does not exist here.
  const bool known = path == "/healthz" || path == "/readyz" ||
                     (path == "/metrics" && metrics_text_) || path == "/v1/models" ||
                     path == "/v1/completions" || path == "/v1/chat/completions";
  if (known) {
    return writer->Send(
        405, {{"content-type", "application/json"}},
        DumpJson({{"error",
                   {{"message", absl::StrCat(request.method, " is not allowed on ", path)},
                    {"type", "invalid_request_error"},
                    {"param", nullptr},
                    {"code", "method_not_allowed"}}}}));
  }
  SendOpenAiError(*writer, absl::NotFoundError(absl::StrCat("no such endpoint: ", path)));
}

void OpenAiApi::HandleModels(const http::HttpRequest& request, http::ResponseWriter& writer) {
  absl::StatusOr<Principal> principal =
      tracker_->admission().Authenticate(request.Header("authorization"));
  if (!principal.ok()) return SendOpenAiError(writer, principal.status());
  Json data = Json::array();
  for (const ModelCatalog::ModelSummary& summary : catalog_->List()) {
    if (summary.ready_workers == 0) continue;
    data.push_back({{"id", summary.info->model_name()},
                    {"object", "model"},
                    {"created", 0},
                    {"owned_by", "llmserve"},
                    {"max_model_len", summary.info->max_model_len()}});
  }
  writer.Send(200, {{"content-type", "application/json"}},
              DumpJson({{"object", "list"}, {"data", data}}));
}

void OpenAiApi::HandleGeneration(OpenAiEndpoint endpoint, http::HttpRequest request,
                                 std::shared_ptr<http::ResponseWriter> writer) {
  std::shared_ptr<RequestLifecycle> lifecycle = tracker_->Begin(
      "http",
      endpoint == OpenAiEndpoint::kChatCompletions ? "/v1/chat/completions" : "/v1/completions",
      common::tracing::ParseTraceParent(request.Header("traceparent"),
                                        request.Header("tracestate")));
  lifecycle->set_operation(endpoint == OpenAiEndpoint::kChatCompletions ? "chat"
                                                                        : "text_completion");
  if (const common::tracing::Span& span = lifecycle->span(); span.recording()) {
    const std::string host(request.Header("host"));
    const size_t colon = host.rfind(':');
    span.SetAttribute("server.address", host.substr(0, colon));
    int64_t port = 0;
    if (colon != std::string::npos && absl::SimpleAtoi(host.substr(colon + 1), &port)) {
      span.SetAttribute("server.port", port);
    }
  }
  if (absl::Status accepting = tracker_->CheckAccepting(); !accepting.ok()) {
    lifecycle->Finish(accepting);
    return SendOpenAiError(*writer, accepting);
  }
  absl::StatusOr<Principal> principal =
      tracker_->admission().Authenticate(request.Header("authorization"));
  if (!principal.ok()) {
    lifecycle->Finish(principal.status());
    return SendOpenAiError(*writer, principal.status());
  }
  lifecycle->set_principal(*principal);
  // Everything else (the JSON body of up to --max_body_bytes, the template, the tokenizer) runs on
  // the prepare stage's threads, not on this I/O thread, which also writes every other stream of
  // its connections. A client that leaves while its request waits for a thread spares the work
  // (the job replaces this hook once it exists).
  auto ticket = std::make_shared<PrepareStage::Ticket>();
  writer->SetOnClose([ticket] { ticket->Cancel(); });
  const size_t body_bytes = request.body.size();
  common::tracing::Span prepare_span = lifecycle->StartChildSpan("prepare");
  const absl::Status submitted = prepare_->Run(
      body_bytes, ticket,
      [this, endpoint, body = std::move(request.body), principal = *std::move(principal), writer,
       lifecycle, prepare_span](absl::Status ready) mutable {
        if (!ready.ok()) {
          prepare_span.SetError(absl::StatusCodeToString(ready.code()), ready.message());
          prepare_span.End();
          lifecycle->Finish(ready);
          return SendOpenAiError(*writer, ready);
        }
        Prepare(PendingGeneration{.endpoint = endpoint,
                                  .principal = std::move(principal),
                                  .writer = std::move(writer),
                                  .lifecycle = std::move(lifecycle),
                                  .prepare_span = std::move(prepare_span)},
                body);
      });
  if (!submitted.ok()) {
    // A full queue is a busy gateway: retry soon (429).
    if (absl::IsResourceExhausted(submitted) && options_.metrics != nullptr) {
      options_.metrics->OnRateLimited();
    }
    prepare_span.SetError(absl::StatusCodeToString(submitted.code()), submitted.message());
    prepare_span.End();
    lifecycle->Finish(submitted);
    SendOpenAiError(*writer, submitted,
                    absl::IsResourceExhausted(submitted) ? absl::Seconds(1) : absl::ZeroDuration());
  }
}

namespace {

// The pipeline names the constraint by the public proto's field; the client wrote it as one of
// OpenAI's or vLLM's.
absl::Status NameConstraintField(const absl::Status& status, const std::string& field) {
  absl::string_view message = status.message();
  if (field.empty() || !absl::IsInvalidArgument(status) ||
      !absl::ConsumePrefix(&message, "structured_output: ")) {
    return status;
  }
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", message));
}

}  // namespace

void OpenAiApi::Prepare(PendingGeneration pending, absl::string_view body) {
  absl::StatusOr<OpenAiRequest> parsed = ParseOpenAiRequest(pending.endpoint, body);
  absl::StatusOr<std::shared_ptr<const ServedModel>> model =
      parsed.ok() ? catalog_->Resolve(parsed->request.model())
                  : absl::StatusOr<std::shared_ptr<const ServedModel>>(parsed.status());
  if (parsed.ok()) {
    pending.lifecycle->set_model(model.ok() ? (*model)->name() : parsed->request.model());
    pending.lifecycle->set_input_content(parsed->request);
  }
  if (!model.ok()) {
    pending.prepare_span.SetError(absl::StatusCodeToString(model.status().code()),
                                  model.status().message());
    pending.prepare_span.End();
    pending.lifecycle->Finish(model.status());
    return SendOpenAiError(*pending.writer, model.status());
  }
  absl::StatusOr<std::vector<PreparedRequest>> choices = PrepareChoices(
      parsed->request, *model, parsed->n, prepare_->limits(), prepare_->render_chat());
  if (!choices.ok()) choices = NameConstraintField(choices.status(), parsed->constraint_field);
  parsed->request.Clear();
  pending.parsed = *std::move(parsed);
  pending.model = *std::move(model);
  OnPrepared(std::move(pending), std::move(choices));
}

void OpenAiApi::OnPrepared(PendingGeneration pending,
                           absl::StatusOr<std::vector<PreparedRequest>> choices) {
  // A client that left while its prompt was being prepared needs no generation.
  if (choices.ok() && pending.writer->closed()) {
    choices = absl::CancelledError("the client disconnected");
  }
  if (!choices.ok()) {
    pending.prepare_span.SetError(absl::StatusCodeToString(choices.status().code()),
                                  choices.status().message());
    pending.prepare_span.End();
    pending.lifecycle->Finish(choices.status());
    return SendOpenAiError(*pending.writer, choices.status());
  }
  pending.prepare_span.SetAttribute("gen_ai.usage.input_tokens",
                                    int64_t{(*choices)[0].worker_request.prompt_token_ids_size()});
  pending.prepare_span.End();
  pending.lifecycle->set_request_parameters((*choices)[0].worker_request,
                                            static_cast<int>(choices->size()));
  StartGeneration(std::move(pending), *std::move(choices));
}

void OpenAiApi::StartGeneration(PendingGeneration pending, std::vector<PreparedRequest> requests) {
  const int prompt_tokens = requests[0].worker_request.prompt_token_ids_size();
  const int64_t max_tokens = requests[0].worker_request.max_tokens();
  GenerationOptions generation;
  generation.deadline = pending.lifecycle->arrival() + options_.request_timeout;
  generation.max_attempts = options_.max_attempts;
  generation.metrics = options_.metrics;
  generation.query_of_death = options_.query_of_death_guard;
  generation.api = "http";
  generation.in_flight = tracker_->generations();
  generation.tracer = pending.lifecycle->tracer();
  generation.parent_span = pending.lifecycle->span();
  if (options_.isolate_cache_per_principal) generation.cache_salt = pending.principal.name;
  const std::string id =
      absl::StrCat(pending.endpoint == OpenAiEndpoint::kChatCompletions ? "chatcmpl-" : "cmpl-",
                   requests[0].request_id);
  const int n = pending.parsed.n;
  const Principal principal = pending.principal;
  auto job = std::make_shared<OpenAiJob>(pending.endpoint, std::move(pending.parsed),
                                         std::move(pending.model), std::move(pending.writer), id,
                                         prompt_tokens, std::move(pending.lifecycle));
  job->lifecycle().set_request_id(id);
  job->WatchClose();
  job->lifecycle().Admit(principal, prompt_tokens + n * max_tokens,
                         [job, workers = workers_, requests = std::move(requests), generation](
                             absl::Status admitted, absl::Duration retry_after) {
                           if (!admitted.ok()) return job->Refuse(admitted, retry_after);
                           job->Start(workers, requests, generation);
                         });
}

}  // namespace llmserve::gateway
