// Sends spans to an OpenTelemetry receiver over OTLP/HTTP: POST of the protobuf-encoded
// ExportTraceServiceRequest (content-type application/x-protobuf), gzip-compressed by default,
// with the operator's headers (e.g. `Authorization: Basic ...` for Langfuse). http:// and https://
// (TLS verified against the system's CAs, with SNI).
//
// One call at a time, on the tracer's export thread: it blocks on the network, up to `timeout`
// for the whole exchange, and never runs on the data path.

#ifndef LLMSERVE_COMMON_TRACING_OTLP_HTTP_EXPORTER_H_
#define LLMSERVE_COMMON_TRACING_OTLP_HTTP_EXPORTER_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/tracing/otlp_encoding.h"
#include "common/tracing/span.h"

namespace llmserve::common::tracing {

// The destination of finished spans (the OTLP/HTTP exporter, or a fake in tests).
class SpanExporter {
 public:
  virtual ~SpanExporter() = default;
  // OK; UNAVAILABLE (or RESOURCE_EXHAUSTED for HTTP 429) when trying again later may succeed;
  // another error when the receiver refused the spans for good.
  virtual absl::Status Export(absl::Span<const SpanData> spans) = 0;
  virtual std::string Describe() const = 0;
};

struct OtlpEndpoint {
  bool tls = false;
  std::string host;
  std::string port;
  std::string target;  // the path and query, "/v1/traces" when the URL has no path
};

// http(s)://host[:port][/path]: INVALID_ARGUMENT naming what is wrong.
absl::StatusOr<OtlpEndpoint> ParseOtlpEndpoint(absl::string_view url);

// "key1=value1,key2=value2" (the OTEL_EXPORTER_OTLP_HEADERS form; values may be
// percent-encoded): INVALID_ARGUMENT for an entry without '=' or with a name HTTP does not allow.
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParseOtlpHeaders(
    absl::string_view headers);

struct OtlpHttpExporterOptions {
  OtlpEndpoint endpoint;
  std::vector<std::pair<std::string, std::string>> headers;
  bool gzip = true;
  absl::Duration timeout = absl::Seconds(10);
  std::vector<Attribute> resource;
  InstrumentationScope scope;
};

class OtlpHttpExporter final : public SpanExporter {
 public:
  explicit OtlpHttpExporter(OtlpHttpExporterOptions options) : options_(std::move(options)) {}
  absl::Status Export(absl::Span<const SpanData> spans) override;
  std::string Describe() const override;

 private:
  const OtlpHttpExporterOptions options_;
};

// gzip (RFC 1952) of `data`.
absl::StatusOr<std::string> Gzip(absl::string_view data);

}  // namespace llmserve::common::tracing

#endif  // LLMSERVE_COMMON_TRACING_OTLP_HTTP_EXPORTER_H_
