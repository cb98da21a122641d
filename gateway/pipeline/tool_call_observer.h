// Turns a chat's output into tool calls on its way to the frontend: wraps the frontend's
// GenerationObserver, feeds every text delta to a streaming tool-call parser, and passes on the
// text outside calls as text and the calls as tool-call deltas; at the end the result carries the
// whole calls and finish reason TOOL_CALLS when the model called any and stopped. Both APIs get
// the same calls this way (one lifecycle, whichever API), and a streamed and a non-streamed
// request the same result: the parsers send a call only once it is whole and validated, so a
// malformed or cut call is content in both (with the model's finish reason, STOP or LENGTH).
//
// Thread-safe as GenerationObserver: calls come one at a time.

#ifndef LLMSERVE_GATEWAY_PIPELINE_TOOL_CALL_OBSERVER_H_
#define LLMSERVE_GATEWAY_PIPELINE_TOOL_CALL_OBSERVER_H_

#include <memory>

#include "gateway/pipeline/generation.h"
#include "gateway/pipeline/output_constraints.h"

namespace llmserve::gateway {

std::shared_ptr<GenerationObserver> WithToolCallParsing(std::shared_ptr<GenerationObserver> inner,
                                                        const ToolCalling& calling);

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_PIPELINE_TOOL_CALL_OBSERVER_H_
