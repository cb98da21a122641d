#include "tools/bench/sse_parser.h"

#include "absl/strings/strip.h"

namespace llmserve::tools {

void SseParser::Feed(absl::string_view bytes) {
  for (const char c : bytes) {
    if (c == '\n' && after_cr_) {  // the LF of a CRLF whose CR already ended the line
      after_cr_ = false;
      continue;
    }
    after_cr_ = c == '\r';
    if (c == '\n' || c == '\r') {
      Line(line_);
      line_.clear();
    } else {
      line_.push_back(c);
    }
  }
}

void SseParser::Line(absl::string_view line) {
  if (line.empty()) {
    if (has_data_) on_event_(event_);
    event_ = SseEvent();
    has_data_ = false;
    return;
  }
  if (line[0] == ':') return;
  const size_t colon = line.find(':');
  const absl::string_view field = line.substr(0, colon);
  absl::string_view value = colon == absl::string_view::npos ? "" : line.substr(colon + 1);
  absl::ConsumePrefix(&value, " ");
  if (field == "data") {
    if (has_data_) event_.data.push_back('\n');
    event_.data.append(value.data(), value.size());
    has_data_ = true;
  } else if (field == "event") {
    event_.event = std::string(value);
  }
}

}  // namespace llmserve::tools
