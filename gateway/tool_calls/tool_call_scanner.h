// The state machine behind both the non-streamed and the streamed tool-call parse: it takes the
// model's output in pieces and splits it into content and calls, per format (see
// tool_call_format.h). One per choice; not thread-safe (one thread at a time).
//
// What it accepts (the observable behaviour of vLLM's hermes, llama3_json and mistral parsers,
// made incremental so that any split of the output gives the same result):
//  - hermes: <tool_call> {call} [</tool_call>] anywhere in the output; a call left open at the
//    end of the output counts when its JSON is complete.
//  - llama3_json: <|python_tag|> {call} anywhere, or {call} as the first non-space output; more
//    calls may follow, separated by ';' or whitespace.
//  - mistral: [TOOL_CALLS] followed by a JSON array of calls (or one call object), or by
//    name[ARGS]{arguments} (also name{arguments} and name[CALL_ID]id[ARGS]{arguments}).
// A call is {"name": <one of the tools>, "arguments"|"parameters": {...}} whose JSON passes
// ParseBoundedJson (valid JSON and UTF-8, no lone surrogate, finite numbers, bounded depth and
// size). Text that looks like a call but is not one (bad JSON, no name, unknown name, cut off by
// the end of the output) stays content, byte for byte. Whitespace alone between the start of the
// output, calls and the end is dropped (up to 4096 bytes a run).
//
// Nothing of a call goes out before the whole call is validated: its id, name and arguments come
// in one delta once its JSON closed and parsed (a Mistral array: all its calls once the array
// closed). So a call is never sent that later turns out malformed, and for any split of the
// output the deltas add up to exactly what one Feed of the whole output gives.
//
// Bounds: a call's JSON is at most kMaxJsonBytes and kMaxJsonDepth deep (json_scan.h), else it
// is malformed; at most kMaxToolCalls calls per output (later ones stay content). Held-back text
// is at most a marker's length plus 4096 bytes of whitespace, or one call's text.
#ifndef LLMSERVE_GATEWAY_TOOL_CALLS_TOOL_CALL_SCANNER_H_
#define LLMSERVE_GATEWAY_TOOL_CALLS_TOOL_CALL_SCANNER_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/types/span.h"
#include "gateway/tool_calls/call_object.h"
#include "gateway/tool_calls/json_scan.h"
#include "gateway/tool_calls/stream_delta.h"
#include "gateway/tool_calls/tool_call_format.h"
#include "llmserve/v1/inference.pb.h"

namespace llmserve::gateway::tool_calls {

inline constexpr int kMaxToolCalls = 128;

class ToolCallScanner {
 public:
  ToolCallScanner(ToolCallFormat format, std::vector<llmserve::v1::Tool> tools);

  StreamDelta Feed(std::string_view text);
  StreamDelta Finish();  // end of output; further Feed calls return nothing

  const std::vector<llmserve::v1::ToolCall>& calls() const { return calls_; }

 private:
  enum class Mode { kText, kPreamble, kJson, kAfterCall, kFinished };
  enum class CallKind { kHermes, kLlamaTag, kLlamaBare, kMistral, kMistralArray, kMistralName };

  // Each returns false when it needs more input (or, with final_, when the buffer is empty).
  bool StepText();
  bool StepPreamble();
  bool StepMistralNamePreamble();
  bool StepJson();
  bool StepAfterCall();
  void Run();

  // Content that is held while only whitespace follows the start or a call.
  void EmitHeldText(size_t end);
  // Text just before a call: dropped when it is only whitespace (up to 4096 bytes).
  void EmitTextBeforeCall(std::string_view text);
  // Content whose fate is decided: sends it and ends the whitespace-only stretch.
  void SendContent(std::string_view text);

  void StartCall(CallKind kind, size_t marker_length);
  void BeginJson(size_t position);
  // The text [0, end) of buf_ is not a call: it becomes content.
  void Reject(size_t end);
  // A validated call: recorded and sent whole (id, name, arguments).
  void AddCall(const std::string& name, const std::string& arguments);

  std::string_view Marker() const;
  size_t MarkerPrefixAtEnd(std::string_view marker) const;
  bool CanTakeMoreCalls() const { return static_cast<int>(calls_.size()) < kMaxToolCalls; }

  const ToolCallFormat format_;
  const std::vector<llmserve::v1::Tool> tools_;

  Mode mode_ = Mode::kText;
  bool final_ = false;
  // Unresolved output: in kText, text not yet sent; in a call, the call's text from its marker.
  std::string buf_;
  // Nothing but whitespace has been seen yet (a bare '{' starts a Llama call).
  bool at_start_ = true;
  // Since the start or the last call only whitespace: it is held, and dropped if a call or the
  // end comes next.
  bool whitespace_only_ = true;

  CallKind kind_ = CallKind::kHermes;
  size_t json_start_ = 0;  // where the call's JSON begins in buf_
  size_t scanned_ = 0;     // bytes of buf_ the scanner has seen
  JsonScanner scanner_;
  size_t name_start_ = 0;  // Mistral name form: where the name begins in buf_
  std::string mistral_name_;

  std::vector<llmserve::v1::ToolCall> calls_;
  StreamDelta out_;
};

}  // namespace llmserve::gateway::tool_calls

#endif  // LLMSERVE_GATEWAY_TOOL_CALLS_TOOL_CALL_SCANNER_H_
