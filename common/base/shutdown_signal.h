// SIGTERM/SIGINT handling for the servers' main(): the first signal asks for a drain, a second
// one exits at once with status 1.
//
// The handler writes to a pipe the main thread reads, whichever thread the kernel picks: BLAS
// and gRPC start threads before main() could block signals in them.
//
// Call InstallShutdownSignalHandlers once, early in main(); WaitForShutdownSignal from one thread.

#ifndef LLMSERVE_COMMON_BASE_SHUTDOWN_SIGNAL_H_
#define LLMSERVE_COMMON_BASE_SHUTDOWN_SIGNAL_H_

namespace llmserve::common {

// False when the pipe or the handlers cannot be set up.
bool InstallShutdownSignalHandlers();

// Blocks until SIGTERM or SIGINT arrives; returns the signal number.
int WaitForShutdownSignal();

}  // namespace llmserve::common

#endif  // LLMSERVE_COMMON_BASE_SHUTDOWN_SIGNAL_H_
