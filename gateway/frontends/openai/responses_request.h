// OpenAI Responses API request bodies (POST /v1/responses), stateless: parsed into the chat
// completion they ask for, so that one validation serves both APIs.
//
// Taken: model, input (a string, or a list of message items — roles user / system / developer /
// assistant, content a string or input_text / output_text parts — function_call and
// function_call_output items, and reasoning items, which are dropped as chat templates drop
// earlier reasoning), instructions (a system message first), max_output_tokens, temperature,
// top_p, stream, text.format (text, json_object, json_schema with name / schema / strict /
// description), tools (function tools: name, description, parameters, strict), tool_choice
// ("auto", "none", "required", {"type": "function", "name": ...}), parallel_tool_calls, user,
// metadata (up to 16 string values, echoed), and the values of store / background / truncation /
// include / previous_response_id / reasoning / top_logprobs / service_tier that ask for nothing
// (store false, truncation "disabled", ...).
// Refused by name (INVALID_ARGUMENT naming the field as the client wrote it): a field we do not
// know, `store: true` and `previous_response_id` (nothing is stored), `background: true`, other
// item and content types (images, files, built-in tools), and every wrong type.
//
// Thread-safe: pure functions.

#ifndef LLMSERVE_GATEWAY_FRONTENDS_OPENAI_RESPONSES_REQUEST_H_
#define LLMSERVE_GATEWAY_FRONTENDS_OPENAI_RESPONSES_REQUEST_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gateway/frontends/openai/openai_json.h"
#include "gateway/frontends/openai/openai_request.h"

namespace llmserve::gateway {

struct ResponsesRequest {
  // The equivalent chat completion (one choice).
  OpenAiRequest chat;
  // What the response object repeats of the request: instructions, max_output_tokens,
  // temperature, top_p, tools, tool_choice, parallel_tool_calls, text, metadata, user (as OpenAI
  // returns them, defaults filled in).
  openai_json::Json echo;
};

absl::StatusOr<ResponsesRequest> ParseResponsesRequest(absl::string_view body);

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_FRONTENDS_OPENAI_RESPONSES_REQUEST_H_
