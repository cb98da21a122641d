// Streams the calls of a constrained output (tool_choice required or a named function, see
// tool_choice.h) with the same StreamDelta shape as StreamingToolCallParser. One per choice; not
// thread-safe (one thread at a time).
//
// Each call goes out whole (id, name and arguments in one delta) as soon as its JSON completes:
// for a named function when the arguments object closes, for required as each element of the
// array closes. If the output never forms a call (cut by max_tokens before the first call
// completed, not JSON), it all goes out as content, as the non-streamed path returns it. If it
// breaks after some calls went out, those calls stand and the rest of the output is dropped.
// Bounds: kMaxJsonBytes / kMaxJsonDepth (json_scan.h), kMaxToolCalls calls.
#ifndef LLMSERVE_GATEWAY_TOOL_CALLS_STREAMING_CONSTRAINED_PARSER_H_
#define LLMSERVE_GATEWAY_TOOL_CALLS_STREAMING_CONSTRAINED_PARSER_H_

#include <string>
#include <string_view>
#include <vector>

#include "gateway/tool_calls/json_scan.h"
#include "gateway/tool_calls/stream_delta.h"
#include "gateway/tool_calls/tool_choice.h"
#include "llmserve/v1/inference.pb.h"

namespace llmserve::gateway::tool_calls {

class StreamingConstrainedParser {
 public:
  // `choice` must be required or a named function; with any other mode all output is content.
  explicit StreamingConstrainedParser(ToolChoice choice);

  StreamDelta Feed(std::string_view text);
  StreamDelta Finish();
  bool saw_tool_calls() const { return !calls_.empty(); }
  const std::vector<llmserve::v1::ToolCall>& calls() const { return calls_; }

 private:
  void Scan(StreamDelta* out);
  void AddCall(std::string name, std::string arguments, StreamDelta* out);
  // The output will not form (more) calls: content when none went out, dropped otherwise.
  void Fail(StreamDelta* out);

  const ToolChoice choice_;
  bool pass_through_ = false;  // all output is content
  bool stopped_ = false;       // no more calls: the rest is dropped
  bool finished_ = false;
  std::string buf_;  // the output since the start (dropped once a call went out)
  size_t scanned_ = 0;
  size_t element_start_ = 0;
  JsonScanner scanner_;
  std::vector<llmserve::v1::ToolCall> calls_;
};

}  // namespace llmserve::gateway::tool_calls

#endif  // LLMSERVE_GATEWAY_TOOL_CALLS_STREAMING_CONSTRAINED_PARSER_H_
