// Tool calling for the gateway (OpenAI `tools` / `tool_choice`): everything the request pipeline
// and the frontends use, in one include. See each header for its contract and thread-safety.
#ifndef LLMSERVE_GATEWAY_TOOL_CALLS_TOOL_CALLS_H_
#define LLMSERVE_GATEWAY_TOOL_CALLS_TOOL_CALLS_H_

#include "gateway/tool_calls/parse_tool_calls.h"              // IWYU pragma: export
#include "gateway/tool_calls/stream_delta.h"                  // IWYU pragma: export
#include "gateway/tool_calls/streaming_constrained_parser.h"  // IWYU pragma: export
#include "gateway/tool_calls/streaming_tool_call_parser.h"    // IWYU pragma: export
#include "gateway/tool_calls/tool_call_format.h"              // IWYU pragma: export
#include "gateway/tool_calls/tool_call_id.h"                  // IWYU pragma: export
#include "gateway/tool_calls/tool_choice.h"                   // IWYU pragma: export
#include "gateway/tool_calls/tools.h"                         // IWYU pragma: export

#endif  // LLMSERVE_GATEWAY_TOOL_CALLS_TOOL_CALLS_H_
