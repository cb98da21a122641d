#include "gateway/tool_calls/parse_tool_calls.h"

#include "gateway/tool_calls/tool_call_scanner.h"

namespace llmserve::gateway::tool_calls {

ParsedOutput ParseToolCalls(ToolCallFormat format, std::string_view output,
                            absl::Span<const llmserve::v1::Tool> tools) {
  // The streaming machine over the whole text: a malformed call is content.
  ToolCallScanner scanner(format, std::vector<llmserve::v1::Tool>(tools.begin(), tools.end()));
  ParsedOutput out;
  out.content = scanner.Feed(output).content;
  out.content += scanner.Finish().content;
  out.calls = scanner.calls();
  return out;
}

}  // namespace llmserve::gateway::tool_calls
