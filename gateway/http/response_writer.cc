#include "gateway/http/response_writer.h"

#include <string>
#include <utility>

#include "common/status/http_error.h"

namespace llmserve::gateway::http {

void SendError(ResponseWriter& writer, const absl::Status& status) {
  common::HttpError error = common::ToHttpError(status);
  writer.Send(error.http_status, {{"content-type", "application/json"}}, std::move(error.body));
}

}  // namespace llmserve::gateway::http
