// The part of a server's main() that follows flag parsing, shared by llmserve-worker and
// llmserve-gateway: report bad options (exit 2), install the shutdown-signal handlers, start the
// server, wait for SIGTERM/SIGINT, drain, stop (exit 0).
//
// Call from main() only.

#ifndef LLMSERVE_COMMON_BASE_SERVE_UNTIL_SIGNAL_H_
#define LLMSERVE_COMMON_BASE_SERVE_UNTIL_SIGNAL_H_

#include <signal.h>

#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/base/logging.h"
#include "common/base/shutdown_signal.h"

namespace llmserve::common {

// `start(options)` returns absl::StatusOr<std::unique_ptr<Server>>; Server has Drain(). A start
// that fails exits 1, or 2 (a usage error) when it is INVALID_ARGUMENT and
// `invalid_start_is_usage_error`.
template <typename Options, typename Start>
int ServeUntilShutdownSignal(const char* program, const absl::StatusOr<Options>& options,
                             Start start, bool invalid_start_is_usage_error) {
  if (!options.ok()) {
    std::fprintf(stderr, "%s: %s\n", program, std::string(options.status().message()).c_str());
    return 2;
  }
  if (!InstallShutdownSignalHandlers()) {
    std::fprintf(stderr, "%s: cannot install signal handlers\n", program);
    return 1;
  }
  auto server = start(*options);
  if (!server.ok()) {
    std::fprintf(stderr, "%s: %s\n", program, server.status().ToString().c_str());
    return invalid_start_is_usage_error && absl::IsInvalidArgument(server.status()) ? 2 : 1;
  }
  const int signal_number = WaitForShutdownSignal();
  LLMSERVE_LOG(INFO) << "received " << (signal_number == SIGINT ? "SIGINT" : "SIGTERM")
                     << ": draining";
  (*server)->Drain();
  server->reset();
  LLMSERVE_LOG(INFO) << "stopped";
  return 0;
}

}  // namespace llmserve::common

#endif  // LLMSERVE_COMMON_BASE_SERVE_UNTIL_SIGNAL_H_
