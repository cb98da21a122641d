// Route() latency of the gateway's WorkerPool in front of real workers (in process, on loopback),
// with the DNS resolver answering at once (the pool re-resolves every millisecond) or never (a
// DNS server that drops packets). Routing reads a published snapshot and never waits for
// discovery, so the two should match.
//
//   cmake --build build --target route_benchmark && build/bin/route_benchmark
//
// Built with the tests, never run by ctest: performance figures come from benchmarks.

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "benchmark/benchmark.h"
#include "gateway/router/worker_pool.h"
#include "tests/testing/fake_host_resolver.h"
#include "tests/testing/test_model.h"
#include "worker/service/worker_server.h"

namespace llmserve::gateway {
namespace {

// Two workers serving the tiny model, and a pool of them whose worker_dns entry is answered at
// once or never.
class Fleet {
 public:
  explicit Fleet(bool silent_resolver) {
    char pattern[] = "/tmp/route_benchmark_XXXXXX";
    if (mkdtemp(pattern) == nullptr) std::abort();
    dir_ = pattern;
    if (!::llmserve::testing::WriteTinyModel(dir_).ok()) std::abort();
    WorkerPoolOptions options;
    for (int i = 0; i < 2; ++i) {
      absl::StatusOr<std::unique_ptr<worker::WorkerServer>> server =
          worker::WorkerServer::Start({.model_dir = dir_,
                                       .served_model_name = "tiny",
                                       .host = "127.0.0.1",
                                       .port = 0,
                                       .metrics_port = -1,
                                       .kv_cache_bytes = 8 << 20,
                                       .threads = 1});
      if (!server.ok()) std::abort();
      options.workers.push_back(absl::StrCat("127.0.0.1:", (*server)->port()));
      workers_.push_back(*std::move(server));
    }
    options.worker_dns = {"workers.invalid:1"};
    options.dns_refresh = absl::Milliseconds(1);
    options.load_interval = absl::Milliseconds(50);
    resolver_ = std::make_shared<::llmserve::testing::FakeHostResolver>();
    resolver_->SetSilent("workers.invalid", silent_resolver);
    options.resolver = resolver_;
    absl::StatusOr<std::unique_ptr<WorkerPool>> pool = WorkerPool::Start(options);
    if (!pool.ok()) std::abort();
    pool_ = *std::move(pool);
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (absl::Now() < deadline) {
      int ready = 0;
      for (const WorkerStatus& worker : pool_->Workers()) ready += worker.ready;
      if (ready == 2) return;
      absl::SleepFor(absl::Milliseconds(10));
    }
    std::abort();
  }

  ~Fleet() { std::filesystem::remove_all(dir_); }

  WorkerPool& pool() { return *pool_; }

 private:
  std::string dir_;
  std::vector<std::unique_ptr<worker::WorkerServer>> workers_;
  std::shared_ptr<::llmserve::testing::FakeHostResolver> resolver_;
  std::unique_ptr<WorkerPool> pool_;
};

void BM_Route(benchmark::State& state) {
  static Fleet* const fast = new Fleet(/*silent_resolver=*/false);
  static Fleet* const slow = new Fleet(/*silent_resolver=*/true);
  WorkerPool& pool = (state.range(0) == 0 ? fast : slow)->pool();
  // A 1024-token prompt: 64 blocks of the tiny model's 16 tokens, hashed once per request.
  std::vector<int32_t> prompt(1024);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(i % 400);
  for (auto _ : state) {
    PromptRoutingHashes hashes(prompt, "");
    benchmark::DoNotOptimize(pool.Route("tiny", hashes, {}));
  }
  state.SetLabel(state.range(0) == 0 ? "resolver answers at once" : "resolver never answers");
}
BENCHMARK(BM_Route)->Arg(0)->Arg(1)->Threads(1)->Threads(2)->UseRealTime();

}  // namespace
}  // namespace llmserve::gateway

BENCHMARK_MAIN();
