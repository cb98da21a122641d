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
#include "gateway/frontends/openai/embeddings_job.h"
#include "gateway/frontends/openai/embeddings_request.h"
#include "gateway/frontends/openai/lora_admin_api.h"
#include "gateway/frontends/openai/openai_logprobs.h"
#include "gateway/frontends/openai/responses_job.h"
#include "gateway/frontends/openai/responses_request.h"
#include "gateway/http/sse.h"
#include "gateway/pipeline/embedding_run.h"

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

// One OpenAI request's response (whole or streamed), from its run's events: n choices, their
// results, and the usage.
class OpenAiJob final : public RequestSink {
 public:
  OpenAiJob(OpenAiEndpoint endpoint, std::shared_ptr<http::ResponseWriter> writer)
      : endpoint_(endpoint),
        writer_(std::move(writer)),
        created_(absl::ToUnixSeconds(absl::Now())) {}

  void set_run(std::weak_ptr<RequestRun> run) { run_ = std::move(run); }

  // On the prepare thread, before the run starts any generation: what the response needs of the
  // request (its `request` cleared), its model and the response's id.
  void SetPrepared(OpenAiRequest parsed, std::shared_ptr<const ServedModel> model, std::string id) {
    absl::MutexLock lock(&mutex_);
    parsed_ = std::move(parsed);
    model_ = std::move(model);
    id_ = std::move(id);
    choices_.resize(parsed_.n);
  }

  // Nothing was generated: the error is the whole response.
  void OnRefused(const absl::Status& status, absl::Duration retry_after) override {
    http::SendError(*writer_, status, retry_after);
  }
  // A streamed response starts with the first output of any choice (see OpenStreamLocked), so
  // that what fails before it (no worker to route to, a worker refusing the request) is answered
  // with its real status.
  void OnStarted(const PreparedRun& run) override {
    absl::MutexLock lock(&mutex_);
    prompt_tokens_ = run.choices[0].worker_request.prompt_token_ids_size();
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
             const Json& logprobs) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
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

  void OnDelta(int index, GenerationDelta delta) override {
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

  void OnChoiceEnd(int index, const GenerationResult* result, const absl::Status& error) override {
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
    }
    // The response will be this error: the other choices need not run on.
    if (failed) {
      if (std::shared_ptr<RequestRun> run = run_.lock()) run->Cancel();
    }
  }

  // Every choice ended (and the request was counted): the response, or its end.
  void OnCompleted(const absl::Status&) override {
    absl::MutexLock lock(&mutex_);
    completed_ = true;
    int64_t completion_tokens = 0;
    for (const Choice& choice : choices_) completion_tokens += choice.completion_tokens;
    // Nothing was sent yet: the first error is the whole response, with its HTTP status.
    if (FailsAsAWholeLocked()) return http::SendError(*writer_, first_error_);
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
  std::shared_ptr<http::ResponseWriter> writer_;
  const int64_t created_;
  // To cancel the other choices when one fails the whole request.
  std::weak_ptr<RequestRun> run_;
  absl::Mutex mutex_;
  // Set by SetPrepared, before any other event but OnRefused.
  OpenAiRequest parsed_ ABSL_GUARDED_BY(mutex_);
  std::shared_ptr<const ServedModel> model_ ABSL_GUARDED_BY(mutex_);
  std::string id_ ABSL_GUARDED_BY(mutex_);
  int64_t prompt_tokens_ ABSL_GUARDED_BY(mutex_) = 0;
  std::vector<Choice> choices_ ABSL_GUARDED_BY(mutex_);
  bool completed_ ABSL_GUARDED_BY(mutex_) = false;
  // The first choice to fail, in time.
  absl::Status first_error_ ABSL_GUARDED_BY(mutex_);
  // Streamed: whether the headers (200, text/event-stream) were sent.
  bool stream_started_ ABSL_GUARDED_BY(mutex_) = false;
};

}  // namespace

OpenAiApi::OpenAiApi(const RequestRunner* runner, const WorkerClient* workers,
                     std::function<std::string()> metrics_text)
    : runner_(runner), workers_(workers), metrics_text_(std::move(metrics_text)) {}

void OpenAiApi::Handle(http::HttpRequest request, std::shared_ptr<http::ResponseWriter> writer) {
  const std::string& path = request.path;
  const bool get = request.method == "GET" || request.method == "HEAD";
  const bool post = request.method == "POST";
  if (path == "/healthz" && get) {
    return writer->Send(200, {{"content-type", "application/json"}}, R"({"status":"ok"})");
  }
  if (path == "/readyz" && get) {
    if (!runner_->tracker().draining() && workers_->AnyReady()) {
      return writer->Send(200, {{"content-type", "application/json"}}, R"({"status":"ready"})");
    }
    return http::SendError(
        *writer, absl::UnavailableError(runner_->tracker().draining() ? "the gateway is draining"
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
  if (path == "/v1/responses" && post)
    return HandleResponses(std::move(request), std::move(writer));
  if (path == "/v1/embeddings" && post) {
    return HandleEmbeddings(std::move(request), std::move(writer));
  }
  if (path == "/v1/load_lora_adapter" && post) {
    return HandleLoraAdmin(LoraAdminAction::kLoad, *runner_, request, std::move(writer));
  }
  if (path == "/v1/unload_lora_adapter" && post) {
    return HandleLoraAdmin(LoraAdminAction::kUnload, *runner_, request, std::move(writer));
  }
  // Without metrics_text_ (a separate metrics port serves them) /metrics does not exist here.
  const bool known = path == "/healthz" || path == "/readyz" ||
                     (path == "/metrics" && metrics_text_) || path == "/v1/models" ||
                     path == "/v1/completions" || path == "/v1/chat/completions" ||
                     path == "/v1/responses" || path == "/v1/embeddings" ||
                     path == "/v1/load_lora_adapter" || path == "/v1/unload_lora_adapter";
  if (known) {
    return http::SendError(*writer, common::MethodNotAllowed(request.method, path));
  }
  http::SendError(*writer, absl::NotFoundError(absl::StrCat("no such endpoint: ", path)));
}

void OpenAiApi::HandleModels(const http::HttpRequest& request, http::ResponseWriter& writer) {
  absl::StatusOr<std::vector<ModelCatalog::ModelSummary>> models =
      runner_->ListModels(request.Header("authorization"));
  if (!models.ok()) return http::SendError(writer, models.status());
  Json data = Json::array();
  for (const ModelCatalog::ModelSummary& summary : *models) {
    data.push_back({{"id", summary.name},
                    {"object", "model"},
                    {"created", 0},
                    {"owned_by", "llmserve"},
                    {"root", summary.parent.empty() ? summary.name : summary.parent},
                    {"parent", summary.parent.empty() ? Json() : Json(summary.parent)},
                    {"max_model_len", summary.info->max_model_len()}});
  }
  writer.Send(200, {{"content-type", "application/json"}},
              DumpJson({{"object", "list"}, {"data", data}}));
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

// What every OpenAI endpoint does with its parsed request on the prepare stage: the lifecycle
// learns its input and model, the model is resolved, and the request is prepared as `n` choices
// (a constraint's error named by the field the client wrote).
absl::StatusOr<PreparedRun> PrepareParsed(const RequestRunner& runner, RequestLifecycle& lifecycle,
                                          const OpenAiRequest& parsed) {
  lifecycle.set_input_content(parsed.request);
  absl::StatusOr<std::shared_ptr<const ServedModel>> model =
      runner.ResolveModel(lifecycle, parsed.request.model());
  lifecycle.set_model(model.ok() ? (*model)->name() : parsed.request.model());
  if (!model.ok()) return model.status();
  absl::StatusOr<std::vector<PreparedRequest>> choices = PrepareChoices(
      parsed.request, *model, parsed.n, runner.prepare().limits(), runner.prepare().render_chat());
  if (!choices.ok()) return NameConstraintField(choices.status(), parsed.constraint_field);
  return PreparedRun{.model = *std::move(model), .choices = *std::move(choices)};
}

}  // namespace

std::shared_ptr<RequestLifecycle> OpenAiApi::BeginLifecycle(const http::HttpRequest& request,
                                                            const char* operation) const {
  std::shared_ptr<RequestLifecycle> lifecycle =
      runner_->tracker().Begin("http", request.path,
                               common::tracing::ParseTraceParent(request.Header("traceparent"),
                                                                 request.Header("tracestate")));
  lifecycle->set_operation(operation);
  if (const common::tracing::Span& span = lifecycle->span(); span.recording()) {
    const std::string host(request.Header("host"));
    const size_t colon = host.rfind(':');
    span.SetAttribute("server.address", host.substr(0, colon));
    int64_t port = 0;
    if (colon != std::string::npos && absl::SimpleAtoi(host.substr(colon + 1), &port)) {
      span.SetAttribute("server.port", port);
    }
  }
  return lifecycle;
}

std::shared_ptr<RequestRun> OpenAiApi::NewRun(std::shared_ptr<RequestLifecycle> lifecycle,
                                              std::shared_ptr<RequestSink> sink,
                                              http::ResponseWriter& writer) const {
  std::shared_ptr<RequestRun> run = runner_->NewRun(std::move(lifecycle), std::move(sink));
  // A client that leaves (even before its request started, or while it is queued) cancels
  // everything of its request.
  writer.SetOnClose([weak = std::weak_ptr<RequestRun>(run)] {
    if (std::shared_ptr<RequestRun> live = weak.lock()) live->Cancel();
  });
  return run;
}

namespace {

// Prepares a request's run from its body, on a prepare thread.
using BodyPreparer =
    absl::AnyInvocable<absl::StatusOr<PreparedRun>(const std::string& body,
                                                   RequestLifecycle& lifecycle) &&>;

// What every POST endpoint hands the runner: the caller's credentials, the body's size, and the
// body, parsed and prepared by `prepare` on a prepare thread (up to --max_body_bytes of JSON, a
// template and the tokenizer: this I/O thread also writes every other stream of its
// connections).
RunInput BodyInput(http::HttpRequest& request, BodyPreparer prepare) {
  RunInput input;
  input.authorization = std::string(request.Header("authorization"));
  input.prompt_bytes = request.body.size();
  input.prepare = [body = std::move(request.body),
                   prepare = std::move(prepare)](RequestLifecycle& lifecycle) mutable {
    return std::move(prepare)(body, lifecycle);
  };
  return input;
}

}  // namespace

void OpenAiApi::HandleGeneration(OpenAiEndpoint endpoint, http::HttpRequest request,
                                 std::shared_ptr<http::ResponseWriter> writer) {
  const bool chat = endpoint == OpenAiEndpoint::kChatCompletions;
  auto job = std::make_shared<OpenAiJob>(endpoint, writer);
  std::shared_ptr<RequestRun> run =
      NewRun(BeginLifecycle(request, chat ? "chat" : "text_completion"), job, *writer);
  job->set_run(run);
  run->Start(BodyInput(
      request,
      [runner = runner_, endpoint, job](
          const std::string& body, RequestLifecycle& lifecycle) -> absl::StatusOr<PreparedRun> {
        absl::StatusOr<OpenAiRequest> parsed = ParseOpenAiRequest(endpoint, body);
        if (!parsed.ok()) return parsed.status();
        absl::StatusOr<PreparedRun> run = PrepareParsed(*runner, lifecycle, *parsed);
        if (!run.ok()) return run.status();
        std::string id =
            absl::StrCat(endpoint == OpenAiEndpoint::kChatCompletions ? "chatcmpl-" : "cmpl-",
                         run->choices[0].request_id);
        lifecycle.set_request_id(id);
        parsed->request.Clear();
        job->SetPrepared(*std::move(parsed), run->model, std::move(id));
        return run;
      }));
}

void OpenAiApi::HandleResponses(http::HttpRequest request,
                                std::shared_ptr<http::ResponseWriter> writer) {
  auto job = std::make_shared<ResponsesJob>(writer);
  std::shared_ptr<RequestRun> run = NewRun(BeginLifecycle(request, "chat"), job, *writer);
  run->Start(BodyInput(
      request,
      [runner = runner_, job](const std::string& body,
                              RequestLifecycle& lifecycle) -> absl::StatusOr<PreparedRun> {
        absl::StatusOr<ResponsesRequest> parsed = ParseResponsesRequest(body);
        if (!parsed.ok()) return parsed.status();
        absl::StatusOr<PreparedRun> run = PrepareParsed(*runner, lifecycle, parsed->chat);
        if (!run.ok()) return run.status();
        std::string id = run->choices[0].request_id;
        lifecycle.set_request_id(absl::StrCat("resp_", id));
        parsed->chat.request.Clear();
        job->SetPrepared(*std::move(parsed), run->model, std::move(id));
        return run;
      }));
}

void OpenAiApi::HandleEmbeddings(http::HttpRequest request,
                                 std::shared_ptr<http::ResponseWriter> writer) {
  auto job = std::make_shared<EmbeddingsJob>(writer);
  std::shared_ptr<RequestRun> run = NewRun(BeginLifecycle(request, "embeddings"), job, *writer);
  run->Start(BodyInput(
      request,
      [runner = runner_, job](const std::string& body,
                              RequestLifecycle& lifecycle) -> absl::StatusOr<PreparedRun> {
        absl::StatusOr<EmbeddingsRequest> parsed = ParseEmbeddingsRequest(body);
        if (!parsed.ok()) return parsed.status();
        absl::StatusOr<std::shared_ptr<const ServedModel>> model =
            runner->ResolveModel(lifecycle, parsed->model);
        lifecycle.set_model(model.ok() ? (*model)->name() : parsed->model);
        if (!model.ok()) return model.status();
        absl::StatusOr<PreparedRun> run = PrepareEmbeddings(
            *model, parsed->inputs, parsed->dimensions, "", runner->prepare().limits());
        if (!run.ok()) return run.status();
        lifecycle.set_request_id(absl::StrCat("embd-", run->choices[0].request_id));
        job->SetBase64(parsed->base64);
        return run;
      }));
}

}  // namespace llmserve::gateway
