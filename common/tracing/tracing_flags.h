// The tracing flags both binaries share (--otlp_traces_endpoint, --otlp_headers,
// --trace_sample_ratio, --otlp_compression, --trace_content), with OpenTelemetry's environment
// variables as fallbacks.

#ifndef LLMSERVE_COMMON_TRACING_TRACING_FLAGS_H_
#define LLMSERVE_COMMON_TRACING_TRACING_FLAGS_H_

#include <string>

#include "absl/status/statusor.h"
#include "common/tracing/tracer.h"

namespace llmserve::common::tracing {

// The flags' values; an empty flag falls back to OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (as is) or
// OTEL_EXPORTER_OTLP_ENDPOINT (+ "/v1/traces"), and OTEL_EXPORTER_OTLP_TRACES_HEADERS or
// OTEL_EXPORTER_OTLP_HEADERS, so that credentials can stay off the command line.
absl::StatusOr<TracingFlags> TracingFlagsFromCommandLine();

}  // namespace llmserve::common::tracing

#endif  // LLMSERVE_COMMON_TRACING_TRACING_FLAGS_H_
