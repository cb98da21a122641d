#include "worker/service/load_accountant.h"

#include <algorithm>
#include <optional>
#include <utility>

namespace llmserve::worker {

void LoadAccountant::Record(const StepStats& step) {
  absl::MutexLock lock(&mutex_);
  for (const PrefixCacheEvent& event : step.cache_events) {
    if (event.kind == PrefixCacheEvent::Kind::kCleared) cached_hashes_.clear();
    for (uint64_t hash : event.block_hashes) {
      if (event.kind == PrefixCacheEvent::Kind::kStored) {
        cached_hashes_.insert(hash);
      } else {
        cached_hashes_.erase(hash);
      }
    }
    pending_event_hashes_ += static_cast<int64_t>(event.block_hashes.size());
    events_.push_back(event);
  }
  if (pending_event_hashes_ > kMaxPendingEventHashes) {
    events_.clear();
    pending_event_hashes_ = 0;
    events_overflowed_ = true;
  }

  load_.running = step.running;
  load_.waiting = step.waiting;
  load_.kv_blocks_total = step.kv_blocks_total;
  load_.kv_blocks_free = step.kv_blocks_free;
  load_.prefix_cache_queries += step.prefix_cache_queries;
  load_.prefix_cache_hits += step.prefix_cache_hits;
  load_.prefix_cache_hit_rate =
      load_.prefix_cache_queries == 0
          ? 0
          : static_cast<double>(load_.prefix_cache_hits) / load_.prefix_cache_queries;
  load_.preemptions += step.preemptions;
  load_.spec_drafts += step.spec_drafts;
  load_.spec_draft_tokens += step.spec_draft_tokens;
  load_.spec_accepted_tokens += step.spec_accepted_tokens;
  if (load_.spec_accepted_per_position.size() < step.spec_accepted_per_position.size()) {
    load_.spec_accepted_per_position.resize(step.spec_accepted_per_position.size());
  }
  for (size_t j = 0; j < step.spec_accepted_per_position.size(); ++j) {
    load_.spec_accepted_per_position[j] += step.spec_accepted_per_position[j];
  }
  load_.lora_adapters = step.lora_adapters;
  load_.lora_adapters_time = step.time;
  if (!step.forward) return;

  ++load_.steps;
  load_.overhead_s += step.overhead_s;
  load_.forward_s += step.forward_s;
  recent_.push_back({.time = step.time,
                     .prompt_tokens = step.prompt_tokens,
                     .generated_tokens = step.generated_tokens,
                     .seconds = step.forward_s + step.overhead_s});
  while (step.time - recent_.front().time > kRateWindow) recent_.pop_front();
}

EngineLoad LoadAccountant::Load() const {
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mutex_);
  EngineLoad load = load_;
  int64_t prompt = 0, generated = 0;
  std::optional<absl::Time> first_start;
  for (const RecentPass& pass : recent_) {
    if (now - pass.time > kRateWindow) continue;
    if (!first_start) first_start = pass.time - absl::Seconds(pass.seconds);
    prompt += pass.prompt_tokens;
    generated += pass.generated_tokens;
  }
  if (first_start) {
    const double span = std::max(1e-3, absl::ToDoubleSeconds(now - *first_start));
    load.prompt_tokens_per_s = prompt / span;
    load.generated_tokens_per_s = generated / span;
  }
  return load;
}

EngineLoad LoadAccountant::Load(const EngineCounts& live) const {
  EngineLoad load = Load();
  load.running = live.running;
  load.waiting = live.waiting;
  load.kv_blocks_free = live.kv_blocks_free;
  return load;
}

LoadAccountant::CacheEvents LoadAccountant::TakePrefixCacheEvents() {
  absl::MutexLock lock(&mutex_);
  CacheEvents taken{.overflowed = events_overflowed_};
  taken.events.swap(events_);
  pending_event_hashes_ = 0;
  events_overflowed_ = false;
  return taken;
}

std::vector<uint64_t> LoadAccountant::CachedBlockHashes() const {
  absl::MutexLock lock(&mutex_);
  return std::vector<uint64_t>(cached_hashes_.begin(), cached_hashes_.end());
}

}  // namespace llmserve::worker
