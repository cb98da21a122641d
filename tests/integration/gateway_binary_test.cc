// The whole stack as users run it: two llmserve-worker processes and llmserve-gateway on
// loopback ports, a worker killed in the middle of a load.

#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "llmserve/v1/inference.grpc.pb.h"
#include "tests/testing/http_get.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_model.h"

namespace llmserve {
namespace {

using ::llmserve::testing::NumberAfter;
using ::llmserve::testing::Subprocess;

constexpr absl::Duration kPatience = absl::Seconds(60);

class GatewayBinaryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The slow variant: requests take long enough to be in flight when a worker dies.
    ASSERT_TRUE(::llmserve::testing::WriteTinyModel(dir_.path(), 9, /*slow=*/true).ok());
  }

  std::unique_ptr<Subprocess> StartWorker(int* port) {
    auto worker = std::make_unique<Subprocess>(
        std::vector<std::string>{LLMSERVE_WORKER_BINARY, "--model=" + dir_.path(),
                                 "--served-model-name=tiny", "--host=127.0.0.1", "--port=0",
                                 "--metrics-port=-1", "--threads=1", "--kv-cache-memory=64MiB"});
    EXPECT_TRUE(worker->WaitForOutput("no metrics server", kPatience)) << worker->output();
    *port = NumberAfter(worker->output(), " on 127.0.0.1:");
    return worker;
  }

  ::llmserve::testing::ScopedTempDir dir_{"gateway_binary_test"};
};

TEST_F(GatewayBinaryTest, AWorkerKilledMidLoadNeverHangsAClient) {
  int port_a = -1, port_b = -1;
  std::unique_ptr<Subprocess> worker_a = StartWorker(&port_a);
  std::unique_ptr<Subprocess> worker_b = StartWorker(&port_b);
  ASSERT_GT(port_a, 0);
  ASSERT_GT(port_b, 0);
  Subprocess gateway({LLMSERVE_GATEWAY_BINARY, "--host=127.0.0.1", "--grpc-port=0", "--http-port=0",
                      "--routing=round_robin",
                      absl::StrCat("--workers=127.0.0.1:", port_a, ",127.0.0.1:", port_b)});
  ASSERT_TRUE(gateway.WaitForOutput("gateway: ready", kPatience)) << gateway.output();
  const int grpc_port = NumberAfter(gateway.output(), "gRPC on 127.0.0.1:");
  const int http_port = NumberAfter(gateway.output(), "HTTP on http://127.0.0.1:");
  ASSERT_GT(grpc_port, 0);
  EXPECT_NE(::llmserve::testing::HttpGet(http_port, "/readyz").find("ready"), std::string::npos);

  auto stub = v1::Inference::NewStub(grpc::CreateChannel(absl::StrCat("127.0.0.1:", grpc_port),
                                                         grpc::InsecureChannelCredentials()));
  constexpr int kStreams = 8;
  std::atomic<int> ok{0}, failed_clearly{0}, other{0}, started{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < kStreams; ++i) {
    clients.emplace_back([&, i] {
      v1::GenerateRequest request;
      request.set_text(absl::StrCat("story number ", i));
      request.mutable_stopping()->set_max_tokens(300);
      request.mutable_stopping()->set_ignore_eos(true);
      grpc::ClientContext context;
      context.set_deadline(absl::ToChronoTime(absl::Now() + kPatience));
      auto reader = stub->GenerateStream(&context, request);
      v1::GenerateStreamResponse message;
      bool counted = false;
      while (reader->Read(&message)) {
        if (!counted && message.tokens_size() > 0) {
          ++started;
          counted = true;
        }
      }
      const grpc::Status status = reader->Finish();
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

  gateway.Signal(SIGTERM);
  EXPECT_EQ(gateway.WaitForExit(kPatience), 0) << gateway.output();
  worker_b->Signal(SIGTERM);
  EXPECT_EQ(worker_b->WaitForExit(kPatience), 0);
}

TEST_F(GatewayBinaryTest, BadFlagsFailWithAClearMessage) {
  {
    Subprocess gateway({LLMSERVE_GATEWAY_BINARY, "--workers=nohost"});
    EXPECT_EQ(gateway.WaitForExit(kPatience), 2);
    EXPECT_NE(gateway.output().find("\"nohost\" is not host:port"), std::string::npos)
        << gateway.output();
  }
  {
    Subprocess gateway({LLMSERVE_GATEWAY_BINARY, "--workers=a:1", "--routing=random"});
    EXPECT_EQ(gateway.WaitForExit(kPatience), 2);
    EXPECT_NE(gateway.output().find("--routing"), std::string::npos) << gateway.output();
  }
  {
    Subprocess gateway({LLMSERVE_GATEWAY_BINARY, "--workers=a:1", "--host=0.0.0.0", "--grpc-port=0",
                        "--http-port=0"});
    EXPECT_EQ(gateway.WaitForExit(kPatience), 1);
    EXPECT_NE(gateway.output().find("--allow_unauthenticated"), std::string::npos)
        << gateway.output();
  }
}

}  // namespace
}  // namespace llmserve
