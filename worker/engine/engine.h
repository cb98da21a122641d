// The serving engine: one thread that owns the scheduler, the KV cache manager, the backend and
// the per-request sampling state, and runs the loop
//     schedule -> forward -> sample -> update -> publish outputs
// while there is work, and sleeps (no busy spin) when there is none.
//
// Speculative decoding (EngineConfig::speculative): after a step, a decoding request may get draft
// tokens from its Proposer (worker/speculative/: prompt lookup or a draft model), which the
// next step computes after its last token in the same forward pass, asking the backend for logits
// at every one of those positions. Verification samples each position exactly as a step without
// drafts would — same mask, penalties over the same history, the same draw of the request's random
// stream (sampler.h) — and keeps going while the sample equals the draft. So every emitted token is
// the token the request would have got without speculation: greedy and seeded outputs are
// identical, unseeded ones follow the same distribution, and logprobs, stop conditions and grammars
// see the same tokens in the same order. (For a deterministic draft this is exactly rejection
// sampling: a draft d is accepted with probability p(d), and a rejection draws from p without d.)
//
// Other threads talk to it through thread-safe entry points: AddRequest and AbortRequest queue
// work and wake the loop; Counts() reads the counts published between and after steps. Outputs are
// pushed to each request's callback on the engine thread, and what each iteration did to
// EngineConfig::on_step (StepStats).
//
// LoRA: a request may name a registered adapter (AddLoraAdapter); the scheduler runs at most
// EngineConfig::max_loras distinct adapters at once, and a step's requests of different adapters
// and of the base model share one forward pass, each sequence naming its adapter's slot
// (ForwardBatch::lora_slots).
//
// Thread-safe: every public method may be called from any thread (StepOnce only while no engine
// thread runs).

#ifndef LLMSERVE_WORKER_ENGINE_ENGINE_H_
#define LLMSERVE_WORKER_ENGINE_ENGINE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "worker/engine/backend.h"
#include "worker/engine/pooler.h"
#include "worker/kv/kv_cache_manager.h"
#include "worker/sampling/sampler.h"
#include "worker/sampling/sampling_state.h"
#include "worker/scheduler/scheduler.h"
#include "worker/speculative/draft_length.h"
#include "worker/speculative/proposer.h"
#include "worker/speculative/speculative_config.h"
#include "worker/structured/grammar_matcher.h"

namespace llmserve::worker {

// What one iteration of the engine loop did and left behind: the engine's only account of
// itself. Reported (EngineConfig::on_step) once when the engine is created, after every iteration
// that took queued adds or aborts, and after every forward pass. Whoever listens keeps the totals,
// the token rates and the prefix-cache mirror (worker/service/load_accountant.h), as vLLM's
// frontend keeps its stats from the engine core's per-step SchedulerStats.
// The requests of one LoRA adapter after an iteration (StepStats::lora_adapters).
struct LoraAdapterLoad {
  std::string name;
  int32_t running = 0;
  int32_t waiting = 0;
};

struct StepStats {
  // When the iteration ended, on the engine's clock.
  absl::Time time;
  // Whether it ran a forward pass; without one, the pass fields below are zero.
  bool forward = false;
  // The forward pass failed: the requests in it ended with the error (and the prefix cache was
  // cleared, which cache_events says).
  bool failed = false;
  // Requests in the forward pass, and their tokens (prompt chunks + one per decode).
  int32_t num_seqs = 0;
  int64_t num_tokens = 0;
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;
  // Wall time of the whole iteration (schedule, forward, sample, update, propose), and how it
  // splits: inside Backend::Forward (a draft model's passes included) and outside it.
  double duration_s = 0;
  double forward_s = 0;
  double overhead_s = 0;
  // Requests preempted in this iteration.
  int64_t preemptions = 0;
  // Prompt tokens looked up in the prefix cache at admission in this iteration, and of those, the
  // tokens served from it.
  int64_t prefix_cache_queries = 0;
  int64_t prefix_cache_hits = 0;
  // Speculative decoding in this iteration, as vLLM counts it: verifications (a request's drafts
  // in one step), draft tokens verified, drafts accepted (each a generated token that cost no step
  // of its own), and drafts accepted at each draft position (size num_speculative_tokens; empty
  // when speculation is off).
  int64_t spec_drafts = 0;
  int64_t spec_draft_tokens = 0;
  int64_t spec_accepted_tokens = 0;
  std::vector<int64_t> spec_accepted_per_position;
  // Prefix-cache changes in this iteration, oldest first.
  std::vector<PrefixCacheEvent> cache_events;
  // After the iteration: requests running and waiting (queued adds not yet taken included), and
  // the KV cache's usable and free blocks (cached free blocks count as free).
  int32_t running = 0;
  int32_t waiting = 0;
  int32_t kv_blocks_total = 0;
  int32_t kv_blocks_free = 0;
  // With LoRA slots (EngineConfig::max_loras > 0): every adapter that taken requests use, with
  // how many of them run and wait after the iteration, sorted by name.
  std::vector<LoraAdapterLoad> lora_adapters;
};

struct EngineConfig {
  int32_t max_num_batched_tokens = 2048;
  int32_t max_num_seqs = 64;
  SchedulerConfig::Policy policy = SchedulerConfig::Policy::kFcfs;
  bool enable_prefix_caching = true;
  // LoRA adapters usable at once: the backend's adapter slots (at most Backend::max_loras()); 0:
  // no LoRA. Adapters are registered with AddLoraAdapter; a request names one.
  int32_t max_loras = 0;
  // AddRequest answers RESOURCE_EXHAUSTED while this many requests wait (queued, not running);
  // 0 = no limit. Overload is refused at once rather than queued into timeouts.
  int32_t max_waiting = 0;
  // Speculative decoding (off by default); validated by Create.
  SpeculativeConfig speculative;
  // Gets every StepStats: on the thread that calls Create (the first report), then on the engine
  // thread (or StepOnce's caller). Must not block.
  std::function<void(const StepStats&)> on_step;
  // What request timings, step durations and token rates are measured with (null: the real
  // clock; tests: a simulated one). Must outlive the engine.
  const common::Clock* clock = nullptr;
};

enum class FinishReason { kNone, kStop, kLength, kAbort, kError };

struct GeneratedToken {
  int32_t token_id = 0;
  // Set when the request asked for logprobs.
  std::optional<float> logprob;
  // The requested number of alternatives, most likely first.
  std::vector<std::pair<int32_t, float>> top_logprobs;
};

// One message to a request's callback: new tokens, and on the last message why it ended.
struct EngineOutput {
  RequestId id = 0;
  std::vector<GeneratedToken> tokens;
  FinishReason finish = FinishReason::kNone;
  // With kError: what went wrong (the backend failed).
  absl::Status error;
  // Embedding requests, on their last message (kStop): the pooled embedding.
  std::vector<float> embedding;
  // Set on the last message.
  int32_t prompt_tokens = 0;
  int32_t cached_prompt_tokens = 0;
  int32_t output_tokens = 0;
  int32_t preemptions = 0;
  double queue_s = 0;  // arrival to first scheduled
  double ttft_s = 0;   // arrival to first token
  double total_s = 0;  // arrival to finish
};

using OutputCallback = std::function<void(const EngineOutput&)>;

struct EngineRequest {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  // max_tokens <= 0 means: up to the end of the context.
  StoppingParams stopping;
  int32_t priority = 0;
  std::string cache_salt;
  // Constrained decoding (structured outputs): every sampled token keeps the output in the
  // grammar's language; the request ends when the grammar does. Null: unconstrained. A
  // constrained request may not set ignore_eos or min_tokens (INVALID_ARGUMENT from AddRequest):
  // the grammar alone decides where the output may end.
  std::shared_ptr<const structured::CompiledGrammar> grammar;
  // Set: an embedding request. Its prompt is computed (it may fill the whole context) and pooled
  // into EngineOutput::embedding, and it finishes (kStop) without generating; stopping.max_tokens
  // must be 0, and sampling, grammar and the prefix cache are not used. FAILED_PRECONDITION from
  // AddRequest when the backend cannot return hidden states.
  std::optional<PoolingParams> pooling;
  // The LoRA adapter (AddLoraAdapter's name) whose delta the request's projections add; empty:
  // the base model. NOT_FOUND from AddRequest for a name not registered. Its prefix-cache blocks
  // are its own: the adapter's name is mixed into cache_salt (LoraCacheSalt).
  std::string lora_adapter;
  // Called on the engine thread with every output, the last one with finish != kNone. It must
  // not block; it may call AbortRequest.
  OutputCallback on_output;
};

// What other threads may read of the engine's state: published when the engine thread takes
// queued work, before every step's outputs, and after every step.
struct EngineCounts {
  int32_t running = 0;
  // Includes requests added but not yet taken by the engine thread.
  int32_t waiting = 0;
  int32_t kv_blocks_free = 0;
  // Forward passes run (failed ones included).
  int64_t steps = 0;
};

class Engine {
 public:
  // `draft`: the draft model's backend, exactly when config.speculative.method is kDraft
  // (INVALID_ARGUMENT otherwise, or when it cannot draft for `backend`'s model).
  static absl::StatusOr<std::unique_ptr<Engine>> Create(std::unique_ptr<Backend> backend,
                                                        const EngineConfig& config,
                                                        std::unique_ptr<Backend> draft = nullptr);
  // Stops the thread; requests still live get a kAbort output.
  ~Engine();

  // Starts the engine thread. Without it, the caller drives the loop with StepOnce.
  void Start();

  // Validates and queues a request: INVALID_ARGUMENT naming the field for bad sampling values,
  // token ids outside the vocabulary, or a request that can never fit (scheduler.h);
  // RESOURCE_EXHAUSTED when max_waiting requests already wait.
  absl::StatusOr<RequestId> AddRequest(EngineRequest request);

  // Aborts a request in any state; its callback gets a kAbort output and its blocks are freed at
  // the next loop iteration. Unknown or finished ids are ignored.
  void AbortRequest(RequestId id);

  // LoRA adapters, by name (1 to 128 printable ASCII characters). Registered adapters stay in
  // memory; up to EngineConfig::max_loras of them are in the backend's slots at once, each put in
  // a slot (the least recently used one whose adapter no scheduled request uses) when a request
  // of it is scheduled. FAILED_PRECONDITION when the engine has no slots; ALREADY_EXISTS for a
  // name taken; INVALID_ARGUMENT for a rank above the backend's max_lora_rank() or an adapter of
  // another layer count.
  absl::Status AddLoraAdapter(const std::string& name, std::shared_ptr<const LoraAdapter> adapter);
  // NOT_FOUND for an unknown name; FAILED_PRECONDITION while requests that use it are live.
  absl::Status RemoveLoraAdapter(const std::string& name);
  // The registered adapters' names, sorted.
  std::vector<std::string> LoraAdapters() const;

  EngineCounts Counts() const;
  // Blocks until Counts().steps reaches `steps` or `deadline` passes, and returns the counts then.
  EngineCounts WaitForSteps(int64_t steps, absl::Time deadline) const;
  // Usable KV cache blocks (the null block excluded); constant.
  int32_t num_kv_blocks() const { return total_kv_blocks_; }
  const ModelConfig& model_config() const { return backend_->config(); }
  const Backend& backend() const { return *backend_; }
  int32_t max_model_len() const { return scheduler_config_.max_model_len; }

  // Runs one loop iteration on the calling thread (no engine thread may be running): takes
  // queued work, and runs a step if there is any. Returns whether work remains.
  bool StepOnce();

 private:
  // What the engine keeps of a request beside the scheduler's Request: its sampling and grammar
  // state, its draft length, where its outputs go, and its timings.
  struct RequestState {
    SamplingState sampling;
    // Constrained requests only: the grammar's state, and the mask it fills every step.
    std::unique_ptr<structured::GrammarMatcher> matcher;
    // Embedding requests only.
    std::unique_ptr<Pooler> pooler;
    std::vector<uint32_t> bitmask;
    // Set when the matcher ran out of work budget: the request ends with it this step.
    absl::Status constraint_error;
    // How many drafts to propose next (speculation on only).
    DraftLengthController draft_length;
    // LoRA requests only: the adapter and its engine id.
    std::shared_ptr<const LoraAdapter> lora;
    int64_t lora_id = 0;
    std::string lora_name;
    OutputCallback on_output;
    absl::Time arrival;
    absl::Time first_scheduled = absl::InfinitePast();
    absl::Time first_token = absl::InfinitePast();
  };
  // An AddRequest waiting in the inbox for the engine thread.
  struct QueuedRequest {
    RequestId id;
    std::unique_ptr<Request> request;
    std::unique_ptr<RequestState> state;
  };

  Engine(std::unique_ptr<Backend> backend, const EngineConfig& config,
         std::unique_ptr<Proposer> proposer);
  void Loop();
  // Moves queued adds and aborts into the scheduler.
  void TakeInbox(std::vector<QueuedRequest> adds, std::vector<RequestId> aborts);
  void RunStep();
  // Fills batch_ from the plan; returns the prompt tokens it processes.
  int64_t BuildBatch(const SchedulerOutput& plan);
  // Samples the tokens every scheduled request emits (index-aligned with the plan): one, or with
  // drafts, the accepted drafts and one more (the verification described above). Appends them to
  // the request's sampling state and grammar as it goes, since each position's sample depends on
  // the ones before.
  std::vector<std::vector<SampleResult>> SampleAll(const SchedulerOutput& plan);
  // Hands each embedding request's hidden states of this step to its pooler (after resetting
  // those of requests the plan preempted).
  void Pool(const SchedulerOutput& plan);
  // Puts the adapter of every request in the plan in a backend slot (lora_slot_of_).
  absl::Status AssignLoraSlots(const SchedulerOutput& plan);
  // A LoRA request ended (or was never taken): its adapter may be removed once no request uses it.
  void ReleaseLora(const RequestState& state);
  // Gives the requests that just decoded (and still run) drafts for their next step.
  void ProposeDrafts(absl::Span<const RequestId> decoded);
  // Constrained decoding: forbids every token the request's grammar does not allow next.
  void MaskLogits(RequestState& live, absl::Span<float> logits);
  void FailStep(const SchedulerOutput& plan, const absl::Status& error);
  // Publishes running/waiting/free-block counts (after the inbox changed them, between steps).
  void PublishCounts();
  void Finish(RequestId id, EngineOutput& output);
  // Completes step_ (counts, increments since the last report, cache events), hands it to
  // on_step_ and starts the next one. `forward`: the iteration ran a forward pass.
  void Report(bool forward);
  // Fills step_.lora_adapters.
  void CountLoraRequests();
  void CountVerification(int32_t drafts, int32_t accepted);

  // Engine-thread state (no locks: only the engine thread, or StepOnce's caller, touches it).
  std::unique_ptr<Backend> backend_;
  SchedulerConfig scheduler_config_;
  KvCacheManager kv_;
  // Usable KV blocks (the null block excluded); constant, so AddRequest may read it on any thread.
  int32_t total_kv_blocks_;
  Scheduler scheduler_;
  Sampler sampler_;
  absl::flat_hash_map<RequestId, std::unique_ptr<RequestState>> live_;
  ForwardBatch batch_;
  ForwardOutput forward_output_;
  std::function<void(const StepStats&)> on_step_;
  const common::Clock* const clock_;
  const int32_t max_waiting_;
  const SpeculativeConfig speculative_;
  // Null without speculative decoding.
  std::unique_ptr<Proposer> proposer_;
  // The report being built for the current iteration, and the cumulative counters its increments
  // are taken from.
  StepStats step_;
  int64_t reported_preemptions_ = 0;
  int64_t reported_prefix_queries_ = 0;
  int64_t reported_prefix_hits_ = 0;
  // LoRA slots: the adapter id in each (0: empty), when each was last used, and each resident
  // adapter's slot.
  std::vector<int64_t> slot_lora_;
  std::vector<int64_t> slot_used_at_;
  absl::flat_hash_map<int64_t, int32_t> lora_slot_of_;
  int64_t lora_clock_ = 0;

  mutable absl::Mutex mutex_;
  std::vector<QueuedRequest> inbox_ ABSL_GUARDED_BY(mutex_);
  std::vector<RequestId> aborts_ ABSL_GUARDED_BY(mutex_);
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  bool has_work_ ABSL_GUARDED_BY(mutex_) = false;
  RequestId next_id_ ABSL_GUARDED_BY(mutex_) = 1;
  EngineCounts counts_ ABSL_GUARDED_BY(mutex_);
  struct LoraEntry {
    int64_t id = 0;
    std::shared_ptr<const LoraAdapter> adapter;
    // Live requests (queued, waiting or running) that use it.
    int32_t requests = 0;
  };
  absl::flat_hash_map<std::string, LoraEntry> loras_ ABSL_GUARDED_BY(mutex_);
  int64_t next_lora_id_ ABSL_GUARDED_BY(mutex_) = 1;
  std::thread thread_;
};

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_ENGINE_ENGINE_H_
