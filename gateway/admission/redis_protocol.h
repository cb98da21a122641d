// Redis's wire protocol (RESP2), the part a client needs: commands as arrays of bulk strings, and
// replies parsed incrementally from what the socket has delivered so far.

#ifndef LLMSERVE_GATEWAY_ADMISSION_REDIS_PROTOCOL_H_
#define LLMSERVE_GATEWAY_ADMISSION_REDIS_PROTOCOL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace llmserve::gateway {

struct RedisReply {
  enum class Type { kStatus, kError, kInteger, kBulk, kNil, kArray };
  Type type = Type::kNil;
  int64_t integer = 0;
  std::string text;  // status, error or bulk string
  std::vector<RedisReply> elements;
};

// *N\r\n$len\r\narg\r\n... (binary-safe).
std::string EncodeRedisCommand(const std::vector<std::string>& arguments);

// One reply from the front of `buffer`. Returns the bytes it took, 0 when the buffer holds only
// part of a reply (read more), or INVALID_ARGUMENT for bytes that are not RESP (the connection
// must be dropped). Bulk strings and arrays beyond 64 MiB / 1M elements, and nesting beyond 8
// levels, are refused.
absl::StatusOr<size_t> ParseRedisReply(absl::string_view buffer, RedisReply* reply);

struct RedisUrl {
  std::string host;
  std::string port = "6379";
  std::string username;
  std::string password;
  int db = 0;
};

// redis://[[user]:password@]host[:port][/db]: INVALID_ARGUMENT naming what is wrong (never the
// password).
absl::StatusOr<RedisUrl> ParseRedisUrl(absl::string_view url);

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_ADMISSION_REDIS_PROTOCOL_H_
