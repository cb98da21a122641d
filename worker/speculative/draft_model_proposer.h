// Speculative decoding with a draft model: a smaller model of the target's vocabulary, run beside
// it on the engine thread, proposes each request's next few tokens greedily.
//
// The draft model has its own backend and its own paged KV cache (no prefix caching: its blocks
// are cheap to recompute and never shared). For every request it remembers which tokens its cache
// holds. When asked for drafts it compares that with the request's tokens now (the target's
// verification may have accepted only some of the last drafts), rolls its block table back to the
// common prefix, feeds what it lacks (the accepted tokens and the target's own token; on first
// use the whole prompt, in chunks under a token budget), and then decodes the drafts one forward
// pass at a time. All requests drafting in a step share each pass, so k drafts cost k draft
// passes whatever the batch.
//
// Drafts are argmax tokens (greedy). The engine's verification keeps outputs exact for any draft
// (engine.h); a draft model only decides how often drafts are accepted.
//
// When the draft cache runs out of blocks, the proposer evicts the requests it saw least recently
// (those not drafting now: preempted, waiting, or decoding without drafts); a request that still
// does not fit gets no drafts this step. A request past the draft model's context gets none.
//
// Thread-compatible: the engine thread owns it.

#ifndef LLMSERVE_WORKER_SPECULATIVE_DRAFT_MODEL_PROPOSER_H_
#define LLMSERVE_WORKER_SPECULATIVE_DRAFT_MODEL_PROPOSER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/node_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/engine/backend.h"
#include "worker/kv/kv_cache_manager.h"
#include "worker/model/model_config.h"
#include "worker/speculative/proposer.h"

namespace llmserve::worker {

class DraftModelProposer final : public Proposer {
 public:
  // INVALID_ARGUMENT when the draft cannot speculate for `target`: a larger vocabulary (a draft
  // could name a token the target does not have), or a cache of fewer than 2 blocks.
  // `max_catch_up_tokens` (>= 1) caps the tokens of the first pass of a step, where requests new
  // to the draft model feed their prompts.
  static absl::StatusOr<std::unique_ptr<DraftModelProposer>> Create(std::unique_ptr<Backend> draft,
                                                                    const ModelConfig& target,
                                                                    int32_t max_catch_up_tokens);

  // Drafts for each query (index-aligned), up to its max_drafts, possibly none. Queries must have
  // distinct ids. An error is the draft backend's: every request's draft state is then dropped
  // (its cache may hold garbage) and the next call starts afresh.
  absl::StatusOr<std::vector<std::vector<int32_t>>> Propose(
      absl::Span<const DraftQuery> queries) override;

  // Forgets a request (finished or aborted) and frees its draft blocks. Unknown ids are ignored.
  void Release(RequestId id) override;
  bool runs_a_model() const override { return true; }

  const Backend& backend() const { return *draft_; }
  // Requests with draft state, and the draft cache's free blocks (for tests and logs).
  int32_t num_tracked() const { return static_cast<int32_t>(states_.size()); }
  int32_t free_blocks() const { return kv_.Stats().free_blocks; }

 private:
  struct State {
    // The tokens whose K/V the draft cache holds, positions 0, 1, ...
    std::vector<int32_t> cached;
    // The Propose call that last saw the request (for eviction).
    int64_t last_seen = 0;
  };
  // One request's part of a Propose call.
  struct Active {
    RequestId id = 0;
    size_t query = 0;
    State* state = nullptr;
    // Drafts wanted (0: only catching up this step).
    int32_t wanted = 0;
    // The tokens the next pass feeds.
    std::vector<int32_t> feed;
  };

  DraftModelProposer(std::unique_ptr<Backend> draft, const ModelConfig& target,
                     int32_t max_catch_up_tokens);
  // Allocates `tokens` more slots for `id`, evicting requests not seen in this call as needed.
  bool Allocate(RequestId id, int32_t tokens);
  // Runs one pass over the requests' feeds; row i of the output is the last token of
  // `requests[i]`'s.
  absl::Status Run(absl::Span<Active* const> requests);
  int32_t Argmax(int32_t seq) const;
  void DropAll();

  std::unique_ptr<Backend> draft_;
  std::vector<int32_t> eos_token_ids_;
  int32_t max_catch_up_tokens_;
  int32_t max_model_len_;
  KvCacheManager kv_;
  // Node-based: Propose holds pointers to states while evicting others.
  absl::node_hash_map<RequestId, State> states_;
  int64_t calls_ = 0;
  ForwardBatch batch_;
  ForwardOutput output_;
};

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_SPECULATIVE_DRAFT_MODEL_PROPOSER_H_
