// llmserve-bench's HTTP response parser, SSE parser, target parsing and OpenAI request bodies.

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tools/bench/http_client.h"
#include "tools/bench/openai_client.h"
#include "tools/bench/sse_parser.h"

namespace llmserve::tools {
namespace {

struct Parsed {
  absl::Status status;
  int head_calls = 0;
  int status_code = 0;
  std::string body;
  bool complete = false;
  bool reusable = false;
};

// Feeds `response` split into pieces of `piece` bytes (0: whole), then EOF when `eof`.
Parsed Parse(const std::string& response, size_t piece = 0, bool eof = false) {
  Parsed parsed;
  HttpResponseParser parser(
      [&](const HttpResponseHead& head) {
        ++parsed.head_calls;
        parsed.status_code = head.status;
      },
      [&](absl::string_view bytes) {
        // The head is always reported before any of the body.
        EXPECT_EQ(parsed.head_calls, 1);
        parsed.body.append(bytes.data(), bytes.size());
      });
  const size_t step = piece == 0 ? response.size() : piece;
  for (size_t at = 0; at < response.size() && parsed.status.ok(); at += step) {
    parsed.status = parser.Feed(absl::string_view(response).substr(at, step));
  }
  if (eof && parsed.status.ok()) parsed.status = parser.FeedEof();
  parsed.complete = parser.complete();
  parsed.reusable = parser.reusable();
  return parsed;
}

TEST(HttpResponseParserTest, ContentLengthChunkedAndEofFramingsSplitAnywhere) {
  const std::string length = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
  const std::string chunked =
      "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3;ext=1\r\nhel\r\n2\r\nlo\r\n"
      "0\r\nx-trailer: 1\r\n\r\n";
  for (size_t piece : {0, 1, 2, 7}) {
    for (const std::string& response : {length, chunked}) {
      const Parsed parsed = Parse(response, piece);
      ASSERT_TRUE(parsed.status.ok()) << parsed.status << " piece " << piece;
      EXPECT_TRUE(parsed.complete);
      EXPECT_TRUE(parsed.reusable);
      EXPECT_EQ(parsed.status_code, 200);
      EXPECT_EQ(parsed.body, "hello");
    }
  }
  // No length: the body runs to the end of the connection, which then is not reusable.
  const Parsed to_eof = Parse("HTTP/1.1 200 OK\r\n\r\nhello", 3, /*eof=*/true);
  ASSERT_TRUE(to_eof.status.ok()) << to_eof.status;
  EXPECT_TRUE(to_eof.complete);
  EXPECT_FALSE(to_eof.reusable);
  EXPECT_EQ(to_eof.body, "hello");
}

TEST(HttpResponseParserTest, InterimResponsesAndConnectionClose) {
  const Parsed parsed = Parse(
      "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 429 Too Many\r\nConnection: close\r\n"
      "Content-Length: 2\r\n\r\n{}");
  ASSERT_TRUE(parsed.status.ok()) << parsed.status;
  EXPECT_EQ(parsed.head_calls, 1);
  EXPECT_EQ(parsed.status_code, 429);
  EXPECT_FALSE(parsed.reusable);
  EXPECT_TRUE(Parse("HTTP/1.1 204 No Content\r\n\r\n").complete);
  EXPECT_FALSE(Parse("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n").reusable);
}

TEST(HttpResponseParserTest, MalformedResponsesAreErrors) {
  EXPECT_FALSE(Parse("SSH-2.0-OpenSSH\r\n\r\n").status.ok());
  EXPECT_FALSE(Parse("HTTP/1.1 200 OK\r\nno colon\r\n\r\n").status.ok());
  EXPECT_FALSE(Parse("HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n").status.ok());
  EXPECT_FALSE(Parse("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n").status.ok());
  EXPECT_FALSE(
      Parse("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n").status.ok());
  EXPECT_FALSE(Parse("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n").status.ok());
  EXPECT_FALSE(Parse("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nab").status.ok());
  EXPECT_FALSE(Parse("HTTP/1.1 200 OK\r\nX: " + std::string(70000, 'a')).status.ok());
  // Cut short: the connection closing mid-body is UNAVAILABLE.
  const Parsed cut = Parse("HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nhel", 0, /*eof=*/true);
  EXPECT_TRUE(absl::IsUnavailable(cut.status)) << cut.status;
  EXPECT_FALSE(cut.complete);
}

TEST(ParseHttpTargetTest, AcceptsHostPortAndNamesWhatIsWrong) {
  absl::StatusOr<HttpTarget> plain = ParseHttpTarget("127.0.0.1:8080");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->host, "127.0.0.1");
  EXPECT_EQ(plain->port, 8080);
  absl::StatusOr<HttpTarget> url = ParseHttpTarget("http://gateway.svc:80/");
  ASSERT_TRUE(url.ok());
  EXPECT_EQ(url->host, "gateway.svc");
  absl::StatusOr<HttpTarget> v6 = ParseHttpTarget("[::1]:9000");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "::1");
  EXPECT_NE(ParseHttpTarget("https://x:443").status().message().find("https"), std::string::npos);
  EXPECT_NE(ParseHttpTarget("x:80/v1").status().message().find("path"), std::string::npos);
  for (const char* bad : {"x", "x:0", "x:70000", ":80", "x:port", "[::1:80"}) {
    EXPECT_FALSE(ParseHttpTarget(bad).ok()) << bad;
  }
}

TEST(SseParserTest, EventsFromAnyLineEndingsAndSplits) {
  const std::string stream =
      ": comment\r\ndata: {\"a\":1}\r\n\r\nevent: error\ndata: line1\ndata:line2\n\n"
      "data: [DONE]\r\rdata: no end yet";
  for (size_t piece = 1; piece <= stream.size(); ++piece) {
    std::vector<SseEvent> events;
    SseParser parser([&](const SseEvent& event) { events.push_back(event); });
    for (size_t at = 0; at < stream.size(); at += piece) {
      parser.Feed(absl::string_view(stream).substr(at, piece));
    }
    ASSERT_EQ(events.size(), 3u) << "piece " << piece;
    EXPECT_EQ(events[0].data, "{\"a\":1}");
    EXPECT_EQ(events[1].event, "error");
    EXPECT_EQ(events[1].data, "line1\nline2");
    EXPECT_EQ(events[2].data, "[DONE]");
    EXPECT_EQ(parser.pending_bytes(), std::string("data: no end yet").size());
  }
}

TEST(OpenAiClientTest, RequestBodiesAskForExactLengthsAndUsage) {
  OpenAiClient completions({.model = "m", .extra_body = {{"temperature", 0.7}, {"seed", 3}}});
  const BenchRequest ids{.prompt_ids = {1, 2, 3}, .output_len = 9};
  const nlohmann::json body = completions.RequestBody(ids);
  EXPECT_EQ(body["model"], "m");
  EXPECT_EQ(body["prompt"], nlohmann::json({1, 2, 3}));
  EXPECT_EQ(body["max_tokens"], 9);
  EXPECT_EQ(body["stream"], true);
  EXPECT_EQ(body["stream_options"]["include_usage"], true);
  EXPECT_EQ(body["ignore_eos"], true);
  EXPECT_EQ(body["temperature"], 0.7);  // extra_body wins
  EXPECT_EQ(body["seed"], 3);
  EXPECT_EQ(completions.RequestBody({.prompt_text = "hi", .output_len = 2})["prompt"], "hi");

  OpenAiClient chat({.endpoint = OpenAiEndpoint::kChat, .model = "m"});
  const nlohmann::json text = chat.RequestBody({.prompt_text = "hello", .output_len = 4});
  EXPECT_EQ(text["messages"], nlohmann::json::parse(R"([{"role": "user", "content": "hello"}])"));
  EXPECT_EQ(text["max_completion_tokens"], 4);
  EXPECT_FALSE(text.contains("prompt"));
  const nlohmann::json turns =
      chat.RequestBody({.messages = {{"system", "be brief"}, {"user", "hi"}}, .output_len = 1});
  EXPECT_EQ(turns["messages"].size(), 2u);
  EXPECT_EQ(turns["messages"][0]["role"], "system");
}

}  // namespace
}  // namespace llmserve::tools
