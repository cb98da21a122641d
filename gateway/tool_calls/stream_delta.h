// What a streaming tool-call parser hands back for each piece of output: content to send now and
// tool-call deltas shaped like OpenAI's `choices[].delta.tool_calls[]`. Plain values.
#ifndef LLMSERVE_GATEWAY_TOOL_CALLS_STREAM_DELTA_H_
#define LLMSERVE_GATEWAY_TOOL_CALLS_STREAM_DELTA_H_

#include <string>
#include <vector>

namespace llmserve::gateway::tool_calls {

struct ToolCallDelta {
  int index = 0;          // the call's index in this choice
  std::string id;         // first delta of a call only
  std::string name;       // first delta of a call only
  std::string arguments;  // a fragment of the arguments JSON text; concatenating all fragments
                          // of a call gives exactly the final arguments
};

struct StreamDelta {
  // Content to send now; never a prefix of a marker that may still become a call.
  std::string content;
  // In call order; a call's id and name come in its first delta only.
  std::vector<ToolCallDelta> tool_calls;

  bool empty() const { return content.empty() && tool_calls.empty(); }
};

}  // namespace llmserve::gateway::tool_calls

#endif  // LLMSERVE_GATEWAY_TOOL_CALLS_STREAM_DELTA_H_
