#include "common/status/http_error.h"

#include <nlohmann/json.hpp>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status/status_table.h"

namespace llmserve::common {

namespace {

std::string ErrorBody(std::string message, absl::string_view type, absl::string_view code) {
  nlohmann::json body = {{"error",
                          {{"message", std::move(message)},
                           {"type", std::string(type)},
                           {"param", nullptr},
                           {"code", std::string(code)}}}};
  // Replace invalid UTF-8 rather than throw: messages can quote client input.
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

int HttpStatusFor(absl::StatusCode code) { return MappingFor(code).http_status; }

HttpError ToHttpError(const absl::Status& status) {
  const StatusMapping& mapping = MappingFor(status.code());
  HttpError error;
  error.http_status = mapping.http_status;
  if (status.ok()) return error;
  std::string message(status.message());
  if (message.empty()) message = std::string(mapping.code_name);
  error.body = ErrorBody(std::move(message), mapping.openai_type, mapping.code_name);
  return error;
}

HttpError MethodNotAllowed(absl::string_view method, absl::string_view path) {
  return {.http_status = 405,
          .body = ErrorBody(absl::StrCat(method, " is not allowed on ", path),
                            "invalid_request_error", "method_not_allowed")};
}

}  // namespace llmserve::common
