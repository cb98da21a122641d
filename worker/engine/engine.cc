#include "worker/engine/engine.h"

#include <algorithm>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/base/log_throttle.h"
#include "common/base/logging.h"
#include "common/prefix_cache/block_hash.h"
#include "common/status/status_macros.h"
#include "worker/sampling/token_bitmask.h"
#include "worker/speculative/draft_model_proposer.h"
#include "worker/speculative/ngram_proposer.h"

namespace llmserve::worker {
namespace {

double Seconds(absl::Time from, absl::Time to) { return absl::ToDoubleSeconds(to - from); }

}  // namespace

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(std::unique_ptr<Backend> backend,
                                                       const EngineConfig& config,
                                                       std::unique_ptr<Backend> draft) {
  if (config.max_num_batched_tokens < 1 || config.max_num_seqs < 1) {
    return absl::InvalidArgumentError("max_num_batched_tokens and max_num_seqs must be >= 1");
  }
  if (config.max_waiting < 0) return absl::InvalidArgumentError("max_waiting must be >= 0");
  LLMSERVE_RETURN_IF_ERROR(ValidateSpeculativeConfig(config.speculative));
  if (config.max_loras < 0 || config.max_loras > backend->max_loras()) {
    return absl::InvalidArgumentError(absl::StrCat("max_loras ", config.max_loras,
                                                   " is outside [0, the backend's ",
                                                   backend->max_loras(), " adapter slots]"));
  }
  if (backend->num_kv_blocks() < 2) {
    return absl::InvalidArgumentError("the backend's KV cache needs at least 2 blocks");
  }
  const bool drafts_by_model = config.speculative.method == SpeculativeMethod::kDraft;
  if (drafts_by_model != (draft != nullptr)) {
    return absl::InvalidArgumentError(
        drafts_by_model ? "speculative_method=draft needs the draft model's backend"
                        : "a draft model's backend is given, but speculative_method is not draft");
  }
  std::unique_ptr<Proposer> proposer;
  if (drafts_by_model) {
    LLMSERVE_ASSIGN_OR_RETURN(proposer,
                              DraftModelProposer::Create(std::move(draft), backend->config(),
                                                         config.max_num_batched_tokens));
  } else if (config.speculative.enabled()) {
    proposer = std::make_unique<NgramProposer>(config.speculative.prompt_lookup_min,
                                               config.speculative.prompt_lookup_max);
  }
  return std::unique_ptr<Engine>(new Engine(std::move(backend), config, std::move(proposer)));
}

Engine::Engine(std::unique_ptr<Backend> backend, const EngineConfig& config,
               std::unique_ptr<Proposer> proposer)
    : backend_(std::move(backend)),
      scheduler_config_{.max_num_batched_tokens = config.max_num_batched_tokens,
                        .max_num_seqs = config.max_num_seqs,
                        .max_model_len = static_cast<int32_t>(backend_->config().max_model_len),
                        .policy = config.policy,
                        .eos_token_ids = backend_->config().eos_token_ids,
                        .max_loras = config.max_loras},
      kv_(backend_->num_kv_blocks(), backend_->block_size(), config.enable_prefix_caching),
      total_kv_blocks_(kv_.Stats().total_blocks),
      scheduler_(scheduler_config_, &kv_),
      on_step_(config.on_step),
      clock_(common::Clock::OrReal(config.clock)),
      max_waiting_(config.max_waiting),
      speculative_(config.speculative),
      proposer_(std::move(proposer)),
      slot_lora_(config.max_loras, 0),
      slot_used_at_(config.max_loras, 0) {
  if (speculative_.enabled()) {
    step_.spec_accepted_per_position.assign(speculative_.num_speculative_tokens, 0);
  }
  // The first report: listeners learn the cache's size and the speculation positions before any
  // traffic.
  Report(/*forward=*/false);
}

Engine::~Engine() {
  {
    absl::MutexLock lock(&mutex_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
  // Whatever is still queued or live ends as aborted, so no caller waits forever.
  std::vector<QueuedRequest> adds;
  {
    absl::MutexLock lock(&mutex_);
    adds.swap(inbox_);
  }
  for (QueuedRequest& pending : adds) {
    EngineOutput output{.id = pending.id, .finish = FinishReason::kAbort};
    pending.state->on_output(output);
  }
  std::vector<RequestId> ids;
  for (const auto& [id, live] : live_) ids.push_back(id);
  for (RequestId id : ids) {
    scheduler_.AbortRequest(id);
    EngineOutput output{.id = id, .finish = FinishReason::kAbort};
    Finish(id, output);
  }
}

void Engine::Start() {
  thread_ = std::thread([this] { Loop(); });
}

absl::StatusOr<RequestId> Engine::AddRequest(EngineRequest request) {
  if (!request.on_output) return absl::InvalidArgumentError("a request needs an output callback");
  auto scheduled = std::make_unique<Request>();
  scheduled->num_prompt_tokens = static_cast<int32_t>(request.prompt.size());
  scheduled->stopping = std::move(request.stopping);
  scheduled->pooling = request.pooling.has_value();
  if (scheduled->pooling) {
    if (!backend_->supports_hidden_states()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the ", backend_->name(), " backend cannot compute embeddings (no hidden states)"));
    }
    if (request.grammar != nullptr) {
      return absl::InvalidArgumentError("an embedding request cannot have structured_output");
    }
  } else if (scheduled->stopping.max_tokens <= 0) {
    scheduled->stopping.max_tokens = scheduler_config_.max_model_len - scheduled->num_prompt_tokens;
  }
  scheduled->priority = request.priority;
  scheduled->cache_salt = common::LoraCacheSalt(request.cache_salt, request.lora_adapter);
  scheduled->tokens = std::move(request.prompt);
  LLMSERVE_RETURN_IF_ERROR(
      CheckRequestFits(*scheduled, scheduler_config_, total_kv_blocks_, backend_->block_size()));
  absl::StatusOr<SamplingState> sampling =
      SamplingState::Create(request.sampling, scheduled->tokens, backend_->config().vocab_size);
  if (!sampling.ok()) return sampling.status();
  auto live = std::make_unique<RequestState>(
      RequestState{.sampling = *std::move(sampling),
                   .draft_length = DraftLengthController(speculative_.num_speculative_tokens),
                   .on_output = std::move(request.on_output),
                   .arrival = clock_->Now()});
  if (request.pooling.has_value()) {
    live->pooler = std::make_unique<Pooler>(*request.pooling, backend_->config().hidden_size);
  }
  if (request.grammar != nullptr) {
    if (scheduled->stopping.ignore_eos || scheduled->stopping.min_tokens > 0) {
      return absl::InvalidArgumentError(
          "structured_output cannot be combined with ignore_eos or min_tokens: the constraint "
          "decides where the output ends");
    }
    live->matcher = std::make_unique<structured::GrammarMatcher>(std::move(request.grammar));
    // The initial state is expanded here, on the caller's thread, within the matcher's budget.
    if (!live->matcher->status().ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("structured_output: ", live->matcher->status().message()));
    }
    live->bitmask.resize(TokenBitmaskWords(backend_->config().vocab_size));
  }
  absl::MutexLock lock(&mutex_);
  if (max_waiting_ > 0 && counts_.waiting >= max_waiting_) {
    return absl::ResourceExhaustedError(absl::StrCat("the worker is overloaded: ", counts_.waiting,
                                                     " requests are already waiting (limit ",
                                                     max_waiting_, "); retry later"));
  }
  if (!request.lora_adapter.empty()) {
    const auto entry = loras_.find(request.lora_adapter);
    if (entry == loras_.end()) {
      return absl::NotFoundError(
          absl::StrCat("LoRA adapter \"", request.lora_adapter, "\" is not loaded on this worker"));
    }
    ++entry->second.requests;
    live->lora = entry->second.adapter;
    live->lora_id = entry->second.id;
    live->lora_name = request.lora_adapter;
    scheduled->lora_id = entry->second.id;
  }
  ++counts_.waiting;
  const RequestId id = next_id_++;
  scheduled->id = id;
  inbox_.push_back({id, std::move(scheduled), std::move(live)});
  return id;
}

void Engine::AbortRequest(RequestId id) {
  absl::MutexLock lock(&mutex_);
  aborts_.push_back(id);
}

EngineCounts Engine::Counts() const {
  absl::MutexLock lock(&mutex_);
  return counts_;
}

EngineCounts Engine::WaitForSteps(int64_t steps, absl::Time deadline) const {
  absl::MutexLock lock(&mutex_);
  const EngineCounts* counts = &counts_;
  const auto reached = [counts, steps] { return counts->steps >= steps; };
  mutex_.AwaitWithDeadline(absl::Condition(&reached), deadline);
  return counts_;
}

void Engine::Loop() {
  while (true) {
    std::vector<QueuedRequest> adds;
    std::vector<RequestId> aborts;
    {
      absl::MutexLock lock(&mutex_);
      mutex_.Await(absl::Condition(
          +[](Engine* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(e->mutex_) {
            return e->stopping_ || e->has_work_ || !e->inbox_.empty() || !e->aborts_.empty();
          },
          this));
      if (stopping_) return;
      adds.swap(inbox_);
      aborts.swap(aborts_);
    }
    const bool inbox_changed = !adds.empty() || !aborts.empty();
    TakeInbox(std::move(adds), std::move(aborts));
    if (inbox_changed) Report(/*forward=*/false);
    if (scheduler_.HasWork()) RunStep();
    absl::MutexLock lock(&mutex_);
    has_work_ = scheduler_.HasWork();
  }
}

bool Engine::StepOnce() {
  std::vector<QueuedRequest> adds;
  std::vector<RequestId> aborts;
  {
    absl::MutexLock lock(&mutex_);
    adds.swap(inbox_);
    aborts.swap(aborts_);
  }
  const bool inbox_changed = !adds.empty() || !aborts.empty();
  TakeInbox(std::move(adds), std::move(aborts));
  if (inbox_changed) Report(/*forward=*/false);
  if (scheduler_.HasWork()) RunStep();
  return scheduler_.HasWork();
}

void Engine::TakeInbox(std::vector<QueuedRequest> adds, std::vector<RequestId> aborts) {
  for (QueuedRequest& pending : adds) {
    const RequestId id = pending.id;
    const absl::Status added = scheduler_.AddRequest(std::move(pending.request));
    if (!added.ok()) {  // cannot happen after AddRequest's checks, but never lose a caller
      ReleaseLora(*pending.state);
      EngineOutput output{.id = id, .finish = FinishReason::kError, .error = added};
      pending.state->on_output(output);
      continue;
    }
    live_[id] = std::move(pending.state);
  }
  for (RequestId id : aborts) {
    if (!scheduler_.AbortRequest(id)) continue;
    EngineOutput output{.id = id, .finish = FinishReason::kAbort};
    Finish(id, output);
  }
}

void Engine::Finish(RequestId id, EngineOutput& output) {
  const auto it = live_.find(id);
  if (it == live_.end()) return;
  RequestState& live = *it->second;
  const absl::Time now = clock_->Now();
  if (live.first_scheduled != absl::InfinitePast()) {
    output.queue_s = Seconds(live.arrival, live.first_scheduled);
  }
  if (live.first_token != absl::InfinitePast()) {
    output.ttft_s = Seconds(live.arrival, live.first_token);
  }
  output.total_s = Seconds(live.arrival, now);
  if (proposer_ != nullptr) proposer_->Release(id);
  ReleaseLora(live);
  const OutputCallback callback = std::move(live.on_output);
  live_.erase(it);
  callback(output);
}

int64_t Engine::BuildBatch(const SchedulerOutput& plan) {
  batch_.Clear();
  int64_t prompt_tokens = 0;
  for (const ScheduledRequest& step : plan.scheduled) {
    const RequestState& live = *live_.at(step.id);
    batch_.AddSequence(step.new_token_ids, step.num_computed_tokens, step.block_table,
                       /*want_all_logits=*/step.num_draft_tokens > 0,
                       /*want_hidden_states=*/live.pooler != nullptr,
                       live.lora_id == 0 ? -1 : lora_slot_of_.at(live.lora_id));
    prompt_tokens += step.num_new_prompt_tokens;
  }
  return prompt_tokens;
}

std::vector<std::vector<SampleResult>> Engine::SampleAll(const SchedulerOutput& plan) {
  std::vector<std::vector<SampleResult>> results(plan.scheduled.size());
  const int64_t vocab = forward_output_.vocab_size;
  for (size_t i = 0; i < plan.scheduled.size(); ++i) {
    const ScheduledRequest& step = plan.scheduled[i];
    if (!step.samples) continue;
    RequestState& live = *live_.at(step.id);
    if (live.pooler != nullptr) continue;
    const int32_t drafts = step.num_draft_tokens;
    // The rows of the last known token and of each draft: row j predicts the token after them.
    const int32_t first_row = forward_output_.row_start[i + 1] - (drafts + 1);
    const int32_t first_draft = step.num_new_tokens - drafts;
    for (int32_t j = 0; j <= drafts; ++j) {
      absl::Span<float> logits(forward_output_.logits.data() + (first_row + j) * vocab, vocab);
      if (live.matcher != nullptr) MaskLogits(live, logits);
      SampleResult result = sampler_.Sample(logits, live.sampling);
      const int32_t token = result.token_id;
      live.sampling.Append(token);
      results[i].push_back(std::move(result));
      if (live.matcher != nullptr && !live.matcher->AcceptToken(token)) {
        if (!live.matcher->status().ok()) {
          // Accepting ran past the matcher's work budget (its mask had not): the request ends
          // with the error at its next mask, as when a mask is over budget.
          if (live.constraint_error.ok()) {
            live.constraint_error = absl::InvalidArgumentError(
                absl::StrCat("structured_output: ", live.matcher->status().message()));
          }
          break;
        }
        // Otherwise only a dead end gets here (MaskLogits let EOS through), and EOS ends it.
        if (std::find(scheduler_config_.eos_token_ids.begin(),
                      scheduler_config_.eos_token_ids.end(),
                      token) == scheduler_config_.eos_token_ids.end()) {
          LLMSERVE_LOG(ERROR) << "the grammar refused a token its own mask allowed: " << token;
        }
        break;
      }
      if (j == drafts || token != step.new_token_ids[first_draft + j]) break;
    }
    if (drafts > 0) {
      const int32_t accepted = static_cast<int32_t>(results[i].size()) - 1;
      live.draft_length.Record(drafts, accepted);
      CountVerification(drafts, accepted);
    }
  }
  return results;
}

absl::Status Engine::AddLoraAdapter(const std::string& name,
                                    std::shared_ptr<const LoraAdapter> adapter) {
  if (slot_lora_.empty()) {
    return absl::FailedPreconditionError(
        "this worker serves no LoRA adapters (it has no adapter slots: --max_loras 0)");
  }
  if (name.empty() || name.size() > 128 ||
      !std::all_of(name.begin(), name.end(), [](char c) { return c > 0x20 && c < 0x7f; })) {
    return absl::InvalidArgumentError(
        "a LoRA adapter's name must be 1 to 128 printable ASCII characters without spaces");
  }
  if (adapter == nullptr) return absl::InvalidArgumentError("no adapter");
  if (adapter->rank > backend_->max_lora_rank()) {
    return absl::InvalidArgumentError(absl::StrCat("LoRA adapter \"", name, "\" has rank ",
                                                   adapter->rank, ", above --max_lora_rank ",
                                                   backend_->max_lora_rank()));
  }
  if (static_cast<int64_t>(adapter->layers.size()) != backend_->config().num_layers) {
    return absl::InvalidArgumentError(absl::StrCat("LoRA adapter \"", name, "\" has ",
                                                   adapter->layers.size(), " layers; the model ",
                                                   backend_->config().num_layers));
  }
  absl::MutexLock lock(&mutex_);
  if (loras_.contains(name)) {
    return absl::AlreadyExistsError(absl::StrCat("LoRA adapter \"", name, "\" is already loaded"));
  }
  loras_[name] = LoraEntry{.id = next_lora_id_++, .adapter = std::move(adapter)};
  return absl::OkStatus();
}

absl::Status Engine::RemoveLoraAdapter(const std::string& name) {
  absl::MutexLock lock(&mutex_);
  const auto it = loras_.find(name);
  if (it == loras_.end()) {
    return absl::NotFoundError(absl::StrCat("LoRA adapter \"", name, "\" is not loaded"));
  }
  if (it->second.requests > 0) {
    return absl::FailedPreconditionError(absl::StrCat("LoRA adapter \"", name, "\" is in use by ",
                                                      it->second.requests,
                                                      " requests; unload it when they have ended"));
  }
  // A slot may still hold it until another adapter needs the slot: no request names it now.
  loras_.erase(it);
  return absl::OkStatus();
}

std::vector<std::string> Engine::LoraAdapters() const {
  std::vector<std::string> names;
  {
    absl::MutexLock lock(&mutex_);
    for (const auto& [name, entry] : loras_) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

void Engine::ReleaseLora(const RequestState& state) {
  if (state.lora_id == 0) return;
  absl::MutexLock lock(&mutex_);
  const auto it = loras_.find(state.lora_name);
  if (it != loras_.end() && it->second.id == state.lora_id) --it->second.requests;
}

absl::Status Engine::AssignLoraSlots(const SchedulerOutput& plan) {
  if (slot_lora_.empty()) return absl::OkStatus();
  ++lora_clock_;
  absl::flat_hash_set<int64_t> needed;
  for (const ScheduledRequest& step : plan.scheduled) {
    if (const int64_t id = live_.at(step.id)->lora_id; id != 0) needed.insert(id);
  }
  for (const ScheduledRequest& step : plan.scheduled) {
    const RequestState& live = *live_.at(step.id);
    if (live.lora_id == 0) continue;
    if (const auto resident = lora_slot_of_.find(live.lora_id); resident != lora_slot_of_.end()) {
      slot_used_at_[resident->second] = lora_clock_;
      continue;
    }
    // An empty slot, else the least recently used one no request of this step needs (the
    // scheduler admits at most max_loras distinct adapters, so there is one).
    int32_t victim = -1;
    for (int32_t slot = 0; slot < static_cast<int32_t>(slot_lora_.size()); ++slot) {
      if (slot_lora_[slot] == 0) {
        victim = slot;
        break;
      }
      if (needed.contains(slot_lora_[slot])) continue;
      if (victim < 0 || slot_used_at_[slot] < slot_used_at_[victim]) victim = slot;
    }
    if (victim < 0) {
      return absl::InternalError("a step needs more LoRA adapters than the engine has slots");
    }
    LLMSERVE_RETURN_IF_ERROR(backend_->SetLoraAdapter(victim, live.lora));
    if (slot_lora_[victim] != 0) lora_slot_of_.erase(slot_lora_[victim]);
    slot_lora_[victim] = live.lora_id;
    slot_used_at_[victim] = lora_clock_;
    lora_slot_of_[live.lora_id] = victim;
  }
  return absl::OkStatus();
}

void Engine::Pool(const SchedulerOutput& plan) {
  for (RequestId id : plan.preempted) {
    const auto it = live_.find(id);
    if (it != live_.end() && it->second->pooler != nullptr) it->second->pooler->Reset();
  }
  const int64_t h = forward_output_.hidden_size;
  for (size_t i = 0; i < plan.scheduled.size(); ++i) {
    Pooler* pooler = live_.at(plan.scheduled[i].id)->pooler.get();
    if (pooler == nullptr) continue;
    const int32_t first = forward_output_.hidden_row_start[i];
    pooler->Add(forward_output_.hidden.data() + first * h,
                forward_output_.hidden_row_start[i + 1] - first,
                plan.scheduled[i].num_computed_tokens);
  }
}

void Engine::CountVerification(int32_t drafts, int32_t accepted) {
  ++step_.spec_drafts;
  step_.spec_draft_tokens += drafts;
  step_.spec_accepted_tokens += accepted;
  for (int32_t j = 0;
       j < accepted && j < static_cast<int32_t>(step_.spec_accepted_per_position.size()); ++j) {
    ++step_.spec_accepted_per_position[j];
  }
}

void Engine::ProposeDrafts(absl::Span<const RequestId> decoded) {
  if (proposer_ == nullptr || decoded.empty()) return;
  // A large batch is compute-bound: verifying drafts would cost about what they save.
  const int32_t limit = speculative_.EffectiveDisableBatchSize();
  if (limit > 0 && scheduler_.num_running() > limit) {
    return;
  }
  std::vector<DraftQuery> queries;
  for (RequestId id : decoded) {
    const Request* request = scheduler_.Find(id);
    if (request == nullptr) continue;
    const int32_t length = live_.at(id)->draft_length.NextLength();
    if (length == 0) continue;
    queries.push_back({.id = id, .tokens = request->tokens, .max_drafts = length});
  }
  if (queries.empty()) return;
  absl::StatusOr<std::vector<std::vector<int32_t>>> drafts = proposer_->Propose(queries);
  if (!drafts.ok()) {
    // Drafts only save steps: the requests go on without them.
    static common::LogThrottle throttle(absl::Seconds(10));
    if (std::optional<int64_t> skipped = throttle.Record(clock_->Now())) {
      LLMSERVE_LOG(ERROR) << "the draft proposer failed; this step proposes no drafts: "
                          << drafts.status() << " (" << *skipped << " more not logged)";
    }
    return;
  }
  for (size_t i = 0; i < queries.size(); ++i) {
    if (!(*drafts)[i].empty()) scheduler_.SetDraftTokens(queries[i].id, std::move((*drafts)[i]));
  }
}

void Engine::MaskLogits(RequestState& live, absl::Span<float> logits) {
  const bool filled = live.matcher->FillNextTokenBitmask(absl::MakeSpan(live.bitmask));
  if (!filled && live.constraint_error.ok()) {
    // Over the matcher's per-token work budget: the request ends here with the error, and no
    // other request waits longer than one budget's worth for it.
    live.constraint_error = absl::InvalidArgumentError(
        absl::StrCat("structured_output: ", live.matcher->status().message()));
  }
  if (!filled || !AnyTokenAllowed(live.bitmask, static_cast<int64_t>(logits.size()))) {
    // A failed matcher, or a dead end: no token of this vocabulary continues the output (a
    // character no token spells, or the nesting limit). Let the request end rather than sample
    // from nothing.
    for (int32_t eos : scheduler_config_.eos_token_ids) {
      if (eos >= 0 && eos < static_cast<int32_t>(logits.size())) {
        live.bitmask[eos / 32] |= 1u << (eos % 32);
      }
    }
    static common::LogThrottle throttle(absl::Seconds(10));
    if (std::optional<int64_t> skipped = throttle.Record(clock_->Now()); skipped && filled) {
      LLMSERVE_LOG(WARNING) << "a constrained request reached a state no token continues; it "
                               "ends here ("
                            << *skipped << " more not logged)";
    }
  }
  ApplyTokenBitmask(live.bitmask, logits);
}

void Engine::FailStep(const SchedulerOutput& plan, const absl::Status& error) {
  LLMSERVE_LOG(ERROR) << "forward pass failed: " << error;
  // Blocks this step registered in the prefix cache were never filled.
  kv_.ClearPrefixCache();
  for (const ScheduledRequest& step : plan.scheduled) {
    scheduler_.AbortRequest(step.id);
    EngineOutput output{.id = step.id, .finish = FinishReason::kError, .error = error};
    Finish(step.id, output);
  }
  step_.failed = true;
  Report(/*forward=*/true);
}

void Engine::RunStep() {
  const absl::Time start = clock_->Now();
  const SchedulerOutput plan = scheduler_.Schedule();
  for (RequestId id : plan.first_scheduled) live_.at(id)->first_scheduled = start;
  // Before any output: a request whose first token a client reads is running, not waiting, when
  // the next one is admitted against max_waiting.
  PublishCounts();
  if (plan.scheduled.empty()) return;
  if (absl::Status slots = AssignLoraSlots(plan); !slots.ok()) return FailStep(plan, slots);
  const int64_t prompt_tokens = BuildBatch(plan);
  const absl::Time forward_start = clock_->Now();
  const absl::Status forward = backend_->Forward(batch_, &forward_output_);
  const absl::Time forward_end = clock_->Now();
  if (!forward.ok()) return FailStep(plan, forward);
  Pool(plan);

  std::vector<std::vector<SampleResult>> results = SampleAll(plan);
  std::vector<std::vector<int32_t>> emitted(results.size());
  for (size_t i = 0; i < results.size(); ++i) {
    for (const SampleResult& result : results[i]) emitted[i].push_back(result.token_id);
  }
  int64_t generated = 0;
  std::vector<RequestId> decoded;
  size_t position = 0;  // Update's outputs follow the plan's order
  for (const RequestOutput& out : scheduler_.Update(plan, emitted)) {
    while (plan.scheduled[position].id != out.id) ++position;
    RequestState& live = *live_.at(out.id);
    generated += static_cast<int64_t>(out.new_tokens.size());
    if (out.first_token) live.first_token = forward_end;
    EngineOutput output{.id = out.id};
    const bool logprobs = live.sampling.params().wants_logprobs();
    for (size_t j = 0; j < out.new_tokens.size(); ++j) {
      SampleResult& result = results[position][j];
      GeneratedToken token{.token_id = result.token_id,
                           .top_logprobs = std::move(result.top_logprobs)};
      if (logprobs) token.logprob = result.logprob;
      output.tokens.push_back(std::move(token));
    }
    if (!IsFinished(out.status)) {
      decoded.push_back(out.id);
      live.on_output(output);
      continue;
    }
    output.finish =
        out.status == RequestStatus::kFinishedStopped ? FinishReason::kStop : FinishReason::kLength;
    if (live.pooler != nullptr) {
      live.first_token = forward_end;
      output.embedding = live.pooler->Finish(out.num_prompt_tokens);
    }
    if (!live.constraint_error.ok()) {
      // The EOS that ended it was forced, not generated.
      output.tokens.clear();
      output.finish = FinishReason::kError;
      output.error = live.constraint_error;
    }
    output.prompt_tokens = out.num_prompt_tokens;
    output.cached_prompt_tokens = out.num_cached_prompt_tokens;
    output.output_tokens = out.num_output_tokens;
    output.preemptions = out.num_preemptions;
    Finish(out.id, output);
  }
  const absl::Time propose_start = clock_->Now();
  ProposeDrafts(decoded);
  const absl::Time end = clock_->Now();
  // A draft model's passes are forward time too; prompt lookup's is overhead.
  const double draft_s =
      proposer_ != nullptr && proposer_->runs_a_model() ? Seconds(propose_start, end) : 0;
  step_.num_seqs = static_cast<int32_t>(plan.scheduled.size());
  step_.num_tokens = batch_.num_tokens();
  step_.prompt_tokens = prompt_tokens;
  step_.generated_tokens = generated;
  step_.duration_s = Seconds(start, end);
  step_.forward_s = Seconds(forward_start, forward_end) + draft_s;
  step_.overhead_s = Seconds(start, forward_start) + Seconds(forward_end, end) - draft_s;
  Report(/*forward=*/true);
}

void Engine::PublishCounts() {
  const KvCacheStats kv = kv_.Stats();
  absl::MutexLock lock(&mutex_);
  counts_.running = scheduler_.num_running();
  counts_.waiting = scheduler_.num_waiting() + static_cast<int32_t>(inbox_.size());
  counts_.kv_blocks_free = kv.free_blocks;
}

void Engine::CountLoraRequests() {
  const absl::flat_hash_set<RequestId> running(scheduler_.running().begin(),
                                               scheduler_.running().end());
  absl::btree_map<std::string, LoraAdapterLoad> adapters;
  for (const auto& [id, state] : live_) {
    if (state->lora_name.empty()) continue;
    LoraAdapterLoad& load = adapters[state->lora_name];
    load.name = state->lora_name;
    ++(running.contains(id) ? load.running : load.waiting);
  }
  for (auto& [name, load] : adapters) step_.lora_adapters.push_back(std::move(load));
}

void Engine::Report(bool forward) {
  const KvCacheStats kv = kv_.Stats();
  step_.time = clock_->Now();
  step_.forward = forward;
  step_.preemptions = scheduler_.num_preemptions() - reported_preemptions_;
  reported_preemptions_ = scheduler_.num_preemptions();
  step_.prefix_cache_queries = kv.prefix_queries - reported_prefix_queries_;
  step_.prefix_cache_hits = kv.prefix_hits - reported_prefix_hits_;
  reported_prefix_queries_ = kv.prefix_queries;
  reported_prefix_hits_ = kv.prefix_hits;
  step_.cache_events = kv_.TakeEvents();
  step_.running = scheduler_.num_running();
  step_.kv_blocks_total = kv.total_blocks;
  step_.kv_blocks_free = kv.free_blocks;
  if (!slot_lora_.empty()) CountLoraRequests();
  {
    absl::MutexLock lock(&mutex_);
    counts_.running = step_.running;
    counts_.waiting = scheduler_.num_waiting() + static_cast<int32_t>(inbox_.size());
    counts_.kv_blocks_free = kv.free_blocks;
    step_.waiting = counts_.waiting;
  }
  if (on_step_) on_step_(step_);
  if (forward) {
    // Counted after the report, so that whoever waits for a step (the worker's warm-up) knows its
    // report was delivered.
    absl::MutexLock lock(&mutex_);
    ++counts_.steps;
  }
  // The next iteration's report starts from zero (same speculation positions).
  std::vector<int64_t> positions = std::move(step_.spec_accepted_per_position);
  std::fill(positions.begin(), positions.end(), 0);
  step_ = StepStats{.spec_accepted_per_position = std::move(positions)};
}

}  // namespace llmserve::worker
