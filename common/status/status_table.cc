#include "common/status/status_table.h"

#include <array>

namespace llmserve::common {
namespace {

// gRPC's numeric codes equal absl's canonical ones (both follow google.rpc.Code); they are spelled
// out anyway so that the table reads as the contract it is.
constexpr std::array<StatusMapping, 17> kMappings = {{
    {absl::StatusCode::kOk, 0, 200, "", "ok"},
    {absl::StatusCode::kCancelled, 1, 499, "cancelled", "cancelled"},
    {absl::StatusCode::kUnknown, 2, 500, "server_error", "unknown"},
    {absl::StatusCode::kInvalidArgument, 3, 400, "invalid_request_error", "invalid_argument"},
    {absl::StatusCode::kDeadlineExceeded, 4, 504, "timeout_error", "deadline_exceeded"},
    {absl::StatusCode::kNotFound, 5, 404, "not_found_error", "not_found"},
    {absl::StatusCode::kAlreadyExists, 6, 409, "conflict_error", "already_exists"},
    {absl::StatusCode::kPermissionDenied, 7, 403, "permission_error", "permission_denied"},
    {absl::StatusCode::kResourceExhausted, 8, 429, "rate_limit_error", "resource_exhausted"},
    {absl::StatusCode::kFailedPrecondition, 9, 400, "invalid_request_error", "failed_precondition"},
    {absl::StatusCode::kAborted, 10, 409, "conflict_error", "aborted"},
    {absl::StatusCode::kOutOfRange, 11, 400, "invalid_request_error", "out_of_range"},
    {absl::StatusCode::kUnimplemented, 12, 501, "not_implemented_error", "unimplemented"},
    {absl::StatusCode::kInternal, 13, 500, "server_error", "internal"},
    {absl::StatusCode::kUnavailable, 14, 503, "service_unavailable_error", "unavailable"},
    {absl::StatusCode::kDataLoss, 15, 500, "server_error", "data_loss"},
    {absl::StatusCode::kUnauthenticated, 16, 401, "authentication_error", "unauthenticated"},
}};

}  // namespace

const StatusMapping& MappingFor(absl::StatusCode code) {
  const int index = static_cast<int>(code);
  if (index < 0 || index >= static_cast<int>(kMappings.size())) {
    return kMappings[static_cast<int>(absl::StatusCode::kUnknown)];
  }
  return kMappings[index];
}

}  // namespace llmserve::common
