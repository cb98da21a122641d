// The tool calls in the whole output of a non-streamed chat completion. Pure function;
// thread-safe. Formats and rules: tool_call_scanner.h.
#ifndef LLMSERVE_GATEWAY_TOOL_CALLS_PARSE_TOOL_CALLS_H_
#define LLMSERVE_GATEWAY_TOOL_CALLS_PARSE_TOOL_CALLS_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/types/span.h"
#include "gateway/tool_calls/tool_call_format.h"
#include "llmserve/v1/inference.pb.h"

namespace llmserve::gateway::tool_calls {

struct ParsedOutput {
  std::string content;                        // text outside the calls (OpenAI: empty -> null)
  std::vector<llmserve::v1::ToolCall> calls;  // ids filled with NewToolCallId()
};

// Text that looks like a call but does not parse as one (bad JSON, no name, name not among
// `tools`) stays in content, as vLLM does.
ParsedOutput ParseToolCalls(ToolCallFormat format, std::string_view output,
                            absl::Span<const llmserve::v1::Tool> tools);

}  // namespace llmserve::gateway::tool_calls

#endif  // LLMSERVE_GATEWAY_TOOL_CALLS_PARSE_TOOL_CALLS_H_
