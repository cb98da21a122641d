#include "worker/speculative/ngram_proposer.h"

#include <algorithm>

namespace llmserve::worker {

std::vector<int32_t> ProposeNgramDrafts(absl::Span<const int32_t> tokens, int32_t min_n,
                                        int32_t max_n, int32_t max_drafts) {
  std::vector<int32_t> drafts;
  const int64_t size = static_cast<int64_t>(tokens.size());
  if (min_n < 1 || max_n < min_n || max_drafts < 1 || size <= min_n) return drafts;
  const int32_t last = tokens[size - 1];
  // `end` is the last token of a candidate occurrence; it must leave one token after it.
  int64_t best_end = -1;
  int32_t best_len = 0;
  for (int64_t end = size - 2; end >= min_n - 1; --end) {
    if (tokens[end] != last) continue;
    const int64_t limit = std::min<int64_t>(max_n, end + 1);
    int32_t len = 1;
    while (len < limit && tokens[end - len] == tokens[size - 1 - len]) ++len;
    if (len > best_len) {
      best_len = len;
      best_end = end;
      if (len == max_n) break;
    }
  }
  if (best_len < min_n) return drafts;
  drafts.reserve(max_drafts);
  for (int64_t source = best_end + 1; static_cast<int32_t>(drafts.size()) < max_drafts; ++source) {
    drafts.push_back(source < size ? tokens[source] : drafts[source - size]);
  }
  return drafts;
}

absl::StatusOr<std::vector<std::vector<int32_t>>> NgramProposer::Propose(
    absl::Span<const DraftQuery> queries) {
  std::vector<std::vector<int32_t>> drafts;
  drafts.reserve(queries.size());
  for (const DraftQuery& query : queries) {
    drafts.push_back(ProposeNgramDrafts(query.tokens, min_n_, max_n_, query.max_drafts));
  }
  return drafts;
}

}  // namespace llmserve::worker
