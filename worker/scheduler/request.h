// One generation request as the scheduler tracks it: its tokens, limits, and where it is in its
// life. Plain data; the scheduler owns every Request and mutates it on the engine thread.
//
//   waiting --schedule--> running --update--> finished (stopped | length | aborted)
//      ^                     |
//      +----- preempted <----+   (blocks freed; recomputed from scratch when readmitted)

#ifndef LLMSERVE_WORKER_SCHEDULER_REQUEST_H_
#define LLMSERVE_WORKER_SCHEDULER_REQUEST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/prefix_cache/block_hash.h"
#include "worker/kv/kv_cache_manager.h"

namespace llmserve::worker {

enum class RequestStatus {
  kWaiting,
  kRunning,
  kPreempted,  // waiting again, to be recomputed
  kFinishedStopped,
  kFinishedLength,
  kFinishedAborted,
};

bool IsFinished(RequestStatus status);

// What ends a request, besides abort.
struct StoppingParams {
  // At least 1.
  int32_t max_tokens = 16;
  // Ids that end the request (the stop token is kept as the last output token).
  std::vector<int32_t> stop_token_ids;
  // Don't stop on the model's EOS ids.
  bool ignore_eos = false;
  // EOS and stop ids cannot end the request before this many output tokens.
  int32_t min_tokens = 0;
};

struct Request {
  RequestId id = 0;
  // The prompt, then the output tokens as they are generated: one array, so that the KV cache
  // manager can hash blocks that span both without copying.
  std::vector<int32_t> tokens;
  int32_t num_prompt_tokens = 0;
  StoppingParams stopping;
  // An embedding request: it computes its prompt and finishes (kFinishedStopped) with no output
  // token (stopping.max_tokens is 0), and never shares or caches blocks through the prefix cache
  // (its pooling needs the hidden state of every prompt token).
  bool pooling = false;
  // The LoRA adapter whose delta the request's projections add (the engine's id for it), or 0
  // for the base model.
  int64_t lora_id = 0;
  // Lower is served first (priority policy); ties in arrival order.
  int32_t priority = 0;
  std::string cache_salt;
  // The hashes of the full blocks of `tokens` under cache_salt, by which the prefix cache knows
  // blocks (common/prefix_cache/block_hash.h). The scheduler computes them for the prompt when the
  // request is added and extends them as output tokens fill blocks, so that admission attempts,
  // preemptions and caching never hash the same tokens again (vLLM's request block hasher).
  // Empty when prefix caching is off.
  std::vector<common::BlockHash> block_hashes;

  // Speculative decoding: tokens proposed to follow `tokens`, to be verified by the next step
  // (Scheduler::SetDraftTokens). Not part of `tokens` until the model agrees with them; dropped
  // when the step that carries them is planned, and on preemption.
  std::vector<int32_t> draft_tokens;

  RequestStatus status = RequestStatus::kWaiting;
  // Set by the scheduler on AddRequest: the order of arrival.
  int64_t arrival = 0;
  // Tokens (of prompt + output) whose K/V are in the cache.
  int32_t num_computed_tokens = 0;
  // Prompt tokens served from the prefix cache at the first admission.
  int32_t num_cached_prompt_tokens = 0;
  int32_t num_preemptions = 0;
  // Whether the request has ever been scheduled (for the queue-time metric).
  bool ever_scheduled = false;

  int32_t num_tokens() const { return static_cast<int32_t>(tokens.size()); }
  int32_t num_output_tokens() const { return num_tokens() - num_prompt_tokens; }
};

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_SCHEDULER_REQUEST_H_
