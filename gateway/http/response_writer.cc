#include "gateway/http/response_writer.h"

#include <string>
#include <utility>

#include "common/status/http_error.h"
#include "common/status/retry_after.h"

namespace llmserve::gateway::http {

void SendError(ResponseWriter& writer, const absl::Status& status, absl::Duration retry_after) {
  SendError(writer, common::ToHttpError(status), retry_after);
}

void SendError(ResponseWriter& writer, common::HttpError error, absl::Duration retry_after) {
  HttpHeaders headers = {{"content-type", "application/json"}};
  if (std::string seconds = common::RetryAfterValue(retry_after); !seconds.empty()) {
    headers.push_back({"retry-after", std::move(seconds)});
  }
  writer.Send(error.http_status, std::move(headers), std::move(error.body));
}

}  // namespace llmserve::gateway::http
