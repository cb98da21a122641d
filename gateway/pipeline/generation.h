// One request's generation as the gateway runs it: pick a worker and call it (WorkerClient: the
// gRPC WorkerPool, or a fake in tests), stream the worker's tokens, detokenize incrementally,
// apply stop strings, and hand text deltas to an observer (the gRPC or HTTP frontend). The
// prompt's routing hashes are computed once, for every attempt.
//
// Failures (retry_policy.h states the rule): a worker that fails or refuses (unavailable,
// overloaded) before the first token is reported to the worker client and the request is retried
// on another worker, up to max_attempts; after the first token the observer gets UNAVAILABLE
// naming how far it got (never a silent truncation). A worker that went away while running the
// request (its connection broke) may have been killed by it: the request is retried only within
// the query-of-death guard's crash_retries, then failed and quarantined; a quarantined request
// fails before reaching any worker (query_of_death.h). Cancel() (client gone, deadline) cancels the
// worker call, which frees the request's KV blocks on the worker at once.
//
// Thread-safe: Cancel may be called from any thread. Observer methods are called one at a time,
// in order, from gRPC's threads, and must not block.

#ifndef LLMSERVE_GATEWAY_PIPELINE_GENERATION_H_
#define LLMSERVE_GATEWAY_PIPELINE_GENERATION_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "common/tokenizer/incremental_detokenizer.h"
#include "common/tracing/tracer.h"
#include "gateway/metrics/gateway_metrics.h"
#include "gateway/pipeline/in_flight_count.h"
#include "gateway/pipeline/lora_adapter_manager.h"
#include "gateway/pipeline/prompt_builder.h"
#include "gateway/pipeline/query_of_death.h"
#include "gateway/pipeline/stop_matcher.h"
#include "gateway/router/prompt_routing_hashes.h"
#include "gateway/router/worker_client.h"
#include "gateway/tool_calls/stream_delta.h"
#include "llmserve/v1/inference.pb.h"

namespace llmserve::gateway {

struct GenerationDelta {
  // The output's text; for chats whose reasoning is parsed, the answer only
  // (reasoning_observer.h).
  std::string text;
  // Chats whose reasoning is parsed: reasoning, without its tags. A delta's reasoning comes
  // before its text, and no reasoning follows text.
  std::string reasoning;
  std::vector<::llmserve::v1::GeneratedToken> tokens;
  // Chats with tool calling: pieces of calls (text outside calls stays in `text`).
  std::vector<tool_calls::ToolCallDelta> tool_calls;
};

struct GenerationResult {
  ::llmserve::v1::FinishReason finish_reason = ::llmserve::v1::FINISH_REASON_UNSPECIFIED;
  std::string matched_stop;
  ::llmserve::v1::Usage usage;
  ::llmserve::v1::Timing timing;
  // host:port of the worker that served it.
  std::string worker;
  // Chats with tool calling: the calls the output held (then finish_reason is TOOL_CALLS).
  std::vector<::llmserve::v1::ToolCall> tool_calls;
  // Whether the reply went through a reasoning parser (then usage.reasoning_tokens is set), and
  // whether it had a think block (then it has reasoning, perhaps empty).
  bool reasoning_parsed = false;
  bool reasoned = false;
  // Embedding requests: the worker's embedding (empty if it gave up, finish_reason ABORT).
  std::vector<float> embedding;
};

class GenerationObserver {
 public:
  virtual ~GenerationObserver() = default;
  virtual void OnDelta(GenerationDelta delta) = 0;
  // Exactly one of OnFinish and OnError ends every generation.
  virtual void OnFinish(const GenerationResult& result) = 0;
  virtual void OnError(const absl::Status& status) = 0;
};

struct GenerationOptions {
  int max_attempts = 3;
  // Passed to the worker call (the client's deadline, or the gateway's request timeout).
  absl::Time deadline = absl::InfiniteFuture();
  // Mixed into the prefix-cache hashes (per-tenant isolation).
  std::string cache_salt;
  // Token latencies and routing decisions go here when set, labelled with `api`.
  GatewayMetrics* metrics = nullptr;
  std::string api;
  // Query-of-death protection, shared by every generation of the gateway. Null: a request whose
  // worker went away is not retried and nothing is quarantined.
  QueryOfDeathGuard* query_of_death = nullptr;
  // Counts the generation for as long as it is alive (RequestTracker::generations), so that a
  // gateway shutting down can wait for it before it destroys the worker client. Null: not counted.
  std::shared_ptr<InFlightCount> in_flight;
  // Each attempt is a client span, child of `parent_span` (the request's); its context goes to
  // the worker. Without a tracer the parent's context goes to the worker as it is.
  common::tracing::Tracer* tracer = nullptr;
  common::tracing::Span parent_span;
  // What the latencies (time to first token, between tokens, in total) are measured with (null:
  // the real clock). Must outlive the generation.
  const common::Clock* clock = nullptr;
  // Loads a request's LoRA adapter on a worker on demand when no ready worker has it (each
  // attempt asks, so that a retry can load it elsewhere). Null: only workers that have it serve.
  LoraAdapterManager* lora_adapters = nullptr;
};

class Generation : public std::enable_shared_from_this<Generation> {
 public:
  // `workers` must outlive every generation (see GenerationOptions::in_flight).
  static std::shared_ptr<Generation> Start(WorkerClient* workers, PreparedRequest request,
                                           const GenerationOptions& options,
                                           std::shared_ptr<GenerationObserver> observer);
  void Cancel();

 private:
  // One attempt's call observer: holds the generation alive until the call is done.
  class Attempt;

  Generation(WorkerClient* workers, PreparedRequest request, const GenerationOptions& options,
             std::shared_ptr<GenerationObserver> observer);
  // Counts an attempt and, for a LoRA adapter that no worker may have, waits for the adapter
  // manager first.
  void StartAttempt();
  // Routes the attempt and starts its call.
  void RouteAttempt();
  // From the current attempt's call, one at a time.
  void OnWorkerMessage(Attempt* attempt, const worker::v1::GenerateResponse& message);
  void OnWorkerDone(Attempt* attempt, const absl::Status& status);
  void Fail(const absl::Status& status);
  void Complete(GenerationResult result);
  ::llmserve::v1::GeneratedToken ToPublicToken(const worker::v1::GeneratedToken& token) const;

  // First, so that it is released last: the generation is done with the worker client only once
  // every other member is destroyed.
  const InFlightCount::Guard in_flight_;
  WorkerClient* const workers_;
  const PreparedRequest request_;
  const GenerationOptions options_;
  // Routing reads these on every attempt; they are hashed once.
  PromptRoutingHashes prompt_hashes_;
  const std::shared_ptr<GenerationObserver> observer_;
  const common::Clock* const clock_ = common::Clock::OrReal(options_.clock);
  const absl::Time start_ = clock_->Now();

  absl::Mutex mutex_;
  // The current attempt's call, until its OnDone.
  WorkerCall* call_ ABSL_GUARDED_BY(mutex_) = nullptr;
  bool cancelled_ ABSL_GUARDED_BY(mutex_) = false;
  bool done_ ABSL_GUARDED_BY(mutex_) = false;
  // Waiting for the adapter manager to load the request's LoRA adapter (no call yet).
  bool awaiting_adapter_ ABSL_GUARDED_BY(mutex_) = false;

  // Identical requests share it (request_fingerprint.h).
  const uint64_t fingerprint_;

  // Touched only from the current call's callbacks (serialized).
  int attempts_ = 0;
  // Attempts whose worker went away while running the request.
  int crashes_ = 0;
  // A worker said it does not have the request's LoRA adapter (retried once for that).
  bool adapter_missing_seen_ = false;
  absl::flat_hash_set<std::string> excluded_;
  int32_t completion_tokens_ = 0;
  absl::Time first_token_time_ = absl::InfinitePast();
  absl::Time last_token_time_ = absl::InfinitePast();
  std::optional<common::tokenizer::IncrementalDetokenizer> detokenizer_;
  StopMatcher stop_matcher_;
};

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_PIPELINE_GENERATION_H_
