#include "gateway/admission/global_rate_limiter.h"

#include <array>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/civil_time.h"
#include "common/base/logging.h"

namespace llmserve::gateway {
namespace {

// KEYS: the minute's request and token counters, the day's and the month's token counters.
// ARGV: the four limits (0: none), the request's tokens, the four windows' lifetimes (s).
// Returns 0 when admitted (and counted), else which limit (1-4) it would pass.
constexpr char kAcquireScript[] = R"lua(
local adds = {1, tonumber(ARGV[5]), tonumber(ARGV[5]), tonumber(ARGV[5])}
for i = 1, 4 do
  local limit = tonumber(ARGV[i])
  if limit > 0 and tonumber(redis.call('GET', KEYS[i]) or '0') + adds[i] > limit then
    return i
  end
end
for i = 1, 4 do
  if tonumber(ARGV[i]) > 0 then
    redis.call('INCRBY', KEYS[i], adds[i])
    redis.call('EXPIRE', KEYS[i], ARGV[5 + i])
  end
end
return 0
)lua";

// KEYS as above. ARGV: the four limits, the request delta, the token delta, the four lifetimes.
constexpr char kAdjustScript[] = R"lua(
local adds = {tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[6]), tonumber(ARGV[6])}
for i = 1, 4 do
  if tonumber(ARGV[i]) > 0 and adds[i] ~= 0 then
    redis.call('INCRBY', KEYS[i], adds[i])
    redis.call('EXPIRE', KEYS[i], ARGV[6 + i])
  end
end
return 0
)lua";

constexpr std::array<const char*, 4> kLimitNames = {"requests per minute", "tokens per minute",
                                                    "tokens per day", "tokens per month"};

struct Windows {
  std::array<std::string, 4> keys;
  std::array<int64_t, 4> lifetimes_s;
  // When each window ends.
  std::array<absl::Time, 4> ends;
};

Windows WindowsAt(absl::string_view principal, absl::Time now) {
  const absl::TimeZone utc = absl::UTCTimeZone();
  const absl::CivilSecond second = absl::ToCivilSecond(now, utc);
  const absl::CivilMinute minute(second);
  const absl::CivilDay day(second);
  const absl::CivilMonth month(second);
  // Hex: key names and JWT subjects may hold any character; the braces keep one key's counters
  // in one Redis Cluster slot.
  const std::string prefix = absl::StrCat("llmserve:rl:{", absl::BytesToHexString(principal), "}:");
  Windows windows;
  windows.keys = {absl::StrCat(prefix, "rpm:", absl::FormatCivilTime(minute)),
                  absl::StrCat(prefix, "tpm:", absl::FormatCivilTime(minute)),
                  absl::StrCat(prefix, "day:", absl::FormatCivilTime(day)),
                  absl::StrCat(prefix, "month:", absl::FormatCivilTime(month))};
  windows.ends = {absl::FromCivil(minute + 1, utc), absl::FromCivil(minute + 1, utc),
                  absl::FromCivil(day + 1, utc), absl::FromCivil(month + 1, utc)};
  // Past its end by a margin, so that a late correction still finds it.
  windows.lifetimes_s = {120, 120, 2 * 86400, 32 * 86400};
  return windows;
}

// EVAL of `script` on `windows`: the keys, the limits, then `arguments`, then the lifetimes (the
// order both scripts read their ARGV in).
std::vector<std::string> ScriptCommand(const char* script, const Windows& windows,
                                       const std::array<int64_t, 4>& limits,
                                       std::initializer_list<int64_t> arguments) {
  std::vector<std::string> command = {"EVAL", script, "4"};
  for (const std::string& key : windows.keys) command.push_back(key);
  for (int64_t limit : limits) command.push_back(absl::StrCat(limit));
  for (int64_t argument : arguments) command.push_back(absl::StrCat(argument));
  for (int64_t lifetime : windows.lifetimes_s) command.push_back(absl::StrCat(lifetime));
  return command;
}

}  // namespace

std::array<int64_t, 4> GlobalRateLimiter::WindowLimits() const {
  return {limits_.requests_per_minute, limits_.tokens_per_minute, limits_.tokens_per_day,
          limits_.tokens_per_month};
}

void GlobalRateLimiter::Acquire(absl::string_view principal, int64_t tokens, absl::Time now,
                                Done done) {
  if (tokens < 0) {
    return std::move(done)({.status = absl::InvalidArgumentError("negative token count")});
  }
  const std::array<int64_t, 4> limits = WindowLimits();
  // A request larger than a whole window's allowance can never pass: said at once, no retry.
  for (int i = 1; i < 4; ++i) {
    if (limits[i] > 0 && tokens > limits[i]) {
      return std::move(done)(
          {.status = absl::ResourceExhaustedError(absl::StrCat(
               "the request needs ", tokens, " tokens, more than the key's whole limit of ",
               limits[i], " ", kLimitNames[i], "; waiting cannot help"))});
    }
  }
  const Windows windows = WindowsAt(principal, now);
  redis_->Send(
      ScriptCommand(kAcquireScript, windows, limits, {tokens}),
      [this, principal = std::string(principal), tokens, now, windows,
       done = std::move(done)](absl::StatusOr<RedisReply> reply) mutable {
        if (reply.ok() && reply->type == RedisReply::Type::kError) {
          reply = absl::UnavailableError(absl::StrCat("Redis: ", reply->text));
        }
        if (!reply.ok() || reply->type != RedisReply::Type::kInteger || reply->integer < 0 ||
            reply->integer > 4) {
          return OnRedisFailure(
              principal, tokens, now,
              reply.ok() ? absl::UnavailableError("Redis: an unexpected reply") : reply.status(),
              std::move(done));
        }
        if (reply->integer == 0) return std::move(done)({});
        const int hit = static_cast<int>(reply->integer) - 1;
        const absl::Duration wait = windows.ends[hit] - now;
        std::move(done)({.status = absl::ResourceExhaustedError(absl::StrCat(
                             "rate limit: the key's ", kLimitNames[hit],
                             " are used up (across all gateway "
                             "replicas); the window ends in ",
                             absl::ToInt64Seconds(absl::Ceil(wait, absl::Seconds(1))), " s")),
                         .retry_after = wait});
      });
}

void GlobalRateLimiter::OnRedisFailure(absl::string_view principal, int64_t tokens, absl::Time now,
                                       const absl::Status& error, Done done) {
  if (metrics_ != nullptr) metrics_->OnRateLimitBackendError();
  if (limits_.failure_policy == RedisFailurePolicy::kClosed) {
    return std::move(done)({.status = absl::UnavailableError(absl::StrCat(
                                "rate limits cannot be checked now (", error.message(),
                                "); refused by --redis_failure_policy=closed, retry shortly")),
                            .retry_after = absl::Seconds(1)});
  }
  if (fallback_ == nullptr) return std::move(done)({});
  std::move(done)(fallback_->TryAcquire(principal, 1, tokens, now));
}

void GlobalRateLimiter::Adjust(absl::string_view principal, int64_t requests, int64_t tokens,
                               absl::Time admitted_at) {
  if (requests == 0 && tokens == 0) return;
  const Windows windows = WindowsAt(principal, admitted_at);

  GatewayMetrics* metrics = metrics_;
  redis_->Send(
      ScriptCommand(kAdjustScript, windows, WindowLimits(), {requests, tokens}),
      [metrics](absl::StatusOr<RedisReply> reply) {
        // Lost while Redis is away: the windows keep the reservation (they err on the safe side).
        if ((!reply.ok() || reply->type == RedisReply::Type::kError) && metrics != nullptr) {
          metrics->OnRateLimitBackendError();
        }
      });
}

}  // namespace llmserve::gateway
