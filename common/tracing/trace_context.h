// W3C Trace Context (https://www.w3.org/TR/trace-context/): the `traceparent` and `tracestate`
// values that carry a trace from a client through the gateway to a worker, in HTTP headers and
// in gRPC metadata alike.
//
//   traceparent: 00-<32 hex trace id>-<16 hex parent span id>-<2 hex flags>
//
// Parsing follows the spec's rules for version 00 and for unknown future versions (read the
// first four fields, ignore what follows); an all-zero id, upper-case hex or a wrong length makes
// the header invalid, and an invalid header starts a new trace. tracestate is passed on as it
// came when it is well-formed enough (at most 512 printable ASCII characters), else dropped.

#ifndef LLMSERVE_COMMON_TRACING_TRACE_CONTEXT_H_
#define LLMSERVE_COMMON_TRACING_TRACE_CONTEXT_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace llmserve::common::tracing {

using TraceId = std::array<uint8_t, 16>;
using SpanId = std::array<uint8_t, 8>;

inline constexpr uint8_t kSampledFlag = 0x01;

struct TraceContext {
  TraceId trace_id{};
  // The span that is the parent of the next span made in this context.
  SpanId span_id{};
  uint8_t flags = 0;
  std::string trace_state;

  bool sampled() const { return (flags & kSampledFlag) != 0; }
};

// nullopt when `traceparent` is absent or invalid. `tracestate` is kept when valid.
std::optional<TraceContext> ParseTraceParent(absl::string_view traceparent,
                                             absl::string_view tracestate = "");

// "00-<trace id>-<span id>-<flags>".
std::string FormatTraceParent(const TraceContext& context);

// Random, never all zero (thread-safe).
TraceId NewTraceId();
SpanId NewSpanId();

std::string HexId(const TraceId& id);
std::string HexId(const SpanId& id);

}  // namespace llmserve::common::tracing

#endif  // LLMSERVE_COMMON_TRACING_TRACE_CONTEXT_H_
