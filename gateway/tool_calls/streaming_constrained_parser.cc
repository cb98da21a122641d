#include "gateway/tool_calls/streaming_constrained_parser.h"

#include <optional>
#include <utility>

#include "gateway/tool_calls/call_object.h"
#include "gateway/tool_calls/tool_call_id.h"
#include "gateway/tool_calls/tool_call_scanner.h"

namespace llmserve::gateway::tool_calls {

StreamingConstrainedParser::StreamingConstrainedParser(ToolChoice choice)
    : choice_(std::move(choice)),
      pass_through_(choice_.mode != ToolChoice::Mode::kFunction &&
                    choice_.mode != ToolChoice::Mode::kRequired) {}

StreamDelta StreamingConstrainedParser::Feed(std::string_view text) {
  StreamDelta out;
  if (finished_ || stopped_) return out;
  if (pass_through_) {
    out.content = std::string(text);
    return out;
  }
  buf_.append(text);
  Scan(&out);
  return out;
}

StreamDelta StreamingConstrainedParser::Finish() {
  StreamDelta out;
  if (finished_) return out;
  finished_ = true;
  // An empty array or an unfinished value: no (more) calls come.
  if (!pass_through_ && !stopped_ &&
      (calls_.empty() || scanner_.state() != JsonScanner::State::kDone)) {
    Fail(&out);
  }
  return out;
}

void StreamingConstrainedParser::Scan(StreamDelta* out) {
  const bool named = choice_.mode == ToolChoice::Mode::kFunction;
  while (scanned_ < buf_.size() && !stopped_ && !pass_through_) {
    const char c = buf_[scanned_++];
    if (scanner_.state() == JsonScanner::State::kDone) {
      // Only whitespace may follow the value; anything else is not the constrained shape.
      if (c != ' ' && c != '\n' && c != '\t' && c != '\r') Fail(out);
      continue;
    }
    if (scanner_.state() == JsonScanner::State::kStart &&
        (c == ' ' || c == '\n' || c == '\t' || c == '\r')) {
      continue;
    }
    const int depth_before = scanner_.depth();
    const bool in_string = scanner_.in_string();
    const JsonScanner::State state = scanner_.Push(c);
    if (state == JsonScanner::State::kError ||
        (state == JsonScanner::State::kScanning && depth_before == 0 && c != (named ? '{' : '['))) {
      Fail(out);
      return;
    }
    if (named) {
      if (state != JsonScanner::State::kDone) continue;
      const size_t begin = buf_.find('{');
      std::optional<nlohmann::ordered_json> arguments =
          ParseBoundedJson(std::string_view(buf_).substr(begin, scanned_ - begin));
      if (!arguments.has_value() || !arguments->is_object()) {
        Fail(out);
        return;
      }
      AddCall(choice_.function, DumpJson(*arguments), out);
      continue;
    }
    // required: each element of the top-level array is one call.
    if (in_string) continue;
    if (depth_before == 1 && scanner_.depth() == 2) element_start_ = scanned_ - 1;
    if (depth_before == 2 && scanner_.depth() == 1) {
      std::optional<nlohmann::ordered_json> element = ParseBoundedJson(
          std::string_view(buf_).substr(element_start_, scanned_ - element_start_));
      std::optional<CallParts> parts;
      if (element.has_value()) parts = CallFromJson(*element, nullptr);
      if (!parts.has_value() || calls_.size() >= static_cast<size_t>(kMaxToolCalls)) {
        Fail(out);
        return;
      }
      AddCall(std::move(parts->name), std::move(parts->arguments), out);
    } else if (depth_before == 1 && scanner_.depth() == 1 && c != ',' && c != ' ' && c != '\n' &&
               c != '\t' && c != '\r') {
      Fail(out);  // a scalar element: not a call
      return;
    }
  }
}

void StreamingConstrainedParser::AddCall(std::string name, std::string arguments,
                                         StreamDelta* out) {
  llmserve::v1::ToolCall call;
  call.set_id(NewToolCallId());
  call.set_name(std::move(name));
  call.set_arguments(std::move(arguments));
  ToolCallDelta delta;
  delta.index = static_cast<int>(calls_.size());
  delta.id = call.id();
  delta.name = call.name();
  delta.arguments = call.arguments();
  out->tool_calls.push_back(std::move(delta));
  calls_.push_back(std::move(call));
}

void StreamingConstrainedParser::Fail(StreamDelta* out) {
  if (calls_.empty()) {
    out->content += buf_;
    pass_through_ = true;
  } else {
    stopped_ = true;
  }
  buf_.clear();
  scanned_ = 0;
}

}  // namespace llmserve::gateway::tool_calls
