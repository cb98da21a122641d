// Splits a chat's reply into reasoning and content on its way to the frontend: wraps the
// GenerationObserver that the tool-call parsing (or the frontend) provides, feeds every text
// delta to a streaming reasoning parser, and passes the reasoning on as reasoning and only the
// content as text, so that tool calls are parsed from the answer alone (a <tool_call> written
// while reasoning is reasoning). At the end the result counts the reasoning's tokens and says
// whether the reply had any. Both APIs get the same split this way (one lifecycle, whichever
// API), and a streamed and a non-streamed request the same reply.
//
// Thread-safe as GenerationObserver: calls come one at a time.

#ifndef LLMSERVE_GATEWAY_PIPELINE_REASONING_OBSERVER_H_
#define LLMSERVE_GATEWAY_PIPELINE_REASONING_OBSERVER_H_

#include <memory>

#include "gateway/pipeline/generation.h"
#include "gateway/pipeline/prompt_builder.h"

namespace llmserve::gateway {

std::shared_ptr<GenerationObserver> WithReasoningParsing(std::shared_ptr<GenerationObserver> inner,
                                                         const ReasoningParsing& parsing);

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_PIPELINE_REASONING_OBSERVER_H_
