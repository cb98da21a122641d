#include "gateway/tool_calls/tool_call_scanner.h"

#include <utility>

#include "gateway/tool_calls/tool_call_id.h"

namespace llmserve::gateway::tool_calls {
namespace {

constexpr std::string_view kSpaces = " \t\r\n";
constexpr size_t kMaxDroppedWhitespace = 4096;
constexpr size_t kMaxNameLength = 64;
constexpr std::string_view kHermesStart = "<tool_call>";
constexpr std::string_view kHermesEnd = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kMistralStart = "[TOOL_CALLS]";
constexpr std::string_view kMistralArgs = "[ARGS]";
constexpr std::string_view kMistralCallId = "[CALL_ID]";

constexpr size_t kTooMuchSpace = std::string_view::npos - 1;

// The first non-space byte of `text` at or after `from`; npos when only spaces follow (so far);
// kTooMuchSpace when more than kMaxDroppedWhitespace spaces come first. Bounding the run keeps a
// stream of spaces from being rescanned for ever, at a point that does not depend on chunking.
size_t FirstNonSpace(std::string_view text, size_t from) {
  const size_t first = text.find_first_not_of(kSpaces, from);
  const size_t run = (first == std::string_view::npos ? text.size() : first) - from;
  if (run > kMaxDroppedWhitespace) return kTooMuchSpace;
  return first;
}

bool IsAllSpace(std::string_view text) {
  return text.find_first_not_of(kSpaces) == std::string_view::npos;
}
bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}
bool IsAlnum(char c) { return IsNameChar(c) && c != '_' && c != '-'; }
// `text` is a proper, non-empty prefix of `word`.
bool IsProperPrefix(std::string_view text, std::string_view word) {
  return !text.empty() && text.size() < word.size() && word.substr(0, text.size()) == text;
}

}  // namespace

ToolCallScanner::ToolCallScanner(ToolCallFormat format, std::vector<llmserve::v1::Tool> tools)
    : format_(format), tools_(std::move(tools)) {}

StreamDelta ToolCallScanner::Feed(std::string_view text) {
  if (mode_ == Mode::kFinished) return {};
  buf_.append(text);
  Run();
  return std::exchange(out_, StreamDelta());
}

StreamDelta ToolCallScanner::Finish() {
  if (mode_ == Mode::kFinished) return {};
  final_ = true;
  Run();
  buf_.clear();
  mode_ = Mode::kFinished;
  return std::exchange(out_, StreamDelta());
}

void ToolCallScanner::Run() {
  for (;;) {
    bool progressed = false;
    switch (mode_) {
      case Mode::kText:
        progressed = StepText();
        break;
      case Mode::kPreamble:
        progressed = kind_ == CallKind::kMistralName ? StepMistralNamePreamble() : StepPreamble();
        break;
      case Mode::kJson:
        progressed = StepJson();
        break;
      case Mode::kAfterCall:
        progressed = StepAfterCall();
        break;
      case Mode::kFinished:
        break;
    }
    if (!progressed) return;
  }
}

std::string_view ToolCallScanner::Marker() const {
  switch (format_) {
    case ToolCallFormat::kHermes:
      return kHermesStart;
    case ToolCallFormat::kLlama3Json:
      return kPythonTag;
    case ToolCallFormat::kMistral:
      return kMistralStart;
    case ToolCallFormat::kNone:
      break;
  }
  return {};
}

size_t ToolCallScanner::MarkerPrefixAtEnd(std::string_view marker) const {
  if (marker.empty()) return 0;
  for (size_t k = std::min(marker.size() - 1, buf_.size()); k > 0; --k) {
    if (std::string_view(buf_).substr(buf_.size() - k) == marker.substr(0, k)) return k;
  }
  return 0;
}

bool ToolCallScanner::StepText() {
  if (buf_.empty()) return false;
  if (format_ == ToolCallFormat::kNone) {
    SendContent(buf_);
    buf_.clear();
    return false;
  }
  const std::string_view view(buf_);
  const size_t first = view.find_first_not_of(kSpaces);
  if (at_start_ && first != std::string_view::npos) {
    at_start_ = false;
    if (format_ == ToolCallFormat::kLlama3Json && view[first] == '{' && CanTakeMoreCalls()) {
      EmitTextBeforeCall(view.substr(0, first));
      buf_.erase(0, first);
      StartCall(CallKind::kLlamaBare, 0);
      return true;
    }
  }
  const std::string_view marker = Marker();
  const size_t found = CanTakeMoreCalls() ? view.find(marker) : std::string_view::npos;
  if (found != std::string_view::npos) {
    EmitTextBeforeCall(view.substr(0, found));
    buf_.erase(0, found);
    switch (format_) {
      case ToolCallFormat::kHermes:
        StartCall(CallKind::kHermes, marker.size());
        break;
      case ToolCallFormat::kLlama3Json:
        StartCall(CallKind::kLlamaTag, marker.size());
        break;
      default:
        StartCall(CallKind::kMistral, marker.size());
        break;
    }
    return true;
  }
  const size_t held = final_ || !CanTakeMoreCalls() ? 0 : MarkerPrefixAtEnd(marker);
  EmitHeldText(buf_.size() - held);
  return false;
}

void ToolCallScanner::EmitHeldText(size_t end) {
  const std::string_view text = std::string_view(buf_).substr(0, end);
  if (whitespace_only_ && IsAllSpace(text)) {
    // Held until what follows decides: a call or the end drops it, other text sends it.
    if (final_) {
      if (text.size() > kMaxDroppedWhitespace) SendContent(text);
      buf_.erase(0, end);
    } else if (text.size() > kMaxDroppedWhitespace) {
      SendContent(text);
      buf_.erase(0, end);
    }
    return;
  }
  SendContent(text);
  buf_.erase(0, end);
}

void ToolCallScanner::EmitTextBeforeCall(std::string_view text) {
  if (whitespace_only_ && IsAllSpace(text) && text.size() <= kMaxDroppedWhitespace) return;
  SendContent(text);
}

void ToolCallScanner::SendContent(std::string_view text) {
  if (text.empty()) return;
  out_.content.append(text);
  whitespace_only_ = false;
}

void ToolCallScanner::StartCall(CallKind kind, size_t marker_length) {
  kind_ = kind;
  at_start_ = false;
  mode_ = Mode::kPreamble;
  json_start_ = marker_length;
  if (kind == CallKind::kLlamaBare) BeginJson(0);
}

void ToolCallScanner::BeginJson(size_t position) {
  json_start_ = position;
  scanned_ = position;
  scanner_ = JsonScanner();
  mode_ = Mode::kJson;
}

bool ToolCallScanner::StepPreamble() {
  const std::string_view view(buf_);
  const size_t first = FirstNonSpace(view, json_start_);
  if (first == kTooMuchSpace) {
    Reject(json_start_ + kMaxDroppedWhitespace + 1);
    return true;
  }
  if (first == std::string_view::npos) {
    if (!final_) return false;
    Reject(buf_.size());
    return true;
  }
  const char c = view[first];
  if (kind_ == CallKind::kMistral) {
    if (c == '[' || c == '{') {
      kind_ = CallKind::kMistralArray;
      BeginJson(first);
    } else if (IsNameChar(c)) {
      kind_ = CallKind::kMistralName;
      name_start_ = first;
    } else {
      Reject(first);
    }
    return true;
  }
  if (c == '{') {
    BeginJson(first);
  } else {
    Reject(first);
  }
  return true;
}

bool ToolCallScanner::StepMistralNamePreamble() {
  const std::string_view view(buf_);
  size_t i = name_start_;
  while (i < view.size() && IsNameChar(view[i]) && i - name_start_ <= kMaxNameLength) ++i;
  if (i - name_start_ > kMaxNameLength) {
    Reject(i);
    return true;
  }
  if (i == view.size()) {
    if (!final_) return false;
    Reject(i);
    return true;
  }
  mistral_name_ = std::string(view.substr(name_start_, i - name_start_));
  // Then at most one [CALL_ID]<id> and one [ARGS], in either order, before the arguments.
  bool seen_id = false;
  bool seen_args = false;
  for (;;) {
    const std::string_view rest = view.substr(i);
    if (!seen_id && rest.substr(0, kMistralCallId.size()) == kMistralCallId) {
      seen_id = true;
      size_t j = i + kMistralCallId.size();
      while (j < view.size() && IsAlnum(view[j]) && j - i <= kMistralCallId.size() + 64) ++j;
      if (j == view.size() && !final_) return false;
      i = j;
      continue;
    }
    if (!seen_args && rest.substr(0, kMistralArgs.size()) == kMistralArgs) {
      seen_args = true;
      i += kMistralArgs.size();
      continue;
    }
    const size_t first = FirstNonSpace(view, i);
    if (first == kTooMuchSpace) {
      Reject(i + kMaxDroppedWhitespace + 1);
      return true;
    }
    if (first == std::string_view::npos) {
      if (!final_) return false;
      Reject(view.size());
      return true;
    }
    if (view[first] == '{') {
      BeginJson(first);
      return true;
    }
    if (!final_ && first == i &&
        ((!seen_id && IsProperPrefix(rest, kMistralCallId)) ||
         (!seen_args && IsProperPrefix(rest, kMistralArgs)))) {
      return false;
    }
    Reject(first);
    return true;
  }
}

bool ToolCallScanner::StepJson() {
  JsonScanner::State state = scanner_.state();
  while (scanned_ < buf_.size() &&
         (state == JsonScanner::State::kStart || state == JsonScanner::State::kScanning)) {
    state = scanner_.Push(buf_[scanned_++]);
  }
  if (state == JsonScanner::State::kError) {
    Reject(scanned_ - 1);
    return true;
  }
  if (state != JsonScanner::State::kDone) {
    if (!final_) return false;
    Reject(buf_.size());  // cut off (max_tokens): the call never completed
    return true;
  }
  const size_t end = scanned_;
  const std::optional<nlohmann::ordered_json> parsed =
      ParseBoundedJson(std::string_view(buf_).substr(json_start_, end - json_start_));
  const absl::Span<const llmserve::v1::Tool> tools(tools_);
  if (kind_ == CallKind::kMistralArray) {
    std::vector<CallParts> parts;
    bool valid = parsed.has_value() && (parsed->is_array() || parsed->is_object());
    if (valid) {
      const nlohmann::ordered_json items =
          parsed->is_array() ? *parsed : nlohmann::ordered_json::array({*parsed});
      for (const nlohmann::ordered_json& item : items) {
        std::optional<CallParts> call = CallFromJson(item, &tools);
        if (!call.has_value()) {
          valid = false;
          break;
        }
        parts.push_back(*std::move(call));
      }
    }
    valid = valid && !parts.empty() &&
            calls_.size() + parts.size() <= static_cast<size_t>(kMaxToolCalls);
    if (!valid) {
      Reject(end);
      return true;
    }
    for (const CallParts& call : parts) AddCall(call.name, call.arguments);
  } else if (kind_ == CallKind::kMistralName) {
    // name[ARGS]{...}: the JSON is the arguments object itself.
    if (!parsed.has_value() || !parsed->is_object() || !IsKnownTool(mistral_name_, tools_)) {
      Reject(end);
      return true;
    }
    AddCall(mistral_name_, DumpJson(*parsed));
  } else {
    std::optional<CallParts> call;
    if (parsed.has_value()) call = CallFromJson(*parsed, &tools);
    if (!call.has_value()) {
      Reject(end);
      return true;
    }
    AddCall(call->name, call->arguments);
  }
  buf_.erase(0, end);
  mode_ = Mode::kAfterCall;
  return true;
}

bool ToolCallScanner::StepAfterCall() {
  const std::string_view view(buf_);
  const size_t first = FirstNonSpace(view, 0);
  if (first == kTooMuchSpace) {
    mode_ = Mode::kText;  // which sends a run this long as content
    return true;
  }
  if (first == std::string_view::npos) {
    if (!final_) return false;
    mode_ = Mode::kText;
    return true;
  }
  const std::string_view rest = view.substr(first);
  if (format_ == ToolCallFormat::kHermes) {
    if (rest.substr(0, kHermesEnd.size()) == kHermesEnd) {
      buf_.erase(0, first + kHermesEnd.size());
    } else if (!final_ && IsProperPrefix(rest, kHermesEnd)) {
      return false;
    }
  } else if (format_ == ToolCallFormat::kLlama3Json) {
    if (rest[0] == ';') {
      buf_.erase(0, first + 1);
      return true;
    }
    if (rest[0] == '{' && CanTakeMoreCalls()) {
      buf_.erase(0, first);
      StartCall(CallKind::kLlamaBare, 0);
      return true;
    }
  }
  mode_ = Mode::kText;
  return true;
}

void ToolCallScanner::Reject(size_t end) {
  SendContent(std::string_view(buf_).substr(0, end));
  buf_.erase(0, end);
  mode_ = Mode::kText;
}

void ToolCallScanner::AddCall(const std::string& name, const std::string& arguments) {
  llmserve::v1::ToolCall call;
  call.set_id(NewToolCallId());
  call.set_name(name);
  call.set_arguments(arguments);
  ToolCallDelta delta;
  delta.index = static_cast<int>(calls_.size());
  delta.id = call.id();
  delta.name = name;
  delta.arguments = arguments;
  calls_.push_back(std::move(call));
  out_.tool_calls.push_back(std::move(delta));
  whitespace_only_ = true;
}

}  // namespace llmserve::gateway::tool_calls
