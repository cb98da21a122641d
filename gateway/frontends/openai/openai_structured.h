// The structured-output and tool-calling fields of OpenAI request bodies, parsed into the public
// API's GenerateRequest: `response_format` (json_object, json_schema), vLLM's `guided_json`,
// `guided_regex`, `guided_choice`, `guided_grammar` and `structured_outputs`; and, for chat,
// `tools`, `tool_choice`, `parallel_tool_calls`, and the `tool_calls` / `tool_call_id` of
// history messages. docs/structured-outputs.md describes the semantics.
//
// Thread-safe: pure functions.

#ifndef LLMSERVE_GATEWAY_FRONTENDS_OPENAI_OPENAI_STRUCTURED_H_
#define LLMSERVE_GATEWAY_FRONTENDS_OPENAI_OPENAI_STRUCTURED_H_

#include <nlohmann/json.hpp>
#include <string>

#include "absl/status/status.h"
#include "llmserve/v1/inference.pb.h"

namespace llmserve::gateway {

// At most one constraint per request, and none with a tool_choice that forces a call (already
// parsed into request->chat()); INVALID_ARGUMENT naming the field otherwise, or for a malformed
// one. `response_format: {"type": "text"}` is no constraint. `field`, when given, is set to the
// name of the field that gave the constraint (e.g. "guided_json"), or "" when none did.
absl::Status ParseOpenAiStructuredOutput(const nlohmann::ordered_json& body,
                                         ::llmserve::v1::GenerateRequest* request,
                                         std::string* field = nullptr);

// Chat only: tools, tool_choice, parallel_tool_calls into `chat`. Checks the tools' shape and
// that tool_choice names one of them; the pipeline checks the rest.
absl::Status ParseOpenAiTools(const nlohmann::ordered_json& body, ::llmserve::v1::ChatPrompt* chat);

// A history message's `tool_calls` (assistant) and `tool_call_id` (tool).
absl::Status ParseOpenAiMessageToolFields(const nlohmann::ordered_json& message, size_t index,
                                          ::llmserve::v1::ChatMessage* out);

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_FRONTENDS_OPENAI_OPENAI_STRUCTURED_H_
