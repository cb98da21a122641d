// The request log as a file of JSON lines, one record per line (RequestRecordJson), appended.
//
// A batch is written with one write() and is all or nothing: when it fails part way (a full
// disk), the file is cut back to where the batch began, so that the retry does not repeat lines.
// A file that was moved away (log rotation) or deleted is noticed at the next batch and the path
// opened again.

#ifndef LLMSERVE_GATEWAY_REQUEST_LOG_JSON_LINES_SINK_H_
#define LLMSERVE_GATEWAY_REQUEST_LOG_JSON_LINES_SINK_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "gateway/request_log/request_log_sink.h"

namespace llmserve::gateway {

class JsonLinesSink final : public RequestLogSink {
 public:
  // Opens (creating, mode 0640) `path` for appending: an error naming the path when it cannot.
  static absl::StatusOr<std::unique_ptr<JsonLinesSink>> Open(std::string path);
  ~JsonLinesSink() override;

  absl::Status Write(absl::Span<const RequestRecord> records) override;
  std::string Describe() const override { return path_; }

 private:
  JsonLinesSink(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  // Opens the path again when it no longer names the open file.
  absl::Status ReopenIfMoved();

  const std::string path_;
  int fd_;
};

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_REQUEST_LOG_JSON_LINES_SINK_H_
