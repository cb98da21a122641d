#include <grpcpp/support/status.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/status/grpc_status.h"
#include "common/status/http_error.h"
#include "gtest/gtest.h"

namespace llmserve::common {
namespace {

struct Expected {
  absl::StatusCode code;
  grpc::StatusCode grpc_code;
  int http_status;
  std::string openai_type;
  std::string code_name;
};

// Written out independently of status_table.cc: docs/architecture.md, "Errors", fixes the HTTP
// statuses.
const std::vector<Expected>& AllCodes() {
  static const auto* const kAll = new std::vector<Expected>{
      {absl::StatusCode::kCancelled, grpc::StatusCode::CANCELLED, 499, "cancelled", "cancelled"},
      {absl::StatusCode::kUnknown, grpc::StatusCode::UNKNOWN, 500, "server_error", "unknown"},
      {absl::StatusCode::kInvalidArgument, grpc::StatusCode::INVALID_ARGUMENT, 400,
       "invalid_request_error", "invalid_argument"},
      {absl::StatusCode::kDeadlineExceeded, grpc::StatusCode::DEADLINE_EXCEEDED, 504,
       "timeout_error", "deadline_exceeded"},
      {absl::StatusCode::kNotFound, grpc::StatusCode::NOT_FOUND, 404, "not_found_error",
       "not_found"},
      {absl::StatusCode::kAlreadyExists, grpc::StatusCode::ALREADY_EXISTS, 409, "conflict_error",
       "already_exists"},
      {absl::StatusCode::kPermissionDenied, grpc::StatusCode::PERMISSION_DENIED, 403,
       "permission_error", "permission_denied"},
      {absl::StatusCode::kResourceExhausted, grpc::StatusCode::RESOURCE_EXHAUSTED, 429,
       "rate_limit_error", "resource_exhausted"},
      {absl::StatusCode::kFailedPrecondition, grpc::StatusCode::FAILED_PRECONDITION, 400,
       "invalid_request_error", "failed_precondition"},
      {absl::StatusCode::kAborted, grpc::StatusCode::ABORTED, 409, "conflict_error", "aborted"},
      {absl::StatusCode::kOutOfRange, grpc::StatusCode::OUT_OF_RANGE, 400, "invalid_request_error",
       "out_of_range"},
      {absl::StatusCode::kUnimplemented, grpc::StatusCode::UNIMPLEMENTED, 501,
       "not_implemented_error", "unimplemented"},
      {absl::StatusCode::kInternal, grpc::StatusCode::INTERNAL, 500, "server_error", "internal"},
      {absl::StatusCode::kUnavailable, grpc::StatusCode::UNAVAILABLE, 503,
       "service_unavailable_error", "unavailable"},
      {absl::StatusCode::kDataLoss, grpc::StatusCode::DATA_LOSS, 500, "server_error", "data_loss"},
      {absl::StatusCode::kUnauthenticated, grpc::StatusCode::UNAUTHENTICATED, 401,
       "authentication_error", "unauthenticated"},
  };
  return *kAll;
}

TEST(StatusMappingTest, EveryCodeMapsToGrpcAndBack) {
  for (const Expected& expected : AllCodes()) {
    SCOPED_TRACE(expected.code_name);
    const absl::Status status(expected.code, "field 'x' is bad");
    const grpc::Status grpc_status = ToGrpcStatus(status);
    EXPECT_EQ(grpc_status.error_code(), expected.grpc_code);
    EXPECT_EQ(grpc_status.error_message(), "field 'x' is bad");
    const absl::Status back = FromGrpcStatus(grpc_status);
    EXPECT_EQ(back.code(), expected.code);
    EXPECT_EQ(back.message(), "field 'x' is bad");
  }
}

TEST(StatusMappingTest, EveryCodeMapsToHttpAndOpenAiJson) {
  for (const Expected& expected : AllCodes()) {
    SCOPED_TRACE(expected.code_name);
    EXPECT_EQ(HttpStatusFor(expected.code), expected.http_status);
    const HttpError error = ToHttpError(absl::Status(expected.code, "max_tokens must be > 0"));
    EXPECT_EQ(error.http_status, expected.http_status);
    const nlohmann::json body = nlohmann::json::parse(error.body);
    EXPECT_EQ(body["error"]["message"], "max_tokens must be > 0");
    EXPECT_EQ(body["error"]["type"], expected.openai_type);
    EXPECT_EQ(body["error"]["code"], expected.code_name);
    EXPECT_TRUE(body["error"]["param"].is_null());
  }
}

TEST(StatusMappingTest, OkIsOkEverywhere) {
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
  const HttpError error = ToHttpError(absl::OkStatus());
  EXPECT_EQ(error.http_status, 200);
  EXPECT_TRUE(error.body.empty());
}

TEST(StatusMappingTest, UnknownCodesBecomeUnknown) {
  const absl::Status odd(static_cast<absl::StatusCode>(42), "odd");
  EXPECT_EQ(ToGrpcStatus(odd).error_code(), grpc::StatusCode::UNKNOWN);
  EXPECT_EQ(ToHttpError(odd).http_status, 500);
  // 20: outside gRPC's codes but inside the enum's range (0..31), so not undefined behaviour.
  const absl::Status back = FromGrpcStatus(grpc::Status(static_cast<grpc::StatusCode>(20), "x"));
  EXPECT_EQ(back.code(), absl::StatusCode::kUnknown);
  EXPECT_NE(back.message().find("gRPC code 20"), absl::string_view::npos);
}

TEST(StatusMappingTest, EmptyMessageAndInvalidUtf8StillGiveAUsableBody) {
  const HttpError empty = ToHttpError(absl::InvalidArgumentError(""));
  EXPECT_EQ(nlohmann::json::parse(empty.body)["error"]["message"], "invalid_argument");
  const HttpError bad_utf8 = ToHttpError(absl::InvalidArgumentError("bad \xff byte"));
  const nlohmann::json body = nlohmann::json::parse(bad_utf8.body);
  EXPECT_EQ(body["error"]["message"], "bad \xEF\xBF\xBD byte");
}

}  // namespace
}  // namespace llmserve::common
