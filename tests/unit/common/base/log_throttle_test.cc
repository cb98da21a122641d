// LogThrottle, and libprotobuf's log through it (protobuf_log.h): a client that sends request
// after request with a string field that is not UTF-8 makes libprotobuf log an ERROR line each
// time; with the handler installed the log gets one line, not one per request.

#include "common/base/log_throttle.h"

#include <google/protobuf/wrappers.pb.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/base/protobuf_log.h"
#include "gtest/gtest.h"

namespace llmserve::common {
namespace {

TEST(LogThrottleTest, LogsTheFirstThenOncePerIntervalWithTheCountLeftOut) {
  LogThrottle throttle(absl::Seconds(10));
  const absl::Time start = absl::FromUnixSeconds(1000);
  EXPECT_EQ(throttle.Record(start), 0);
  // Every 50 ms for 10 s: none logged until the interval has passed ...
  int64_t logged = 0;
  for (int i = 1; i < 200; ++i) {
    if (throttle.Record(start + i * absl::Milliseconds(50)).has_value()) ++logged;
  }
  EXPECT_EQ(logged, 0);
  // ... then one, counting the 199 left out.
  EXPECT_EQ(throttle.Record(start + absl::Seconds(10)), 199);
  EXPECT_EQ(throttle.Record(start + absl::Seconds(10) + absl::Milliseconds(50)), std::nullopt);
  // After a quiet spell the next one is logged at once, counting the one left out.
  EXPECT_EQ(throttle.Record(start + absl::Minutes(5)), 1);
  EXPECT_EQ(throttle.Record(start + absl::Minutes(5) + absl::Seconds(1)), std::nullopt);
}

// What this process writes to stderr while `body` runs.
template <typename Body>
std::string CaptureStderr(Body body) {
  std::FILE* file = std::tmpfile();
  std::fflush(stderr);
  const int saved = ::dup(STDERR_FILENO);
  ::dup2(::fileno(file), STDERR_FILENO);
  body();
  std::fflush(stderr);
  ::dup2(saved, STDERR_FILENO);
  ::close(saved);
  std::string text;
  char buffer[4096];
  std::fseek(file, 0, SEEK_SET);
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), file)) > 0) text.append(buffer, n);
  std::fclose(file);
  return text;
}

int LinesContaining(const std::string& text, absl::string_view needle) {
  int count = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::StrContains(line, needle)) ++count;
  }
  return count;
}

TEST(ProtobufLogTest, InvalidUtf8InAStringFieldIsLoggedOncePerIntervalNotPerMessage) {
  InstallThrottledProtobufLogHandler(absl::Minutes(1));
  // google.protobuf.StringValue { value: "\xff" }: field 1, length 1, not UTF-8.
  const std::string bad("\x0a\x01\xff", 3);
  int refused = 0;
  const std::string log = CaptureStderr([&] {
    for (int i = 0; i < 100; ++i) {
      google::protobuf::StringValue message;
      if (!message.ParseFromString(bad)) ++refused;
    }
  });
  EXPECT_EQ(refused, 100);
  EXPECT_EQ(LinesContaining(log, "invalid UTF-8"), 1) << log;
  EXPECT_EQ(LinesContaining(log, "libprotobuf "), 1) << log;
  EXPECT_TRUE(absl::StrContains(log, "logged at most once every 1m")) << log;
  // A well-formed message logs nothing.
  const std::string quiet = CaptureStderr([] {
    google::protobuf::StringValue message;
    EXPECT_TRUE(message.ParseFromString(std::string("\x0a\x02ok", 4)));
  });
  EXPECT_EQ(quiet, "");
}

}  // namespace
}  // namespace llmserve::common
