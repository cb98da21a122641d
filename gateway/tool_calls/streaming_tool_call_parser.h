// Streams a chat completion's tool calls: feed the text deltas as they are detokenized and get
// what to send now (content, and tool-call deltas as OpenAI sends them). One per choice; not
// thread-safe (one thread at a time).
//
// What goes out when:
//  - content streams as it comes, held back only while it could still be the start of a call
//    marker ("<tool", "[TOOL_", a Llama '{' at the start) or is whitespace that a call may
//    follow;
//  - a call goes out whole, in one delta (index, id, name and the compact JSON text of its
//    arguments), once its JSON is complete and validated; nothing of it before. A Mistral
//    [TOOL_CALLS][...] array sends all its calls when the array closes.
// So a malformed call (bad JSON, a lone surrogate, a non-finite number, too deep, or cut off by
// max_tokens) is never sent as a call: its text goes out as content, as ParseToolCalls returns
// it. calls() and the concatenated content equal ParseToolCalls on the whole output, for any
// split. Bounds: see tool_call_scanner.h.
#ifndef LLMSERVE_GATEWAY_TOOL_CALLS_STREAMING_TOOL_CALL_PARSER_H_
#define LLMSERVE_GATEWAY_TOOL_CALLS_STREAMING_TOOL_CALL_PARSER_H_

#include <string_view>
#include <vector>

#include "gateway/tool_calls/stream_delta.h"
#include "gateway/tool_calls/tool_call_format.h"
#include "gateway/tool_calls/tool_call_scanner.h"
#include "llmserve/v1/inference.pb.h"

namespace llmserve::gateway::tool_calls {

class StreamingToolCallParser {
 public:
  StreamingToolCallParser(ToolCallFormat format, std::vector<llmserve::v1::Tool> tools);

  StreamDelta Feed(std::string_view text);
  // End of output: flushes held-back text and settles an unfinished call.
  StreamDelta Finish();
  // The output called tools: finish_reason "tool_calls".
  bool saw_tool_calls() const { return !scanner_.calls().empty(); }
  // The calls so far (all of them after Finish), with the ids that were streamed.
  const std::vector<llmserve::v1::ToolCall>& calls() const { return scanner_.calls(); }

 private:
  ToolCallScanner scanner_;
};

}  // namespace llmserve::gateway::tool_calls

#endif  // LLMSERVE_GATEWAY_TOOL_CALLS_STREAMING_TOOL_CALL_PARSER_H_
