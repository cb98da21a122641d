// HF's Pattern + SplitDelimiterBehavior (tokenizers/src/tokenizer/normalizer.rs): find the
// pieces of a string that match a pattern, then decide how matches and gaps become splits.
// Pure functions; thread-safe.
#ifndef LLMSERVE_COMMON_TOKENIZER_PATTERN_H_
#define LLMSERVE_COMMON_TOKENIZER_PATTERN_H_

#include <cstddef>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/tokenizer/regex.h"
#include "common/utf8/utf8.h"

namespace llmserve::common::tokenizer {

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// Parses HF's names ("Removed", "Isolated", ...); INVALID_ARGUMENT otherwise.
absl::StatusOr<SplitBehavior> ParseSplitBehavior(std::string_view name);

// One piece of the text: [begin, end), and whether it is a match or a gap between matches.
struct PatternPiece {
  size_t begin;
  size_t end;
  bool is_match;
};
using PatternPieces = std::vector<PatternPiece>;

// Regex matches and the gaps between them, covering the whole text.
absl::Status FindRegexPieces(const Regex& regex, std::string_view text, PatternPieces* pieces);

// Every occurrence of `literal` is a match (non-overlapping, left to right).
void FindLiteralPieces(std::string_view literal, std::string_view text, PatternPieces* pieces);

// Each character satisfying `predicate` is its own match. `text` must be valid UTF-8.
template <typename Predicate>
void FindCharPieces(Predicate predicate, std::string_view text, PatternPieces* pieces) {
  if (text.empty()) {
    pieces->push_back({0, 0, false});
    return;
  }
  size_t gap_start = 0;
  size_t pos = 0;
  char32_t cp;
  while (pos < text.size()) {
    const int n = common::utf8::DecodeOne(text, pos, &cp);
    const size_t len = n > 0 ? n : -n;
    if (n > 0 && predicate(cp)) {
      if (gap_start < pos) pieces->push_back({gap_start, pos, false});
      pieces->push_back({pos, pos + len, true});
      gap_start = pos + len;
    }
    pos += len;
  }
  if (gap_start < text.size()) pieces->push_back({gap_start, text.size(), false});
}

// Applies `behavior` (after flipping is_match when `invert`) and appends the non-empty
// resulting [begin, end) ranges to *ranges.
void ApplySplitBehavior(PatternPieces pieces, SplitBehavior behavior, bool invert,
                        std::vector<std::pair<size_t, size_t>>* ranges);

}  // namespace llmserve::common::tokenizer

#endif  // LLMSERVE_COMMON_TOKENIZER_PATTERN_H_
