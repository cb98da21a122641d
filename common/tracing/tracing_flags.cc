#include "common/tracing/tracing_flags.h"

#include <cstdlib>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"

ABSL_FLAG(std::string, otlp_traces_endpoint, "",
          "send OpenTelemetry traces over OTLP/HTTP (protobuf) to this URL, e.g. "
          "http://collector:4318/v1/traces (no path: /v1/traces); empty: "
          "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT, else no tracing");
ABSL_FLAG(std::string, otlp_headers, "",
          "headers of every OTLP export, 'name=value,name=value' (values percent-encoded, e.g. "
          "Authorization=Basic%20...); empty: OTEL_EXPORTER_OTLP_TRACES_HEADERS or "
          "OTEL_EXPORTER_OTLP_HEADERS");
ABSL_FLAG(double, trace_sample_ratio, 1.0,
          "share of new traces recorded, in [0, 1]; a caller's traceparent decides for its own");
ABSL_FLAG(std::string, otlp_compression, "gzip", "OTLP export body compression: gzip or none");
ABSL_FLAG(absl::Duration, otlp_timeout, absl::Seconds(10),
          "how long one OTLP export may take (a receiver that does not answer costs spans, "
          "never requests)");
ABSL_FLAG(bool, trace_content, false,
          "put prompt and completion text in spans (gen_ai.input.messages, "
          "gen_ai.output.messages): off by default, they may hold personal data");

namespace llmserve::common::tracing {
namespace {

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "" : value;
}

}  // namespace

absl::StatusOr<TracingFlags> TracingFlagsFromCommandLine() {
  TracingFlags flags;
  flags.endpoint = absl::GetFlag(FLAGS_otlp_traces_endpoint);
  if (flags.endpoint.empty()) flags.endpoint = Env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
  if (flags.endpoint.empty() && !Env("OTEL_EXPORTER_OTLP_ENDPOINT").empty()) {
    std::string base = Env("OTEL_EXPORTER_OTLP_ENDPOINT");
    flags.endpoint = absl::StrCat(absl::StripSuffix(base, "/"), "/v1/traces");
  }
  flags.headers = absl::GetFlag(FLAGS_otlp_headers);
  if (flags.headers.empty()) flags.headers = Env("OTEL_EXPORTER_OTLP_TRACES_HEADERS");
  if (flags.headers.empty()) flags.headers = Env("OTEL_EXPORTER_OTLP_HEADERS");
  flags.sample_ratio = absl::GetFlag(FLAGS_trace_sample_ratio);
  const std::string compression = absl::GetFlag(FLAGS_otlp_compression);
  if (compression != "gzip" && compression != "none") {
    return absl::InvalidArgumentError(
        absl::StrCat("--otlp_compression must be gzip or none, got '", compression, "'"));
  }
  flags.gzip = compression == "gzip";
  flags.content = absl::GetFlag(FLAGS_trace_content);
  flags.timeout = absl::GetFlag(FLAGS_otlp_timeout);
  if (flags.timeout <= absl::ZeroDuration() || flags.timeout > absl::Minutes(10)) {
    return absl::InvalidArgumentError("--otlp_timeout must be in (0, 10m]");
  }
  if (!(flags.sample_ratio >= 0 && flags.sample_ratio <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--trace_sample_ratio must be in [0, 1], got ", flags.sample_ratio));
  }
  return flags;
}

}  // namespace llmserve::common::tracing
