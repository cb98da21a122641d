// A compiled PCRE2 regular expression with the options HF tokenizer patterns need (UTF, UCP so
// that \s, \w, \d and \p{..} are Unicode-aware like Oniguruma's), JIT-compiled when available.
//
// Thread-safe: the compiled code is immutable; each thread matches with its own match data and
// JIT stack (thread_local), so concurrent FindAll calls never share mutable state.
#ifndef LLMSERVE_COMMON_TOKENIZER_REGEX_H_
#define LLMSERVE_COMMON_TOKENIZER_REGEX_H_

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace llmserve::common::tokenizer {

class Regex {
 public:
  // Fails with INVALID_ARGUMENT carrying PCRE2's message and offset when the pattern is rejected.
  static absl::StatusOr<std::unique_ptr<Regex>> Compile(std::string_view pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends [begin, end) byte ranges of successive non-overlapping matches, left to right.
  // `text` must be valid UTF-8 (it is not re-checked). Fails only when PCRE2 hits a resource
  // limit (RESOURCE_EXHAUSTED).
  absl::Status FindAll(std::string_view text,
                       std::vector<std::pair<size_t, size_t>>* matches) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Code;
  Regex(std::string pattern, Code* code) : pattern_(std::move(pattern)), code_(code) {}

  std::string pattern_;
  Code* code_;  // owned; a pcre2_code behind an incomplete type keeps pcre2.h out of headers
};

}  // namespace llmserve::common::tokenizer

#endif  // LLMSERVE_COMMON_TOKENIZER_REGEX_H_
