// Minimal logging and CHECK macros. Debian bookworm's Abseil (20220623) predates absl/log, so
// this stands in for it with the same shape:
//
//   LLMSERVE_LOG(INFO) << "worker ready on " << address;
//   LLMSERVE_CHECK(block_id < num_blocks) << "block " << block_id;   // invariant, aborts
//
// A line is written to stderr whole (one write per message), as
// "I1121 18:30:00.123456 12345 file.cc:12] text". FATAL aborts after writing.
//
// Thread-safe.

#ifndef LLMSERVE_COMMON_BASE_LOGGING_H_
#define LLMSERVE_COMMON_BASE_LOGGING_H_

#include <sstream>

namespace llmserve::common {

enum class LogSeverity { INFO = 0, WARNING = 1, ERROR = 2, FATAL = 3 };

// Messages below this severity are dropped (FATAL always aborts). Default INFO.
void SetMinLogSeverity(LogSeverity severity);
LogSeverity MinLogSeverity();

class LogMessage {
 public:
  LogMessage(const char* file, int line, LogSeverity severity);
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;
  ~LogMessage();

  std::ostream& stream() { return stream_; }

 private:
  LogSeverity severity_;
  std::ostringstream stream_;
};

// Turns `LLMSERVE_CHECK(x) << ...` into a void expression usable in a ternary.
struct LogMessageVoidify {
  void operator&(std::ostream&) {}
};

}  // namespace llmserve::common

#define LLMSERVE_LOG(severity)                                                                  \
  ::llmserve::common::LogMessage(__FILE__, __LINE__, ::llmserve::common::LogSeverity::severity) \
      .stream()

#define LLMSERVE_CHECK(condition)                                             \
  (condition) ? (void)0                                                       \
              : ::llmserve::common::LogMessageVoidify() & LLMSERVE_LOG(FATAL) \
                                                              << "Check failed: " #condition " "

#endif  // LLMSERVE_COMMON_BASE_LOGGING_H_
