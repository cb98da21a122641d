// A HostResolver for tests: answers from a table at once (on the caller's thread), or, for the
// names marked silent, holds the lookup back as a DNS server that never replies would: the held
// callbacks never run (they are dropped with the fake), unless the test answers them.

#ifndef LLMSERVE_TESTS_TESTING_FAKE_HOST_RESOLVER_H_
#define LLMSERVE_TESTS_TESTING_FAKE_HOST_RESOLVER_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "gateway/router/host_resolver.h"

namespace llmserve::testing {

class FakeHostResolver final : public gateway::HostResolver {
 public:
  using Answer = absl::StatusOr<std::vector<std::string>>;

  // What a lookup of `host` answers from now on (default: no addresses).
  void SetAnswer(const std::string& host, Answer answer) {
    absl::MutexLock lock(&mutex_);
    answers_.insert_or_assign(host, std::move(answer));
  }
  // Whether lookups of `host` are held back from now on.
  void SetSilent(const std::string& host, bool silent) {
    absl::MutexLock lock(&mutex_);
    if (silent) {
      silent_.insert(host);
    } else {
      silent_.erase(host);
    }
  }
  // Answers every held lookup with what its name answers now.
  void AnswerHeld() {
    std::vector<std::pair<std::string, Callback>> held;
    {
      absl::MutexLock lock(&mutex_);
      held.swap(held_);
    }
    for (auto& [host, done] : held) std::move(done)(AnswerFor(host));
  }

  int lookups(const std::string& host) const {
    absl::MutexLock lock(&mutex_);
    const auto it = lookups_.find(host);
    return it == lookups_.end() ? 0 : it->second;
  }
  int held() const {
    absl::MutexLock lock(&mutex_);
    return static_cast<int>(held_.size());
  }

  void Resolve(const std::string& host, const std::string& /*port*/, Callback done) override {
    {
      absl::MutexLock lock(&mutex_);
      ++lookups_[host];
      if (silent_.contains(host)) {
        held_.emplace_back(host, std::move(done));
        return;
      }
    }
    std::move(done)(AnswerFor(host));
  }

 private:
  Answer AnswerFor(const std::string& host) const {
    absl::MutexLock lock(&mutex_);
    const auto it = answers_.find(host);
    return it == answers_.end() ? Answer(std::vector<std::string>()) : it->second;
  }

  mutable absl::Mutex mutex_;
  absl::flat_hash_map<std::string, Answer> answers_ ABSL_GUARDED_BY(mutex_);
  absl::flat_hash_set<std::string> silent_ ABSL_GUARDED_BY(mutex_);
  absl::flat_hash_map<std::string, int> lookups_ ABSL_GUARDED_BY(mutex_);
  std::vector<std::pair<std::string, Callback>> held_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace llmserve::testing

#endif  // LLMSERVE_TESTS_TESTING_FAKE_HOST_RESOLVER_H_
