#include "worker/service/load_broadcaster.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "common/status/grpc_raw_message.h"

namespace llmserve::worker {
namespace {

// How often the broadcaster thread looks at the engine (below the shortest client interval).
constexpr absl::Duration kTick = absl::Milliseconds(25);
// A client that lets this many event hashes pile up gets a snapshot instead.
constexpr int64_t kMaxPendingHashes = 1 << 20;

v1::PrefixCacheEvent::Kind ToProtoKind(PrefixCacheEvent::Kind kind) {
  switch (kind) {
    case PrefixCacheEvent::Kind::kStored:
      return v1::PrefixCacheEvent::KIND_STORED;
    case PrefixCacheEvent::Kind::kEvicted:
      return v1::PrefixCacheEvent::KIND_EVICTED;
    case PrefixCacheEvent::Kind::kCleared:
      return v1::PrefixCacheEvent::KIND_CLEARED;
  }
  return v1::PrefixCacheEvent::KIND_UNSPECIFIED;
}

}  // namespace

class LoadBroadcaster::Watcher final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  Watcher(LoadBroadcaster* owner, absl::Duration interval) : owner_(owner), interval_(interval) {}

  // Broadcaster thread. Whether a snapshot of the cache is needed for the next report.
  bool WantsSnapshot() {
    absl::MutexLock lock(&mutex_);
    return needs_reset_ && !writing_ && !finish_called_;
  }

  // Broadcaster thread: takes this round's changes; returns whether a report is ready to be
  // written (the caller calls Write after releasing its locks).
  bool Offer(absl::Time now, const EngineLoad& load, bool draining,
             const std::vector<PrefixCacheEvent>& events, bool reset,
             const std::vector<uint64_t>* snapshot, const std::vector<std::string>& loras) {
    absl::MutexLock lock(&mutex_);
    if (finish_called_ || cancelled_) return false;
    // A stream being finished still gets the report that says the worker drains.
    if (finish_requested_ && !(draining && !last_draining_)) return false;
    if (reset && !needs_reset_) {
      needs_reset_ = true;
      pending_events_.clear();
      pending_hashes_ = 0;
    }
    if (!needs_reset_) {
      for (const PrefixCacheEvent& event : events) {
        v1::PrefixCacheEvent& out = pending_events_.emplace_back();
        out.set_kind(ToProtoKind(event.kind));
        out.mutable_block_hashes()->Add(event.block_hashes.begin(), event.block_hashes.end());
        pending_hashes_ += static_cast<int64_t>(event.block_hashes.size());
      }
      if (pending_hashes_ > kMaxPendingHashes) {
        needs_reset_ = true;
        pending_events_.clear();
        pending_hashes_ = 0;
      }
    }
    if (writing_) return false;
    const bool counts_changed = load.running != last_.running || load.waiting != last_.waiting ||
                                load.kv_blocks_free != last_.kv_blocks_free;
    const bool changed = counts_changed || !pending_events_.empty() || loras != last_loras_;
    const absl::Duration since = now - last_sent_;
    const bool send = needs_reset_ || (draining && !last_draining_) ||
                      (since >= interval_ && changed) ||
                      since >= std::max(interval_, LoadBroadcaster::kHeartbeat);
    if (!send) return false;
    if (needs_reset_ && snapshot == nullptr && owner_->prefix_caching_) {
      return false;  // the next round brings the snapshot
    }

    in_flight_.Clear();
    in_flight_.set_running(load.running);
    in_flight_.set_waiting(load.waiting);
    in_flight_.set_kv_blocks_total(load.kv_blocks_total);
    in_flight_.set_kv_blocks_free(load.kv_blocks_free);
    in_flight_.set_prefix_cache_hit_rate(load.prefix_cache_hit_rate);
    in_flight_.set_prompt_tokens_per_s(load.prompt_tokens_per_s);
    in_flight_.set_generated_tokens_per_s(load.generated_tokens_per_s);
    in_flight_.set_draining(draining);
    in_flight_.set_sequence(++sequence_);
    for (const std::string& name : loras) in_flight_.add_lora_adapters(name);
    if (needs_reset_) {
      in_flight_.set_reset(true);
      if (snapshot != nullptr && !snapshot->empty()) {
        v1::PrefixCacheEvent* stored = in_flight_.add_events();
        stored->set_kind(v1::PrefixCacheEvent::KIND_STORED);
        stored->mutable_block_hashes()->Add(snapshot->begin(), snapshot->end());
      }
      needs_reset_ = false;
    } else {
      for (v1::PrefixCacheEvent& event : pending_events_) {
        in_flight_.add_events()->Swap(&event);
      }
    }
    pending_events_.clear();
    pending_hashes_ = 0;
    last_ = load;
    last_draining_ = draining;
    last_loras_ = loras;
    last_sent_ = now;
    writing_ = true;
    return true;
  }

  // After Offer returned true, outside the broadcaster's locks. The write in flight keeps the
  // call alive (it cannot finish before OnWriteDone).
  void Write() {
    common::SerializeRawResponse(in_flight_, &in_flight_bytes_);
    StartWrite(&in_flight_bytes_);
  }

  // Ends the stream with OK once the write in flight (if any) is done and, when the worker
  // drains, once the client was told so. Returns whether the caller must call Finish now
  // (outside its locks); otherwise OnWriteDone does.
  bool RequestFinish(bool draining) {
    absl::MutexLock lock(&mutex_);
    finish_requested_ = true;
    if (writing_ || finish_called_) return false;
    if (draining && !last_draining_) return false;  // the next round sends that report
    finish_called_ = true;
    return true;
  }

  void OnWriteDone(bool ok) override {
    grpc::Status status;
    {
      absl::MutexLock lock(&mutex_);
      writing_ = false;
      if (!ok) cancelled_ = true;
      if (finish_called_ || !(cancelled_ || finish_requested_)) return;
      finish_called_ = true;
      status =
          cancelled_ ? grpc::Status(grpc::StatusCode::CANCELLED, "cancelled") : grpc::Status::OK;
    }
    Finish(status);
  }

  void OnCancel() override {
    {
      absl::MutexLock lock(&mutex_);
      cancelled_ = true;
      if (writing_ || finish_called_) return;
      finish_called_ = true;
    }
    Finish(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
  }

  void OnDone() override {
    owner_->Remove(this);
    delete this;
  }

 private:
  LoadBroadcaster* const owner_;
  const absl::Duration interval_;
  absl::Mutex mutex_;
  bool needs_reset_ ABSL_GUARDED_BY(mutex_) = true;
  std::vector<v1::PrefixCacheEvent> pending_events_ ABSL_GUARDED_BY(mutex_);
  int64_t pending_hashes_ ABSL_GUARDED_BY(mutex_) = 0;
  bool writing_ ABSL_GUARDED_BY(mutex_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mutex_) = false;
  bool finish_requested_ ABSL_GUARDED_BY(mutex_) = false;
  bool finish_called_ ABSL_GUARDED_BY(mutex_) = false;
  EngineLoad last_ ABSL_GUARDED_BY(mutex_);
  bool last_draining_ ABSL_GUARDED_BY(mutex_) = false;
  std::vector<std::string> last_loras_ ABSL_GUARDED_BY(mutex_);
  absl::Time last_sent_ ABSL_GUARDED_BY(mutex_) = absl::InfinitePast();
  uint64_t sequence_ ABSL_GUARDED_BY(mutex_) = 0;
  v1::LoadReport in_flight_;
  grpc::ByteBuffer in_flight_bytes_;
};

LoadBroadcaster::LoadBroadcaster(LoadAccountant* load, const Engine* engine, bool prefix_caching)
    : load_(load), engine_(engine), prefix_caching_(prefix_caching), thread_([this] { Loop(); }) {}

LoadBroadcaster::~LoadBroadcaster() { Stop(); }

void LoadBroadcaster::Stop() {
  {
    absl::MutexLock lock(&mutex_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* LoadBroadcaster::Watch(absl::Duration interval) {
  auto* watcher = new Watcher(this, interval);
  bool finish_now = false;
  {
    absl::MutexLock lock(&mutex_);
    watchers_.insert(watcher);
    wake_ = true;
    finish_now = finishing_ && watcher->RequestFinish(/*draining=*/false);
  }
  if (finish_now) watcher->Finish(grpc::Status::OK);
  return watcher;
}

void LoadBroadcaster::SetDraining() {
  absl::MutexLock lock(&mutex_);
  draining_ = true;
  wake_ = true;
}

void LoadBroadcaster::FinishAll() {
  std::vector<Watcher*> finish_now;
  {
    absl::MutexLock lock(&mutex_);
    finishing_ = true;
    for (Watcher* watcher : watchers_) {
      if (watcher->RequestFinish(draining_)) finish_now.push_back(watcher);
    }
  }
  for (Watcher* watcher : finish_now) watcher->Finish(grpc::Status::OK);
}

void LoadBroadcaster::Remove(Watcher* watcher) {
  absl::MutexLock lock(&mutex_);
  watchers_.erase(watcher);
}

void LoadBroadcaster::Loop() {
  while (true) {
    {
      absl::MutexLock lock(&mutex_);
      mutex_.AwaitWithTimeout(absl::Condition(
                                  +[](LoadBroadcaster* b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(b->mutex_) {
                                    return b->stopping_ || b->wake_;
                                  },
                                  this),
                              kTick);
      if (stopping_) return;
      wake_ = false;
    }
    // Taken even with nobody watching, so the accountant's queue never overflows for nothing.
    LoadAccountant::CacheEvents events;
    if (prefix_caching_) events = load_->TakePrefixCacheEvents();
    const EngineLoad load = load_->Load(engine_->Counts());
    const std::vector<std::string> loras = engine_->LoraAdapters();
    const absl::Time now = absl::Now();
    std::vector<Watcher*> ready;
    {
      absl::MutexLock lock(&mutex_);
      bool wants_snapshot = false;
      for (Watcher* watcher : watchers_) {
        wants_snapshot = wants_snapshot || events.overflowed || watcher->WantsSnapshot();
      }
      std::vector<uint64_t> snapshot;
      if (prefix_caching_ && wants_snapshot) snapshot = load_->CachedBlockHashes();
      for (Watcher* watcher : watchers_) {
        if (watcher->Offer(now, load, draining_, events.events, events.overflowed,
                           wants_snapshot ? &snapshot : nullptr, loras)) {
          ready.push_back(watcher);
        }
      }
    }
    for (Watcher* watcher : ready) watcher->Write();
  }
}

}  // namespace llmserve::worker
