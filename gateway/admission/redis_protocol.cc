#include "gateway/admission/redis_protocol.h"

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace llmserve::gateway {
namespace {

constexpr int64_t kMaxBulkBytes = int64_t{64} << 20;
constexpr int64_t kMaxArrayElements = 1 << 20;
constexpr int kMaxDepth = 8;

// The line at `pos` up to its CRLF: false when the CRLF has not arrived yet.
bool Line(absl::string_view buffer, size_t pos, absl::string_view* line, size_t* next) {
  const size_t end = buffer.find("\r\n", pos);
  if (end == absl::string_view::npos) return false;
  *line = buffer.substr(pos, end - pos);
  *next = end + 2;
  return true;
}

absl::StatusOr<size_t> Parse(absl::string_view buffer, size_t pos, int depth, RedisReply* reply) {
  if (depth > kMaxDepth) return absl::InvalidArgumentError("RESP: nesting too deep");
  if (pos >= buffer.size()) return 0;
  absl::string_view line;
  size_t next = 0;
  if (!Line(buffer, pos + 1, &line, &next)) return 0;
  const char kind = buffer[pos];
  switch (kind) {
    case '+':
    case '-':
      reply->type = kind == '+' ? RedisReply::Type::kStatus : RedisReply::Type::kError;
      reply->text = std::string(line);
      return next;
    case ':':
      reply->type = RedisReply::Type::kInteger;
      if (!absl::SimpleAtoi(line, &reply->integer)) {
        return absl::InvalidArgumentError("RESP: a malformed integer");
      }
      return next;
    case '$': {
      int64_t length = 0;
      if (!absl::SimpleAtoi(line, &length) || length < -1 || length > kMaxBulkBytes) {
        return absl::InvalidArgumentError("RESP: a malformed bulk length");
      }
      if (length == -1) {
        reply->type = RedisReply::Type::kNil;
        return next;
      }
      if (buffer.size() < next + static_cast<size_t>(length) + 2) return 0;
      if (buffer.substr(next + length, 2) != "\r\n") {
        return absl::InvalidArgumentError("RESP: a bulk string without its CRLF");
      }
      reply->type = RedisReply::Type::kBulk;
      reply->text = std::string(buffer.substr(next, length));
      return next + length + 2;
    }
    case '*': {
      int64_t count = 0;
      if (!absl::SimpleAtoi(line, &count) || count < -1 || count > kMaxArrayElements) {
        return absl::InvalidArgumentError("RESP: a malformed array length");
      }
      if (count == -1) {
        reply->type = RedisReply::Type::kNil;
        return next;
      }
      reply->type = RedisReply::Type::kArray;
      reply->elements.clear();
      for (int64_t i = 0; i < count; ++i) {
        RedisReply element;
        absl::StatusOr<size_t> taken = Parse(buffer, next, depth + 1, &element);
        if (!taken.ok() || *taken == 0) return taken;
        next = *taken;
        reply->elements.push_back(std::move(element));
      }
      return next;
    }
    default:
      return absl::InvalidArgumentError(absl::StrCat("RESP: unknown reply type byte ",
                                                     static_cast<int>(static_cast<uint8_t>(kind))));
  }
}

}  // namespace

std::string EncodeRedisCommand(const std::vector<std::string>& arguments) {
  std::string out = absl::StrCat("*", arguments.size(), "\r\n");
  for (const std::string& argument : arguments) {
    absl::StrAppend(&out, "$", argument.size(), "\r\n", argument, "\r\n");
  }
  return out;
}

absl::StatusOr<size_t> ParseRedisReply(absl::string_view buffer, RedisReply* reply) {
  return Parse(buffer, 0, 0, reply);
}

absl::StatusOr<RedisUrl> ParseRedisUrl(absl::string_view url) {
  absl::string_view rest = url;
  if (!absl::ConsumePrefix(&rest, "redis://")) {
    return absl::InvalidArgumentError(
        "--redis_url: expected redis://[[user]:password@]host[:port][/db] (rediss:// is not "
        "supported)");
  }
  RedisUrl parsed;
  if (const size_t at = rest.rfind('@'); at != absl::string_view::npos) {
    absl::string_view credentials = rest.substr(0, at);
    rest = rest.substr(at + 1);
    const size_t colon = credentials.find(':');
    if (colon == absl::string_view::npos) {
      parsed.password = std::string(credentials);
    } else {
      parsed.username = std::string(credentials.substr(0, colon));
      parsed.password = std::string(credentials.substr(colon + 1));
    }
  }
  absl::string_view authority = rest;
  if (const size_t slash = rest.find('/'); slash != absl::string_view::npos) {
    authority = rest.substr(0, slash);
    absl::string_view db = rest.substr(slash + 1);
    if (!db.empty() && (!absl::SimpleAtoi(db, &parsed.db) || parsed.db < 0 || parsed.db > 15)) {
      return absl::InvalidArgumentError("--redis_url: the database after '/' must be 0-15");
    }
  }
  const size_t colon = authority.rfind(':');
  parsed.host = std::string(authority.substr(0, colon));
  if (colon != absl::string_view::npos) parsed.port = std::string(authority.substr(colon + 1));
  int port = 0;
  if (parsed.host.empty() || !absl::SimpleAtoi(parsed.port, &port) || port < 1 || port > 65535) {
    return absl::InvalidArgumentError("--redis_url: needs a host and a port in [1, 65535]");
  }
  return parsed;
}

}  // namespace llmserve::gateway
