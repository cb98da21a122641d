#include "gateway/router/worker_call_failure.h"

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace llmserve::gateway {
namespace {

// The payload that marks a lost connection; its value is the cause.
constexpr absl::string_view kConnectionLostUrl = "llmserve.gateway/worker_connection_lost";

}  // namespace

bool IsBrokenConnectionMessage(absl::string_view message) {
  // Anchored at the start: a worker's own message (which may quote a client's input) starts with
  // its own words, never with these.
  return message == "Socket closed" || absl::StartsWith(message, "recvmsg:") ||
         absl::StartsWith(message, "sendmsg:") ||
         absl::StartsWith(message, "Connection reset by peer") ||
         absl::StartsWith(message, "Broken pipe");
}

absl::Status WorkerConnectionLost(absl::string_view address, absl::string_view cause) {
  absl::Status status = absl::UnavailableError(absl::StrCat(
      "the connection to the worker ", address, " broke while it ran the request (", cause, ")"));
  status.SetPayload(kConnectionLostUrl, absl::Cord(cause));
  return status;
}

bool IsWorkerConnectionLost(const absl::Status& status) {
  return absl::IsUnavailable(status) && status.GetPayload(kConnectionLostUrl).has_value();
}

std::string WorkerConnectionLostCause(const absl::Status& status) {
  if (!IsWorkerConnectionLost(status)) return "";
  return std::string(*status.GetPayload(kConnectionLostUrl));
}

}  // namespace llmserve::gateway
