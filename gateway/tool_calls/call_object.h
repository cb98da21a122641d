// Turns one parsed call object ({"name": ..., "arguments"|"parameters": {...}}) into a call of one
// of the request's tools. Pure functions; thread-safe.
#ifndef LLMSERVE_GATEWAY_TOOL_CALLS_CALL_OBJECT_H_
#define LLMSERVE_GATEWAY_TOOL_CALLS_CALL_OBJECT_H_

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "absl/types/span.h"
#include "llmserve/v1/inference.pb.h"

namespace llmserve::gateway::tool_calls {

struct CallParts {
  std::string name;
  std::string arguments;  // compact JSON text of an object
};

// True when `name` is one of `tools`.
bool IsKnownTool(std::string_view name, absl::Span<const llmserve::v1::Tool> tools);

// The arguments object's JSON text from `value` (an object, a string holding an object's JSON
// as some models write it, or absent/null for no arguments: "{}"); nullopt otherwise.
std::optional<std::string> ArgumentsText(const nlohmann::ordered_json* value);

// `object` as a call: "name" a string naming one of `tools` (any non-empty name when
// `tools` is null), arguments under "arguments" or "parameters" (exactly one of them; null
// means no arguments). nullopt otherwise.
std::optional<CallParts> CallFromJson(const nlohmann::ordered_json& object,
                                      const absl::Span<const llmserve::v1::Tool>* tools);

}  // namespace llmserve::gateway::tool_calls

#endif  // LLMSERVE_GATEWAY_TOOL_CALLS_CALL_OBJECT_H_
