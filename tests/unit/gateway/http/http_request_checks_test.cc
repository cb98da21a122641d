// What HttpServer refuses before a request reaches its handler: framing that a proxy in front
// could read differently (request smuggling), bodies it cannot interpret, and (when asked) POST
// bodies not declared as JSON. Over loopback sockets with the raw client of test_http_client.h,
// so that exactly the bytes under test are sent.

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gateway/http/http_server.h"
#include "gateway/http/request_checks.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/gateway/http/test_http_client.h"

namespace llmserve::gateway::http {
namespace {

using ::llmserve::gateway::http::testing::TestHttpClient;
using ::llmserve::gateway::http::testing::TestResponse;
using ::testing::HasSubstr;

class RequestChecksTest : public ::testing::Test {
 protected:
  void StartServer(HttpServerOptions options = {}) {
    options.host = "127.0.0.1";
    options.port = 0;
    absl::StatusOr<std::unique_ptr<HttpServer>> server =
        HttpServer::Start(options, [](HttpRequest request, std::shared_ptr<ResponseWriter> writer) {
          // The body and the headers the handler saw.
          nlohmann::json headers = nlohmann::json::object();
          for (const auto& [name, value] : request.headers) headers[name] = value;
          nlohmann::json info = {{"body", request.body}, {"headers", headers}};
          writer->Send(200, {{"content-type", "application/json"}}, info.dump());
        });
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  // Sends `request` on a new connection and reads the response.
  std::optional<TestResponse> Exchange(const std::string& request) {
    std::unique_ptr<TestHttpClient> client = TestHttpClient::Connect(server_->port());
    EXPECT_NE(client, nullptr);
    if (client == nullptr) return std::nullopt;
    EXPECT_TRUE(client->Send(request));
    std::optional<TestResponse> response = client->ReadResponse();
    if (response.has_value() && response->status >= 400) {
      // Every refusal leaves the stream unusable: the server closes it after answering.
      EXPECT_EQ(response->Header("connection"), "close") << request.substr(0, 200);
      EXPECT_TRUE(client->WaitForClose()) << request.substr(0, 200);
    }
    return response;
  }

  // Expects `request` to be refused with `status` and an OpenAI-style JSON error whose message
  // contains `message_part`.
  void ExpectRefused(const std::string& request, int status, const std::string& message_part) {
    SCOPED_TRACE(request.substr(0, 200));
    std::optional<TestResponse> response = Exchange(request);
    ASSERT_TRUE(response.has_value());
    EXPECT_EQ(response->status, status) << response->body;
    EXPECT_EQ(response->Header("content-type"), "application/json");
    nlohmann::json body = nlohmann::json::parse(response->body, nullptr, false);
    ASSERT_TRUE(body.is_object()) << response->body;
    EXPECT_EQ(body["error"]["type"], "invalid_request_error") << response->body;
    EXPECT_THAT(body["error"]["message"].get<std::string>(), HasSubstr(message_part));
  }

  // Expects `request` to reach the handler; returns what it saw.
  nlohmann::json ExpectServed(const std::string& request) {
    SCOPED_TRACE(request.substr(0, 200));
    std::optional<TestResponse> response = Exchange(request);
    EXPECT_TRUE(response.has_value());
    if (!response.has_value()) return {};
    EXPECT_EQ(response->status, 200) << response->body;
    return nlohmann::json::parse(response->body, nullptr, false);
  }

  std::unique_ptr<HttpServer> server_;
};

std::string Post(const std::string& headers, const std::string& body) {
  return absl::StrCat("POST /x HTTP/1.1\r\nHost: x\r\n", headers, "\r\n", body);
}

std::string PostWithLength(const std::string& headers, const std::string& body) {
  return Post(absl::StrCat(headers, "Content-Length: ", body.size(), "\r\n"), body);
}

// --- Transfer-Encoding and Content-Length (defect 3) ----------------------------------------

TEST_F(RequestChecksTest, TransferEncodingOtherThanChunkedIs501) {
  StartServer();
  for (const std::string coding :
       {"gzip", "identity", "xchunked", "gzip, chunked", "chunked, gzip", "deflate"}) {
    ExpectRefused(
        Post(absl::StrCat("Transfer-Encoding: ", coding, "\r\n"), "5\r\nhello\r\n0\r\n\r\n"), 501,
        "transfer-encoding");
  }
}

TEST_F(RequestChecksTest, TransferEncodingSplitOverTwoFieldsIs501) {
  StartServer();
  ExpectRefused(
      Post("Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n", "5\r\nhello\r\n0\r\n\r\n"),
      501, "transfer-encoding");
}

TEST_F(RequestChecksTest, TransferEncodingWithContentLengthIs400) {
  StartServer();
  // Whichever comes first, and whatever the coding: a proxy may frame by the other one.
  ExpectRefused(Post("Transfer-Encoding: gzip\r\nContent-Length: 5\r\n", "hello"), 400,
                "content-length");
  ExpectRefused(Post("Transfer-Encoding: identity\r\nContent-Length: 5\r\n", "hello"), 400,
                "content-length");
  ExpectRefused(Post("Content-Length: 5\r\nTransfer-Encoding: gzip\r\n", "hello"), 400, "");
  ExpectRefused(
      Post("Content-Length: 16\r\nTransfer-Encoding: chunked\r\n", "5\r\nhello\r\n0\r\n\r\n"), 400,
      "");
  ExpectRefused(
      Post("Transfer-Encoding: chunked\r\nContent-Length: 16\r\n", "5\r\nhello\r\n0\r\n\r\n"), 400,
      "");
}

TEST_F(RequestChecksTest, TransferEncodingInHttp10Is400) {
  StartServer();
  ExpectRefused("POST /x HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
                400, "HTTP/1.0");
}

TEST_F(RequestChecksTest, ChunkedInAnyCaseIsServed) {
  StartServer();
  EXPECT_EQ(ExpectServed(Post("Transfer-Encoding: Chunked\r\n", "5\r\nhello\r\n0\r\n\r\n"))["body"],
            "hello");
}

TEST_F(RequestChecksTest, ConflictingContentLengthsAre400) {
  StartServer();
  ExpectRefused(Post("Content-Length: 5\r\nContent-Length: 6\r\n", "hello!"), 400, "");
  ExpectRefused(Post("Content-Length: 5, 6\r\n", "hello!"), 400, "");
  // The same value twice is one length (RFC 9110, 8.6).
  EXPECT_EQ(ExpectServed(Post("Content-Length: 5\r\nContent-Length: 5\r\n", "hello"))["body"],
            "hello");
}

// --- Content-Encoding ---------------------------------------------------------------------

TEST_F(RequestChecksTest, ContentEncodingIs415) {
  StartServer();
  for (const std::string coding : {"gzip", "deflate", "br", "gzip, identity"}) {
    ExpectRefused(PostWithLength(absl::StrCat("Content-Encoding: ", coding, "\r\n"), "hello"), 415,
                  "content-encoding");
  }
  std::optional<TestResponse> response =
      Exchange(PostWithLength("Content-Encoding: gzip\r\n", "hello"));
  ASSERT_TRUE(response.has_value());
  // RFC 7694: what the server would accept instead.
  EXPECT_EQ(response->Header("accept-encoding"), "identity");
}

TEST_F(RequestChecksTest, IdentityContentEncodingIsServed) {
  StartServer();
  EXPECT_EQ(ExpectServed(PostWithLength("Content-Encoding: identity\r\n", "hello"))["body"],
            "hello");
}

// --- Host ---------------------------------------------------------------------------------

TEST_F(RequestChecksTest, Http11WithoutHostIs400) {
  StartServer();
  ExpectRefused("GET /x HTTP/1.1\r\n\r\n", 400, "host");
  ExpectRefused("POST /x HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello", 400, "host");
}

TEST_F(RequestChecksTest, TwoHostFieldsAre400) {
  StartServer();
  ExpectRefused("GET /x HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, "host");
}

TEST_F(RequestChecksTest, Http10WithoutHostIsServed) {
  StartServer();
  ExpectServed("GET /x HTTP/1.0\r\n\r\n");
}

// --- Header syntax --------------------------------------------------------------------------

TEST_F(RequestChecksTest, ObsoleteLineFoldingIs400) {
  StartServer();
  ExpectRefused("GET /x HTTP/1.1\r\nHost: x\r\nX-Long: a\r\n b\r\n\r\n", 400, "folding");
  ExpectRefused("GET /x HTTP/1.1\r\nHost: x\r\nX-Long: a\r\n\tb\r\n\r\n", 400, "folding");
}

TEST_F(RequestChecksTest, BodyAfterHeadersIsNotMistakenForFolding) {
  StartServer();
  // A body that starts with a space right after the blank line.
  EXPECT_EQ(ExpectServed(PostWithLength("", " hello"))["body"], " hello");
  EXPECT_EQ(ExpectServed("POST /x HTTP/1.0\r\nContent-Length: 3\r\n\r\n\tab")["body"], "\tab");
}

// --- Chunk lines and trailers -------------------------------------------------------------

TEST_F(RequestChecksTest, HugeChunkExtensionIs400) {
  StartServer();
  ExpectRefused(
      Post("Transfer-Encoding: chunked\r\n",
           absl::StrCat("5;ext=", std::string(100 * 1024, 'a'), "\r\nhello\r\n0\r\n\r\n")),
      400, "chunk");
  // Past the bound, though small enough to arrive in one read.
  ExpectRefused(Post("Transfer-Encoding: chunked\r\n",
                     absl::StrCat("5;ext=", std::string(10 * 1024, 'a'), "\r\nhello\r\n0\r\n\r\n")),
                400, "chunk");
}

TEST_F(RequestChecksTest, EndlessChunkSizeLineIs400WithoutWaitingForItsEnd) {
  StartServer();
  std::unique_ptr<TestHttpClient> client = TestHttpClient::Connect(server_->port());
  ASSERT_NE(client, nullptr);
  // A chunk-size line that never ends: the server must not buffer it forever.
  ASSERT_TRUE(client->Send(
      Post("Transfer-Encoding: chunked\r\n", absl::StrCat("5;", std::string(64 * 1024, 'a')))));
  std::optional<TestResponse> response = client->ReadResponse();
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 400);
  EXPECT_THAT(response->body, HasSubstr("chunk"));
}

TEST_F(RequestChecksTest, SmallChunkExtensionIsServed) {
  StartServer();
  EXPECT_EQ(ExpectServed(Post("Transfer-Encoding: chunked\r\n",
                              "5;name=value\r\nhello\r\n0;last\r\n\r\n"))["body"],
            "hello");
}

TEST_F(RequestChecksTest, TrailersPastTheHeaderLimitAre431) {
  StartServer();
  ExpectRefused(
      Post("Transfer-Encoding: chunked\r\n",
           absl::StrCat("5\r\nhello\r\n0\r\nX-Trailer: ", std::string(20 * 1024, 't'), "\r\n\r\n")),
      431, "trailer");
  // Many small trailer fields, as much in total.
  std::string trailers;
  for (int i = 0; i < 1000; ++i)
    absl::StrAppend(&trailers, "X-T", i, ": ", std::string(20, 'v'), "\r\n");
  ExpectRefused(
      Post("Transfer-Encoding: chunked\r\n", absl::StrCat("5\r\nhello\r\n0\r\n", trailers, "\r\n")),
      431, "trailer");
}

TEST_F(RequestChecksTest, TrailersDoNotBecomeHeaders) {
  StartServer();
  nlohmann::json seen = ExpectServed(Post(
      "Transfer-Encoding: chunked\r\n", "5\r\nhello\r\n0\r\nAuthorization: Bearer forged\r\n\r\n"));
  EXPECT_EQ(seen["body"], "hello");
  EXPECT_FALSE(seen["headers"].contains("authorization")) << seen.dump();
}

TEST_F(RequestChecksTest, TrailersArrivingSlowlyAre431) {
  StartServer();
  std::unique_ptr<TestHttpClient> client = TestHttpClient::Connect(server_->port());
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Send(Post("Transfer-Encoding: chunked\r\n", "5\r\nhello\r\n0\r\n")));
  // Fields of 1 KB, one at a time, without the blank line that would end them.
  std::optional<TestResponse> response;
  for (int i = 0; i < 40; ++i) {
    if (!client->Send(absl::StrCat("X-T", i, ": ", std::string(1024, 'v'), "\r\n"))) break;
    absl::SleepFor(absl::Milliseconds(2));
  }
  response = client->ReadResponse();
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 431);
  EXPECT_THAT(response->body, HasSubstr("trailers exceed the limit of 16384 bytes"));
}

TEST_F(RequestChecksTest, RefusalOfAPipelinedRequestFollowsThePreviousResponse) {
  StartServer();
  std::unique_ptr<TestHttpClient> client = TestHttpClient::Connect(server_->port());
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Send(
      "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
      "POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\nContent-Length: 5\r\n\r\nworld"
      "GET /x HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::optional<TestResponse> first = client->ReadResponse();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->status, 200);
  std::optional<TestResponse> second = client->ReadResponse();
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->status, 400);
  // Nothing after the refused request is served: the stream cannot be trusted any more.
  EXPECT_TRUE(client->WaitForClose());
}

// --- Content-Type for JSON POST bodies (defect 4) -----------------------------------------

TEST_F(RequestChecksTest, PostNotDeclaredAsJsonIs415WhenRequired) {
  StartServer({.require_json_post_body = true});
  const std::string json = R"({"a":1})";
  for (const std::string type :
       {"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
        "application/jsonx", "application/json-seq", "text/json", ""}) {
    SCOPED_TRACE(type);
    const std::string header = type.empty() ? "" : absl::StrCat("Content-Type: ", type, "\r\n");
    ExpectRefused(PostWithLength(header, json), 415, "application/json");
  }
  // Without a content-type header at all.
  ExpectRefused(PostWithLength("", json), 415, "application/json");
  // Two content types.
  ExpectRefused(
      PostWithLength("Content-Type: application/json\r\nContent-Type: text/plain\r\n", json), 415,
      "application/json");
}

TEST_F(RequestChecksTest, PostDeclaredAsJsonIsServedWhenRequired) {
  StartServer({.require_json_post_body = true});
  const std::string json = R"({"a":1})";
  for (const std::string type :
       {"application/json", "Application/JSON", "application/json; charset=utf-8",
        "application/json;charset=UTF-8", "application/json ; charset=\"utf-8\""}) {
    SCOPED_TRACE(type);
    EXPECT_EQ(
        ExpectServed(PostWithLength(absl::StrCat("Content-Type: ", type, "\r\n"), json))["body"],
        json);
  }
  // GET has no body to check.
  ExpectServed("GET /x HTTP/1.1\r\nHost: x\r\n\r\n");
}

TEST_F(RequestChecksTest, NotJsonIsRefusedBeforeTheBodyIsSent) {
  StartServer({.require_json_post_body = true});
  std::unique_ptr<TestHttpClient> client = TestHttpClient::Connect(server_->port());
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Send(
      "POST /x HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 7\r\n"
      "Expect: 100-continue\r\n\r\n"));
  // The refusal, not "100 Continue".
  std::optional<TestResponse> response = client->ReadHead(/*keep_informational=*/true);
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 415);
}

TEST_F(RequestChecksTest, AnyContentTypeIsServedWhenNotRequired) {
  StartServer();
  EXPECT_EQ(ExpectServed(PostWithLength("Content-Type: text/plain\r\n", "hello"))["body"], "hello");
}

// --- The pure functions ---------------------------------------------------------------------

TEST(IsJsonMediaTypeTest, AcceptsApplicationJsonWithParameters) {
  EXPECT_TRUE(IsJsonMediaType("application/json"));
  EXPECT_TRUE(IsJsonMediaType("APPLICATION/Json"));
  EXPECT_TRUE(IsJsonMediaType(" application/json "));
  EXPECT_TRUE(IsJsonMediaType("application/json; charset=utf-8"));
  EXPECT_TRUE(IsJsonMediaType("application/json\t;charset=utf-8"));
  EXPECT_FALSE(IsJsonMediaType(""));
  EXPECT_FALSE(IsJsonMediaType("text/plain"));
  EXPECT_FALSE(IsJsonMediaType("application/jsonp"));
  EXPECT_FALSE(IsJsonMediaType("application/ json"));
  EXPECT_FALSE(IsJsonMediaType("application/json, text/plain"));
  EXPECT_FALSE(IsJsonMediaType("application/problem+json"));
}

TEST(ContainsObsFoldTest, FindsFoldedLinesOnlyInTheHeader) {
  EXPECT_FALSE(ContainsObsFold("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_TRUE(ContainsObsFold("GET / HTTP/1.1\r\nHost: x\r\n y\r\n\r\n"));
  EXPECT_TRUE(ContainsObsFold("GET / HTTP/1.1\r\nHost: x\r\n\ty\r\n\r\n"));
  EXPECT_FALSE(ContainsObsFold("POST / HTTP/1.1\r\nHost: x\r\n\r\n body"));
  EXPECT_FALSE(ContainsObsFold("Host: x\r\n\r\n\tbody"));
  EXPECT_FALSE(ContainsObsFold("\r\n body"));  // an empty field section, then the body
}

TEST(CheckUnfinishedChunkedDataTest, BoundsTheChunkSizeLine) {
  EXPECT_FALSE(CheckUnfinishedChunkedData("", 100).has_value());
  EXPECT_FALSE(CheckUnfinishedChunkedData("\r\n5;a=b", 100).has_value());
  EXPECT_FALSE(CheckUnfinishedChunkedData(std::string(kMaxChunkLineBytes, 'a'), 100).has_value());
  std::optional<Refusal> refusal =
      CheckUnfinishedChunkedData(std::string(kMaxChunkLineBytes + 1, 'a'), 100);
  ASSERT_TRUE(refusal.has_value());
  EXPECT_EQ(refusal->http_status, 400);
  EXPECT_THAT(refusal->error.message(), HasSubstr("chunk-size line"));
}

TEST(CheckUnfinishedChunkedDataTest, BoundsTheTrailerSection) {
  EXPECT_FALSE(CheckUnfinishedChunkedData("\r\n0\r\nX-A: b\r\n", 100).has_value());
  EXPECT_FALSE(
      CheckUnfinishedChunkedData(absl::StrCat("0\r\n", std::string(100, 't')), 100).has_value());
  std::optional<Refusal> refusal =
      CheckUnfinishedChunkedData(absl::StrCat("\r\n0\r\n", std::string(101, 't')), 100);
  ASSERT_TRUE(refusal.has_value());
  EXPECT_EQ(refusal->http_status, 431);
  EXPECT_THAT(refusal->error.message(), HasSubstr("trailers exceed the limit of 100 bytes"));
}

TEST(CheckChunkExtensionsTest, RefusesFromTheLineLimitOn) {
  EXPECT_FALSE(CheckChunkExtensions("").has_value());
  EXPECT_FALSE(CheckChunkExtensions(";a=b").has_value());
  std::optional<Refusal> refusal = CheckChunkExtensions(std::string(kMaxChunkLineBytes, 'e'));
  ASSERT_TRUE(refusal.has_value());
  EXPECT_EQ(refusal->http_status, 400);
}

TEST(CheckTrailersTest, CountsOnlyTheFieldsAfterTheHeader) {
  boost::beast::http::fields fields;
  fields.insert("Host", "x");
  fields.insert("X-Big-Header", std::string(200, 'h'));
  EXPECT_FALSE(CheckTrailers(fields, 2, 100).has_value());
  fields.insert("X-T", std::string(90, 't'));  // 3 + 90 + 4 bytes on the wire
  EXPECT_FALSE(CheckTrailers(fields, 2, 97).has_value());
  std::optional<Refusal> refusal = CheckTrailers(fields, 2, 96);
  ASSERT_TRUE(refusal.has_value());
  EXPECT_EQ(refusal->http_status, 431);
}

TEST(CheckRequestHeaderTest, NamesWhatItRefuses) {
  boost::beast::http::request_header<> header;
  header.method(boost::beast::http::verb::post);
  header.version(11);
  header.set(boost::beast::http::field::host, "x");
  header.set(boost::beast::http::field::transfer_encoding, "gzip");
  std::optional<Refusal> refusal = CheckRequestHeader(header, {});
  ASSERT_TRUE(refusal.has_value());
  EXPECT_EQ(refusal->http_status, 501);
  EXPECT_EQ(refusal->error.message(),
            "transfer-encoding \"gzip\" is not implemented: only \"chunked\" is");
  header.set(boost::beast::http::field::transfer_encoding, "chunked");
  EXPECT_FALSE(CheckRequestHeader(header, {}).has_value());
  refusal = CheckRequestHeader(header, {.require_json_post_body = true});
  ASSERT_TRUE(refusal.has_value());
  EXPECT_EQ(refusal->http_status, 415);
  EXPECT_EQ(refusal->error.message(),
            "the request body must be JSON, sent with content-type: application/json (got no "
            "content-type)");
}

}  // namespace
}  // namespace llmserve::gateway::http
