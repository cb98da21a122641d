// What a request asks of its output's shape, resolved before it reaches a worker: the structured
// output constraint (checked for size and form here; compiled against the vocabulary by the
// worker, which names a schema's faulty path), and tool calling for chats with `tools` — how the
// template sees the tools, whether tool_choice constrains the output to a call's JSON, and how
// the output is parsed back into calls (tool_call_observer.h).
//
// Thread-safe: pure functions.

#ifndef LLMSERVE_GATEWAY_PIPELINE_OUTPUT_CONSTRAINTS_H_
#define LLMSERVE_GATEWAY_PIPELINE_OUTPUT_CONSTRAINTS_H_

#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "gateway/tool_calls/tool_call_format.h"
#include "gateway/tool_calls/tool_choice.h"
#include "llmserve/v1/inference.pb.h"
#include "llmserve/worker/v1/worker.pb.h"

namespace llmserve::gateway {

// Bounds on a constraint's text, so that a worker never compiles something absurd.
inline constexpr size_t kMaxConstraintBytes = 256 * 1024;
inline constexpr int kMaxConstraintChoices = 1024;

// How a chat's output becomes tool calls.
struct ToolCalling {
  std::vector<::llmserve::v1::Tool> tools;
  tool_calls::ToolChoice choice;
  // The model's own call format (kAuto parses it; kNone: the output stays text).
  tool_calls::ToolCallFormat format = tool_calls::ToolCallFormat::kNone;
  bool parallel_tool_calls = true;
  // tool_choice required / a function: the worker constrains the output to the calls' JSON.
  bool constrained() const {
    return choice.mode == tool_calls::ToolChoice::Mode::kRequired ||
           choice.mode == tool_calls::ToolChoice::Mode::kFunction;
  }
};

// INVALID_ARGUMENT naming the field: an empty or oversized constraint, json_object false,
// json_schema that is not a JSON object or boolean, too many or empty choices.
absl::Status ValidateStructuredOutput(const ::llmserve::v1::StructuredOutput& output);

// Sets `out`'s structured_output from the request (and from tool_choice), and returns how tool
// calls are parsed, or nullopt when they are not (no tools, tool_choice "none", or "auto" with a
// model whose call format is unknown). INVALID_ARGUMENT naming the field for bad tools,
// tool_choice, or a constraint combined with a constraining tool_choice.
absl::StatusOr<std::optional<ToolCalling>> ResolveOutputConstraints(
    const ::llmserve::v1::GenerateRequest& request, tool_calls::ToolCallFormat model_format,
    worker::v1::GenerateRequest* out);

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_PIPELINE_OUTPUT_CONSTRAINTS_H_
