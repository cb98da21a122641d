#include "gateway/frontends/openai/responses_job.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gateway/http/sse.h"
#include "gateway/tool_calls/stream_delta.h"

namespace llmserve::gateway {
namespace {

// Named apart from the other frontends' helpers: the unity build joins their files.
std::string ResponsesJsonText(const openai_json::Json& json) {
  return json.dump(-1, ' ', false, openai_json::Json::error_handler_t::replace);
}

// A message item's one content part.
openai_json::Json OutputTextPart(const std::string& text) {
  return {{"type", "output_text"}, {"text", text}, {"annotations", openai_json::Json::array()}};
}

openai_json::Json ResponsesErrorJson(const absl::Status& status) {
  return {{"code", absl::AsciiStrToLower(absl::StatusCodeToString(status.code()))},
          {"message", std::string(status.message())}};
}

}  // namespace

ResponsesJob::ResponsesJob(std::shared_ptr<http::ResponseWriter> writer)
    : writer_(std::move(writer)), created_(absl::ToUnixSeconds(absl::Now())) {}

void ResponsesJob::SetPrepared(ResponsesRequest parsed, std::shared_ptr<const ServedModel> model,
                               std::string id) {
  absl::MutexLock lock(&mutex_);
  parsed_ = std::move(parsed);
  model_ = std::move(model);
  id_ = std::move(id);
}

void ResponsesJob::OnRefused(const absl::Status& status, absl::Duration retry_after) {
  http::SendError(*writer_, status, retry_after);
}

void ResponsesJob::OnStarted(const PreparedRun& run) {
  absl::MutexLock lock(&mutex_);
  prompt_tokens_ = run.choices[0].worker_request.prompt_token_ids_size();
}

ResponsesJob::Json ResponsesJob::ReasoningItemLocked(const char* status) const {
  return {{"id", absl::StrCat("rs_", id_)},
          {"type", "reasoning"},
          {"status", status},
          {"summary", Json::array()},
          {"content", Json::array({{{"type", "reasoning_text"}, {"text", reasoning_}}})}};
}

ResponsesJob::Json ResponsesJob::MessageItemLocked(const char* status) const {
  Json content = Json::array();
  if (std::string(status) != "in_progress") {
    content.push_back(OutputTextPart(text_));
  }
  return {{"id", absl::StrCat("msg_", id_)},
          {"type", "message"},
          {"status", status},
          {"role", "assistant"},
          {"content", std::move(content)}};
}

ResponsesJob::Json ResponsesJob::CallItem(size_t call, const char* status) const {
  const ::llmserve::v1::ToolCall& tool_call = calls_[call];
  return {{"id", absl::StrCat("fc_", id_, "_", call)},
          {"type", "function_call"},
          {"status", status},
          {"call_id", tool_call.id()},
          {"name", tool_call.name()},
          {"arguments", std::string(status) == "in_progress" ? "" : tool_call.arguments()}};
}

ResponsesJob::Json ResponsesJob::ResponseLocked(const char* status) const {
  Json output = Json::array();
  const bool done = std::string(status) != "in_progress";
  if (done) {
    if (reasoned_) output.push_back(ReasoningItemLocked("completed"));
    if (!text_.empty() || (calls_.empty() && !reasoned_)) {
      output.push_back(MessageItemLocked(length_cut_ ? "incomplete" : "completed"));
    }
    for (size_t i = 0; i < calls_.size(); ++i) output.push_back(CallItem(i, "completed"));
  }
  Json response = {{"id", absl::StrCat("resp_", id_)},
                   {"object", "response"},
                   {"created_at", created_},
                   {"status", status},
                   {"error", nullptr},
                   {"incomplete_details", nullptr},
                   {"model", model_ != nullptr ? model_->name() : ""},
                   {"output", std::move(output)},
                   {"previous_response_id", nullptr},
                   {"store", false}};
  for (const auto& [key, value] : parsed_.echo.items()) response[key] = value;
  if (std::string(status) == "incomplete") {
    response["incomplete_details"] = {{"reason", "max_output_tokens"}};
  }
  if (std::string(status) == "failed") response["error"] = ResponsesErrorJson(error_);
  if (done) {
    response["usage"] = {{"input_tokens", prompt_tokens_},
                         {"input_tokens_details", {{"cached_tokens", cached_tokens_}}},
                         {"output_tokens", output_tokens_},
                         {"output_tokens_details", {{"reasoning_tokens", reasoning_tokens_}}},
                         {"total_tokens", prompt_tokens_ + output_tokens_}};
  } else {
    response["usage"] = nullptr;
  }
  return response;
}

void ResponsesJob::EmitLocked(const char* type, Json data) {
  Json event = {{"type", type}, {"sequence_number", sequence_++}};
  for (auto& [key, value] : data.items()) event[key] = std::move(value);
  writer_->Write(
      absl::StrCat("event: ", type, "\n", http::FormatSseEvent(ResponsesJsonText(event))));
}

void ResponsesJob::OpenStreamLocked() {
  if (stream_started_) return;
  stream_started_ = true;
  writer_->StartStream(200, {{"content-type", "text/event-stream"}, {"cache-control", "no-cache"}});
  EmitLocked("response.created", {{"response", ResponseLocked("in_progress")}});
  EmitLocked("response.in_progress", {{"response", ResponseLocked("in_progress")}});
}

void ResponsesJob::CloseReasoningLocked() {
  if (reasoning_index_ < 0 || reasoning_closed_) return;
  reasoning_closed_ = true;
  const std::string item_id = absl::StrCat("rs_", id_);
  EmitLocked("response.reasoning_text.done", {{"item_id", item_id},
                                              {"output_index", reasoning_index_},
                                              {"content_index", 0},
                                              {"text", reasoning_}});
  EmitLocked("response.output_item.done",
             {{"output_index", reasoning_index_}, {"item", ReasoningItemLocked("completed")}});
}

void ResponsesJob::OpenMessageLocked() {
  if (message_index_ >= 0) return;
  CloseReasoningLocked();  // no reasoning follows an answer
  message_index_ = next_index_++;
  EmitLocked("response.output_item.added",
             {{"output_index", message_index_}, {"item", MessageItemLocked("in_progress")}});
  EmitLocked("response.content_part.added", {{"item_id", absl::StrCat("msg_", id_)},
                                             {"output_index", message_index_},
                                             {"content_index", 0},
                                             {"part", OutputTextPart("")}});
}

void ResponsesJob::CloseMessageLocked() {
  if (message_index_ < 0 || message_closed_) return;
  message_closed_ = true;
  const std::string item_id = absl::StrCat("msg_", id_);
  EmitLocked("response.output_text.done", {{"item_id", item_id},
                                           {"output_index", message_index_},
                                           {"content_index", 0},
                                           {"text", text_},
                                           {"logprobs", Json::array()}});
  EmitLocked("response.content_part.done", {{"item_id", item_id},
                                            {"output_index", message_index_},
                                            {"content_index", 0},
                                            {"part", OutputTextPart(text_)}});
  EmitLocked("response.output_item.done",
             {{"output_index", message_index_},
              {"item", MessageItemLocked(length_cut_ ? "incomplete" : "completed")}});
}

void ResponsesJob::OpenCallLocked(size_t call, const std::string& call_id,
                                  const std::string& name) {
  if (call_indexes_.size() <= call) call_indexes_.resize(call + 1, -1);
  if (call_indexes_[call] >= 0) return;
  // Items go one after another: the answer so far ends here.
  CloseReasoningLocked();
  CloseMessageLocked();
  call_indexes_[call] = next_index_++;
  EmitLocked("response.output_item.added", {{"output_index", call_indexes_[call]},
                                            {"item",
                                             {{"id", absl::StrCat("fc_", id_, "_", call)},
                                              {"type", "function_call"},
                                              {"status", "in_progress"},
                                              {"call_id", call_id},
                                              {"name", name},
                                              {"arguments", ""}}}});
}

void ResponsesJob::OnDelta(int, GenerationDelta delta) {
  absl::MutexLock lock(&mutex_);
  if (finished_) return;
  reasoning_ += delta.reasoning;
  text_ += delta.text;
  if (!parsed_.chat.stream) return;
  if (!delta.reasoning.empty()) {
    OpenStreamLocked();
    if (reasoning_index_ < 0) {
      reasoning_index_ = next_index_++;
      Json item = ReasoningItemLocked("in_progress");
      item["content"] = Json::array();
      EmitLocked("response.output_item.added",
                 {{"output_index", reasoning_index_}, {"item", std::move(item)}});
    }
    EmitLocked("response.reasoning_text.delta", {{"item_id", absl::StrCat("rs_", id_)},
                                                 {"output_index", reasoning_index_},
                                                 {"content_index", 0},
                                                 {"delta", delta.reasoning}});
  }
  // Text after a call (rare) is in the final message only: its item ended when the call began.
  if (!delta.text.empty() && !message_closed_) {
    OpenStreamLocked();
    OpenMessageLocked();
    EmitLocked("response.output_text.delta", {{"item_id", absl::StrCat("msg_", id_)},
                                              {"output_index", message_index_},
                                              {"content_index", 0},
                                              {"delta", delta.text},
                                              {"logprobs", Json::array()}});
  }
  for (const tool_calls::ToolCallDelta& call : delta.tool_calls) {
    OpenStreamLocked();
    const size_t index = static_cast<size_t>(call.index);
    OpenCallLocked(index, call.id, call.name);
    if (call.arguments.empty()) continue;
    EmitLocked("response.function_call_arguments.delta",
               {{"item_id", absl::StrCat("fc_", id_, "_", index)},
                {"output_index", call_indexes_[index]},
                {"delta", call.arguments}});
  }
}

void ResponsesJob::OnChoiceEnd(int, const GenerationResult* result, const absl::Status& error) {
  absl::MutexLock lock(&mutex_);
  if (finished_) return;
  if (result == nullptr) {
    error_ = error;
    return;
  }
  length_cut_ = result->finish_reason == ::llmserve::v1::FINISH_REASON_LENGTH;
  reasoned_ = result->reasoned;
  output_tokens_ = result->usage.completion_tokens();
  reasoning_tokens_ = result->usage.reasoning_tokens();
  cached_tokens_ = result->usage.cached_prompt_tokens();
  calls_ = result->tool_calls;
}

void ResponsesJob::OnCompleted(const absl::Status&) {
  absl::MutexLock lock(&mutex_);
  finished_ = true;
  const char* status = !error_.ok() ? "failed" : length_cut_ ? "incomplete" : "completed";
  if (!parsed_.chat.stream) {
    if (!error_.ok()) return http::SendError(*writer_, error_);
    writer_->Send(200, {{"content-type", "application/json"}},
                  ResponsesJsonText(ResponseLocked(status)));
    return;
  }
  // Nothing was sent yet: the error is the whole answer, with its HTTP status.
  if (!error_.ok() && !stream_started_) return http::SendError(*writer_, error_);
  OpenStreamLocked();
  if (error_.ok()) {
    // A reply that was all reasoning never sent its end.
    if (reasoned_ && reasoning_index_ < 0) {
      reasoning_index_ = next_index_++;
      EmitLocked("response.output_item.added", {{"output_index", reasoning_index_},
                                                {"item", ReasoningItemLocked("in_progress")}});
    }
    CloseReasoningLocked();
    if (!text_.empty() || (calls_.empty() && !reasoned_)) OpenMessageLocked();
    CloseMessageLocked();
    for (size_t i = 0; i < calls_.size(); ++i) {
      const bool streamed = i < call_indexes_.size() && call_indexes_[i] >= 0;
      OpenCallLocked(i, calls_[i].id(), calls_[i].name());
      const int index = call_indexes_[i];
      const std::string item_id = absl::StrCat("fc_", id_, "_", i);
      if (!streamed) {
        EmitLocked(
            "response.function_call_arguments.delta",
            {{"item_id", item_id}, {"output_index", index}, {"delta", calls_[i].arguments()}});
      }
      EmitLocked("response.function_call_arguments.done", {{"item_id", item_id},
                                                           {"output_index", index},
                                                           {"name", calls_[i].name()},
                                                           {"arguments", calls_[i].arguments()}});
      EmitLocked("response.output_item.done",
                 {{"output_index", index}, {"item", CallItem(i, "completed")}});
    }
  }
  const std::string event = absl::StrCat("response.", status);
  EmitLocked(event.c_str(), {{"response", ResponseLocked(status)}});
  writer_->Finish();
}

}  // namespace llmserve::gateway
