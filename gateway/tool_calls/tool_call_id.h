// Ids for the tool calls the gateway parses out of model output. Thread-safe.
#ifndef LLMSERVE_GATEWAY_TOOL_CALLS_TOOL_CALL_ID_H_
#define LLMSERVE_GATEWAY_TOOL_CALLS_TOOL_CALL_ID_H_

#include <string>

namespace llmserve::gateway::tool_calls {

// "call_" + 24 random [A-Za-z0-9] (as OpenAI's ids look; 143 bits, so unique in practice).
std::string NewToolCallId();

}  // namespace llmserve::gateway::tool_calls

#endif  // LLMSERVE_GATEWAY_TOOL_CALLS_TOOL_CALL_ID_H_
