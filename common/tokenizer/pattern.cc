#include "common/tokenizer/pattern.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace llmserve::common::tokenizer {

absl::StatusOr<SplitBehavior> ParseSplitBehavior(std::string_view name) {
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown split behavior \"", std::string(name), "\""));
}

absl::Status FindRegexPieces(const Regex& regex, std::string_view text, PatternPieces* pieces) {
  if (text.empty()) {
    pieces->push_back({0, 0, false});
    return absl::OkStatus();
  }
  std::vector<std::pair<size_t, size_t>> matches;
  const absl::Status status = regex.FindAll(text, &matches);
  if (!status.ok()) return status;
  size_t prev = 0;
  for (const auto& [begin, end] : matches) {
    if (prev != begin) pieces->push_back({prev, begin, false});
    pieces->push_back({begin, end, true});
    prev = end;
  }
  if (prev != text.size()) pieces->push_back({prev, text.size(), false});
  return absl::OkStatus();
}

void FindLiteralPieces(std::string_view literal, std::string_view text, PatternPieces* pieces) {
  if (text.empty() || literal.empty()) {
    pieces->push_back({0, text.size(), false});
    return;
  }
  size_t prev = 0;
  for (size_t at = text.find(literal); at != std::string_view::npos;
       at = text.find(literal, at + literal.size())) {
    if (prev != at) pieces->push_back({prev, at, false});
    pieces->push_back({at, at + literal.size(), true});
    prev = at + literal.size();
  }
  if (prev != text.size()) pieces->push_back({prev, text.size(), false});
}

namespace {

// Each behavior below is a transcription of the fold in HF's NormalizedString::split; the
// output flag means "remove this range".
PatternPieces Merge(const PatternPieces& pieces, SplitBehavior behavior) {
  PatternPieces out;
  bool previous_match = false;
  for (const PatternPiece& p : pieces) {
    const bool merge = behavior == SplitBehavior::kContiguous ? p.is_match == previous_match
                                                              : (p.is_match && !previous_match);
    if (merge && !out.empty()) {
      out.back().end = p.end;
    } else {
      out.push_back({p.begin, p.end, false});
    }
    previous_match = p.is_match;
  }
  return out;
}

PatternPieces MergeWithNext(const PatternPieces& pieces) {
  PatternPieces out;
  bool previous_match = false;
  for (auto it = pieces.rbegin(); it != pieces.rend(); ++it) {
    if (it->is_match && !previous_match && !out.empty()) {
      out.back().begin = it->begin;
    } else {
      out.push_back({it->begin, it->end, false});
    }
    previous_match = it->is_match;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

}  // namespace

void ApplySplitBehavior(PatternPieces pieces, SplitBehavior behavior, bool invert,
                        std::vector<std::pair<size_t, size_t>>* ranges) {
  if (invert) {
    for (PatternPiece& p : pieces) p.is_match = !p.is_match;
  }
  PatternPieces result;
  switch (behavior) {
    case SplitBehavior::kRemoved:
      result = std::move(pieces);
      break;
    case SplitBehavior::kIsolated:
      result = std::move(pieces);
      for (PatternPiece& p : result) p.is_match = false;
      break;
    case SplitBehavior::kContiguous:
    case SplitBehavior::kMergedWithPrevious:
      result = Merge(pieces, behavior);
      break;
    case SplitBehavior::kMergedWithNext:
      result = MergeWithNext(pieces);
      break;
  }
  for (const PatternPiece& p : result) {
    if (!p.is_match && p.end > p.begin) ranges->emplace_back(p.begin, p.end);
  }
}

}  // namespace llmserve::common::tokenizer
