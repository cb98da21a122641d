// RESP2 encoding and incremental parsing, and redis:// URLs.

#include "gateway/admission/redis_protocol.h"

#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace llmserve::gateway {
namespace {

TEST(RedisProtocolTest, CommandsAreArraysOfBinarySafeBulkStrings) {
  EXPECT_EQ(EncodeRedisCommand({"GET", std::string("a\0\r\nb", 5)}),
            std::string("*2\r\n$3\r\nGET\r\n$5\r\na\0\r\nb\r\n", 24));
}

TEST(RedisProtocolTest, ParsesEveryReplyType) {
  RedisReply reply;
  EXPECT_EQ(*ParseRedisReply("+OK\r\n", &reply), 5u);
  EXPECT_EQ(reply.type, RedisReply::Type::kStatus);
  EXPECT_EQ(reply.text, "OK");
  EXPECT_EQ(*ParseRedisReply("-ERR bad\r\n", &reply), 10u);
  EXPECT_EQ(reply.type, RedisReply::Type::kError);
  EXPECT_EQ(*ParseRedisReply(":-42\r\n", &reply), 6u);
  EXPECT_EQ(reply.integer, -42);
  EXPECT_EQ(*ParseRedisReply("$-1\r\n", &reply), 5u);
  EXPECT_EQ(reply.type, RedisReply::Type::kNil);
  EXPECT_EQ(*ParseRedisReply("$4\r\na\r\nb\r\n", &reply), 10u);
  EXPECT_EQ(reply.text, "a\r\nb");  // the length decides, not the CRLF inside
  EXPECT_EQ(*ParseRedisReply("*2\r\n:1\r\n$1\r\nx\r\n:9\r\n", &reply), 15u);  // one reply of two
  ASSERT_EQ(reply.elements.size(), 2u);
  EXPECT_EQ(reply.elements[1].text, "x");
}

TEST(RedisProtocolTest, APartialReplyAsksForMoreAtEveryCut) {
  const std::string whole = "*3\r\n:1\r\n$5\r\nhello\r\n+OK\r\n";
  for (size_t cut = 0; cut < whole.size(); ++cut) {
    RedisReply reply;
    absl::StatusOr<size_t> taken = ParseRedisReply(whole.substr(0, cut), &reply);
    ASSERT_TRUE(taken.ok()) << cut;
    EXPECT_EQ(*taken, 0u) << cut;
  }
  RedisReply reply;
  EXPECT_EQ(*ParseRedisReply(whole, &reply), whole.size());
}

TEST(RedisProtocolTest, BytesThatAreNotRespAreRefused) {
  for (const char* bad : {"?x\r\n", ":12a\r\n", "$-2\r\n", "$3\r\nabcXY", "*-5\r\n",
                          "$99999999999\r\n", "*9999999\r\n"}) {
    RedisReply reply;
    EXPECT_FALSE(ParseRedisReply(bad, &reply).ok()) << bad;
  }
  std::string deep;
  for (int i = 0; i < 20; ++i) deep += "*1\r\n";
  deep += ":1\r\n";
  RedisReply reply;
  EXPECT_FALSE(ParseRedisReply(deep, &reply).ok());
}

TEST(RedisUrlTest, ParsesHostPortCredentialsAndDatabase) {
  RedisUrl url = *ParseRedisUrl("redis://user:p@ss:word@cache.example:6380/3");
  EXPECT_EQ(url.host, "cache.example");
  EXPECT_EQ(url.port, "6380");
  EXPECT_EQ(url.username, "user");
  EXPECT_EQ(url.password, "p@ss:word");
  EXPECT_EQ(url.db, 3);
  RedisUrl plain = *ParseRedisUrl("redis://localhost");
  EXPECT_EQ(plain.port, "6379");
  EXPECT_EQ(plain.db, 0);
  EXPECT_EQ(ParseRedisUrl("redis://:secret@h:1")->password, "secret");
  for (const char* bad : {"localhost:6379", "rediss://h:6379", "redis://:6379", "redis://h:0",
                          "redis://h:6379/16", "redis://h:6379/x"}) {
    absl::StatusOr<RedisUrl> parsed = ParseRedisUrl(bad);
    EXPECT_FALSE(parsed.ok()) << bad;
    if (!parsed.ok()) {
      EXPECT_TRUE(absl::StartsWith(parsed.status().message(), "--redis_url"));
    }
  }
  absl::Status hidden = ParseRedisUrl("redis://:topsecret@h:0").status();
  EXPECT_FALSE(absl::StrContains(hidden.message(), "topsecret"));
}

}  // namespace
}  // namespace llmserve::gateway
