#include "gateway/pipeline/quarantine.h"

namespace llmserve::gateway {

void Quarantine::ExpireLocked(absl::Time now) {
  while (!entries_.empty() && entries_.front().second <= now) {
    index_.erase(entries_.front().first);
    entries_.pop_front();
  }
}

void Quarantine::Add(uint64_t fingerprint, absl::Time now) {
  absl::MutexLock lock(&mutex_);
  ExpireLocked(now);
  if (auto it = index_.find(fingerprint); it != index_.end()) {
    entries_.erase(it->second);
    index_.erase(it);
  }
  entries_.emplace_back(fingerprint, now + duration_);
  index_[fingerprint] = std::prev(entries_.end());
  while (entries_.size() > capacity_) {
    index_.erase(entries_.front().first);
    entries_.pop_front();
  }
}

std::optional<absl::Time> Quarantine::Until(uint64_t fingerprint, absl::Time now) {
  absl::MutexLock lock(&mutex_);
  ExpireLocked(now);
  const auto it = index_.find(fingerprint);
  if (it == index_.end()) return std::nullopt;
  return it->second->second;
}

size_t Quarantine::size(absl::Time now) {
  absl::MutexLock lock(&mutex_);
  ExpireLocked(now);
  return entries_.size();
}

}  // namespace llmserve::gateway
