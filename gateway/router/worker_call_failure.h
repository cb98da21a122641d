// How a failed worker call says "the worker went away while it ran this request", apart from the
// worker refusing it. The request pipeline decides on it (gateway/pipeline/retry_policy.h: a
// request that may have killed its worker is not retried blindly); the WorkerClient that knows
// the transport classifies (WorkerPool from gRPC's status, the tests' fake on demand).
//
// gRPC reports both a worker's own refusal (draining, stopped) and a broken connection as
// UNAVAILABLE; they differ in who wrote the status. A status the worker sent travels in the
// call's trailers with the worker's message. A connection that breaks under an established call
// (the worker process died: segfault, abort, SIGKILL, OOM kill) gets a status that gRPC's client
// synthesizes from the socket error: with gRPC 1.51 (Debian bookworm; checked against a server
// that crashes inside its handler) "Socket closed" (EOF) or "recvmsg:Connection reset by peer" /
// "sendmsg:Broken pipe" (an OS error on the connection). A worker that was down before the call
// started is "failed to connect to all addresses ...": the request never reached it, so it is not
// a broken connection.
//
// Thread-safe (pure functions).

#ifndef LLMSERVE_GATEWAY_ROUTER_WORKER_CALL_FAILURE_H_
#define LLMSERVE_GATEWAY_ROUTER_WORKER_CALL_FAILURE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace llmserve::gateway {

// Whether `message`, of an UNAVAILABLE status that the gRPC client library produced for a call,
// says the connection under the established call broke (rather than a worker's refusal or a
// failure to connect).
bool IsBrokenConnectionMessage(absl::string_view message);

// UNAVAILABLE naming `address` and `cause` (the transport's words), marked as a lost connection.
absl::Status WorkerConnectionLost(absl::string_view address, absl::string_view cause);

// Whether `status` came from WorkerConnectionLost.
bool IsWorkerConnectionLost(const absl::Status& status);

// The `cause` given to WorkerConnectionLost (empty for any other status).
std::string WorkerConnectionLostCause(const absl::Status& status);

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_ROUTER_WORKER_CALL_FAILURE_H_
