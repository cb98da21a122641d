#include "common/base/logging.h"

#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

namespace llmserve::common {
namespace {

std::atomic<int> min_severity{static_cast<int>(LogSeverity::INFO)};

const char* BaseName(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash == nullptr ? path : slash + 1;
}

}  // namespace

void SetMinLogSeverity(LogSeverity severity) {
  min_severity.store(static_cast<int>(severity), std::memory_order_relaxed);
}

LogSeverity MinLogSeverity() {
  return static_cast<LogSeverity>(min_severity.load(std::memory_order_relaxed));
}

LogMessage::LogMessage(const char* file, int line, LogSeverity severity) : severity_(severity) {
  timeval now;
  gettimeofday(&now, nullptr);
  tm local;
  localtime_r(&now.tv_sec, &local);
  char prefix[64];
  std::snprintf(prefix, sizeof(prefix), "%c%02d%02d %02d:%02d:%02d.%06ld %d ",
                "IWEF"[static_cast<int>(severity)], local.tm_mon + 1, local.tm_mday, local.tm_hour,
                local.tm_min, local.tm_sec, static_cast<long>(now.tv_usec),
                static_cast<int>(getpid()));
  stream_ << prefix << BaseName(file) << ":" << line << "] ";
}

LogMessage::~LogMessage() {
  const bool fatal = severity_ == LogSeverity::FATAL;
  if (fatal || static_cast<int>(severity_) >= static_cast<int>(MinLogSeverity())) {
    std::string line = stream_.str();
    line.push_back('\n');
    // One write call, so that lines from different threads do not interleave.
    [[maybe_unused]] const ssize_t written = ::write(STDERR_FILENO, line.data(), line.size());
  }
  if (fatal) std::abort();
}

}  // namespace llmserve::common
