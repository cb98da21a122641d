#include "gateway/http/response_writer.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status/http_error.h"

namespace llmserve::gateway::http {

void SendError(ResponseWriter& writer, const absl::Status& status, absl::Duration retry_after) {
  SendError(writer, common::ToHttpError(status), retry_after);
}

void SendError(ResponseWriter& writer, common::HttpError error, absl::Duration retry_after) {
  HttpHeaders headers = {{"content-type", "application/json"}};
  if (retry_after > absl::ZeroDuration()) {
    headers.push_back({"retry-after", absl::StrCat(absl::ToInt64Seconds(
                                          absl::Ceil(retry_after, absl::Seconds(1))))});
  }
  writer.Send(error.http_status, std::move(headers), std::move(error.body));
}

}  // namespace llmserve::gateway::http
