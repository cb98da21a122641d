// Server-Sent Events framing (https://html.spec.whatwg.org/multipage/server-sent-events.html) for
// streamed responses: FormatSseEvent("{...}") == "data: {...}\n\n".
//
// Thread-safe: pure functions.

#ifndef LLMSERVE_GATEWAY_HTTP_SSE_H_
#define LLMSERVE_GATEWAY_HTTP_SSE_H_

#include <string>

#include "absl/strings/string_view.h"

namespace llmserve::gateway::http {

// The OpenAI stream terminator.
inline constexpr absl::string_view kSseDone = "data: [DONE]\n\n";

// One event carrying `data`. A line break inside `data` (\n, \r\n or \r) starts a new "data:" line,
// which the client joins back with \n, so any text survives the framing.
std::string FormatSseEvent(absl::string_view data);

}  // namespace llmserve::gateway::http

#endif  // LLMSERVE_GATEWAY_HTTP_SSE_H_
