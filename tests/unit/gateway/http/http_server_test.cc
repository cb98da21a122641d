// End-to-end tests of HttpServer over loopback sockets, with a raw POSIX client
// (test_http_client.h) so that the bytes on the wire are what is checked.

#include "gateway/http/http_server.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gateway/http/sse.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/gateway/http/server_test_helpers.h"
#include "tests/unit/gateway/http/test_http_client.h"

namespace llmserve::gateway::http {
namespace {

using ::llmserve::gateway::http::testing::CloseCounter;
using ::llmserve::gateway::http::testing::ExpectedSse;
using ::llmserve::gateway::http::testing::SseEvent;
using ::llmserve::gateway::http::testing::StreamEvents;
using ::llmserve::gateway::http::testing::TestHttpClient;
using ::llmserve::gateway::http::testing::TestResponse;
using ::llmserve::gateway::http::testing::WriterBox;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// Routes used by most tests; anything else goes to the WriterBox.
class HttpServerTest : public ::testing::Test {
 protected:
  void StartServer(HttpServerOptions options = {}) {
    options.host = "127.0.0.1";
    options.port = 0;
    absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Start(
        options, [this](HttpRequest request, std::shared_ptr<ResponseWriter> writer) {
          Handle(std::move(request), std::move(writer));
        });
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  void Handle(HttpRequest request, std::shared_ptr<ResponseWriter> writer) {
    if (request.path == "/hello") {
      writer->Send(200, {{"content-type", "text/plain"}, {"x-path", request.path}}, "hello");
    } else if (request.path == "/echo") {
      writer->Send(200, {{"content-type", "application/octet-stream"}}, request.body);
    } else if (request.path == "/inspect") {
      nlohmann::json info = {{"method", request.method},
                             {"path", request.path},
                             {"query", request.query},
                             {"x-test", std::string(request.Header("x-test"))},
                             {"remote", request.remote_address}};
      writer->Send(200, {{"content-type", "application/json"}}, info.dump());
    } else if (request.path == "/sse") {
      StreamEvents(*writer, 3);  // on the I/O thread, for curl
    } else if (request.path == "/drop") {
      // Releases the writer without answering.
    } else if (request.path == "/error") {
      SendError(*writer, absl::NotFoundError("no such model: x"));
    } else {
      box_.Add(std::move(writer), std::move(request));
    }
  }

  std::unique_ptr<TestHttpClient> Connect() {
    std::unique_ptr<TestHttpClient> client = TestHttpClient::Connect(server_->port());
    EXPECT_NE(client, nullptr);
    return client;
  }

  // Waits up to 10 s for the server's connection count to reach `n`.
  bool WaitForActiveConnections(int n) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (server_->active_connections() != n) {
      if (absl::Now() > deadline) return false;
      absl::SleepFor(absl::Milliseconds(5));
    }
    return true;
  }

  std::unique_ptr<HttpServer> server_;
  WriterBox box_;
};

TEST_F(HttpServerTest, GetWholeResponse) {
  StartServer();
  auto client = Connect();
  ASSERT_TRUE(client->Send("GET /hello HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::optional<TestResponse> response = client->ReadResponse();
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->body, "hello");
  EXPECT_EQ(response->Header("content-length"), "5");
  EXPECT_EQ(response->Header("content-type"), "text/plain");
  EXPECT_EQ(response->Header("x-path"), "/hello");
  EXPECT_FALSE(response->Header("date").empty());
  EXPECT_EQ(response->Header("connection"), "");
}

TEST_F(HttpServerTest, RequestFieldsReachTheHandler) {
  StartServer();
  auto client = Connect();
  ASSERT_TRUE(client->Send("GET /inspect?a=1&b=%20 HTTP/1.1\r\nHost: x\r\nX-Test: Abc\r\n\r\n"));
  std::optional<TestResponse> response = client->ReadResponse();
  ASSERT_TRUE(response.has_value());
  nlohmann::json info = nlohmann::json::parse(response->body);
  EXPECT_EQ(info["method"], "GET");
  EXPECT_EQ(info["path"], "/inspect");
  EXPECT_EQ(info["query"], "a=1&b=%20");
  EXPECT_EQ(info["x-test"], "Abc");
  EXPECT_THAT(info["remote"].get<std::string>(), StartsWith("127.0.0.1:"));
}

TEST_F(HttpServerTest, PostBodyIsEchoed) {
  StartServer();
  auto client = Connect();
  const std::string body(100000, 'b');
  ASSERT_TRUE(client->Send(absl::StrCat(
      "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: ", body.size(), "\r\n\r\n", body)));
  std::optional<TestResponse> response = client->ReadResponse();
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->body, body);
}

TEST_F(HttpServerTest, ChunkedRequestBodyIsDecoded) {
  StartServer();
  auto client = Connect();
  ASSERT_TRUE(
      client->Send("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                   "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"));
  std::optional<TestResponse> response = client->ReadResponse();
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->body, "hello world");
}

TEST_F(HttpServerTest, KeepAliveServesTwoRequestsOnOneConnection) {
  StartServer();
  auto client = Connect();
  ASSERT_TRUE(client->Send("GET /hello HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::optional<TestResponse> first = client->ReadResponse();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->body, "hello");
  ASSERT_TRUE(client->Send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"));
  std::optional<TestResponse> second = client->ReadResponse();
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->body, "abc");
  EXPECT_EQ(server_->active_connections(), 1);
}

TEST_F(HttpServerTest, PipelinedRequestsAreAnsweredInOrder) {
  StartServer();
  auto client = Connect();
  ASSERT_TRUE(
      client->Send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\none"
                   "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\ntwo"
                   "GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  std::optional<TestResponse> first = client->ReadResponse();
  std::optional<TestResponse> second = client->ReadResponse();
  std::optional<TestResponse> third = client->ReadResponse();
  ASSERT_TRUE(first.has_value() && second.has_value() && third.has_value());
  EXPECT_EQ(first->body, "one");
  EXPECT_EQ(second->body, "two");
  EXPECT_EQ(third->body, "hello");
  EXPECT_EQ(third->Header("connection"), "close");
  EXPECT_TRUE(client->WaitForClose());
}

TEST_F(HttpServerTest, ConnectionCloseRequestClosesAfterResponse) {
  StartServer();
  auto client = Connect();
  ASSERT_TRUE(client->Send("GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  std::optional<TestResponse> response = client->ReadResponse();
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->Header("connection"), "close");
  EXPECT_TRUE(client->WaitForClose());
  client->Close();  // the server lingers until the client closes its side too
  EXPECT_TRUE(WaitForActiveConnections(0));
}

// Found by http_request_fuzz: the server was reading a pipelined request (cut short) when its
// lingering close began, then read the client's EOF; its drain read then waited for an EOF that
// Asio does not report twice, and the connection stayed open until the 2 s linger deadline.
TEST_F(HttpServerTest, HalfCloseAfterAPipelinedPartialRequestClosesAtOnce) {
  StartServer();
  auto client = Connect();
  ASSERT_TRUE(
      client->Send("GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                   "GET /hello HTTP/1.1\r\nHo"));
  std::optional<TestResponse> response = client->ReadResponse();
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->body, "hello");
  EXPECT_TRUE(client->WaitForClose());  // the server's side is shut: it lingers, reading
  ASSERT_EQ(server_->active_connections(), 1);
  const absl::Time half_closed = absl::Now();
  ASSERT_EQ(::shutdown(client->fd(), SHUT_WR), 0);
  EXPECT_TRUE(WaitForActiveConnections(0));
  // Well under the linger deadline (2 s), which is what closed it before.
  EXPECT_LT(absl::Now() - half_closed, absl::Milliseconds(500));
}

// Issue 28: a client that sends a whole request and then shuts down its sending side
// (shutdown(SHUT_WR), `nc -N`) still reads: it gets an interim 100 (the probe that tells it from a
// client that closed entirely), then its response, and the connection closes after it.
TEST_F(HttpServerTest, AHalfClosedClientStillGetsItsResponse) {
  StartServer();
  auto client = Connect();
  ASSERT_TRUE(client->Send("POST /held HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi"));
  ASSERT_EQ(::shutdown(client->fd(), SHUT_WR), 0);
  std::vector<std::shared_ptr<ResponseWriter>> writers = box_.WaitFor(1);
  ASSERT_EQ(writers.size(), 1u);
  CloseCounter counter;
  writers[0]->SetOnClose([&counter] { counter.Increment(); });
  // The probe comes once the server has read the client's end; the response is still pending.
  std::optional<TestResponse> interim = client->ReadHead(/*keep_informational=*/true);
  ASSERT_TRUE(interim.has_value());
  EXPECT_EQ(interim->status, 100);
  EXPECT_FALSE(writers[0]->closed());
  writers[0]->Send(200, {{"content-type", "text/plain"}}, "done");
  std::optional<TestResponse> response = client->ReadResponse();
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->body, "done");
  EXPECT_EQ(response->Header("connection"), "close");
  EXPECT_TRUE(client->WaitForClose());
  EXPECT_TRUE(WaitForActiveConnections(0));
  EXPECT_EQ(counter.Calls(), 0);
}

// The same EOF from a client that closed its socket entirely: the probe draws a reset, so the
// server still notices at once that the client left and runs on_close.
TEST_F(HttpServerTest, AClientThatClosesWhileItsResponseIsPendingIsStillNoticed) {
  StartServer();
  auto client = Connect();
  ASSERT_TRUE(client->Send("GET /held HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::vector<std::shared_ptr<ResponseWriter>> writers = box_.WaitFor(1);
  ASSERT_EQ(writers.size(), 1u);
  CloseCounter counter;
  writers[0]->SetOnClose([&counter] { counter.Increment(); });
  client->Close();
  ASSERT_TRUE(counter.WaitForCalls(1));
  EXPECT_TRUE(writers[0]->closed());
  EXPECT_TRUE(WaitForActiveConnections(0));
}

// HTTP/1.0 takes no interim response, so nothing can tell a half-close from a client that left:
// it counts as leaving, as before.
TEST_F(HttpServerTest, AnHttp10HalfCloseCountsAsLeaving) {
  StartServer();
  auto client = Connect();
  ASSERT_TRUE(client->Send("GET /held HTTP/1.0\r\nHost: x\r\n\r\n"));
  ASSERT_EQ(::shutdown(client->fd(), SHUT_WR), 0);
  std::vector<std::shared_ptr<ResponseWriter>> writers = box_.WaitFor(1);
  ASSERT_EQ(writers.size(), 1u);
  CloseCounter counter;
  writers[0]->SetOnClose([&counter] { counter.Increment(); });
  ASSERT_TRUE(counter.WaitForCalls(1));
  EXPECT_TRUE(client->WaitForClose());
}

TEST_F(HttpServerTest, HeadRequestGetsHeadersWithoutBody) {
  StartServer();
  auto client = Connect();
  ASSERT_TRUE(
      client->Send("HEAD /hello HTTP/1.1\r\nHost: x\r\n\r\n"
                   "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::optional<TestResponse> head = client->ReadResponse(/*head_request=*/true);
  ASSERT_TRUE(head.has_value());
  EXPECT_EQ(head->Header("content-length"), "5");
  // The next response follows at once: no body bytes came in between.
  std::optional<TestResponse> get = client->ReadResponse();
  ASSERT_TRUE(get.has_value());
  EXPECT_EQ(get->body, "hello");
}

TEST_F(HttpServerTest, ExpectContinueGetsAnInterimResponse) {
  StartServer();
  auto client = Connect();
  ASSERT_TRUE(client->Send(
      "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n"));
  std::optional<TestResponse> interim = client->ReadHead(/*keep_informational=*/true);
  ASSERT_TRUE(interim.has_value());
  EXPECT_EQ(interim->status, 100);
  ASSERT_TRUE(client->Send("data"));
  std::optional<TestResponse> response = client->ReadResponse();
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->body, "data");
}

void ExpectJsonError(const TestResponse& response, int status, const std::string& code,
                     const std::string& message_part) {
  EXPECT_EQ(response.status, status);
  EXPECT_EQ(response.Header("content-type"), "application/json");
  nlohmann::json body = nlohmann::json::parse(response.body, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(body.is_object()) << response.body;
  EXPECT_EQ(body["error"]["code"], code) << response.body;
  EXPECT_TRUE(body["error"]["type"].is_string()) << response.body;
  EXPECT_THAT(body["error"]["message"].get<std::string>(), HasSubstr(message_part));
}

TEST_F(HttpServerTest, OversizedBodyGets413BeforeTheBodyIsSent) {
  StartServer({.max_body_bytes = 1024});
  auto client = Connect();
  // Only the headers: the server must answer without waiting for the 1 MiB it announces.
  ASSERT_TRUE(client->Send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1048576\r\n\r\n"));
  std::optional<TestResponse> response = client->ReadResponse();
  ASSERT_TRUE(response.has_value());
  ExpectJsonError(*response, 413, "invalid_argument", "exceeds the limit of 1024 bytes");
  EXPECT_EQ(response->Header("connection"), "close");
  EXPECT_TRUE(client->WaitForClose());
}

TEST_F(HttpServerTest, OversizedBodyWithBodyAlreadySentStillGets413) {
  StartServer({.max_body_bytes = 1024});
  auto client = Connect();
  // The client sends everything before reading, as simple clients do.
  const std::string body(200000, 'x');
  ASSERT_TRUE(client->Send(absl::StrCat(
      "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: ", body.size(), "\r\n\r\n", body)));
  std::optional<TestResponse> response = client->ReadResponse();
  ASSERT_TRUE(response.has_value());
  ExpectJsonError(*response, 413, "invalid_argument", "exceeds the limit");
}

TEST_F(HttpServerTest, OversizedChunkedBodyGets413) {
  StartServer({.max_body_bytes = 10});
  auto client = Connect();
  ASSERT_TRUE(
      client->Send("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                   "8\r\n12345678\r\n8\r\n12345678\r\n0\r\n\r\n"));
  std::optional<TestResponse> response = client->ReadResponse();
  ASSERT_TRUE(response.has_value());
  ExpectJsonError(*response, 413, "invalid_argument", "exceeds the limit of 10 bytes");
}

TEST_F(HttpServerTest, GarbageGets400) {
  StartServer();
  auto client = Connect();
  ASSERT_TRUE(client->Send("THIS IS NOT HTTP\r\n\r\n"));
  std::optional<TestResponse> response = client->ReadResponse();
  ASSERT_TRUE(response.has_value());
  ExpectJsonError(*response, 400, "invalid_argument", "malformed HTTP request");
  EXPECT_TRUE(client->WaitForClose());
}

TEST_F(HttpServerTest, OversizedHeadersGet431) {
  StartServer({.max_header_bytes = 1024});
  auto client = Connect();
  ASSERT_TRUE(client->Send(absl::StrCat(
      "GET /hello HTTP/1.1\r\nHost: x\r\nX-Big: ", std::string(4000, 'h'), "\r\n\r\n")));
  std::optional<TestResponse> response = client->ReadResponse();
  ASSERT_TRUE(response.has_value());
  ExpectJsonError(*response, 431, "invalid_argument", "headers exceed");
}

TEST_F(HttpServerTest, HeaderTimeoutClosesTheConnection) {
  StartServer({.header_timeout = absl::Milliseconds(200)});
  auto client = Connect();
  ASSERT_TRUE(client->Send("GET /hello HTTP/1.1\r\nHost: x\r\n"));  // never finished
  const absl::Time start = absl::Now();
  EXPECT_TRUE(client->WaitForClose());
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(150));
  EXPECT_TRUE(WaitForActiveConnections(0));
}

TEST_F(HttpServerTest, IdleKeepAliveConnectionTimesOut) {
  StartServer({.idle_timeout = absl::Milliseconds(200)});
  auto client = Connect();
  ASSERT_TRUE(client->Send("GET /hello HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_TRUE(client->ReadResponse().has_value());
  EXPECT_TRUE(client->WaitForClose());
}

TEST_F(HttpServerTest, HandlerErrorUsesOpenAiShape) {
  StartServer();
  auto client = Connect();
  ASSERT_TRUE(client->Send("GET /error HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::optional<TestResponse> response = client->ReadResponse();
  ASSERT_TRUE(response.has_value());
  ExpectJsonError(*response, 404, "not_found", "no such model: x");
}

TEST_F(HttpServerTest, DroppedWriterGets500) {
  StartServer();
  auto client = Connect();
  ASSERT_TRUE(client->Send("GET /drop HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::optional<TestResponse> response = client->ReadResponse();
  ASSERT_TRUE(response.has_value());
  ExpectJsonError(*response, 500, "internal", "did not produce a response");
}

TEST_F(HttpServerTest, WriterDroppedMidStreamTruncatesTheResponse) {
  StartServer();
  auto client = Connect();
  ASSERT_TRUE(client->Send("GET /held HTTP/1.1\r\nHost: x\r\n\r\n"));
  {
    std::vector<std::shared_ptr<ResponseWriter>> writers = box_.WaitFor(1);
    ASSERT_EQ(writers.size(), 1u);
    writers[0]->StartStream(200, {{"content-type", "text/event-stream"}});
    writers[0]->Write(SseEvent(0));
  }
  box_.Clear();  // releases the writer mid-stream
  std::optional<TestResponse> head = client->ReadHead();
  ASSERT_TRUE(head.has_value());
  EXPECT_EQ(client->ReadChunk(), SseEvent(0));
  EXPECT_EQ(client->ReadChunk(), std::nullopt);  // closed without the last chunk
}

TEST_F(HttpServerTest, SseStreamWrittenFromAnotherThread) {
  StartServer();
  auto client = Connect();
  ASSERT_TRUE(
      client->Send("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                   "Content-Length: 15\r\n\r\n{\"stream\":true}"));
  std::vector<std::shared_ptr<ResponseWriter>> writers = box_.WaitFor(1);
  ASSERT_EQ(writers.size(), 1u);
  EXPECT_EQ(box_.requests()[0].body, "{\"stream\":true}");
  std::thread producer([writer = writers[0]] { StreamEvents(*writer, 20); });
  std::optional<TestResponse> response = client->ReadResponse();
  producer.join();
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->Header("transfer-encoding"), "chunked");
  EXPECT_EQ(response->Header("content-type"), "text/event-stream");
  EXPECT_EQ(response->Header("content-length"), "");
  EXPECT_EQ(response->body, ExpectedSse(20));
  EXPECT_FALSE(writers[0]->closed());
  // The connection is reusable after the stream.
  ASSERT_TRUE(client->Send("GET /hello HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::optional<TestResponse> next = client->ReadResponse();
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->body, "hello");
}

TEST_F(HttpServerTest, Http10StreamIsDelimitedByClose) {
  StartServer();
  auto client = Connect();
  ASSERT_TRUE(client->Send("GET /sse HTTP/1.0\r\n\r\n"));
  std::optional<TestResponse> response = client->ReadResponse();
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->Header("transfer-encoding"), "");
  EXPECT_EQ(response->body, ExpectedSse(3));
}

TEST_F(HttpServerTest, ClientDisconnectMidStreamRunsOnCloseOnce) {
  StartServer();
  auto client = Connect();
  ASSERT_TRUE(client->Send("GET /held HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::vector<std::shared_ptr<ResponseWriter>> writers = box_.WaitFor(1);
  ASSERT_EQ(writers.size(), 1u);
  std::shared_ptr<ResponseWriter> writer = writers[0];
  CloseCounter counter;
  writer->SetOnClose([&counter] { counter.Increment(); });
  writer->StartStream(200, {{"content-type", "text/event-stream"}});
  writer->Write(SseEvent(0));
  ASSERT_TRUE(client->ReadHead().has_value());
  ASSERT_EQ(client->ReadChunk(), SseEvent(0));

  client->Close();  // the client goes away while the stream is open
  ASSERT_TRUE(counter.WaitForCalls(1));
  EXPECT_TRUE(writer->closed());
  // Writing to a closed stream is harmless and does not call on_close again.
  for (int i = 1; i < 50; ++i) writer->Write(SseEvent(i));
  writer->Finish();
  EXPECT_TRUE(WaitForActiveConnections(0));
  // Once the server has stopped, every posted call has run or been dropped.
  server_->Shutdown(absl::ZeroDuration());
  EXPECT_EQ(counter.Calls(), 1);
  // A callback set after the disconnect runs at once (the connection no longer exists).
  CloseCounter late;
  writer->SetOnClose([&late] { late.Increment(); });
  EXPECT_EQ(late.Calls(), 1);
}

TEST_F(HttpServerTest, OnCloseDoesNotRunAfterACompleteResponse) {
  StartServer();
  auto client = Connect();
  ASSERT_TRUE(client->Send("GET /held HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::vector<std::shared_ptr<ResponseWriter>> writers = box_.WaitFor(1);
  ASSERT_EQ(writers.size(), 1u);
  CloseCounter counter;
  writers[0]->SetOnClose([&counter] { counter.Increment(); });
  StreamEvents(*writers[0], 2);
  ASSERT_TRUE(client->ReadResponse().has_value());
  client->Close();
  EXPECT_TRUE(WaitForActiveConnections(0));
  server_->Shutdown(absl::ZeroDuration());
  EXPECT_EQ(counter.Calls(), 0);
  EXPECT_FALSE(writers[0]->closed());
}

TEST_F(HttpServerTest, ClientThatStopsReadingIsDisconnectedPastTheBufferLimit) {
  StartServer({.max_buffered_bytes = 256 * 1024});
  auto client = Connect();
  ASSERT_TRUE(client->Send("GET /held HTTP/1.1\r\nHost: x\r\n\r\n"));  // and never reads
  std::vector<std::shared_ptr<ResponseWriter>> writers = box_.WaitFor(1);
  ASSERT_EQ(writers.size(), 1u);
  std::shared_ptr<ResponseWriter> writer = writers[0];
  CloseCounter counter;
  writer->SetOnClose([&counter] { counter.Increment(); });
  writer->StartStream(200, {{"content-type", "text/event-stream"}});
  const std::string chunk(64 * 1024, 'x');
  size_t max_backlog = 0;
  // Kernel buffers on loopback hold a few MB; 256 MB is far beyond them plus the limit.
  for (int i = 0; i < 4096 && !writer->closed(); ++i) {
    writer->Write(chunk);
    max_backlog = std::max(max_backlog, writer->buffered_bytes());
    if (writer->buffered_bytes() > 1024 * 1024) absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_TRUE(counter.WaitForCalls(1));
  EXPECT_TRUE(writer->closed());
  EXPECT_GT(max_backlog, 0u);
  EXPECT_EQ(writer->buffered_bytes(), 0u);
}

TEST_F(HttpServerTest, ManyConcurrentStreamsOnOneIoThread) {
  constexpr int kConnections = 500;
  constexpr int kEvents = 5;
  StartServer({.io_threads = 1});
  std::vector<std::unique_ptr<TestHttpClient>> clients;
  for (int i = 0; i < kConnections; ++i) {
    clients.push_back(Connect());
    ASSERT_NE(clients.back(), nullptr);
    ASSERT_TRUE(clients.back()->Send("GET /v1/stream HTTP/1.1\r\nHost: x\r\n\r\n"));
  }
  const absl::Time start = absl::Now();
  std::vector<std::shared_ptr<ResponseWriter>> writers = box_.WaitFor(kConnections);
  ASSERT_EQ(writers.size(), static_cast<size_t>(kConnections));
  EXPECT_EQ(server_->active_connections(), kConnections);
  // One producer thread interleaves the streams, as a token fan-out would.
  std::thread producer([&writers] {
    for (auto& writer : writers) {
      writer->StartStream(200, {{"content-type", "text/event-stream"}});
    }
    for (int e = 0; e < kEvents; ++e) {
      for (auto& writer : writers) writer->Write(SseEvent(e));
    }
    for (auto& writer : writers) {
      writer->Write(std::string(kSseDone));
      writer->Finish();
    }
  });
  int complete = 0;
  for (auto& client : clients) {
    std::optional<TestResponse> response = client->ReadResponse();
    if (response.has_value() && response->body == ExpectedSse(kEvents)) ++complete;
  }
  producer.join();
  EXPECT_EQ(complete, kConnections);
  std::printf("%d concurrent SSE streams x %d events on one I/O thread: %.1f ms\n", kConnections,
              kEvents + 1, absl::ToDoubleMilliseconds(absl::Now() - start));
}

TEST_F(HttpServerTest, StopAcceptingRefusesNewConnectionsWhileAStreamFinishes) {
  StartServer();
  auto streaming = Connect();
  ASSERT_TRUE(streaming->Send("GET /held HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::vector<std::shared_ptr<ResponseWriter>> writers = box_.WaitFor(1);
  ASSERT_EQ(writers.size(), 1u);
  writers[0]->StartStream(200, {{"content-type", "text/event-stream"}});
  writers[0]->Write(SseEvent(0));
  ASSERT_TRUE(streaming->ReadHead().has_value());
  ASSERT_EQ(streaming->ReadChunk(), SseEvent(0));

  server_->StopAccepting();
  int error = 0;
  EXPECT_EQ(TestHttpClient::Connect(server_->port(), &error), nullptr);
  EXPECT_EQ(error, ECONNREFUSED);

  // The open stream still completes, and then its connection closes.
  for (int i = 1; i < 5; ++i) writers[0]->Write(SseEvent(i));
  writers[0]->Write(std::string(kSseDone));
  writers[0]->Finish();
  std::string rest;
  for (;;) {
    std::optional<std::string> chunk = streaming->ReadChunk();
    ASSERT_TRUE(chunk.has_value());
    if (chunk->empty()) break;
    rest += *chunk;
  }
  EXPECT_EQ(SseEvent(0) + rest, ExpectedSse(5));
  EXPECT_TRUE(streaming->WaitForClose());
  streaming->Close();
  EXPECT_TRUE(WaitForActiveConnections(0));
}

TEST_F(HttpServerTest, StopAcceptingClosesIdleKeepAliveConnections) {
  StartServer();
  auto client = Connect();
  ASSERT_TRUE(client->Send("GET /hello HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_TRUE(client->ReadResponse().has_value());
  server_->StopAccepting();
  EXPECT_TRUE(client->WaitForClose());
  client->Close();  // the server lingers until the client closes its side too
  EXPECT_TRUE(WaitForActiveConnections(0));
}

TEST_F(HttpServerTest, CloseConnectionsAfterResponsesKeepsAcceptingWithoutKeepAlive) {
  StartServer();
  auto idle = Connect();
  ASSERT_TRUE(idle->Send("GET /hello HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_TRUE(idle->ReadResponse().has_value());
  server_->CloseConnectionsAfterResponses();
  // The idle keep-alive connection is closed ...
  EXPECT_TRUE(idle->WaitForClose());
  idle->Close();
  // ... new connections are still served (a health check gets its answer), once each.
  for (int i = 0; i < 2; ++i) {
    auto client = Connect();
    ASSERT_NE(client, nullptr);
    ASSERT_TRUE(client->Send("GET /hello HTTP/1.1\r\nHost: x\r\n\r\n"));
    std::optional<TestResponse> response = client->ReadResponse();
    ASSERT_TRUE(response.has_value());
    EXPECT_EQ(response->status, 200);
    EXPECT_EQ(response->Header("connection"), "close");
    EXPECT_TRUE(client->WaitForClose());
    client->Close();
  }
  EXPECT_TRUE(WaitForActiveConnections(0));
}

TEST_F(HttpServerTest, ShutdownClosesOpenStreamsAndRunsOnClose) {
  StartServer();
  auto client = Connect();
  ASSERT_TRUE(client->Send("GET /held HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::vector<std::shared_ptr<ResponseWriter>> writers = box_.WaitFor(1);
  ASSERT_EQ(writers.size(), 1u);
  CloseCounter counter;
  writers[0]->SetOnClose([&counter] { counter.Increment(); });
  writers[0]->StartStream(200, {{"content-type", "text/event-stream"}});
  ASSERT_TRUE(client->ReadHead().has_value());
  server_->Shutdown(absl::Milliseconds(50));
  EXPECT_EQ(counter.Calls(), 1);
  EXPECT_TRUE(writers[0]->closed());
  EXPECT_TRUE(client->WaitForClose());
  // The writer outlives the server and stays harmless.
  server_.reset();
  writers[0]->Write(SseEvent(1));
  writers[0]->Finish();
}

TEST_F(HttpServerTest, SeveralIoThreads) {
  StartServer({.io_threads = 4});
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([this, &ok] {
      auto client = TestHttpClient::Connect(server_->port());
      if (client == nullptr) return;
      for (int i = 0; i < 20; ++i) {
        if (!client->Send("GET /sse HTTP/1.1\r\nHost: x\r\n\r\n")) return;
        std::optional<TestResponse> response = client->ReadResponse();
        if (response.has_value() && response->body == ExpectedSse(3)) ++ok;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(ok.load(), 8 * 20);
}

TEST_F(HttpServerTest, CurlReadsAnSseStream) {
  if (::access("/usr/bin/curl", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/curl";
  StartServer();
  const std::string command =
      absl::StrCat("/usr/bin/curl -sS -N --max-time 10 http://127.0.0.1:", server_->port(), "/sse");
  FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, n);
  EXPECT_EQ(::pclose(pipe), 0);
  EXPECT_EQ(output, ExpectedSse(3));
}

TEST(HttpServerStartTest, BusyPortIsUnavailableAndNamesTheAddress) {
  auto handler = [](HttpRequest, std::shared_ptr<ResponseWriter> writer) {
    writer->Send(204, {}, "");
  };
  absl::StatusOr<std::unique_ptr<HttpServer>> first =
      HttpServer::Start({.host = "127.0.0.1", .port = 0}, handler);
  ASSERT_TRUE(first.ok()) << first.status();
  const int port = (*first)->port();
  absl::StatusOr<std::unique_ptr<HttpServer>> second =
      HttpServer::Start({.host = "127.0.0.1", .port = port}, handler);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(second.status().message()), HasSubstr(absl::StrCat("127.0.0.1:", port)));
}

TEST(HttpServerStartTest, RejectsBadOptions) {
  auto handler = [](HttpRequest, std::shared_ptr<ResponseWriter>) {};
  EXPECT_EQ(HttpServer::Start({.io_threads = 0}, handler).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HttpServer::Start({.port = 70000}, handler).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HttpServer::Start({}, nullptr).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace llmserve::gateway::http
