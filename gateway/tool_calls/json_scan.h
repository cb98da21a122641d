// Bounded JSON helpers for model output: an incremental scanner that finds where one JSON
// object/array ends in text arriving piecewise, and a parse that refuses deep or huge input.
// Not thread-safe per object; the functions are pure.
//
// Bounds: kMaxJsonDepth levels of nesting, kMaxJsonBytes bytes per value. Beyond them the value
// counts as malformed (no recursion or allocation grows with hostile input past these).
#ifndef LLMSERVE_GATEWAY_TOOL_CALLS_JSON_SCAN_H_
#define LLMSERVE_GATEWAY_TOOL_CALLS_JSON_SCAN_H_

#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace llmserve::gateway::tool_calls {

inline constexpr int kMaxJsonDepth = 64;
inline constexpr size_t kMaxJsonBytes = size_t{1} << 20;

// Follows one JSON object or array byte by byte: brackets, strings and escapes, so that the end
// of the value is known without parsing. Catches structural errors early (a closer that does not
// match, a byte that cannot appear outside a string) so that malformed calls resolve as soon as
// possible; it does not validate literals or numbers (the final parse does).
class JsonScanner {
 public:
  enum class State { kStart, kScanning, kDone, kError };

  // Consumes one byte; the first must be '{' or '['. No effect once kDone or kError.
  State Push(char c);
  State state() const { return state_; }
  // Open brackets: 1 inside the top-level value, 0 before it and after it closed.
  int depth() const { return depth_; }
  bool in_string() const { return in_string_; }

 private:
  State state_ = State::kStart;
  int depth_ = 0;
  size_t bytes_ = 0;
  bool in_string_ = false;
  bool escape_ = false;
  // The open brackets, innermost last (bounded by kMaxJsonDepth).
  std::string stack_;
};

// Parses `text` as JSON within the bounds above (insertion order of keys kept, as the model wrote
// them); nullopt when it is not valid JSON (invalid UTF-8, a lone surrogate escape such as
// "\ud800", a number out of double's range such as 1e99999) or exceeds a bound. Never throws.
std::optional<nlohmann::ordered_json> ParseBoundedJson(std::string_view text);

// Compact JSON text of `value`; invalid UTF-8 in strings is replaced, never thrown on.
std::string DumpJson(const nlohmann::ordered_json& value);

}  // namespace llmserve::gateway::tool_calls

#endif  // LLMSERVE_GATEWAY_TOOL_CALLS_JSON_SCAN_H_
