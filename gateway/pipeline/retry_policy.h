// Whether a generation tries another worker after an attempt failed, and what the failure says
// about the worker and the request. Generation (generation.h) applies it; kept apart as a pure
// function so that the rule is stated and tested in one place.
//
// The rule:
//   - After the first token nothing is retried (the client has seen output).
//   - The worker went away while running the request (its connection broke under the call:
//     worker_call_failure.h) before the first token: the request may be what killed it (a query
//     of death), so it is retried only while the request's crashes are within crash_retries
//     (default 0: never, so that one request can take down one worker at most) and attempts
//     remain. A request given up on this way, or one whose worker went away after its first
//     token, is quarantined (query_of_death.h).
//   - Any other failure before the first token (the worker refused: RESOURCE_EXHAUSTED when
//     overloaded, UNAVAILABLE when draining or stopping; it could not be reached: a failed
//     connect; it fell silent and the pool aborted the call; UNKNOWN, INTERNAL, ABORTED) is
//     retried on another worker while attempts remain, as the worker is not known to have run it.
//   - The worker is reported failed (marked down until probed) whenever it is left for another,
//     except for overload, which is no failure of the worker.
//
// Thread-safe (a pure function).

#ifndef LLMSERVE_GATEWAY_PIPELINE_RETRY_POLICY_H_
#define LLMSERVE_GATEWAY_PIPELINE_RETRY_POLICY_H_

#include "absl/status/status.h"

namespace llmserve::gateway {

struct AttemptEnd {
  // How the attempt's call ended: not OK, and not the client's cancel.
  absl::Status status;
  bool received_tokens = false;
  // Attempts made so far, this one included.
  int attempts = 1;
  // Attempts whose worker went away while running the request, this one included.
  int crashes = 0;
};

struct RetryLimits {
  int max_attempts = 3;
  // Retries after a worker went away while running the request.
  int crash_retries = 0;
};

struct RetryVerdict {
  bool retry = false;
  // The worker went away while running the request.
  bool worker_crashed = false;
  // Mark the worker down until probed.
  bool report_failure = false;
  // Refuse identical requests for a while: the request is given up on after a worker crashed.
  bool quarantine = false;
};

RetryVerdict DecideRetry(const AttemptEnd& end, const RetryLimits& limits);

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_PIPELINE_RETRY_POLICY_H_
