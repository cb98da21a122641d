// The request's tools: parsed from OpenAI's `tools` array or checked as gRPC protos, and rendered
// for the chat template. Pure functions; thread-safe.
//
// Rules: at most kMaxTools tools; type "function"; name [A-Za-z0-9_-]{1,64}, unique; parameters a
// JSON object (a JSON Schema) when present, at most kMaxJsonBytes bytes and kMaxJsonDepth levels
// (json_scan.h); description a string; strict a bool. A missing or empty `parameters` means any
// object.
#ifndef LLMSERVE_GATEWAY_TOOL_CALLS_TOOLS_H_
#define LLMSERVE_GATEWAY_TOOL_CALLS_TOOLS_H_

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "llmserve/v1/inference.pb.h"

namespace llmserve::gateway::tool_calls {

inline constexpr int kMaxTools = 128;

// OpenAI's tools array -> Tool protos; INVALID_ARGUMENT naming the field, e.g.
// "tools[1].function.name: must match [A-Za-z0-9_-]{1,64}". null means no tools.
absl::StatusOr<std::vector<llmserve::v1::Tool>> ParseOpenAiTools(
    const nlohmann::ordered_json& tools);

// The same checks for tools that arrived as protos over gRPC ("chat.tools[1].name: ...").
absl::Status ValidateTools(absl::Span<const llmserve::v1::Tool> tools);

// The tools as the chat template sees them, JSON text of what transformers passes:
// [{"type": "function", "function": {"name", "description", "parameters"}}]. A tool without
// parameters gets {"type": "object", "properties": {}}, which templates can iterate.
std::string ToolsToTemplateJson(absl::Span<const llmserve::v1::Tool> tools);

// The parameters schema of `tool` as JSON ({"type": "object"} when empty).
nlohmann::ordered_json ToolParametersSchema(const llmserve::v1::Tool& tool);

}  // namespace llmserve::gateway::tool_calls

#endif  // LLMSERVE_GATEWAY_TOOL_CALLS_TOOLS_H_
