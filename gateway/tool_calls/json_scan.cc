#include "gateway/tool_calls/json_scan.h"

#include <cmath>
#include <exception>
#include <vector>

#include "common/json/ordered_json.h"

namespace llmserve::gateway::tool_calls {
namespace {

bool IsJsonSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// Bytes of literals and numbers: letters (true/false/null/exponents), digits, sign, point.
bool IsLiteralByte(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '+' ||
         c == '-' || c == '.';
}

// nlohmann parses an out-of-range number such as 1e99999 as infinity, which JSON cannot write
// back (it would be dumped as null): such a value is not the model's JSON. Iterative, so its cost
// does not depend on the depth.
bool AllNumbersFinite(const nlohmann::ordered_json& root) {
  std::vector<const nlohmann::ordered_json*> pending = {&root};
  while (!pending.empty()) {
    const nlohmann::ordered_json* value = pending.back();
    pending.pop_back();
    if (value->is_number_float() && !std::isfinite(value->get<double>())) return false;
    if (value->is_structured()) {
      for (const nlohmann::ordered_json& child : *value) pending.push_back(&child);
    }
  }
  return true;
}

}  // namespace

JsonScanner::State JsonScanner::Push(char c) {
  if (state_ == State::kDone || state_ == State::kError) return state_;
  if (++bytes_ > kMaxJsonBytes) return state_ = State::kError;
  if (state_ == State::kStart) {
    if (c != '{' && c != '[') return state_ = State::kError;
    stack_.push_back(c);
    depth_ = 1;
    return state_ = State::kScanning;
  }
  if (in_string_) {
    if (escape_) {
      escape_ = false;
    } else if (c == '\\') {
      escape_ = true;
    } else if (c == '"') {
      in_string_ = false;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      return state_ = State::kError;  // raw control characters are not allowed in JSON strings
    }
    return state_;
  }
  switch (c) {
    case '"':
      in_string_ = true;
      return state_;
    case '{':
    case '[':
      if (depth_ >= kMaxJsonDepth) return state_ = State::kError;
      stack_.push_back(c);
      ++depth_;
      return state_;
    case '}':
    case ']':
      if (stack_.back() != (c == '}' ? '{' : '[')) return state_ = State::kError;
      stack_.pop_back();
      if (--depth_ == 0) state_ = State::kDone;
      return state_;
    case ',':
    case ':':
      return state_;
    default:
      if (IsJsonSpace(c) || IsLiteralByte(c)) return state_;
      return state_ = State::kError;
  }
}

std::optional<nlohmann::ordered_json> ParseBoundedJson(std::string_view text) {
  if (text.size() > kMaxJsonBytes) return std::nullopt;
  // Depth first: nlohmann would build (and later tear down) any depth it is given.
  int depth = 0;
  bool in_string = false;
  bool escape = false;
  for (char c : text) {
    if (in_string) {
      if (escape) {
        escape = false;
      } else if (c == '\\') {
        escape = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > kMaxJsonDepth) return std::nullopt;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  // Linear time: nlohmann's own ordered_json parser is quadratic in an object's keys.
  // nlohmann refuses invalid UTF-8 and lone surrogate escapes ("\ud800") itself.
  absl::StatusOr<nlohmann::ordered_json> value =
      common::ParseOrderedJson(text, {.max_depth = kMaxJsonDepth + 1});
  if (!value.ok() || !AllNumbersFinite(*value)) return std::nullopt;
  return *std::move(value);
}

std::string DumpJson(const nlohmann::ordered_json& value) {
  try {
    return value.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  } catch (const std::exception&) {
    return "null";
  }
}

}  // namespace llmserve::gateway::tool_calls
