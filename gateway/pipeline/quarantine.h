// A bounded set of 64-bit fingerprints, each kept for a fixed time after it was added: the
// requests refused as queries of death (query_of_death.h). Memory stays bounded however many
// distinct requests crash workers: at most `capacity` entries, the oldest dropped first.
//
// Time is passed in (absl::Time now) rather than read, so tests need no clock and no sleep.
//
// Thread-safe; every operation is O(1) amortized under a short lock, with no I/O.

#ifndef LLMSERVE_GATEWAY_PIPELINE_QUARANTINE_H_
#define LLMSERVE_GATEWAY_PIPELINE_QUARANTINE_H_

#include <cstddef>
#include <cstdint>
#include <list>
#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace llmserve::gateway {

class Quarantine {
 public:
  // `duration` > 0, `capacity` >= 1.
  Quarantine(absl::Duration duration, size_t capacity) : duration_(duration), capacity_(capacity) {}

  // Quarantines `fingerprint` from `now` for the duration (again from `now` when it was in).
  void Add(uint64_t fingerprint, absl::Time now);
  // When `fingerprint`'s quarantine ends, if it is in quarantine at `now`.
  std::optional<absl::Time> Until(uint64_t fingerprint, absl::Time now);
  // Entries not yet expired at `now`.
  size_t size(absl::Time now);

  absl::Duration duration() const { return duration_; }

 private:
  using Entries = std::list<std::pair<uint64_t, absl::Time>>;
  // Drops the entries that expired by `now` (the oldest first: all share one duration, so
  // insertion order is expiry order).
  void ExpireLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  const absl::Duration duration_;
  const size_t capacity_;
  absl::Mutex mutex_;
  // Oldest first: (fingerprint, end of its quarantine).
  Entries entries_ ABSL_GUARDED_BY(mutex_);
  absl::flat_hash_map<uint64_t, Entries::iterator> index_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_PIPELINE_QUARANTINE_H_
