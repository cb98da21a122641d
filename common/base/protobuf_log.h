// libprotobuf writes its own log lines to stderr, unthrottled. Some are provoked by clients: each
// request whose string field is not valid UTF-8 makes the parser log an ERROR line ("String field
// 'x' contains invalid UTF-8 data when parsing a protocol buffer ...") before the server answers
// INVALID_ARGUMENT, so a client sending such requests in a loop writes the log as fast as it
// likes. InstallThrottledProtobufLogHandler() routes libprotobuf's messages through LLMSERVE_LOG
// with a LogThrottle per source location (log_throttle.h): the first line of each kind, then at
// most one per `interval` saying how many were left out.
//
//   int main(int argc, char** argv) {
//     llmserve::common::InstallThrottledProtobufLogHandler();
//     ...
//
// Call from main() before any thread uses protobuf (libprotobuf's SetLogHandler is not
// thread-safe). The handler itself is thread-safe.

#ifndef LLMSERVE_COMMON_BASE_PROTOBUF_LOG_H_
#define LLMSERVE_COMMON_BASE_PROTOBUF_LOG_H_

#include "absl/time/time.h"

namespace llmserve::common {

// libprotobuf's messages are logged with their severity (FATAL as ERROR: libprotobuf aborts by
// itself after its handler returns), prefixed "libprotobuf FILE:LINE: ". Each source location in
// libprotobuf gets its own throttle, so a flood of one kind cannot hide another.
void InstallThrottledProtobufLogHandler(absl::Duration interval = absl::Seconds(10));

}  // namespace llmserve::common

#endif  // LLMSERVE_COMMON_BASE_PROTOBUF_LOG_H_
