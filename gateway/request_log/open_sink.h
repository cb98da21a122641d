// The request log's destination from its flag value: a postgres:// or postgresql:// URL
// (PostgresSink), or the path of a JSON-lines file (JsonLinesSink). Any other scheme:// is refused
// by name rather than taken for a file name.

#ifndef LLMSERVE_GATEWAY_REQUEST_LOG_OPEN_SINK_H_
#define LLMSERVE_GATEWAY_REQUEST_LOG_OPEN_SINK_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gateway/request_log/request_log_sink.h"

namespace llmserve::gateway {

absl::StatusOr<std::unique_ptr<RequestLogSink>> OpenRequestLogSink(absl::string_view target);

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_REQUEST_LOG_OPEN_SINK_H_
