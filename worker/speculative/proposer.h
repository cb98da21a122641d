// What speculative decoding asks of a drafter: for each request decoding this step, a few tokens
// the target model is likely to produce next. The engine verifies them in its next step (its
// outputs stay exact whatever the drafts: engine.h), so a proposer only decides how often drafts
// are accepted. Prompt lookup (ngram_proposer.h) and a draft model (draft_model_proposer.h) are
// the two.
//
// Thread-compatible: the engine thread owns its proposer.

#ifndef LLMSERVE_WORKER_SPECULATIVE_PROPOSER_H_
#define LLMSERVE_WORKER_SPECULATIVE_PROPOSER_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/kv/kv_cache_manager.h"

namespace llmserve::worker {

struct DraftQuery {
  RequestId id = 0;
  // The request's known tokens (prompt and output so far), at least one.
  absl::Span<const int32_t> tokens;
  // Most drafts wanted, >= 1.
  int32_t max_drafts = 1;
};

class Proposer {
 public:
  virtual ~Proposer() = default;

  // Drafts for each query (index-aligned), up to its max_drafts, possibly none. Queries have
  // distinct ids. An error means no drafts this step; the requests go on without them.
  virtual absl::StatusOr<std::vector<std::vector<int32_t>>> Propose(
      absl::Span<const DraftQuery> queries) = 0;

  // Forgets a request (finished or aborted). Unknown ids are ignored.
  virtual void Release(RequestId id) = 0;

  // Whether proposing runs a model (its time is forward time, not engine overhead).
  virtual bool runs_a_model() const = 0;
};

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_SPECULATIVE_PROPOSER_H_
