// absl::Status <-> grpc::Status at the gRPC boundary of the gateway and the worker.
//
// Thread-safe: pure functions.

#ifndef LLMSERVE_COMMON_STATUS_GRPC_STATUS_H_
#define LLMSERVE_COMMON_STATUS_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace llmserve::common {

// The gRPC status a handler returns for `status`; the message is kept as is.
grpc::Status ToGrpcStatus(const absl::Status& status);

// The absl::Status for a status received from a gRPC peer. Codes outside gRPC's set become
// UNKNOWN with the original code in the message.
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace llmserve::common

#endif  // LLMSERVE_COMMON_STATUS_GRPC_STATUS_H_
