// One Responses API request's answer (POST /v1/responses), from its run's events: the response
// object, or with `stream: true` its event stream.
//
// The response object: id "resp_...", object "response", status "completed" (or "incomplete"
// with incomplete_details.reason "max_output_tokens" when the length limit ended it), the
// request's echoed settings, and `output`: a reasoning item (when the reasoning parser found a
// think block; its text as a reasoning_text content part), a message item (role assistant, one
// output_text part) when there is an answer, and a function_call item per tool call (call_id,
// name, arguments). Usage: input_tokens (input_tokens_details.cached_tokens), output_tokens
// (output_tokens_details.reasoning_tokens), total_tokens.
//
// Streamed, as OpenAI sends it (SSE with `event: <type>` and a `sequence_number` in each data):
// response.created, response.in_progress; for reasoning response.output_item.added,
// response.reasoning_text.delta..., response.reasoning_text.done, response.output_item.done; for
// the answer response.output_item.added, response.content_part.added,
// response.output_text.delta..., response.output_text.done, response.content_part.done,
// response.output_item.done; for each call, as the tool-call parser finds it,
// response.output_item.added and response.function_call_arguments.delta..., and when the
// generation ends response.function_call_arguments.done, response.output_item.done (an item ends
// before the next begins: text after a call is in the final message only); then
// response.completed (or
// response.incomplete). A failure before the first event is the HTTP error; after it,
// response.failed with the response's error {code, message}.
//
// Thread-safe: the run's events may come from any thread.

#ifndef LLMSERVE_GATEWAY_FRONTENDS_OPENAI_RESPONSES_JOB_H_
#define LLMSERVE_GATEWAY_FRONTENDS_OPENAI_RESPONSES_JOB_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "gateway/frontends/openai/openai_json.h"
#include "gateway/frontends/openai/responses_request.h"
#include "gateway/http/response_writer.h"
#include "gateway/pipeline/request_runner.h"
#include "gateway/pipeline/served_model.h"

namespace llmserve::gateway {

class ResponsesJob final : public RequestSink {
 public:
  explicit ResponsesJob(std::shared_ptr<http::ResponseWriter> writer);

  // On the prepare thread, before the run starts: what the answer needs of the request (its
  // chat request cleared), its model and the response's id (without "resp_").
  void SetPrepared(ResponsesRequest parsed, std::shared_ptr<const ServedModel> model,
                   std::string id);

  void OnRefused(const absl::Status& status, absl::Duration retry_after) override;
  void OnStarted(const PreparedRun& run) override;
  void OnDelta(int choice, GenerationDelta delta) override;
  void OnChoiceEnd(int choice, const GenerationResult* result, const absl::Status& error) override;
  void OnCompleted(const absl::Status& first_error) override;

 private:
  using Json = openai_json::Json;

  // The response object as it stands (status "in_progress" until the end).
  Json ResponseLocked(const char* status) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  Json ReasoningItemLocked(const char* status) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  Json MessageItemLocked(const char* status) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  Json CallItem(size_t call, const char* status) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Streamed: one event (its type and sequence number added).
  void EmitLocked(const char* type, Json data) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Streamed: sends the headers and response.created / in_progress unless done already.
  void OpenStreamLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void CloseReasoningLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void OpenMessageLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void CloseMessageLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Streamed: the item of call number `call` (added once; the message and reasoning end first).
  void OpenCallLocked(size_t call, const std::string& call_id, const std::string& name)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  std::shared_ptr<http::ResponseWriter> writer_;
  const int64_t created_;
  absl::Mutex mutex_;
  ResponsesRequest parsed_ ABSL_GUARDED_BY(mutex_);
  std::shared_ptr<const ServedModel> model_ ABSL_GUARDED_BY(mutex_);
  std::string id_ ABSL_GUARDED_BY(mutex_);
  int64_t prompt_tokens_ ABSL_GUARDED_BY(mutex_) = 0;
  std::string reasoning_ ABSL_GUARDED_BY(mutex_);
  std::string text_ ABSL_GUARDED_BY(mutex_);
  bool finished_ ABSL_GUARDED_BY(mutex_) = false;
  bool length_cut_ ABSL_GUARDED_BY(mutex_) = false;
  bool reasoned_ ABSL_GUARDED_BY(mutex_) = false;
  int64_t output_tokens_ ABSL_GUARDED_BY(mutex_) = 0;
  int64_t reasoning_tokens_ ABSL_GUARDED_BY(mutex_) = 0;
  int64_t cached_tokens_ ABSL_GUARDED_BY(mutex_) = 0;
  std::vector<::llmserve::v1::ToolCall> calls_ ABSL_GUARDED_BY(mutex_);
  absl::Status error_ ABSL_GUARDED_BY(mutex_);
  // Streamed: what was sent so far.
  bool stream_started_ ABSL_GUARDED_BY(mutex_) = false;
  int64_t sequence_ ABSL_GUARDED_BY(mutex_) = 0;
  // Output indexes of the items opened so far (-1: not opened).
  int reasoning_index_ ABSL_GUARDED_BY(mutex_) = -1;
  bool reasoning_closed_ ABSL_GUARDED_BY(mutex_) = false;
  int message_index_ ABSL_GUARDED_BY(mutex_) = -1;
  bool message_closed_ ABSL_GUARDED_BY(mutex_) = false;
  // Output index of each call's item (-1: not added yet).
  std::vector<int> call_indexes_ ABSL_GUARDED_BY(mutex_);
  int next_index_ ABSL_GUARDED_BY(mutex_) = 0;
};

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_FRONTENDS_OPENAI_RESPONSES_JOB_H_
