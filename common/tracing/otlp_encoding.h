// OTLP's ExportTraceServiceRequest in protobuf's binary encoding, written directly (the message
// is small and fixed; the field numbers are those of opentelemetry-proto's trace.proto,
// common.proto and resource.proto): one ResourceSpans with the process's resource attributes,
// one ScopeSpans of the instrumentation scope, and the spans.

#ifndef LLMSERVE_COMMON_TRACING_OTLP_ENCODING_H_
#define LLMSERVE_COMMON_TRACING_OTLP_ENCODING_H_

#include <string>
#include <vector>

#include "absl/types/span.h"
#include "common/tracing/span.h"

namespace llmserve::common::tracing {

struct InstrumentationScope {
  std::string name;
  std::string version;
};

std::string EncodeExportTraceServiceRequest(const std::vector<Attribute>& resource,
                                            const InstrumentationScope& scope,
                                            absl::Span<const SpanData> spans);

}  // namespace llmserve::common::tracing

#endif  // LLMSERVE_COMMON_TRACING_OTLP_ENCODING_H_
