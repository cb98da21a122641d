#include "common/status/http_error.h"

#include <nlohmann/json.hpp>
#include <string>

#include "common/status/status_table.h"

namespace llmserve::common {

int HttpStatusFor(absl::StatusCode code) { return MappingFor(code).http_status; }

HttpError ToHttpError(const absl::Status& status) {
  const StatusMapping& mapping = MappingFor(status.code());
  HttpError error;
  error.http_status = mapping.http_status;
  if (status.ok()) return error;
  std::string message(status.message());
  if (message.empty()) message = std::string(mapping.code_name);
  nlohmann::json body = {{"error",
                          {{"message", std::move(message)},
                           {"type", std::string(mapping.openai_type)},
                           {"param", nullptr},
                           {"code", std::string(mapping.code_name)}}}};
  // Replace invalid UTF-8 rather than throw: messages can quote client input.
  error.body = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return error;
}

}  // namespace llmserve::common
