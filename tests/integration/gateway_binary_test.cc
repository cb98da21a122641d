// The whole stack as users run it: llmserve-worker processes and llmserve-gateway on loopback
// ports; a worker killed in the middle of a load, the gateway drained with streams open on both
// APIs, and a worker restarted under load as a Kubernetes rolling update does.

#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "llmserve/v1/inference.grpc.pb.h"
#include "tests/testing/build_paths.h"
#include "tests/testing/http_get.h"
#include "tests/testing/sanitizers.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_model.h"

namespace llmserve {
namespace {

using ::llmserve::testing::HttpPostRequest;
using ::llmserve::testing::HttpStatus;
using ::llmserve::testing::kSanitizerSlowdown;
using ::llmserve::testing::NumberAfter;
using ::llmserve::testing::Subprocess;

constexpr absl::Duration kPatience = absl::Seconds(60);

// Stream lengths below are for an optimized build; a sanitizer build decodes several times slower
// and streams 1/kSanitizerSlowdown of them, so that they take about as long there.
constexpr int Tokens(int optimized_build_tokens) {
  return optimized_build_tokens / kSanitizerSlowdown;
}

// Streams `max_tokens` tokens (EOS ignored) for `text` over GenerateStream, adding 1 to `started`
// when the first token arrives; returns the call's status, and the tokens received in `*tokens`
// when given.
grpc::Status StreamStory(v1::Inference::Stub& stub, const std::string& text, int max_tokens,
                         std::atomic<int>& started, int* tokens = nullptr) {
  v1::GenerateRequest request;
  request.set_text(text);
  request.mutable_stopping()->set_max_tokens(max_tokens);
  request.mutable_stopping()->set_ignore_eos(true);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kPatience));
  auto reader = stub.GenerateStream(&context, request);
  v1::GenerateStreamResponse message;
  int received = 0;
  while (reader->Read(&message)) {
    if (received == 0 && message.tokens_size() > 0) ++started;
    received += message.tokens_size();
  }
  if (tokens != nullptr) *tokens = received;
  return reader->Finish();
}

class GatewayBinaryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The slow variant: requests take long enough to be in flight when a worker dies.
    ASSERT_TRUE(::llmserve::testing::WriteTinyModel(dir_.path(), 9, /*slow=*/true).ok());
  }

  std::unique_ptr<Subprocess> StartWorker(int* port) {
    auto worker = std::make_unique<Subprocess>(
        std::vector<std::string>{::llmserve::testing::WorkerBinary(), "--model=" + dir_.path(),
                                 "--served-model-name=tiny", "--host=127.0.0.1", "--port=0",
                                 "--metrics-port=-1", "--threads=1", "--kv-cache-memory=64MiB"});
    EXPECT_TRUE(worker->WaitForOutput("no metrics server", kPatience)) << worker->output();
    *port = NumberAfter(worker->output(), " on 127.0.0.1:");
    return worker;
  }

  // A gateway on loopback ports with `flags` added, once it has a ready worker.
  std::unique_ptr<Subprocess> StartGateway(const std::vector<std::string>& flags, int* grpc_port,
                                           int* http_port) {
    std::vector<std::string> argv = {::llmserve::testing::GatewayBinary(), "--host=127.0.0.1",
                                     "--grpc-port=0", "--http-port=0"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    auto gateway = std::make_unique<Subprocess>(argv);
    EXPECT_TRUE(gateway->WaitForOutput("gateway: ready", kPatience)) << gateway->output();
    *grpc_port = NumberAfter(gateway->output(), "gRPC on 127.0.0.1:");
    *http_port = NumberAfter(gateway->output(), "HTTP on http://127.0.0.1:");
    return gateway;
  }

  // Two workers behind a round-robin gateway (ports -1 when something did not start).
  struct TwoWorkerStack {
    std::unique_ptr<Subprocess> worker_a, worker_b, gateway;
    int port_a = -1, port_b = -1, grpc_port = -1, http_port = -1;
  };
  TwoWorkerStack StartTwoWorkerStack(const std::vector<std::string>& gateway_flags = {}) {
    TwoWorkerStack stack;
    stack.worker_a = StartWorker(&stack.port_a);
    stack.worker_b = StartWorker(&stack.port_b);
    if (stack.port_a <= 0 || stack.port_b <= 0) return stack;
    std::vector<std::string> flags = {
        "--routing=round_robin",
        absl::StrCat("--workers=127.0.0.1:", stack.port_a, ",127.0.0.1:", stack.port_b)};
    flags.insert(flags.end(), gateway_flags.begin(), gateway_flags.end());
    stack.gateway = StartGateway(flags, &stack.grpc_port, &stack.http_port);
    return stack;
  }

  // Streams on both workers, then worker A stops (SIGSTOP: its connections stay open and it
  // answers nothing) and short requests follow. Expects every stream to end within `bound` of the
  // stop: on A with UNAVAILABLE naming `reason`, on B normally; and every short request to
  // succeed (those routed to A before the gateway noticed are retried on B).
  void StopAWorkerUnderLoad(TwoWorkerStack& stack, const std::string& reason,
                            absl::Duration bound) {
    auto stub = v1::Inference::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", stack.grpc_port), grpc::InsecureChannelCredentials()));
    constexpr int kStreams = 6;
    std::atomic<int> ok{0}, failed_clearly{0}, started{0};
    std::vector<std::thread> clients;
    for (int i = 0; i < kStreams; ++i) {
      clients.emplace_back([&, i] {
        const grpc::Status status =
            StreamStory(*stub, absl::StrCat("story number ", i), Tokens(900), started);
        if (status.ok()) {
          ++ok;
        } else if (status.error_code() == grpc::StatusCode::UNAVAILABLE &&
                   status.error_message().find(reason) != std::string::npos) {
          ++failed_clearly;
        } else {
          ADD_FAILURE() << "stream " << i << ": " << status.error_code() << " "
                        << status.error_message();
        }
      });
    }
    const absl::Time deadline = absl::Now() + kPatience;
    while (started.load() < kStreams && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    ASSERT_EQ(started.load(), kStreams);
    stack.worker_a->Signal(SIGSTOP);
    const absl::Time stopped = absl::Now();
    std::vector<std::thread> late;
    std::atomic<int> late_ok{0};
    for (int i = 0; i < 4; ++i) {
      late.emplace_back([&, i] {
        v1::GenerateRequest request;
        request.set_text(absl::StrCat("after ", i));
        request.mutable_stopping()->set_max_tokens(2);
        grpc::ClientContext context;
        context.set_deadline(absl::ToChronoTime(absl::Now() + kPatience));
        v1::GenerateResponse response;
        const grpc::Status status = stub->Generate(&context, request, &response);
        EXPECT_TRUE(status.ok()) << status.error_code() << " " << status.error_message();
        late_ok += status.ok();
      });
    }
    for (std::thread& client : clients) client.join();
    const absl::Duration streams_ended = absl::Now() - stopped;
    for (std::thread& client : late) client.join();
    stack.worker_a->Signal(SIGCONT);
    EXPECT_EQ(ok + failed_clearly, kStreams);
    EXPECT_GT(failed_clearly, 0);  // round robin put some streams on the stopped worker
    EXPECT_GT(ok, 0);
    EXPECT_LT(streams_ended, bound);
    EXPECT_EQ(late_ok, 4);
    stack.gateway->Signal(SIGTERM);
    EXPECT_EQ(stack.gateway->WaitForExit(kPatience), 0) << stack.gateway->output();
  }

  ::llmserve::testing::ScopedTempDir dir_{"gateway_binary_test"};
};

TEST_F(GatewayBinaryTest, AWorkerKilledMidLoadNeverHangsAClient) {
  TwoWorkerStack stack = StartTwoWorkerStack();
  ASSERT_GT(stack.grpc_port, 0);
  std::unique_ptr<Subprocess>& worker_a = stack.worker_a;
  std::unique_ptr<Subprocess>& worker_b = stack.worker_b;
  std::unique_ptr<Subprocess>& gateway = stack.gateway;
  const int grpc_port = stack.grpc_port, http_port = stack.http_port;
  EXPECT_NE(::llmserve::testing::HttpGet(http_port, "/readyz").find("ready"), std::string::npos);

  auto stub = v1::Inference::NewStub(grpc::CreateChannel(absl::StrCat("127.0.0.1:", grpc_port),
                                                         grpc::InsecureChannelCredentials()));
  constexpr int kStreams = 8;
  std::atomic<int> ok{0}, failed_clearly{0}, other{0}, started{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < kStreams; ++i) {
    clients.emplace_back([&, i] {
      const grpc::Status status =
          StreamStory(*stub, absl::StrCat("story number ", i), Tokens(300), started);
      if (status.ok()) {
        ++ok;
      } else if (status.error_code() == grpc::StatusCode::UNAVAILABLE &&
                 status.error_message().find("failed after") != std::string::npos) {
        ++failed_clearly;
      } else {
        ++other;
        ADD_FAILURE() << "stream " << i << ": " << status.error_message();
      }
    });
  }
  const absl::Time deadline = absl::Now() + kPatience;
  while (started.load() < kStreams && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  worker_a->Signal(SIGKILL);
  for (std::thread& client : clients) client.join();
  EXPECT_EQ(ok + failed_clearly + other, kStreams);
  EXPECT_EQ(other, 0);
  EXPECT_GT(failed_clearly, 0);  // round robin put some on the killed worker
  EXPECT_GT(ok, 0);

  // New requests find the surviving worker (retried if routed to the dead one first).
  for (int i = 0; i < 4; ++i) {
    v1::GenerateRequest request;
    request.set_text("after");
    request.mutable_stopping()->set_max_tokens(2);
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + kPatience));
    v1::GenerateResponse response;
    const grpc::Status status = stub->Generate(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
  }

  gateway->Signal(SIGTERM);
  EXPECT_EQ(gateway->WaitForExit(kPatience), 0) << gateway->output();
  worker_b->Signal(SIGTERM);
  EXPECT_EQ(worker_b->WaitForExit(kPatience), 0);
}

// A hung worker keeps its TCP connections open: without a watchdog its streams would wait for the
// 10-minute request timeout. Once it has been silent past its heartbeat (5 s: no load report,
// no token), its streams fail and what had no token yet goes elsewhere.
TEST_F(GatewayBinaryTest, StreamsOnAStoppedWorkerFailOnceItIsSilentPastItsHeartbeat) {
  TwoWorkerStack stack = StartTwoWorkerStack();
  ASSERT_GT(stack.grpc_port, 0);
  StopAWorkerUnderLoad(stack, "stopped responding", absl::Seconds(30));
}

// --stream_idle_timeout, shorter than the heartbeat window (5 s) here, ends them sooner. (4 s in
// a sanitizer build, where the running worker's own tokens can be 2 s apart on a loaded machine.)
TEST_F(GatewayBinaryTest, StreamIdleTimeoutEndsStreamsOfAStoppedWorker) {
  const int timeout_s = kSanitizerSlowdown > 1 ? 4 : 2;
  TwoWorkerStack stack =
      StartTwoWorkerStack({absl::StrCat("--stream-idle-timeout=", timeout_s, "s")});
  ASSERT_GT(stack.grpc_port, 0);
  StopAWorkerUnderLoad(stack, absl::StrCat("--stream_idle_timeout ", timeout_s, "s"),
                       absl::Seconds(30));
}

TEST_F(GatewayBinaryTest, SigtermDrainsStreamsOnBothApisWhileReadinessFails) {
  int worker_port = -1;
  std::unique_ptr<Subprocess> worker = StartWorker(&worker_port);
  ASSERT_GT(worker_port, 0);
  int grpc_port = -1, http_port = -1;
  std::unique_ptr<Subprocess> gateway =
      StartGateway({"--drain-timeout=60s", absl::StrCat("--workers=127.0.0.1:", worker_port)},
                   &grpc_port, &http_port);
  ASSERT_GT(grpc_port, 0);
  ASSERT_GT(http_port, 0);

  // Long enough (about 3 ms a token) to be running when SIGTERM comes, short enough to finish.
  constexpr int kMaxTokens = Tokens(400);
  constexpr int kStreamsPerApi = 3;
  auto stub = v1::Inference::NewStub(grpc::CreateChannel(absl::StrCat("127.0.0.1:", grpc_port),
                                                         grpc::InsecureChannelCredentials()));
  std::atomic<int> started{0};
  std::vector<int> grpc_tokens(kStreamsPerApi, 0);
  std::vector<grpc::Status> grpc_status(kStreamsPerApi);
  std::vector<std::string> sse(kStreamsPerApi);
  std::vector<std::thread> clients;
  for (int i = 0; i < kStreamsPerApi; ++i) {
    clients.emplace_back([&, i] {
      grpc_status[i] =
          StreamStory(*stub, absl::StrCat("grpc story ", i), kMaxTokens, started, &grpc_tokens[i]);
    });
    clients.emplace_back([&, i] {
      bool counted = false;
      sse[i] = ::llmserve::testing::HttpExchange(
          http_port,
          HttpPostRequest(
              "/v1/completions",
              absl::StrCat(R"({"model": "tiny", "prompt": "http story )", i, R"(", "max_tokens": )",
                           kMaxTokens, R"(, "ignore_eos": true, "stream": true})")),
          60, [&](const std::string& so_far) {
            if (!counted && so_far.find("data: {") != std::string::npos) {
              counted = true;
              ++started;
            }
          });
    });
  }
  const absl::Time deadline = absl::Now() + kPatience;
  while (started.load() < 2 * kStreamsPerApi && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_EQ(started.load(), 2 * kStreamsPerApi);
  gateway->Signal(SIGTERM);
  ASSERT_TRUE(gateway->WaitForOutput("gateway: draining", kPatience)) << gateway->output();

  // While the streams run: not ready (503, not refused), alive, and new work is refused on both
  // APIs with an error that tells the client to go elsewhere.
  const std::string readyz = ::llmserve::testing::HttpExchange(
      http_port, "GET /readyz HTTP/1.0\r\nHost: localhost\r\n\r\n", 10);
  EXPECT_EQ(HttpStatus(readyz), 503) << readyz;
  EXPECT_NE(readyz.find("draining"), std::string::npos) << readyz;
  EXPECT_EQ(HttpStatus(::llmserve::testing::HttpExchange(
                http_port, "GET /healthz HTTP/1.0\r\nHost: localhost\r\n\r\n", 10)),
            200);
  const std::string metrics = ::llmserve::testing::HttpExchange(
      http_port, "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n", 10);
  EXPECT_NE(metrics.find("\nllmserve_gateway_draining 1"), std::string::npos) << metrics;
  const std::string refused = ::llmserve::testing::HttpExchange(
      http_port,
      HttpPostRequest("/v1/completions", R"({"model": "tiny", "prompt": "late", "max_tokens": 2})"),
      10);
  EXPECT_EQ(HttpStatus(refused), 503) << refused;
  {
    v1::GenerateRequest request;
    request.set_text("late");
    request.mutable_stopping()->set_max_tokens(2);
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    v1::GenerateResponse response;
    const grpc::Status status = stub->Generate(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
  }

  for (std::thread& client : clients) client.join();
  for (int i = 0; i < kStreamsPerApi; ++i) {
    EXPECT_TRUE(grpc_status[i].ok())
        << "gRPC stream " << i << ": " << grpc_status[i].error_message();
    EXPECT_EQ(grpc_tokens[i], kMaxTokens) << "gRPC stream " << i;
    EXPECT_EQ(HttpStatus(sse[i]), 200) << sse[i].substr(0, 300);
    EXPECT_NE(sse[i].find(R"("finish_reason":"length")"), std::string::npos)
        << "HTTP stream " << i << " was cut: ..." << sse[i].substr(sse[i].size() - 300);
    EXPECT_NE(sse[i].find("data: [DONE]"), std::string::npos) << "HTTP stream " << i;
  }
  EXPECT_EQ(gateway->WaitForExit(kPatience), 0) << gateway->output();
  EXPECT_NE(gateway->output().find("gateway: drained"), std::string::npos) << gateway->output();
  EXPECT_EQ(gateway->output().find("cancelled"), std::string::npos) << gateway->output();
  worker->Signal(SIGTERM);
  EXPECT_EQ(worker->WaitForExit(kPatience), 0);
}

TEST_F(GatewayBinaryTest, ARollingRestartOfOneWorkerUnderLoadLosesNoRequest) {
  TwoWorkerStack stack = StartTwoWorkerStack();
  ASSERT_GT(stack.grpc_port, 0);
  std::unique_ptr<Subprocess>& worker_a = stack.worker_a;
  std::unique_ptr<Subprocess>& worker_b = stack.worker_b;
  std::unique_ptr<Subprocess>& gateway = stack.gateway;
  const int port_a = stack.port_a, grpc_port = stack.grpc_port;
  auto stub = v1::Inference::NewStub(grpc::CreateChannel(absl::StrCat("127.0.0.1:", grpc_port),
                                                         grpc::InsecureChannelCredentials()));

  // Clients send requests back to back until told to stop; every one must succeed.
  std::atomic<bool> stop{false};
  std::atomic<int> ok{0};
  std::vector<std::string> failures;
  absl::Mutex failures_mu;
  std::vector<std::thread> clients;
  for (int c = 0; c < 4; ++c) {
    clients.emplace_back([&, c] {
      for (int i = 0; !stop.load(); ++i) {
        v1::GenerateRequest request;
        request.set_text(absl::StrCat("client ", c, " request ", i));
        request.mutable_stopping()->set_max_tokens(Tokens(60));
        request.mutable_stopping()->set_ignore_eos(true);
        grpc::ClientContext context;
        context.set_deadline(absl::ToChronoTime(absl::Now() + kPatience));
        v1::GenerateResponse response;
        const grpc::Status status = stub->Generate(&context, request, &response);
        if (status.ok()) {
          ++ok;
        } else {
          absl::MutexLock lock(&failures_mu);
          failures.push_back(status.error_message());
        }
      }
    });
  }
  auto wait_for_ok = [&](int count) {
    const absl::Time deadline = absl::Now() + kPatience;
    while (ok.load() < count && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
    return ok.load() >= count;
  };
  ASSERT_TRUE(wait_for_ok(8));

  // The restart: SIGTERM (the worker drains and exits 0), then a new process on the same address.
  worker_a->Signal(SIGTERM);
  EXPECT_EQ(worker_a->WaitForExit(kPatience), 0) << worker_a->output();
  const int ok_while_down = ok.load();
  ASSERT_TRUE(wait_for_ok(ok_while_down + 8));  // served by b alone meanwhile
  Subprocess replacement({::llmserve::testing::WorkerBinary(), "--model=" + dir_.path(),
                          "--served-model-name=tiny", "--host=127.0.0.1",
                          absl::StrCat("--port=", port_a), "--metrics-port=0", "--threads=1",
                          "--kv-cache-memory=64MiB"});
  ASSERT_TRUE(replacement.WaitForOutput("/metrics", kPatience)) << replacement.output();
  const int replacement_metrics = NumberAfter(replacement.output(), "metrics on http://127.0.0.1:");
  // Round robin sends the replacement its share once the gateway finds it ready again.
  const absl::Time deadline = absl::Now() + kPatience;
  double served_by_replacement = 0;
  while (served_by_replacement < 3 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(100));
    const std::string metrics = ::llmserve::testing::HttpGet(replacement_metrics, "/metrics");
    const size_t at = metrics.find("llmserve_request_success_total{");
    if (at != std::string::npos) {
      served_by_replacement = std::atof(metrics.c_str() + metrics.find("} ", at) + 2);
    }
  }
  stop = true;
  for (std::thread& client : clients) client.join();
  EXPECT_GE(served_by_replacement, 3);
  EXPECT_TRUE(failures.empty()) << failures.size()
                                << " requests lost, the first: " << failures.front();
  EXPECT_GT(ok.load(), ok_while_down);

  gateway->Signal(SIGTERM);
  EXPECT_EQ(gateway->WaitForExit(kPatience), 0) << gateway->output();
  replacement.Signal(SIGTERM);
  EXPECT_EQ(replacement.WaitForExit(kPatience), 0);
  worker_b->Signal(SIGTERM);
  EXPECT_EQ(worker_b->WaitForExit(kPatience), 0);
}

// logit_bias end to end: the gateway carries it to the worker's sampler, where it decides even a
// greedy request; a token id outside the vocabulary is a 400 naming the field and the key.
TEST_F(GatewayBinaryTest, LogitBiasReachesTheWorkersSampler) {
  int worker_port = -1, grpc_port = -1, http_port = -1;
  std::unique_ptr<Subprocess> worker = StartWorker(&worker_port);
  ASSERT_GT(worker_port, 0);
  std::unique_ptr<Subprocess> gateway =
      StartGateway({absl::StrCat("--workers=127.0.0.1:", worker_port)}, &grpc_port, &http_port);
  ASSERT_GT(grpc_port, 0);
  auto stub = v1::Inference::NewStub(grpc::CreateChannel(absl::StrCat("127.0.0.1:", grpc_port),
                                                         grpc::InsecureChannelCredentials()));
  const auto greedy = [&](const std::vector<std::pair<int32_t, float>>& bias) {
    v1::GenerateRequest request;
    request.set_text("bias");
    request.mutable_sampling()->set_temperature(0.0f);
    for (const auto& [token, value] : bias) {
      v1::LogitBias* entry = request.mutable_sampling()->add_logit_bias();
      entry->set_token_id(token);
      entry->set_bias(value);
    }
    request.mutable_stopping()->set_max_tokens(3);
    request.mutable_stopping()->set_ignore_eos(true);
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + kPatience));
    v1::GenerateResponse response;
    const grpc::Status status = stub->Generate(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    std::vector<int32_t> tokens;
    for (const v1::GeneratedToken& token : response.tokens()) tokens.push_back(token.token_id());
    return tokens;
  };
  const std::vector<int32_t> plain = greedy({});
  ASSERT_EQ(plain.size(), 3u);
  const int32_t forced = plain[0] == 7 ? 8 : 7;
  EXPECT_EQ(greedy({{forced, 100.0f}}), std::vector<int32_t>(3, forced));
  EXPECT_NE(greedy({{plain[0], -100.0f}})[0], plain[0]);

  // The same through the OpenAI API, and its errors.
  const std::string http = ::llmserve::testing::HttpExchange(
      http_port,
      HttpPostRequest("/v1/completions",
                      absl::StrCat(R"({"model": "tiny", "prompt": "bias", "max_tokens": 3,
                                       "temperature": 0, "ignore_eos": true,
                                       "logit_bias": {")",
                                   forced, R"(": 100}})")),
      60);
  EXPECT_EQ(HttpStatus(http), 200) << http;
  const std::string too_big = ::llmserve::testing::HttpExchange(
      http_port,
      HttpPostRequest("/v1/completions",
                      R"({"model": "tiny", "prompt": "x", "logit_bias": {"100000000": 5}})"),
      60);
  EXPECT_EQ(HttpStatus(too_big), 400) << too_big;
  EXPECT_NE(too_big.find("logit_bias[100000000]"), std::string::npos) << too_big;
  const std::string best_of = ::llmserve::testing::HttpExchange(
      http_port,
      HttpPostRequest("/v1/completions", R"({"model": "tiny", "prompt": "x", "best_of": 2})"), 60);
  EXPECT_EQ(HttpStatus(best_of), 400) << best_of;
  EXPECT_NE(best_of.find("best_of"), std::string::npos) << best_of;
}

TEST_F(GatewayBinaryTest, HttpHeaderTimeoutFlagClosesASilentConnection) {
  int worker_port = -1, grpc_port = -1, http_port = -1;
  std::unique_ptr<Subprocess> worker = StartWorker(&worker_port);
  ASSERT_GT(worker_port, 0);
  std::unique_ptr<Subprocess> gateway =
      StartGateway({absl::StrCat("--workers=127.0.0.1:", worker_port), "--http_header_timeout=1s"},
                   &grpc_port, &http_port);
  ASSERT_GT(http_port, 0);
  // Headers that never end: the default timeout (10 s) would keep the connection past 8 s.
  const absl::Time start = absl::Now();
  const std::string response = ::llmserve::testing::HttpExchange(
      http_port, "GET /healthz HTTP/1.1\r\nHost: x\r\n", /*timeout_seconds=*/30);
  const absl::Duration open_for = absl::Now() - start;
  EXPECT_GE(open_for, absl::Milliseconds(900));
  EXPECT_LT(open_for, absl::Seconds(8)) << "response: " << response;
  // The gateway still serves.
  EXPECT_NE(::llmserve::testing::HttpGet(http_port, "/healthz"), "");
}

TEST_F(GatewayBinaryTest, BadFlagsFailWithAClearMessage) {
  {
    Subprocess gateway({::llmserve::testing::GatewayBinary(), "--workers=nohost"});
    EXPECT_EQ(gateway.WaitForExit(kPatience), 2);
    EXPECT_NE(gateway.output().find("\"nohost\" is not host:port"), std::string::npos)
        << gateway.output();
  }
  {
    Subprocess gateway({::llmserve::testing::GatewayBinary(), "--workers=a:1", "--routing=random"});
    EXPECT_EQ(gateway.WaitForExit(kPatience), 2);
    EXPECT_NE(gateway.output().find("--routing"), std::string::npos) << gateway.output();
  }
  {
    Subprocess gateway(
        {::llmserve::testing::GatewayBinary(), "--workers=a:1", "--http_idle_timeout=0s"});
    EXPECT_EQ(gateway.WaitForExit(kPatience), 2);
    EXPECT_NE(gateway.output().find("--http_idle_timeout must be in [1s, 24h]"), std::string::npos)
        << gateway.output();
  }
  {
    Subprocess gateway(
        {::llmserve::testing::GatewayBinary(), "--workers=a:1", "--http_header_timeout=1h"});
    EXPECT_EQ(gateway.WaitForExit(kPatience), 2);
    EXPECT_NE(gateway.output().find("--http_header_timeout must be in [1s, 10m]"),
              std::string::npos)
        << gateway.output();
  }
  {
    Subprocess gateway(
        {::llmserve::testing::GatewayBinary(), "--workers=a:1", "--worker_backoff_max=100ms"});
    EXPECT_EQ(gateway.WaitForExit(kPatience), 2);
    EXPECT_NE(gateway.output().find("--worker_backoff_max must be in [500ms (the first backoff), "
                                    "1h], got 100ms"),
              std::string::npos)
        << gateway.output();
  }
  for (const char* entries : {"--max_logprob_entries=0", "--max-logprob-entries=2000000000"}) {
    Subprocess gateway({::llmserve::testing::GatewayBinary(), "--workers=a:1", entries});
    EXPECT_EQ(gateway.WaitForExit(kPatience), 2) << entries;
    EXPECT_NE(gateway.output().find("--max_logprob_entries must be in [1, 1073741824]"),
              std::string::npos)
        << gateway.output();
  }
  {
    Subprocess gateway({::llmserve::testing::GatewayBinary(), "--workers=a:1", "--host=0.0.0.0",
                        "--grpc-port=0", "--http-port=0"});
    EXPECT_EQ(gateway.WaitForExit(kPatience), 1);
    EXPECT_NE(gateway.output().find("--allow_unauthenticated"), std::string::npos)
        << gateway.output();
  }
}

}  // namespace
}  // namespace llmserve
