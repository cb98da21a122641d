// Prompt lookup decoding (vLLM's "ngram" speculative method; Saxena, "Prompt Lookup Decoding",
// 2023): text that quotes its context — code edits, answers that cite a document, JSON that
// repeats keys — continues the way an earlier occurrence of its last few tokens did.
//
// ProposeNgramDrafts is a pure function (thread-safe); NgramProposer is the engine's Proposer
// around it, with the engine's settings (thread-compatible).

#ifndef LLMSERVE_WORKER_SPECULATIVE_NGRAM_PROPOSER_H_
#define LLMSERVE_WORKER_SPECULATIVE_NGRAM_PROPOSER_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/speculative/proposer.h"

namespace llmserve::worker {

// Finds the earlier occurrence of the longest suffix of `tokens` of length in [min_n, max_n]
// (the latest one among equally long matches) and returns up to `max_drafts` tokens that followed
// it. The copy runs on past the end of `tokens` into the tokens it has already proposed, so a
// repeating pattern is extended by its period rather than cut where the history ends. Empty when
// no suffix of min_n tokens occurred before.
//
// One backward pass over `tokens`, comparing at most max_n tokens at each position.
std::vector<int32_t> ProposeNgramDrafts(absl::Span<const int32_t> tokens, int32_t min_n,
                                        int32_t max_n, int32_t max_drafts);

// Drafts each request from its own tokens, with n-grams of min_n..max_n tokens; keeps no state.
class NgramProposer final : public Proposer {
 public:
  NgramProposer(int32_t min_n, int32_t max_n) : min_n_(min_n), max_n_(max_n) {}

  absl::StatusOr<std::vector<std::vector<int32_t>>> Propose(
      absl::Span<const DraftQuery> queries) override;
  void Release(RequestId) override {}
  bool runs_a_model() const override { return false; }

 private:
  const int32_t min_n_;
  const int32_t max_n_;
};

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_SPECULATIVE_NGRAM_PROPOSER_H_
