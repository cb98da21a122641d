#include "common/base/shutdown_signal.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>

namespace llmserve::common {
namespace {

int signal_pipe[2] = {-1, -1};
volatile sig_atomic_t signals_received = 0;

void OnSignal(int signal_number) {
  if (signals_received != 0) _exit(1);
  signals_received = 1;
  const char byte = static_cast<char>(signal_number);
  // Nothing to do on failure inside a handler; the pipe has room for one byte.
  [[maybe_unused]] const ssize_t written = write(signal_pipe[1], &byte, 1);
}

}  // namespace

bool InstallShutdownSignalHandlers() {
  if (pipe2(signal_pipe, O_CLOEXEC) != 0) return false;
  struct sigaction action = {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  return sigaction(SIGTERM, &action, nullptr) == 0 && sigaction(SIGINT, &action, nullptr) == 0;
}

int WaitForShutdownSignal() {
  char byte = 0;
  while (read(signal_pipe[0], &byte, 1) < 0 && errno == EINTR) {
  }
  return byte;
}

}  // namespace llmserve::common
