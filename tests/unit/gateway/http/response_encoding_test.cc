#include "gateway/http/response_encoding.h"

#include <nlohmann/json.hpp>
#include <string>

#include "gateway/http/sse.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace llmserve::gateway::http {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

TEST(ResponseEncodingTest, HeadWithContentLength) {
  const std::string head =
      EncodeResponseHead(200, {{"content-type", "text/plain"}}, {.content_length = 5});
  EXPECT_THAT(head, StartsWith("HTTP/1.1 200 OK\r\ndate: "));
  EXPECT_THAT(head, HasSubstr("\r\ncontent-type: text/plain\r\n"));
  EXPECT_THAT(head, HasSubstr("\r\ncontent-length: 5\r\n"));
  EXPECT_THAT(head, Not(HasSubstr("connection")));
  EXPECT_THAT(head, testing::EndsWith("\r\n\r\n"));
}

TEST(ResponseEncodingTest, ChunkedAndClose) {
  const std::string head =
      EncodeResponseHead(404, {}, {.framing = BodyFraming::kChunked, .keep_alive = false});
  EXPECT_THAT(head, StartsWith("HTTP/1.1 404 Not Found\r\n"));
  EXPECT_THAT(head, HasSubstr("transfer-encoding: chunked\r\n"));
  EXPECT_THAT(head, HasSubstr("connection: close\r\n"));
  EXPECT_THAT(head, Not(HasSubstr("content-length")));
}

TEST(ResponseEncodingTest, UnknownStatusHasEmptyReason) {
  EXPECT_THAT(EncodeResponseHead(299, {}, {}), StartsWith("HTTP/1.1 299 \r\n"));
}

TEST(ResponseEncodingTest, DropsServerOwnedAndInvalidHeaders) {
  const std::string head = EncodeResponseHead(200,
                                              {{"Content-Length", "99"},
                                               {"Transfer-Encoding", "gzip"},
                                               {"Connection", "keep-alive"},
                                               {"x-evil", "a\r\nset-cookie: b"},
                                               {"bad name", "v"},
                                               {"", "v"},
                                               {"x-ok", "fine"}},
                                              {.content_length = 2});
  EXPECT_THAT(head, Not(HasSubstr("99")));
  EXPECT_THAT(head, Not(HasSubstr("gzip")));
  EXPECT_THAT(head, Not(HasSubstr("keep-alive")));
  EXPECT_THAT(head, Not(HasSubstr("set-cookie")));
  EXPECT_THAT(head, Not(HasSubstr("bad name")));
  EXPECT_THAT(head, HasSubstr("x-ok: fine\r\n"));
  EXPECT_THAT(head, HasSubstr("content-length: 2\r\n"));
}

TEST(ResponseEncodingTest, HeaderValidation) {
  EXPECT_TRUE(IsValidHeaderName("x-request-id"));
  EXPECT_FALSE(IsValidHeaderName("x:y"));
  EXPECT_FALSE(IsValidHeaderName(""));
  EXPECT_TRUE(IsValidHeaderValue("text/event-stream; charset=utf-8"));
  EXPECT_FALSE(IsValidHeaderValue("a\nb"));
  EXPECT_FALSE(IsValidHeaderValue(absl::string_view("a\0b", 3)));
}

TEST(ResponseEncodingTest, Chunks) {
  EXPECT_EQ(EncodeChunk("hello"), "5\r\nhello\r\n");
  EXPECT_EQ(EncodeChunk(std::string(26, 'z')), "1a\r\n" + std::string(26, 'z') + "\r\n");
  EXPECT_EQ(EncodeChunk(""), "");
  EXPECT_EQ(kLastChunk, "0\r\n\r\n");
}

TEST(ResponseEncodingTest, StatusesWithoutBody) {
  EXPECT_TRUE(StatusHasNoBody(204));
  EXPECT_TRUE(StatusHasNoBody(304));
  EXPECT_TRUE(StatusHasNoBody(100));
  EXPECT_FALSE(StatusHasNoBody(200));
  EXPECT_FALSE(StatusHasNoBody(500));
}

TEST(ResponseEncodingTest, ErrorResponseIsOpenAiJson) {
  const std::string response =
      EncodeErrorResponse(413, absl::InvalidArgumentError("too big"), /*head_request=*/false);
  EXPECT_THAT(response, StartsWith("HTTP/1.1 413 Payload Too Large\r\n"));
  EXPECT_THAT(response, HasSubstr("connection: close\r\n"));
  EXPECT_THAT(response, HasSubstr("content-type: application/json\r\n"));
  const std::string body = response.substr(response.find("\r\n\r\n") + 4);
  const nlohmann::json json = nlohmann::json::parse(body);
  EXPECT_EQ(json["error"]["message"], "too big");
  EXPECT_EQ(json["error"]["type"], "invalid_request_error");
  EXPECT_EQ(json["error"]["code"], "invalid_argument");
  EXPECT_THAT(response, HasSubstr("content-length: " + std::to_string(body.size())));
  const std::string head_only =
      EncodeErrorResponse(413, absl::InvalidArgumentError("too big"), /*head_request=*/true);
  EXPECT_THAT(head_only, testing::EndsWith("\r\n\r\n"));
}

TEST(SseTest, FormatsEvents) {
  EXPECT_EQ(FormatSseEvent("{\"a\":1}"), "data: {\"a\":1}\n\n");
  EXPECT_EQ(FormatSseEvent("x\ny\r\nz\rw"), "data: x\ndata: y\ndata: z\ndata: w\n\n");
  EXPECT_EQ(FormatSseEvent(""), "data: \n\n");
  EXPECT_EQ(kSseDone, "data: [DONE]\n\n");
}

}  // namespace
}  // namespace llmserve::gateway::http
