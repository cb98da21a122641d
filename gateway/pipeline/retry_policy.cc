#include "gateway/pipeline/retry_policy.h"

#include "gateway/router/worker_call_failure.h"

namespace llmserve::gateway {
namespace {

// Codes after which another worker may well succeed (the request never reached a token).
bool Retryable(absl::StatusCode code) {
  return code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kUnknown ||
         code == absl::StatusCode::kInternal || code == absl::StatusCode::kResourceExhausted ||
         code == absl::StatusCode::kAborted;
}

}  // namespace

RetryVerdict DecideRetry(const AttemptEnd& end, const RetryLimits& limits) {
  RetryVerdict verdict;
  verdict.worker_crashed = IsWorkerConnectionLost(end.status);
  const bool attempts_left = end.attempts < limits.max_attempts;
  if (verdict.worker_crashed) {
    // The pool learns of it from the worker's load stream too; reported here at once so that
    // no other request is routed to the dead worker meanwhile.
    verdict.report_failure = true;
    verdict.retry = !end.received_tokens && attempts_left && end.crashes <= limits.crash_retries;
    verdict.quarantine = !verdict.retry;
    return verdict;
  }
  if (end.received_tokens) return verdict;
  verdict.retry = attempts_left && Retryable(end.status.code());
  verdict.report_failure = verdict.retry && !absl::IsResourceExhausted(end.status);
  return verdict;
}

}  // namespace llmserve::gateway
