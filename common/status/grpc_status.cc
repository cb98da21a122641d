#include "common/status/grpc_status.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/status/status_table.h"

namespace llmserve::common {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  const StatusMapping& mapping = MappingFor(status.code());
  return grpc::Status(static_cast<grpc::StatusCode>(mapping.grpc_code),
                      std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  const int grpc_code = static_cast<int>(status.error_code());
  for (int code = 1; code <= static_cast<int>(absl::StatusCode::kUnauthenticated); ++code) {
    const StatusMapping& mapping = MappingFor(static_cast<absl::StatusCode>(code));
    if (mapping.grpc_code == grpc_code) return absl::Status(mapping.code, status.error_message());
  }
  return absl::UnknownError(absl::StrCat("gRPC code ", grpc_code, ": ", status.error_message()));
}

}  // namespace llmserve::common
