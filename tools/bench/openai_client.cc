#include "tools/bench/openai_client.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tools/bench/sse_parser.h"

namespace llmserve::tools {
namespace {

using Json = nlohmann::json;

// Bytes of an error body kept for its message.
constexpr size_t kMaxErrorBody = 64 << 10;

std::vector<std::pair<std::string, std::string>> AuthHeaders(const std::string& api_key) {
  if (api_key.empty()) return {};
  return {{"Authorization", absl::StrCat("Bearer ", api_key)}};
}

// The "message" of an OpenAI error object ({"error": {"message": ...}}), or the body itself.
std::string ErrorMessage(const std::string& body) {
  const Json json = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (json.is_object()) {
    auto error = json.find("error");
    if (error != json.end()) {
      if (error->is_string()) return error->get<std::string>();
      if (error->is_object() && error->contains("message") && (*error)["message"].is_string()) {
        return (*error)["message"].get<std::string>();
      }
    }
  }
  return body.substr(0, 300);
}

bool HasChoices(const Json& event) {
  auto choices = event.find("choices");
  return choices != event.end() && choices->is_array() && !choices->empty();
}

// The text an event carries for its first choice: "text" (completions) or "delta.content" /
// "delta.reasoning_content" (chat).
std::string ChoiceText(const Json& event) {
  if (!HasChoices(event)) return "";
  auto choices = event.find("choices");
  const Json& choice = (*choices)[0];
  if (!choice.is_object()) return "";
  if (auto text = choice.find("text"); text != choice.end() && text->is_string()) {
    return text->get<std::string>();
  }
  if (auto delta = choice.find("delta"); delta != choice.end() && delta->is_object()) {
    std::string out;
    for (const char* field : {"content", "reasoning_content"}) {
      if (auto part = delta->find(field); part != delta->end() && part->is_string()) {
        out += part->get<std::string>();
      }
    }
    return out;
  }
  return "";
}

// Whether an event carries a step of generation: a choice with text or logprobs, or one that
// has not finished (chat's role chunk, a token with no visible text).
bool IsTokenEvent(const Json& event) {
  if (!HasChoices(event)) return false;
  const Json& choice = event["choices"][0];
  if (!choice.is_object()) return false;
  if (!ChoiceText(event).empty()) return true;
  if (auto logprobs = choice.find("logprobs"); logprobs != choice.end() && !logprobs->is_null()) {
    return true;
  }
  auto finish = choice.find("finish_reason");
  return finish == choice.end() || finish->is_null();
}

}  // namespace

OpenAiClient::OpenAiClient(OpenAiClientOptions options)
    : options_(std::move(options)),
      path_(!options_.path.empty()                       ? options_.path
            : options_.endpoint == OpenAiEndpoint::kChat ? "/v1/chat/completions"
                                                         : "/v1/completions"),
      pool_(options_.target) {}

Json OpenAiClient::RequestBody(const BenchRequest& request) const {
  Json body = {{"model", options_.model},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}},
               {"temperature", 0},
               {"ignore_eos", true}};
  if (options_.endpoint == OpenAiEndpoint::kChat) {
    Json messages = Json::array();
    if (!request.messages.empty()) {
      for (const ChatTurn& turn : request.messages) {
        messages.push_back({{"role", turn.role}, {"content", turn.content}});
      }
    } else {
      messages.push_back({{"role", "user"}, {"content", request.prompt_text}});
    }
    body["messages"] = std::move(messages);
    body["max_completion_tokens"] = request.output_len;
  } else {
    if (!request.prompt_text.empty()) {
      body["prompt"] = request.prompt_text;
    } else {
      body["prompt"] = request.prompt_ids;
    }
    body["max_tokens"] = request.output_len;
  }
  for (const auto& [key, value] : options_.extra_body.items()) body[key] = value;
  return body;
}

RequestOutcome OpenAiClient::Send(const std::string& /*id*/, const BenchRequest& request,
                                  absl::Time deadline) {
  const std::string body = RequestBody(request).dump();
  const std::vector<std::pair<std::string, std::string>> headers = AuthHeaders(options_.api_key);
  for (int attempt = 0;; ++attempt) {
    RequestOutcome outcome;
    outcome.prompt_tokens = request.prompt_tokens;
    absl::StatusOr<std::unique_ptr<HttpConnection>> connection =
        pool_.Take(std::min(options_.connect_timeout, deadline - absl::Now()),
                   /*fresh=*/attempt > 0);
    if (!connection.ok()) {
      outcome.status = "connect";
      outcome.error = std::string(connection.status().message());
      return outcome;
    }
    const absl::Time start = absl::Now();
    absl::Time last_token;
    int status = 0;
    std::string error_body;
    bool done = false, stream_error = false;
    bool first_event_seen = false;
    int64_t text_events = 0, usage_tokens = -1;
    SseParser sse([&](const SseEvent& event) {
      if (stream_error) return;
      if (event.data == "[DONE]") {
        done = true;
        return;
      }
      const Json json = Json::parse(event.data, nullptr, /*allow_exceptions=*/false);
      if (!json.is_object()) return;
      if (json.contains("error")) {
        stream_error = true;
        outcome.error = ErrorMessage(event.data);
        return;
      }
      // As vLLM's benchmark, every event with a choice is a step, the first (chat's role chunk,
      // or the first token) giving TTFT. A choice's closing event (a finish reason and no text)
      // is not a token unless nothing came before it. A server may send no event for a token
      // that decodes to nothing (llmserve's gateway does so unless logprobs are asked for):
      // its time then shows in the next gap.
      const absl::Time now = absl::Now();
      if (IsTokenEvent(json) || (!first_event_seen && HasChoices(json))) {
        if (!first_event_seen) {
          first_event_seen = true;
          outcome.ttft_s = absl::ToDoubleSeconds(now - start);
        } else {
          outcome.itl_s.push_back(absl::ToDoubleSeconds(now - last_token));
        }
        last_token = now;
      }
      if (!ChoiceText(json).empty()) ++text_events;
      if (auto usage = json.find("usage"); usage != json.end() && usage->is_object()) {
        if (usage->contains("completion_tokens") && (*usage)["completion_tokens"].is_number()) {
          usage_tokens = (*usage)["completion_tokens"].get<int64_t>();
        }
        if (usage->contains("prompt_tokens") && (*usage)["prompt_tokens"].is_number()) {
          outcome.prompt_tokens = (*usage)["prompt_tokens"].get<int64_t>();
        }
      }
    });
    bool answered = false;
    const absl::Status exchanged =
        (*connection)
            ->Exchange(
                "POST", path_, body, headers, deadline,
                [&](const HttpResponseHead& head) {
                  answered = true;
                  status = head.status;
                },
                [&](absl::string_view bytes) {
                  if (status == 200) {
                    sse.Feed(bytes);
                  } else if (error_body.size() < kMaxErrorBody) {
                    absl::StrAppend(&error_body,
                                    bytes.substr(0, kMaxErrorBody - error_body.size()));
                  }
                });
    outcome.e2e_s = absl::ToDoubleSeconds(absl::Now() - start);
    const bool retry = !exchanged.ok() && !answered && (*connection)->reused() && attempt == 0 &&
                       absl::IsUnavailable(exchanged);
    pool_.Return(*std::move(connection));
    if (retry) continue;  // a kept-alive connection the server had closed: again, on a new one
    if (status != 0 && status != 200) {
      outcome.status = absl::StrCat("http ", status);
      outcome.error = ErrorMessage(error_body);
    } else if (absl::IsDeadlineExceeded(exchanged)) {
      outcome.status = "timeout";
      outcome.error = std::string(exchanged.message());
    } else if (stream_error) {
      outcome.status = "stream error";
    } else if (!exchanged.ok()) {
      outcome.status = answered ? "truncated" : "bad response";
      outcome.error = std::string(exchanged.message());
    } else if (!done) {
      outcome.status = "truncated";
      outcome.error = "the event stream ended without data: [DONE]";
    } else {
      outcome.ok = true;
      outcome.status = "ok";
      if (!first_event_seen) outcome.ttft_s = outcome.e2e_s;  // no choice at all: all at the end
    }
    outcome.output_tokens = usage_tokens >= 0 ? usage_tokens : text_events;
    return outcome;
  }
}

absl::StatusOr<std::string> FirstServedModel(const HttpTarget& target, const std::string& api_key,
                                             absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::StatusOr<std::unique_ptr<HttpConnection>> connection =
      HttpConnection::Connect(target, timeout);
  if (!connection.ok()) return connection.status();
  int status = 0;
  std::string body;
  const absl::Status exchanged =
      (*connection)
          ->Exchange(
              "GET", "/v1/models", "", AuthHeaders(api_key), deadline,
              [&](const HttpResponseHead& head) { status = head.status; },
              [&](absl::string_view bytes) {
                if (body.size() < (1 << 20)) absl::StrAppend(&body, bytes);
              });
  if (!exchanged.ok()) {
    return absl::UnavailableError(absl::StrCat("GET /v1/models: ", exchanged.message()));
  }
  if (status != 200) {
    return absl::UnavailableError(
        absl::StrCat("GET /v1/models answered ", status, ": ", ErrorMessage(body)));
  }
  const Json json = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object() || !json.contains("data") || !json["data"].is_array()) {
    return absl::UnavailableError("GET /v1/models did not answer a model list");
  }
  for (const Json& model : json["data"]) {
    if (model.is_object() && model.contains("id") && model["id"].is_string()) {
      return model["id"].get<std::string>();
    }
  }
  return absl::NotFoundError("the server lists no model (GET /v1/models)");
}

}  // namespace llmserve::tools
