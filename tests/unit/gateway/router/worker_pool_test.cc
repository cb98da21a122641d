// The gateway's worker pool against real workers (in process, on loopback ports).

#include "gateway/router/worker_pool.h"

#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/testing/fake_host_resolver.h"
#include "tests/testing/loopback_socket.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tests/testing/simulated_clock.h"
#include "tests/testing/test_model.h"
#include "tests/unit/worker/engine/lora_test_adapters.h"
#include "worker/model/model_config.h"
#include "worker/model/model_files.h"
#include "worker/service/worker_server.h"

namespace llmserve::gateway {
namespace {

constexpr absl::Duration kPatience = absl::Seconds(60);

class WorkerPoolTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(::llmserve::testing::WriteTinyModel(dir_.path()).ok()); }

  // `max_loras` > 0: LoRA slots, loaded and unloaded at run time.
  std::unique_ptr<worker::WorkerServer> StartWorker(const std::string& name,
                                                    int32_t max_loras = 0) {
    absl::StatusOr<std::unique_ptr<worker::WorkerServer>> server =
        worker::WorkerServer::Start({.model_dir = dir_.path(),
                                     .served_model_name = name,
                                     .host = "127.0.0.1",
                                     .port = 0,
                                     .metrics_port = -1,
                                     .kv_cache_bytes = 8 << 20,
                                     .threads = 1,
                                     .drain_timeout = absl::Seconds(5),
                                     .max_loras = max_loras,
                                     .allow_runtime_lora_updating = max_loras > 0});
    EXPECT_TRUE(server.ok()) << server.status();
    return server.ok() ? *std::move(server) : nullptr;
  }

  static std::string Address(const worker::WorkerServer& server) {
    return absl::StrCat("127.0.0.1:", server.port());
  }

  // Waits until `predicate(pool.Workers())` holds.
  template <typename Predicate>
  static bool WaitFor(const WorkerPool& pool, Predicate predicate) {
    const absl::Time deadline = absl::Now() + kPatience;
    while (absl::Now() < deadline) {
      if (predicate(pool.Workers())) return true;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return false;
  }

  // Routes a prompt of `tokens` (hashed for this one call).
  static absl::StatusOr<RoutedWorker> RouteTokens(
      WorkerPool& pool, absl::string_view model, const std::vector<int32_t>& tokens,
      absl::string_view salt, const absl::flat_hash_set<std::string>& excluded = {}) {
    PromptRoutingHashes prompt(tokens, salt);
    return pool.Route(model, prompt, excluded);
  }

  static WorkerPoolOptions FastOptions(std::vector<std::string> workers) {
    return {.workers = std::move(workers),
            .probe_interval = absl::Milliseconds(50),
            .load_interval = absl::Milliseconds(50),
            .backoff_initial = absl::Milliseconds(50),
            .backoff_max = absl::Milliseconds(200)};
  }

  ::llmserve::testing::ScopedTempDir dir_{"worker_pool_test"};
};

TEST_F(WorkerPoolTest, OptionsAreValidated) {
  EXPECT_FALSE(ValidateWorkerPoolOptions({}).ok());
  EXPECT_NE(ValidateWorkerPoolOptions({.workers = {"no-port"}}).message().find("no-port"),
            absl::string_view::npos);
  EXPECT_FALSE(ValidateWorkerPoolOptions({.worker_dns = {"svc:99999"}}).ok());
  EXPECT_TRUE(ValidateWorkerPoolOptions({.workers = {"[::1]:5000", "host:1"}}).ok());
  EXPECT_NE(ValidateWorkerPoolOptions({.workers = {"host:1"},
                                       .backoff_initial = absl::Seconds(2),
                                       .backoff_max = absl::Seconds(1)})
                .message()
                .find("--worker_backoff_max must be in [2s (the first backoff), 1h], got 1s"),
            absl::string_view::npos);
  EXPECT_FALSE(
      ValidateWorkerPoolOptions({.workers = {"host:1"}, .backoff_max = absl::Hours(2)}).ok());
}

TEST_F(WorkerPoolTest, FindsWorkersAndRoutesByPrefix) {
  std::unique_ptr<worker::WorkerServer> a = StartWorker("tiny");
  std::unique_ptr<worker::WorkerServer> b = StartWorker("tiny");
  ASSERT_TRUE(a && b);
  absl::StatusOr<std::unique_ptr<WorkerPool>> pool =
      WorkerPool::Start(FastOptions({Address(*a), Address(*b)}));
  ASSERT_TRUE(pool.ok()) << pool.status();
  ASSERT_TRUE(WaitFor(**pool, [](const std::vector<WorkerStatus>& workers) {
    return workers.size() == 2 && workers[0].ready && workers[1].ready;
  }));
  EXPECT_TRUE((*pool)->AnyReady());
  EXPECT_EQ((*pool)->Workers()[0].model_info->model_name(), "tiny");

  const absl::StatusOr<RoutedWorker> unknown = RouteTokens(**pool, "other-model", {1, 2, 3}, "");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(unknown.status().message().find("known models: tiny"), absl::string_view::npos);

  // Serve a 48-token prompt on worker b: its three blocks get cached there.
  std::vector<int32_t> prompt;
  for (int i = 0; i < 48; ++i) prompt.push_back(10 + i);
  {
    auto stub = worker::v1::Worker::NewStub(
        grpc::CreateChannel(Address(*b), grpc::InsecureChannelCredentials()));
    worker::v1::GenerateRequest request;
    request.set_request_id("warm-b");
    request.mutable_prompt_token_ids()->Add(prompt.begin(), prompt.end());
    request.set_max_tokens(1);
    grpc::ClientContext context;
    auto reader = stub->Generate(&context, request);
    worker::v1::GenerateResponse response;
    while (reader->Read(&response)) {
    }
    ASSERT_TRUE(reader->Finish().ok());
  }
  ASSERT_TRUE(WaitFor(**pool, [&](const std::vector<WorkerStatus>& workers) {
    for (const WorkerStatus& w : workers) {
      if (w.address == Address(*b) && w.cached_blocks >= 3) return true;
    }
    return false;
  }));
  // A prompt sharing that prefix goes to b, whatever order the policy would otherwise pick.
  std::vector<int32_t> follow_up = prompt;
  follow_up.push_back(7);
  for (int i = 0; i < 4; ++i) {
    const absl::StatusOr<RoutedWorker> routed = RouteTokens(**pool, "tiny", follow_up, "");
    ASSERT_TRUE(routed.ok()) << routed.status();
    EXPECT_EQ(routed->address, Address(*b));
    EXPECT_EQ(routed->decision.reason, "prefix_hit");
  }
  // A different tenant's salt changes the hashes: no hit.
  const absl::StatusOr<RoutedWorker> salted = RouteTokens(**pool, "tiny", follow_up, "tenant-x");
  ASSERT_TRUE(salted.ok());
  EXPECT_EQ(salted->decision.reason, "prefix_miss");
  // Excluding b (a failed attempt) leaves a.
  const absl::StatusOr<RoutedWorker> retry = RouteTokens(**pool, "", follow_up, "", {Address(*b)});
  ASSERT_TRUE(retry.ok());
  EXPECT_EQ(retry->address, Address(*a));
  // A request's attempts hash its prompt once: the second Route reads what the first computed.
  PromptRoutingHashes hashes(follow_up, "");
  ASSERT_TRUE((*pool)->Route("tiny", hashes, {}).ok());
  ASSERT_TRUE((*pool)->Route("tiny", hashes, {Address(*b)}).ok());
  EXPECT_EQ(hashes.hash_passes(), 1);
}

TEST_F(WorkerPoolTest, RoutingFollowsEveryStateChange) {
  std::unique_ptr<worker::WorkerServer> a = StartWorker("tiny");
  ASSERT_TRUE(a);
  WorkerPoolOptions options = FastOptions({Address(*a)});
  // Long enough that the worker cannot come back between ReportFailure and the Route after it.
  options.backoff_initial = absl::Seconds(1);
  options.backoff_max = absl::Seconds(2);
  absl::StatusOr<std::unique_ptr<WorkerPool>> pool = WorkerPool::Start(options);
  ASSERT_TRUE(pool.ok()) << pool.status();
  ASSERT_TRUE(WaitFor(**pool, [](const std::vector<WorkerStatus>& workers) {
    return workers.size() == 1 && workers[0].ready;
  }));
  EXPECT_TRUE(RouteTokens(**pool, "tiny", {1, 2, 3}, "").ok());
  // A failure leaves the rotation at once: the snapshot Route reads is published with it.
  (*pool)->ReportFailure(Address(*a), "reset");
  EXPECT_EQ(RouteTokens(**pool, "tiny", {1, 2, 3}, "").status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_FALSE((*pool)->AnyReady());
  // A probe and the first load report bring it back.
  ASSERT_TRUE(WaitFor(**pool, [](const std::vector<WorkerStatus>& workers) {
    return workers.size() == 1 && workers[0].ready;
  }));
  EXPECT_TRUE(RouteTokens(**pool, "tiny", {1, 2, 3}, "").ok());
  EXPECT_TRUE((*pool)->AnyReady());
}

// A call the test registers with the pool as if it were open to a worker.
class IdleCall final : public WatchedCall {
 public:
  void Abort(const absl::Status&) override {}
};

// A call the test registers with the pool; records its abort.
class RecordingCall final : public WatchedCall {
 public:
  explicit RecordingCall(const common::Clock* clock = nullptr) : WatchedCall(clock) {}
  void Abort(const absl::Status& reason) override {
    reason_ = reason;
    aborted_.Notify();
  }
  bool WaitAborted(absl::Duration patience) {
    return aborted_.WaitForNotificationWithTimeout(patience);
  }
  bool aborted() const { return aborted_.HasBeenNotified(); }
  // Set before aborted() reads true.
  const absl::Status& reason() const { return reason_; }

 private:
  absl::Notification aborted_;
  absl::Status reason_;
};

TEST_F(WorkerPoolTest, SpreadsABurstAndCountsItsOwnCallsAsLoad) {
  std::unique_ptr<worker::WorkerServer> a = StartWorker("tiny");
  std::unique_ptr<worker::WorkerServer> b = StartWorker("tiny");
  ASSERT_TRUE(a && b);
  WorkerPoolOptions options = FastOptions({Address(*a), Address(*b)});
  options.routing.policy = RoutingPolicy::kLeastLoad;
  absl::StatusOr<std::unique_ptr<WorkerPool>> pool = WorkerPool::Start(options);
  ASSERT_TRUE(pool.ok()) << pool.status();
  ASSERT_TRUE(WaitFor(**pool, [](const std::vector<WorkerStatus>& workers) {
    return workers.size() == 2 && workers[0].ready && workers[1].ready;
  }));
  // Both idle: a burst routed before any load report alternates between them.
  absl::flat_hash_map<std::string, int> picks;
  for (int i = 0; i < 6; ++i) {
    absl::StatusOr<RoutedWorker> routed = RouteTokens(**pool, "tiny", {1, 2, 3}, "");
    ASSERT_TRUE(routed.ok()) << routed.status();
    ++picks[routed->address];
  }
  EXPECT_EQ(picks[Address(*a)], 3);
  EXPECT_EQ(picks[Address(*b)], 3);
  // Calls this gateway has open to a count as its load until they end.
  IdleCall first, second;
  (*pool)->Watch(Address(*a), &first);
  (*pool)->Watch(Address(*a), &second);
  for (int i = 0; i < 4; ++i) {
    absl::StatusOr<RoutedWorker> routed = RouteTokens(**pool, "tiny", {1, 2, 3}, "");
    ASSERT_TRUE(routed.ok()) << routed.status();
    EXPECT_EQ(routed->address, Address(*b));
  }
  (*pool)->Unwatch(&first);
  (*pool)->Unwatch(&second);
  picks.clear();
  for (int i = 0; i < 4; ++i) ++picks[RouteTokens(**pool, "tiny", {1, 2, 3}, "")->address];
  EXPECT_EQ(picks[Address(*a)], 2);
}

TEST_F(WorkerPoolTest, DrainingAndDeadWorkersLeaveTheRotation) {
  std::unique_ptr<worker::WorkerServer> a = StartWorker("tiny");
  std::unique_ptr<worker::WorkerServer> b = StartWorker("tiny");
  ASSERT_TRUE(a && b);
  const std::string address_a = Address(*a), address_b = Address(*b);
  WorkerPoolOptions options = FastOptions({address_a, address_b});
  // Long enough that b cannot come back between ReportFailure and the Route right after it.
  options.backoff_initial = absl::Seconds(1);
  options.backoff_max = absl::Seconds(2);
  absl::StatusOr<std::unique_ptr<WorkerPool>> pool = WorkerPool::Start(options);
  ASSERT_TRUE(pool.ok());
  ASSERT_TRUE(WaitFor(**pool, [](const std::vector<WorkerStatus>& workers) {
    return workers.size() == 2 && workers[0].ready && workers[1].ready;
  }));
  a->Drain();
  a.reset();
  ASSERT_TRUE(WaitFor(**pool, [&](const std::vector<WorkerStatus>& workers) {
    for (const WorkerStatus& w : workers) {
      if (w.address == address_a) return !w.ready && !w.last_error.empty();
    }
    return false;
  }));
  for (int i = 0; i < 4; ++i) {
    const absl::StatusOr<RoutedWorker> routed = RouteTokens(**pool, "tiny", {1, 2, 3}, "");
    ASSERT_TRUE(routed.ok());
    EXPECT_EQ(routed->address, address_b);
  }
  (*pool)->ReportFailure(address_b, "connection reset before the first token");
  const absl::StatusOr<RoutedWorker> none = RouteTokens(**pool, "tiny", {1, 2, 3}, "");
  EXPECT_EQ(none.status().code(), absl::StatusCode::kUnavailable);
  // Probes bring b back.
  EXPECT_TRUE(WaitFor(**pool, [&](const std::vector<WorkerStatus>& workers) {
    for (const WorkerStatus& w : workers) {
      if (w.address == address_b) return w.ready;
    }
    return false;
  }));
}

TEST_F(WorkerPoolTest, RoutingAndProbesGoOnWhileTheResolverIsSilent) {
  std::unique_ptr<worker::WorkerServer> a = StartWorker("tiny");
  ASSERT_TRUE(a);
  auto resolver = std::make_shared<::llmserve::testing::FakeHostResolver>();
  WorkerPoolOptions options = FastOptions({Address(*a)});
  options.backoff_initial = absl::Seconds(1);
  options.backoff_max = absl::Seconds(2);
  options.worker_dns = {"slow.invalid:1"};
  options.dns_refresh = absl::Milliseconds(50);
  options.resolver = resolver;
  absl::StatusOr<std::unique_ptr<WorkerPool>> pool = WorkerPool::Start(options);
  ASSERT_TRUE(pool.ok()) << pool.status();
  // The first answer comes at once (no addresses); the next lookup is never answered, as with a
  // DNS server that drops packets.
  ASSERT_TRUE(WaitFor(**pool, [&](const std::vector<WorkerStatus>&) {
    return resolver->lookups("slow.invalid") >= 1;
  }));
  resolver->SetSilent("slow.invalid", true);
  ASSERT_TRUE(
      WaitFor(**pool, [&](const std::vector<WorkerStatus>&) { return resolver->held() == 1; }));
  ASSERT_TRUE(WaitFor(**pool, [&](const std::vector<WorkerStatus>& workers) {
    for (const WorkerStatus& w : workers) {
      if (w.address == Address(*a)) return w.ready;
    }
    return false;
  }));
  // While it is silent, routing answers...
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(RouteTokens(**pool, "tiny", {1, 2, 3}, "").ok());
  // ... and the monitor still probes: a worker marked down comes back.
  (*pool)->ReportFailure(Address(*a), "reset");
  EXPECT_EQ(RouteTokens(**pool, "tiny", {1, 2, 3}, "").status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_TRUE(WaitFor(**pool, [&](const std::vector<WorkerStatus>& workers) {
    for (const WorkerStatus& w : workers) {
      if (w.address == Address(*a)) return w.ready;
    }
    return false;
  }));
  // One lookup of the name at a time: the unanswered one is not repeated on top of itself.
  EXPECT_EQ(resolver->lookups("slow.invalid"), 2);
  EXPECT_EQ(resolver->held(), 1);
  // The pool goes without waiting for the answer; an answer after that reaches nothing.
  pool->reset();
  resolver->AnswerHeld();
}

// A TCP port that accepts connections (the kernel completes them into the listen backlog) and
// never answers: a worker whose process hangs, or a host behind a firewall that drops replies.
class BlackholedWorker {
 public:
  BlackholedWorker() : socket_(::llmserve::testing::BindLoopback(SOCK_STREAM)) {
    if (socket_.fd < 0) ADD_FAILURE() << "cannot listen on a loopback port";
  }
  ~BlackholedWorker() {
    if (socket_.fd >= 0) close(socket_.fd);
  }
  std::string address() const { return absl::StrCat("127.0.0.1:", socket_.port); }

 private:
  const ::llmserve::testing::LoopbackSocket socket_;
};

// Probes of unresponsive workers run side by side and wait for nothing: with 20 of them listed
// beside a healthy worker and a probe deadline of a minute, the healthy worker becomes ready, is
// routed to, its calls are still watched, a worker that DNS adds later is found, and the pool
// stops, all before any probe of the blackholed workers has ended (one at a time, they would take
// 20 minutes).
TEST_F(WorkerPoolTest, BlackholedWorkersDelayNothingElse) {
  std::unique_ptr<worker::WorkerServer> healthy = StartWorker("tiny");
  ASSERT_TRUE(healthy);
  std::vector<std::unique_ptr<BlackholedWorker>> blackholed;
  std::vector<std::string> addresses;
  for (int i = 0; i < 20; ++i) {
    blackholed.push_back(std::make_unique<BlackholedWorker>());
    addresses.push_back(blackholed.back()->address());
  }
  addresses.push_back(Address(*healthy));
  auto resolver = std::make_shared<::llmserve::testing::FakeHostResolver>();
  WorkerPoolOptions options = FastOptions(addresses);
  options.probe_timeout = absl::Minutes(1);
  options.stream_idle_timeout = absl::Milliseconds(300);
  options.worker_dns = {"later.test:1"};
  options.dns_refresh = absl::Milliseconds(50);
  options.resolver = resolver;
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<WorkerPool>> pool = WorkerPool::Start(options);
  ASSERT_TRUE(pool.ok()) << pool.status();
  const auto ready = [&](const std::string& address) {
    return [address](const std::vector<WorkerStatus>& workers) {
      for (const WorkerStatus& w : workers) {
        if (w.address == address) return w.ready;
      }
      return false;
    };
  };
  // Nothing about a blackholed worker is known until its probe ends.
  const absl::flat_hash_set<std::string> blackholed_addresses(addresses.begin(),
                                                              addresses.end() - 1);
  const auto none_judged = [&] {
    int unjudged = 0;
    for (const WorkerStatus& w : (*pool)->Workers()) {
      unjudged += blackholed_addresses.contains(w.address) && !w.ready && w.last_error.empty();
    }
    return unjudged == 20;
  };
  ASSERT_TRUE(WaitFor(**pool, ready(Address(*healthy))));
  EXPECT_TRUE(none_judged());
  const absl::StatusOr<RoutedWorker> routed = RouteTokens(**pool, "tiny", {1, 2, 3}, "");
  ASSERT_TRUE(routed.ok()) << routed.status();
  EXPECT_EQ(routed->address, Address(*healthy));

  // The monitor's other rounds go on: a call silent past --stream_idle_timeout is aborted...
  RecordingCall call;
  (*pool)->Watch(Address(*healthy), &call);
  const bool aborted = call.WaitAborted(absl::Seconds(20));
  if (!aborted) (*pool)->Unwatch(&call);
  ASSERT_TRUE(aborted);
  EXPECT_EQ(call.reason().code(), absl::StatusCode::kUnavailable);
  // ... and a worker that DNS adds later is probed and routed to.
  std::unique_ptr<worker::WorkerServer> later = StartWorker("later");
  ASSERT_TRUE(later);
  resolver->SetAnswer("later.test", std::vector<std::string>{Address(*later)});
  ASSERT_TRUE(WaitFor(**pool, ready(Address(*later))));
  EXPECT_TRUE(RouteTokens(**pool, "later", {1, 2, 3}, "").ok());
  EXPECT_TRUE(none_judged());
  // The pool stops without waiting for the blackholed workers' probes.
  pool->reset();
  EXPECT_LT(absl::Now() - start, options.probe_timeout / 2);
}

// LoRA adapter calls through the pool reach the worker, and routing follows a change at once,
// before the worker's next report says it; the worker's refusals come back as they are; a call
// in flight does not hold up the pool's destruction.
TEST_F(WorkerPoolTest, LoraAdapterCallsChangeRoutingAtOnce) {
  auto files = worker::ModelFiles::Open(dir_.path());
  ASSERT_TRUE(files.ok()) << files.status();
  auto config = worker::ParseModelConfig((*files)->config_json(), "");
  ASSERT_TRUE(config.ok()) << config.status();
  const std::string adapter = dir_.path() + "/adapter";
  worker::testing::WriteAdapter(*config, {{"q_proj", "v_proj"}, 8, 16, false, 5}, adapter);
  std::unique_ptr<worker::WorkerServer> server = StartWorker("tiny", /*max_loras=*/2);
  ASSERT_TRUE(server);
  BlackholedWorker blackholed;
  WorkerPoolOptions options = FastOptions({Address(*server), blackholed.address()});
  // Reports far apart: a change that routing sees came through the call, not a report.
  options.load_interval = absl::Seconds(20);
  options.probe_timeout = absl::Minutes(1);
  absl::StatusOr<std::unique_ptr<WorkerPool>> pool = WorkerPool::Start(options);
  ASSERT_TRUE(pool.ok()) << pool.status();
  ASSERT_TRUE(WaitFor(**pool, [&](const std::vector<WorkerStatus>& workers) {
    for (const WorkerStatus& w : workers) {
      if (w.address == Address(*server)) return w.ready;
    }
    return false;
  }));
  const auto route_sql = [&] {
    PromptRoutingHashes prompt(std::vector<int32_t>{1, 2, 3}, "", "sql");
    return (*pool)->Route("tiny", prompt, {});
  };
  EXPECT_EQ(route_sql().status().code(), absl::StatusCode::kUnavailable);
  const auto call = [&](bool load, const std::string& path) {
    absl::Notification done;
    absl::Status result;
    auto on_done = [&](absl::Status status) {
      result = std::move(status);
      done.Notify();
    };
    if (load) {
      worker::v1::LoadLoraAdapterRequest request;
      request.set_lora_name("sql");
      request.set_lora_path(path);
      (*pool)->LoadLoraAdapter(Address(*server), request, absl::Now() + absl::Seconds(30), on_done);
    } else {
      (*pool)->UnloadLoraAdapter(Address(*server), "sql", absl::Now() + absl::Seconds(30), on_done);
    }
    EXPECT_TRUE(done.WaitForNotificationWithTimeout(kPatience));
    return result;
  };
  const absl::Status missing = call(true, dir_.path() + "/no-such-adapter");
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound) << missing;
  ASSERT_TRUE(call(true, adapter).ok());
  const absl::StatusOr<RoutedWorker> routed = route_sql();
  ASSERT_TRUE(routed.ok()) << routed.status();
  EXPECT_EQ(routed->address, Address(*server));
  for (const WorkerStatus& w : (*pool)->Workers()) {
    if (w.address == Address(*server)) {
      EXPECT_EQ(w.lora_adapters, std::vector<std::string>{"sql"});
    }
  }
  EXPECT_EQ(call(true, adapter).code(), absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(call(false, "").ok());
  EXPECT_EQ(route_sql().status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(call(false, "").code(), absl::StatusCode::kNotFound);
  // An unknown address answers at once.
  absl::Status unknown;
  (*pool)->UnloadLoraAdapter("127.0.0.1:1", "sql", absl::InfiniteFuture(),
                             [&](absl::Status status) { unknown = status; });
  EXPECT_EQ(unknown.code(), absl::StatusCode::kUnavailable);
  // A call to a worker that never answers is cancelled when the pool goes.
  absl::Notification cancelled;
  absl::Status blackholed_status;
  worker::v1::LoadLoraAdapterRequest request;
  request.set_lora_name("x");
  request.set_lora_path(adapter);
  (*pool)->LoadLoraAdapter(blackholed.address(), request, absl::Now() + absl::Minutes(5),
                           [&](absl::Status status) {
                             blackholed_status = status;
                             cancelled.Notify();
                           });
  const absl::Time start = absl::Now();
  pool->reset();
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  ASSERT_TRUE(cancelled.HasBeenNotified());
  EXPECT_EQ(blackholed_status.code(), absl::StatusCode::kCancelled) << blackholed_status;
}

// With a worker reporting once a minute, its heartbeat window is 3 minutes of the pool's clock:
// the stream is cut, and the calls to the worker aborted, when that clock passes it and not
// before, whatever the real time.
TEST_F(WorkerPoolTest, HeartbeatsAndSilentCallsAreJudgedByThePoolsClock) {
  std::unique_ptr<worker::WorkerServer> a = StartWorker("tiny");
  ASSERT_TRUE(a);
  ::llmserve::testing::SimulatedClock clock;
  WorkerPoolOptions options = FastOptions({Address(*a)});
  options.clock = &clock;
  options.load_interval = absl::Seconds(60);
  options.stream_idle_timeout = absl::ZeroDuration();
  absl::StatusOr<std::unique_ptr<WorkerPool>> pool = WorkerPool::Start(options);
  ASSERT_TRUE(pool.ok()) << pool.status();
  const auto ready = [&](const std::vector<WorkerStatus>& workers) {
    return workers.size() == 1 && workers[0].ready;
  };
  ASSERT_TRUE(WaitFor(**pool, ready));
  RecordingCall call(&clock);
  (*pool)->Watch(Address(*a), &call);
  absl::Cleanup unwatch = [&] {
    if (!call.aborted()) (*pool)->Unwatch(&call);
  };
  // Just inside the window: however many monitor rounds pass (a negative can only be shown by
  // letting some pass), nothing is cut.
  clock.Advance(absl::Seconds(179));
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_FALSE(call.aborted());
  EXPECT_TRUE(ready((*pool)->Workers()));
  // Past it: the worker is treated as gone, and so is its call.
  clock.Advance(absl::Seconds(2));
  ASSERT_TRUE(call.WaitAborted(kPatience));
  EXPECT_EQ(call.reason().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(call.reason().message().find("stopped responding"), std::string::npos) << call.reason();
  ASSERT_TRUE(WaitFor(**pool, [](const std::vector<WorkerStatus>& workers) {
    return workers.size() == 1 && !workers[0].ready && !workers[0].last_error.empty();
  }));
  // Its next probe is due once the pool's clock passes the backoff: then it is back.
  clock.Advance(absl::Seconds(1));
  EXPECT_TRUE(WaitFor(**pool, ready));
}

TEST_F(WorkerPoolTest, DiscoversWorkersByDns) {
  std::unique_ptr<worker::WorkerServer> a = StartWorker("tiny");
  ASSERT_TRUE(a);
  WorkerPoolOptions options = FastOptions({});
  options.worker_dns = {absl::StrCat("localhost:", a->port())};
  absl::StatusOr<std::unique_ptr<WorkerPool>> pool = WorkerPool::Start(options);
  ASSERT_TRUE(pool.ok()) << pool.status();
  // localhost may also resolve to ::1, where nothing listens: that entry stays down.
  EXPECT_TRUE(WaitFor(**pool, [&](const std::vector<WorkerStatus>& workers) {
    for (const WorkerStatus& w : workers) {
      if (w.address == Address(*a) && w.ready) return true;
    }
    return false;
  }));
}

TEST_F(WorkerPoolTest, DiscoversEveryGroupOfSeveralDnsNames) {
  // One name per worker group, as the Helm chart passes one headless Service per group.
  std::unique_ptr<worker::WorkerServer> a = StartWorker("tiny");
  std::unique_ptr<worker::WorkerServer> b = StartWorker("other");
  ASSERT_TRUE(a && b);
  WorkerPoolOptions options = FastOptions({});
  options.worker_dns = {absl::StrCat("localhost:", a->port()),
                        absl::StrCat("127.0.0.1:", b->port())};
  absl::StatusOr<std::unique_ptr<WorkerPool>> pool = WorkerPool::Start(options);
  ASSERT_TRUE(pool.ok()) << pool.status();
  EXPECT_TRUE(WaitFor(**pool, [&](const std::vector<WorkerStatus>& workers) {
    int ready = 0;
    for (const WorkerStatus& w : workers) {
      ready += (w.address == Address(*a) || w.address == Address(*b)) && w.ready;
    }
    return ready == 2;
  }));
  EXPECT_TRUE(RouteTokens(**pool, "other", {1, 2, 3}, "").ok());
  EXPECT_TRUE(RouteTokens(**pool, "tiny", {1, 2, 3}, "").ok());
}

}  // namespace
}  // namespace llmserve::gateway
