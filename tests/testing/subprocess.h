// Runs a real binary for integration tests: its stderr (where our binaries log) is collected so
// a test can wait for a line such as "serving ... on 127.0.0.1:PORT". Every wait is bounded, and
// the destructor kills a child still running, so a broken binary fails the test, never hangs it.

#ifndef LLMSERVE_TESTS_TESTING_SUBPROCESS_H_
#define LLMSERVE_TESTS_TESTING_SUBPROCESS_H_

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace llmserve::testing {

class Subprocess {
 public:
  // Runs argv[0] with this process's environment plus `env` ("NAME=value" entries, replacing
  // variables of the same name).
  explicit Subprocess(const std::vector<std::string>& argv,
                      const std::vector<std::string>& env = {}) {
    // Everything the child needs is built before fork: between fork and exec a child of a
    // multithreaded process may only make async-signal-safe calls (no malloc).
    std::vector<char*> args;
    for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
    args.push_back(nullptr);
    std::vector<char*> environment;
    for (char** entry = environ; *entry != nullptr; ++entry) {
      const std::string_view name(*entry, std::strcspn(*entry, "="));
      const bool replaced = std::any_of(env.begin(), env.end(), [name](const std::string& e) {
        return e.size() > name.size() && e[name.size()] == '=' &&
               e.compare(0, name.size(), name) == 0;
      });
      if (!replaced) environment.push_back(*entry);
    }
    for (const std::string& entry : env) environment.push_back(const_cast<char*>(entry.c_str()));
    environment.push_back(nullptr);
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(fds[1], STDERR_FILENO);
      dup2(fds[1], STDOUT_FILENO);
      execve(args[0], args.data(), environment.data());
      _exit(127);
    }
    close(fds[1]);
    output_fd_ = fds[0];
  }
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;
  ~Subprocess() {
    if (pid_ > 0 && !exit_code_.has_value()) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (output_fd_ >= 0) close(output_fd_);
  }

  bool started() const { return pid_ > 0; }

  // Reads output until it contains `text` (true) or `timeout` passes / the child closes its
  // output (false). output() has everything read so far.
  bool WaitForOutput(const std::string& text, absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (output_.find(text) == std::string::npos) {
      if (!ReadSome(deadline)) return false;
    }
    return true;
  }

  const std::string& output() const { return output_; }

  void Signal(int signal_number) { kill(pid_, signal_number); }

  // The exit code (128 + signal when killed by one), or nullopt when it is still running after
  // `timeout`.
  std::optional<int> WaitForExit(absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (!exit_code_.has_value()) {
      int status = 0;
      const pid_t done = waitpid(pid_, &status, WNOHANG);
      if (done == pid_) {
        exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        break;
      }
      if (absl::Now() >= deadline) return std::nullopt;
      ReadSome(absl::Now() + absl::Milliseconds(10));  // keep the pipe drained
    }
    while (ReadSome(absl::Now())) {
    }
    return exit_code_;
  }

 private:
  bool ReadSome(absl::Time deadline) {
    if (output_fd_ < 0) return false;
    pollfd poller{.fd = output_fd_, .events = POLLIN};
    const int64_t wait_ms = std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now()));
    if (poll(&poller, 1, static_cast<int>(wait_ms)) <= 0) return false;
    char buffer[4096];
    const ssize_t n = read(output_fd_, buffer, sizeof(buffer));
    if (n <= 0) return false;
    output_.append(buffer, n);
    return true;
  }

  pid_t pid_ = -1;
  int output_fd_ = -1;
  std::string output_;
  std::optional<int> exit_code_;
};

// The decimal number right after `prefix` in `text` (a port in a log line such as
// "serving on 127.0.0.1:PORT"), or -1.
inline int NumberAfter(const std::string& text, const std::string& prefix) {
  const size_t at = text.find(prefix);
  if (at == std::string::npos) return -1;
  size_t end = at + prefix.size();
  while (end < text.size() && text[end] >= '0' && text[end] <= '9') ++end;
  int value = -1;
  return absl::SimpleAtoi(text.substr(at + prefix.size(), end - at - prefix.size()), &value) ? value
                                                                                             : -1;
}

}  // namespace llmserve::testing

#endif  // LLMSERVE_TESTS_TESTING_SUBPROCESS_H_
