#include "worker/scheduler/scheduler.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/base/logging.h"
#include "common/prefix_cache/block_hash.h"
#include "common/status/status_macros.h"

namespace llmserve::worker {

Scheduler::Scheduler(const SchedulerConfig& config, KvCacheManager* kv)
    : config_(config), kv_(kv) {}

Scheduler::WaitingKey Scheduler::KeyOf(const Request& request) const {
  const int32_t priority =
      config_.policy == SchedulerConfig::Policy::kPriority ? request.priority : 0;
  return {priority, request.arrival, request.id};
}

absl::Status CheckRequestFits(const Request& request, const SchedulerConfig& config,
                              int32_t total_blocks, int32_t block_size) {
  const StoppingParams& stop = request.stopping;
  if (request.num_prompt_tokens <= 0 || request.num_prompt_tokens != request.num_tokens()) {
    return absl::InvalidArgumentError("the prompt must hold at least one token");
  }
  if (request.pooling) {
    if (stop.max_tokens != 0) {
      return absl::InvalidArgumentError("an embedding request generates no tokens: max_tokens 0");
    }
  } else if (stop.max_tokens < 1) {
    return absl::InvalidArgumentError("max_tokens must be at least 1");
  }
  if (stop.min_tokens < 0 || stop.min_tokens > stop.max_tokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("min_tokens ", stop.min_tokens, " is outside [0, max_tokens]"));
  }
  const int64_t total = static_cast<int64_t>(request.num_prompt_tokens) + stop.max_tokens;
  if (total > config.max_model_len) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt (", request.num_prompt_tokens, " tokens) + max_tokens (", stop.max_tokens,
        ") exceeds the model's context of ", config.max_model_len, " tokens"));
  }
  const int64_t blocks = (total + block_size - 1) / block_size;
  if (blocks > total_blocks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt + max_tokens needs ", blocks, " KV cache blocks; this worker has ", total_blocks));
  }
  return absl::OkStatus();
}

absl::Status Scheduler::AddRequest(std::unique_ptr<Request> request) {
  LLMSERVE_RETURN_IF_ERROR(
      CheckRequestFits(*request, config_, kv_->Stats().total_blocks, kv_->block_size()));
  if (requests_.contains(request->id)) {
    return absl::AlreadyExistsError(absl::StrCat("request ", request->id, " is already live"));
  }
  request->block_hashes.clear();
  if (kv_->prefix_caching() && !request->pooling) {
    request->block_hashes =
        common::HashFullBlocks(request->tokens, kv_->block_size(), request->cache_salt);
  }
  request->status = RequestStatus::kWaiting;
  request->arrival = next_arrival_++;
  request->num_computed_tokens = request->num_cached_prompt_tokens = 0;
  request->num_preemptions = 0;
  request->ever_scheduled = false;
  waiting_.insert(KeyOf(*request));
  requests_[request->id] = std::move(request);
  return absl::OkStatus();
}

bool Scheduler::AbortRequest(RequestId id) {
  const auto it = requests_.find(id);
  if (it == requests_.end()) return false;
  Request& request = *it->second;
  if (request.status == RequestStatus::kRunning) {
    running_.erase(std::find(running_.begin(), running_.end(), id));
    kv_->Free(id);
  } else {
    waiting_.erase(KeyOf(request));
  }
  requests_.erase(it);
  return true;
}

const Request* Scheduler::Find(RequestId id) const {
  const auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : it->second.get();
}

void Scheduler::InsertRunning(const Request& request) {
  const WaitingKey key = KeyOf(request);
  const auto position = std::upper_bound(
      running_.begin(), running_.end(), key,
      [this](const WaitingKey& k, RequestId other) { return k < KeyOf(*requests_.at(other)); });
  running_.insert(position, request.id);
}

void Scheduler::Preempt(RequestId id, SchedulerOutput* output) {
  Request& request = *requests_.at(id);
  running_.erase(std::find(running_.begin(), running_.end(), id));
  kv_->Free(id);
  request.status = RequestStatus::kPreempted;
  request.num_computed_tokens = 0;
  request.draft_tokens.clear();
  ++request.num_preemptions;
  ++num_preemptions_;
  waiting_.insert(KeyOf(request));
  output->preempted.push_back(id);
}

// Returns false when a running request had to be preempted.
bool Scheduler::ScheduleRunning(int32_t* budget, SchedulerOutput* output) {
  bool preempted = false;
  size_t i = 0;
  while (i < running_.size() && *budget > 0) {
    const RequestId id = running_[i];
    Request& request = *requests_.at(id);
    const int32_t num_known = request.num_tokens() - request.num_computed_tokens;
    const int32_t num_new = std::min(num_known, *budget);
    LLMSERVE_CHECK(num_new > 0) << "running request " << id << " has nothing to compute";
    int32_t num_drafts = 0;
    if (num_new == num_known && !request.draft_tokens.empty()) {
      num_drafts = std::min(static_cast<int32_t>(request.draft_tokens.size()), *budget - num_new);
    }
    // Drafts only use blocks nobody else needs: never preempt for them.
    bool allocated = num_drafts > 0 && kv_->AllocateSlots(id, num_new + num_drafts).has_value();
    if (!allocated) num_drafts = 0;
    while (!allocated) {
      allocated = kv_->AllocateSlots(id, num_new).has_value();
      if (allocated) break;
      // The back of running_ is the lowest-priority, newest request, and it has not been
      // scheduled this step (it is at index >= i).
      const RequestId victim = running_.back();
      Preempt(victim, output);
      preempted = true;
      if (victim == id) break;
    }
    if (!allocated) continue;  // this request itself was preempted; running_[i] is the next one
    kv_->CacheComputedBlocks(id, request.block_hashes, request.num_computed_tokens + num_new);
    output->scheduled.push_back(
        PlanStep(request, request.num_computed_tokens, num_new, num_drafts));
    request.draft_tokens.clear();
    *budget -= num_new + num_drafts;
    ++i;
  }
  return !preempted;
}

void Scheduler::AdmitWaiting(int32_t* budget, SchedulerOutput* output) {
  // The adapters the running requests use (only with a LoRA limit).
  absl::flat_hash_set<int64_t> loras;
  if (config_.max_loras > 0) {
    for (RequestId id : running_) {
      if (const int64_t lora = requests_.at(id)->lora_id; lora != 0) loras.insert(lora);
    }
  }
  auto next = waiting_.begin();
  while (next != waiting_.end() && *budget > 0 &&
         static_cast<int32_t>(running_.size()) < config_.max_num_seqs) {
    const WaitingKey key = *next;
    Request& request = *requests_.at(key.id);
    if (config_.max_loras > 0 && request.lora_id != 0 && !loras.contains(request.lora_id)) {
      if (static_cast<int32_t>(loras.size()) >= config_.max_loras) {
        ++next;  // every adapter slot is taken: this one waits, later ones may run
        continue;
      }
    }
    const PrefixHit hit = kv_->FindCachedPrefix(request.block_hashes, request.num_tokens());
    const int32_t num_new = std::min(request.num_tokens() - hit.num_tokens, *budget);
    if (!kv_->AllocateSlots(request.id, num_new, &hit)) break;
    if (request.lora_id != 0) loras.insert(request.lora_id);
    next = waiting_.erase(next);
    request.status = RequestStatus::kRunning;
    request.num_computed_tokens = hit.num_tokens;
    if (!request.ever_scheduled) {
      request.ever_scheduled = true;
      request.num_cached_prompt_tokens = hit.num_tokens;
      output->first_scheduled.push_back(request.id);
    }
    InsertRunning(request);
    kv_->CacheComputedBlocks(request.id, request.block_hashes, hit.num_tokens + num_new);
    output->scheduled.push_back(PlanStep(request, hit.num_tokens, num_new));
    *budget -= num_new;
  }
}

ScheduledRequest Scheduler::PlanStep(const Request& request, int32_t num_computed, int32_t num_new,
                                     int32_t num_drafts) const {
  ScheduledRequest step{.id = request.id,
                        .num_computed_tokens = num_computed,
                        .num_new_tokens = num_new + num_drafts,
                        .samples = num_computed + num_new == request.num_tokens(),
                        .num_draft_tokens = num_drafts};
  const auto begin = request.tokens.begin() + num_computed;
  step.new_token_ids.reserve(num_new + num_drafts);
  step.new_token_ids.assign(begin, begin + num_new);
  step.new_token_ids.insert(step.new_token_ids.end(), request.draft_tokens.begin(),
                            request.draft_tokens.begin() + num_drafts);
  step.num_new_prompt_tokens =
      std::max(0, std::min(num_computed + num_new, request.num_prompt_tokens) -
                      std::min(num_computed, request.num_prompt_tokens));
  step.block_table = kv_->BlockTable(request.id);
  return step;
}

SchedulerOutput Scheduler::Schedule() {
  SchedulerOutput output;
  int32_t budget = config_.max_num_batched_tokens;
  // After a preemption, blocks are short: admitting more would only cause more preemption.
  if (ScheduleRunning(&budget, &output)) AdmitWaiting(&budget, &output);
  output.num_batched_tokens = config_.max_num_batched_tokens - budget;
  return output;
}

RequestStatus Scheduler::AppendToken(Request& request, int32_t token) {
  request.tokens.push_back(token);
  const int32_t block_size = kv_->block_size();
  if (kv_->prefix_caching() && request.num_tokens() % block_size == 0) {
    const common::BlockHash* parent =
        request.block_hashes.empty() ? nullptr : &request.block_hashes.back();
    request.block_hashes.push_back(common::HashBlock(
        parent, absl::MakeConstSpan(request.tokens).last(block_size), request.cache_salt));
  }
  const StoppingParams& stop = request.stopping;
  const int32_t generated = request.num_output_tokens();
  if (generated >= stop.min_tokens) {
    const auto contains = [token](const std::vector<int32_t>& ids) {
      return std::find(ids.begin(), ids.end(), token) != ids.end();
    };
    if ((!stop.ignore_eos && contains(config_.eos_token_ids)) || contains(stop.stop_token_ids)) {
      return RequestStatus::kFinishedStopped;
    }
  }
  if (generated >= stop.max_tokens || request.num_tokens() >= config_.max_model_len) {
    return RequestStatus::kFinishedLength;
  }
  return RequestStatus::kRunning;
}

void Scheduler::Finish(RequestId id, RequestStatus status, RequestOutput* output) {
  const Request& request = *requests_.at(id);
  output->status = status;
  output->num_prompt_tokens = request.num_prompt_tokens;
  output->num_cached_prompt_tokens = request.num_cached_prompt_tokens;
  output->num_output_tokens = request.num_output_tokens();
  output->num_preemptions = request.num_preemptions;
  running_.erase(std::find(running_.begin(), running_.end(), id));
  kv_->Free(id);
  requests_.erase(id);
}

std::vector<RequestOutput> Scheduler::Update(const SchedulerOutput& output,
                                             absl::Span<const int32_t> sampled) {
  std::vector<std::vector<int32_t>> emitted(output.scheduled.size());
  for (size_t i = 0; i < output.scheduled.size(); ++i) {
    if (output.scheduled[i].samples) emitted[i].push_back(sampled[i]);
  }
  return Update(output, emitted);
}

std::vector<RequestOutput> Scheduler::Update(const SchedulerOutput& output,
                                             absl::Span<const std::vector<int32_t>> emitted) {
  std::vector<RequestOutput> outputs;
  for (size_t i = 0; i < output.scheduled.size(); ++i) {
    const ScheduledRequest& step = output.scheduled[i];
    const auto it = requests_.find(step.id);
    if (it == requests_.end() || it->second->status != RequestStatus::kRunning) continue;
    Request& request = *it->second;
    const int32_t num_known = step.num_new_tokens - step.num_draft_tokens;
    request.num_computed_tokens += num_known;
    if (!step.samples) continue;
    if (request.pooling) {
      // Its prompt is computed: the engine pooled it.
      RequestOutput out{.id = step.id, .status = RequestStatus::kFinishedStopped};
      Finish(step.id, out.status, &out);
      outputs.push_back(std::move(out));
      continue;
    }
    const std::vector<int32_t>& run = emitted[i];
    LLMSERVE_CHECK(!run.empty() && static_cast<int32_t>(run.size()) <= step.num_draft_tokens + 1)
        << "request " << step.id << " emitted " << run.size() << " tokens with "
        << step.num_draft_tokens << " drafts";
    RequestOutput out;
    out.id = step.id;
    out.first_token = request.num_output_tokens() == 0;
    for (size_t j = 0; j < run.size(); ++j) {
      if (j > 0) {
        // run[j - 1] was the draft at that position, so the K/V computed for it stand.
        LLMSERVE_CHECK(run[j - 1] == step.new_token_ids[num_known + j - 1])
            << "request " << step.id << " emitted a token after a rejected draft";
        ++request.num_computed_tokens;
      }
      out.new_tokens.push_back(run[j]);
      out.status = AppendToken(request, run[j]);
      if (IsFinished(out.status)) break;
    }
    if (IsFinished(out.status)) {
      Finish(step.id, out.status, &out);
    } else if (step.num_draft_tokens > 0) {
      kv_->RollbackSlots(step.id, request.num_computed_tokens);
    }
    outputs.push_back(std::move(out));
  }
  return outputs;
}

int32_t Scheduler::SetDraftTokens(RequestId id, std::vector<int32_t> drafts) {
  const auto it = requests_.find(id);
  if (it == requests_.end() || it->second->status != RequestStatus::kRunning) return 0;
  Request& request = *it->second;
  request.draft_tokens.clear();
  if (request.num_tokens() - request.num_computed_tokens != 1) return 0;
  // Drafts sit at positions num_tokens.., and verifying d of them emits up to d + 1 tokens.
  const int64_t room = std::min<int64_t>(
      config_.max_model_len - request.num_tokens(),
      static_cast<int64_t>(request.stopping.max_tokens) - request.num_output_tokens() - 1);
  const int64_t keep = std::clamp<int64_t>(room, 0, static_cast<int64_t>(drafts.size()));
  drafts.resize(keep);
  request.draft_tokens = std::move(drafts);
  return static_cast<int32_t>(keep);
}

}  // namespace llmserve::worker
