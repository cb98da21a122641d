#include "tools/bench/load_runner.h"

#include <algorithm>
#include <atomic>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"

namespace llmserve::tools {

LoadResult RunLoad(BenchClient* client, const std::vector<BenchRequest>& requests,
                   const LoadOptions& options) {
  const int total = static_cast<int>(requests.size());
  const int limit = options.max_concurrency > 0 ? options.max_concurrency : kMaxClientThreads;
  const int threads = std::max(1, std::min(total, limit));
  std::vector<std::optional<RequestOutcome>> outcomes(requests.size());
  std::atomic<int> next{0}, sent{0}, succeeded{0}, failed{0}, running{threads};
  absl::Notification all_done;
  const absl::Time start = absl::Now();
  const absl::Time stop_sending = start + options.duration;
  absl::Mutex end_mutex;
  absl::Time last_end = start;

  auto client_loop = [&] {
    // A thread takes the next request only when it is free: with every thread busy, a request
    // whose arrival has passed waits, which is what max_concurrency means.
    for (int i = next++; i < total; i = next++) {
      const absl::Time due =
          options.arrivals.empty() ? start : start + options.arrivals[static_cast<size_t>(i)];
      if (due >= stop_sending) break;
      absl::SleepFor(due - absl::Now());
      if (absl::Now() >= stop_sending) break;
      ++sent;
      RequestOutcome outcome =
          client->Send(absl::StrCat(options.id_prefix, i), requests[static_cast<size_t>(i)],
                       absl::Now() + options.request_timeout);
      ++(outcome.ok ? succeeded : failed);
      outcomes[static_cast<size_t>(i)] = std::move(outcome);
      absl::MutexLock lock(&end_mutex);
      last_end = std::max(last_end, absl::Now());
    }
    if (--running == 0) all_done.Notify();
  };
  std::vector<std::thread> clients;
  clients.reserve(static_cast<size_t>(threads));
  for (int t = 0; t < threads; ++t) clients.emplace_back(client_loop);

  auto progress = [&] {
    return LoadProgress{.total = total,
                        .sent = sent.load(),
                        .succeeded = succeeded.load(),
                        .failed = failed.load(),
                        .elapsed = absl::Now() - start};
  };
  while (!all_done.WaitForNotificationWithTimeout(options.progress_interval)) {
    if (options.on_progress) options.on_progress(progress());
  }
  for (std::thread& thread : clients) thread.join();
  if (options.on_progress) options.on_progress(progress());

  LoadResult result;
  result.client_threads = threads;
  for (std::optional<RequestOutcome>& outcome : outcomes) {
    if (outcome.has_value()) result.outcomes.push_back(*std::move(outcome));
  }
  absl::MutexLock lock(&end_mutex);
  result.elapsed_s = absl::ToDoubleSeconds(last_end - start);
  return result;
}

}  // namespace llmserve::tools
