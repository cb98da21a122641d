// tool_choice: parsing OpenAI's and the gRPC API's forms, the JSON Schema that constrains the
// output when a call is forced (required / a named function), and parsing that constrained
// output back into calls. Pure functions; thread-safe.
//
// With tool_choice required or a named function the output is constrained to JSON by a schema
// and parsed from it directly, whatever the model's own format (as vLLM does):
//  - named f: the whole output is f's arguments object (the schema is f's parameters);
//  - required: a JSON array of {"name": ..., "parameters": {...}} objects.
#ifndef LLMSERVE_GATEWAY_TOOL_CALLS_TOOL_CHOICE_H_
#define LLMSERVE_GATEWAY_TOOL_CALLS_TOOL_CHOICE_H_

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "llmserve/v1/inference.pb.h"

namespace llmserve::gateway::tool_calls {

struct ToolChoice {
  enum class Mode { kNone, kAuto, kRequired, kFunction };
  Mode mode = Mode::kAuto;
  std::string function;  // kFunction: the function's name (one of the tools)
};

// OpenAI's tool_choice: "none" | "auto" | "required" |
// {"type": "function", "function": {"name": ...}} (any tool's name, even "none"); null means the
// default (auto with tools, none
// without). INVALID_ARGUMENT naming `tool_choice` for an unknown string, a missing name, a name
// not among `tools`, or required/a function with no tools.
absl::StatusOr<ToolChoice> ParseToolChoice(const nlohmann::json& value,
                                           absl::Span<const llmserve::v1::Tool> tools);

// The gRPC API's string form: "none" | "auto" | "required" | "<function name>"; "" is the default
// (auto with tools, none without). Errors name `chat.tool_choice`.
absl::StatusOr<ToolChoice> ParseToolChoiceName(std::string_view value,
                                               absl::Span<const llmserve::v1::Tool> tools);

// A chat's choice: `chat.tool_choice_function` (a function name, any name, "none" included)
// when set, else ParseToolChoiceName(chat.tool_choice). Setting both is INVALID_ARGUMENT naming
// chat.tool_choice_function.
absl::StatusOr<ToolChoice> ParseChatToolChoice(const llmserve::v1::ChatPrompt& chat,
                                               absl::Span<const llmserve::v1::Tool> tools);

// The JSON Schema (text) that constrains the output for `choice`:
//  named f: f's parameters ({"type": "object"} when it has none);
//  required: {"type": "array", "minItems": 1, ("maxItems": 1 unless parallel), "items": {"anyOf":
//    [{"type": "object", "properties": {"name": {"const": "f"}, "parameters": <f's params>},
//      "required": ["name", "parameters"]}, ...]}}.
// Empty for none/auto (nothing is constrained).
std::string ToolChoiceSchema(const ToolChoice& choice, absl::Span<const llmserve::v1::Tool> tools,
                             bool parallel_tool_calls);

// Parses the constrained output back into calls (ids filled, arguments as compact JSON text).
// INVALID_ARGUMENT if it does not parse (e.g. the output was cut by max_tokens) or `choice` does
// not constrain the output; the caller then returns the text as content.
absl::StatusOr<std::vector<llmserve::v1::ToolCall>> ParseConstrainedToolCalls(
    const ToolChoice& choice, std::string_view output);

}  // namespace llmserve::gateway::tool_calls

#endif  // LLMSERVE_GATEWAY_TOOL_CALLS_TOOL_CHOICE_H_
