// Splits a reasoning model's output into its reasoning (between <think> and </think>, tags
// dropped) and its content (the answer after </think>, which tool-call parsing then reads), as
// the output streams in. Pure: text in, text out.
//
// Streaming-safe: text may arrive cut anywhere, inside a tag or inside a UTF-8 sequence. A piece
// that may still become a tag is held until it is ruled in or out, as is the start of a UTF-8
// sequence cut at a piece's end, so each piece handed out is whole characters when the output is,
// and the pieces of a stream add up to what the whole output gives at once. Text after </think>
// is content as written, leading newlines included (as vLLM's deepseek_r1 and qwen3 parsers
// leave it); an output that ends before </think> (max_tokens) is all reasoning.
//
// Not thread-safe: one per choice, one thread at a time.
#ifndef LLMSERVE_GATEWAY_REASONING_REASONING_PARSER_H_
#define LLMSERVE_GATEWAY_REASONING_REASONING_PARSER_H_

#include <string>

#include "absl/strings/string_view.h"
#include "gateway/reasoning/reasoning_format.h"

namespace llmserve::gateway::reasoning {

inline constexpr absl::string_view kThinkOpen = "<think>";
inline constexpr absl::string_view kThinkClose = "</think>";

// Where a reply starts, as its prompt left it.
enum class ReasoningStart {
  kReasoning,  // inside the think block: the prompt opened it (DeepSeek-R1's `<think>\n`)
  kContent,    // after it: the prompt closed one (thinking switched off by the template)
  kUndecided,  // the output decides: reasoning when it opens with <think> (leading whitespace
               // aside), else all content
};

// From the end of the prompt (a chat rendered by its template; any tail long enough to hold a
// tag and the whitespace after it): a prompt ending, whitespace aside, in <think> opens the
// reasoning and one ending in </think> closes it. Otherwise deepseek_r1 starts in reasoning (its
// models always reason; older templates leave <think> to the model, and it is dropped) and qwen3
// lets the output decide.
ReasoningStart StartFor(ReasoningFormat format, absl::string_view prompt_tail);

struct ReasoningDelta {
  std::string reasoning;
  std::string content;
};

class StreamingReasoningParser {
 public:
  explicit StreamingReasoningParser(ReasoningStart start);

  // The next piece of output; returns what can be handed out now (reasoning before content).
  ReasoningDelta Feed(absl::string_view text);
  // The output ended: everything held back (a partial tag is text of where it stands).
  ReasoningDelta Finish();

  // Whether output now read is reasoning (the think block is open, or may be opening).
  bool in_reasoning() const { return state_ != State::kContent; }
  // Whether the output had a think block (it may be empty): then the reply has reasoning.
  bool reasoned() const { return reasoned_; }

 private:
  enum class State {
    kOpening,    // reading leading whitespace and a possible <think>
    kReasoning,  // inside the block, looking for </think>
    kContent,    // after it (or there was none)
  };
  // Moves what `held_` can give out to `out`, given the state.
  void Drain(ReasoningDelta* out);

  State state_;
  // kOpening: what the output is when it does not open with <think>.
  bool opening_falls_back_to_reasoning_ = false;
  bool reasoned_ = false;
  // Text read and not yet handed out: a possible tag, whitespace before a possible <think>, or
  // the start of a cut UTF-8 sequence.
  std::string held_;
};

// The whole output at once (non-streamed, and the reference the stream must match).
ReasoningDelta SplitReasoning(ReasoningStart start, absl::string_view output);

}  // namespace llmserve::gateway::reasoning

#endif  // LLMSERVE_GATEWAY_REASONING_REASONING_PARSER_H_
