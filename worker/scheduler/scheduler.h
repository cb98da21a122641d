// Iteration-level (continuous) batching over one token budget, in the manner of vLLM v1.
//
// Every step, Schedule() decides which requests run and with how many new tokens:
//   1. Running requests first, in admission order: a decode needs 1 token, an unfinished prefill
//      continues with as much of its prompt as the budget allows (chunked prefill). When one
//      cannot get a KV block, the lowest-priority, newest running request is preempted (its
//      blocks freed, to be recomputed later) until it can, or until it was the one preempted.
//   2. Then, if nothing was preempted this step, waiting requests are admitted in policy order
//      (FCFS, or priority with FCFS tie-break) while the budget, the sequence cap and the KV
//      blocks allow; a prefix-cache hit skips the cached part of the prompt. Admission stops at
//      the first request that does not fit, so the oldest is never starved.
// Blocks that the scheduled tokens fill are registered in the prefix cache at once, so requests
// admitted in the same step can share them (kv_cache_manager.h).
// The engine runs the forward pass and samples a token for every scheduled request whose new
// tokens reach the end of its known tokens, then calls Update() with those tokens: outputs grow,
// stop conditions are checked (EOS unless ignore_eos, stop ids, max_tokens, max_model_len),
// finished requests free their blocks.
//
// Speculative decoding: the engine may give a decoding request draft tokens (SetDraftTokens).
// The next step computes them after its last known token, within the same token budget (a
// request's drafts are cut to the budget left, and dropped when their blocks would preempt
// anyone), and the engine verifies them: Update() then takes the run of tokens it emitted — the
// drafts it accepted, in order, and one token of its own — counts the accepted drafts as
// computed, and gives back the blocks that only rejected drafts used (RollbackSlots). Blocks
// enter the prefix cache only once their tokens are known, so no draft is ever shared.
//
// Not thread-safe: owned by the engine thread.

#ifndef LLMSERVE_WORKER_SCHEDULER_SCHEDULER_H_
#define LLMSERVE_WORKER_SCHEDULER_SCHEDULER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "worker/kv/kv_cache_manager.h"
#include "worker/scheduler/request.h"

namespace llmserve::worker {

struct SchedulerConfig {
  // Tokens in one forward pass, prefill and decode together.
  int32_t max_num_batched_tokens = 2048;
  // Requests in one forward pass.
  int32_t max_num_seqs = 64;
  // Prompt + output tokens of one request.
  int32_t max_model_len = 2048;
  enum class Policy { kFcfs, kPriority };
  Policy policy = Policy::kFcfs;
  // The model's EOS ids.
  std::vector<int32_t> eos_token_ids;
  // Distinct LoRA adapters the running requests may use at once (the backend's adapter slots): a
  // waiting request of another adapter is passed over, and later ones admitted, while that many
  // are in use. 0: no limit (no LoRA).
  int32_t max_loras = 0;
};

// One request in a step's batch.
struct ScheduledRequest {
  RequestId id = 0;
  // Tokens of Request::tokens already in the cache before this step.
  int32_t num_computed_tokens = 0;
  int32_t num_new_tokens = 0;
  // The new tokens reach the end of the request's known tokens: a token is to be sampled.
  bool samples = false;
  // Of num_new_tokens, the request's draft tokens (the last ones), to be verified; 0 unless
  // `samples`.
  int32_t num_draft_tokens = 0;
  // What the forward pass needs, copied so that the engine never reads the scheduler's or the KV
  // cache manager's state: the tokens to compute (Request::tokens[num_computed_tokens,
  // + num_new_tokens)), of which num_new_prompt_tokens are prompt tokens, and the request's whole
  // block table after this step's allocation.
  std::vector<int32_t> new_token_ids;
  int32_t num_new_prompt_tokens = 0;
  std::vector<int32_t> block_table;
};

// A step's plan: plain data for the engine and for tests.
struct SchedulerOutput {
  std::vector<ScheduledRequest> scheduled;
  int32_t num_batched_tokens = 0;
  // Requests preempted this step (blocks freed, back to waiting).
  std::vector<RequestId> preempted;
  // Requests scheduled for the first time this step (their queue time ends now).
  std::vector<RequestId> first_scheduled;
};

// What one request got from a step.
struct RequestOutput {
  RequestId id = 0;
  std::vector<int32_t> new_tokens;
  // Finished here: kFinishedStopped, kFinishedLength; otherwise kRunning.
  RequestStatus status = RequestStatus::kRunning;
  // Whether new_tokens holds the request's first output token.
  bool first_token = false;
  // Filled when the request finished here (it is gone from the scheduler afterwards).
  int32_t num_prompt_tokens = 0;
  int32_t num_cached_prompt_tokens = 0;
  int32_t num_output_tokens = 0;
  int32_t num_preemptions = 0;
};

// Whether `request` can ever run under `config` with `total_blocks` usable KV blocks of
// `block_size` tokens: INVALID_ARGUMENT naming the limit otherwise (empty prompt, max_tokens < 1,
// min_tokens > max_tokens, prompt + max_tokens > max_model_len, more blocks than exist). Safe to
// call from any thread: it reads only its arguments.
absl::Status CheckRequestFits(const Request& request, const SchedulerConfig& config,
                              int32_t total_blocks, int32_t block_size);

class Scheduler {
 public:
  // `kv` outlives the scheduler.
  Scheduler(const SchedulerConfig& config, KvCacheManager* kv);

  // Queues a request. INVALID_ARGUMENT when it can never run (CheckRequestFits); ALREADY_EXISTS
  // for a live id. The request's status, arrival and counters are reset.
  absl::Status AddRequest(std::unique_ptr<Request> request);

  // Finishes a request in any state at once (its blocks are freed). Returns whether it was live.
  bool AbortRequest(RequestId id);

  SchedulerOutput Schedule();

  // Applies a step's results. `emitted[i]` is what the engine emitted for output.scheduled[i]
  // (ignored where scheduled[i].samples is false): its accepted draft tokens, in order, then one
  // sampled token, so between 1 and num_draft_tokens + 1 tokens (CHECKed, as is that every token
  // but the last equals its draft). Tokens after one that finishes the request are dropped.
  std::vector<RequestOutput> Update(const SchedulerOutput& output,
                                    absl::Span<const std::vector<int32_t>> emitted);
  // The same without speculation: `sampled[i]` is the one token for output.scheduled[i].
  std::vector<RequestOutput> Update(const SchedulerOutput& output,
                                    absl::Span<const int32_t> sampled);

  // Gives running request `id`, whose next step decodes, draft tokens for that step, cut so that
  // verifying them can neither pass max_model_len nor emit more than max_tokens. Returns how many
  // it kept (0 for an unknown or not running request, or one with prompt tokens still to compute).
  int32_t SetDraftTokens(RequestId id, std::vector<int32_t> drafts);

  // The request, or nullptr once it is finished and removed.
  const Request* Find(RequestId id) const;
  int32_t num_running() const { return static_cast<int32_t>(running_.size()); }
  int32_t num_waiting() const { return static_cast<int32_t>(waiting_.size()); }
  bool HasWork() const { return !running_.empty() || !waiting_.empty(); }
  // Running request ids in admission order (for tests).
  const std::vector<RequestId>& running() const { return running_; }
  const SchedulerConfig& config() const { return config_; }
  int64_t num_preemptions() const { return num_preemptions_; }

 private:
  // Waiting order: priority (when the policy uses it), then arrival.
  struct WaitingKey {
    int32_t priority;
    int64_t arrival;
    RequestId id;
    friend bool operator<(const WaitingKey& a, const WaitingKey& b) {
      if (a.priority != b.priority) return a.priority < b.priority;
      return a.arrival != b.arrival ? a.arrival < b.arrival : a.id < b.id;
    }
  };
  WaitingKey KeyOf(const Request& request) const;

  void InsertRunning(const Request& request);
  // The plan's entry for `num_new` tokens of `request` from `num_computed` on (its blocks
  // allocated).
  // `num_drafts` of the request's draft tokens follow its known ones.
  ScheduledRequest PlanStep(const Request& request, int32_t num_computed, int32_t num_new,
                            int32_t num_drafts = 0) const;
  void Preempt(RequestId id, SchedulerOutput* output);
  bool ScheduleRunning(int32_t* budget, SchedulerOutput* output);
  void AdmitWaiting(int32_t* budget, SchedulerOutput* output);
  // Appends the sampled token and applies the stop conditions.
  RequestStatus AppendToken(Request& request, int32_t token);
  void Finish(RequestId id, RequestStatus status, RequestOutput* output);

  SchedulerConfig config_;
  KvCacheManager* kv_;
  absl::flat_hash_map<RequestId, std::unique_ptr<Request>> requests_;
  absl::btree_set<WaitingKey> waiting_;
  // Kept in waiting order, so the back is always the request to preempt first.
  std::vector<RequestId> running_;
  int64_t next_arrival_ = 0;
  int64_t num_preemptions_ = 0;
};

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_SCHEDULER_SCHEDULER_H_
