#include "gateway/request_log/open_sink.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gateway/request_log/json_lines_sink.h"
#include "gateway/request_log/postgres_sink.h"

namespace llmserve::gateway {

absl::StatusOr<std::unique_ptr<RequestLogSink>> OpenRequestLogSink(absl::string_view target) {
  if (target.empty()) return absl::InvalidArgumentError("request log: empty destination");
  if (absl::StartsWith(target, "postgres://") || absl::StartsWith(target, "postgresql://")) {
    absl::StatusOr<std::unique_ptr<PostgresSink>> sink = PostgresSink::Create(std::string(target));
    if (!sink.ok()) return sink.status();
    return std::unique_ptr<RequestLogSink>(*std::move(sink));
  }
  if (const size_t scheme_end = target.find("://"); scheme_end != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("request log: unsupported destination scheme '", target.substr(0, scheme_end),
                     "' (expected postgres://, postgresql://, or the path of a JSON-lines file)"));
  }
  absl::StatusOr<std::unique_ptr<JsonLinesSink>> sink = JsonLinesSink::Open(std::string(target));
  if (!sink.ok()) return sink.status();
  return std::unique_ptr<RequestLogSink>(*std::move(sink));
}

}  // namespace llmserve::gateway
