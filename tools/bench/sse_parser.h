// Splits a text/event-stream body into events as the bytes arrive (WHATWG "server-sent events":
// lines end in LF, CRLF or CR; "data:" lines of one event are joined with LF; a blank line ends
// the event; ":" lines are comments). Only the data and event fields matter to the benchmark.
//
// Thread-compatible.

#ifndef LLMSERVE_TOOLS_BENCH_SSE_PARSER_H_
#define LLMSERVE_TOOLS_BENCH_SSE_PARSER_H_

#include <functional>
#include <string>

#include "absl/strings/string_view.h"

namespace llmserve::tools {

struct SseEvent {
  std::string event;  // empty for the default ("message")
  std::string data;
};

class SseParser {
 public:
  using EventFn = std::function<void(const SseEvent&)>;
  explicit SseParser(EventFn on_event) : on_event_(std::move(on_event)) {}

  // Consumes `bytes` (split anywhere) and calls on_event for every event they complete.
  void Feed(absl::string_view bytes);
  // Bytes of an unfinished line held back; a line longer than a sane bound is the server's bug.
  size_t pending_bytes() const { return line_.size(); }

 private:
  void Line(absl::string_view line);

  EventFn on_event_;
  std::string line_;
  bool after_cr_ = false;
  SseEvent event_;
  bool has_data_ = false;
};

}  // namespace llmserve::tools

#endif  // LLMSERVE_TOOLS_BENCH_SSE_PARSER_H_
