#include "gateway/tool_calls/streaming_tool_call_parser.h"

#include <utility>

namespace llmserve::gateway::tool_calls {

StreamingToolCallParser::StreamingToolCallParser(ToolCallFormat format,
                                                 std::vector<llmserve::v1::Tool> tools)
    : scanner_(format, std::move(tools)) {}

StreamDelta StreamingToolCallParser::Feed(std::string_view text) { return scanner_.Feed(text); }

StreamDelta StreamingToolCallParser::Finish() { return scanner_.Finish(); }

}  // namespace llmserve::gateway::tool_calls
