// Query-of-death protection's parts, without workers or clocks (times are passed in): the bounded
// quarantine, the request fingerprint, the retry rule, the classification of a broken
// connection, and the guard that joins them.

#include "gateway/pipeline/query_of_death.h"

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gateway/pipeline/quarantine.h"
#include "gateway/pipeline/request_fingerprint.h"
#include "gateway/pipeline/retry_policy.h"
#include "gateway/router/worker_call_failure.h"
#include "gtest/gtest.h"

namespace llmserve::gateway {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1'700'000'000);

TEST(QuarantineTest, KeepsAFingerprintForItsDurationOnly) {
  Quarantine quarantine(absl::Minutes(5), 10);
  EXPECT_FALSE(quarantine.Until(1, kStart).has_value());
  quarantine.Add(1, kStart);
  EXPECT_EQ(quarantine.Until(1, kStart + absl::Minutes(1)), kStart + absl::Minutes(5));
  EXPECT_FALSE(quarantine.Until(2, kStart + absl::Minutes(1)).has_value());
  EXPECT_FALSE(quarantine.Until(1, kStart + absl::Minutes(5)).has_value());
  EXPECT_EQ(quarantine.size(kStart + absl::Minutes(5)), 0u);
}

TEST(QuarantineTest, AddingAgainRestartsTheQuarantine) {
  Quarantine quarantine(absl::Minutes(5), 10);
  quarantine.Add(1, kStart);
  quarantine.Add(2, kStart + absl::Minutes(1));
  quarantine.Add(1, kStart + absl::Minutes(4));
  // 2 expires first now, although 1 went in first.
  EXPECT_FALSE(quarantine.Until(2, kStart + absl::Minutes(6)).has_value());
  EXPECT_EQ(quarantine.Until(1, kStart + absl::Minutes(6)), kStart + absl::Minutes(9));
  EXPECT_EQ(quarantine.size(kStart + absl::Minutes(6)), 1u);
}

TEST(QuarantineTest, StaysWithinItsCapacityDroppingTheOldest) {
  Quarantine quarantine(absl::Hours(1), 3);
  for (uint64_t fingerprint = 0; fingerprint < 1000; ++fingerprint) {
    quarantine.Add(fingerprint, kStart + absl::Seconds(fingerprint));
  }
  const absl::Time now = kStart + absl::Seconds(1000);
  EXPECT_EQ(quarantine.size(now), 3u);
  EXPECT_TRUE(quarantine.Until(999, now).has_value());
  EXPECT_TRUE(quarantine.Until(997, now).has_value());
  EXPECT_FALSE(quarantine.Until(996, now).has_value());
}

worker::v1::GenerateRequest Request() {
  worker::v1::GenerateRequest request;
  request.set_request_id("r1#0");
  for (int32_t id : {5, 6, 7, 8}) request.add_prompt_token_ids(id);
  request.set_max_tokens(8);
  request.mutable_sampling()->set_temperature(0.5);
  request.mutable_sampling()->set_seed(42);
  request.mutable_sampling()->set_top_k(20);
  request.mutable_structured_output()->set_regex("((a?){0,256}){0,256}");
  return request;
}

TEST(RequestFingerprintTest, IgnoresWhatCannotChangeHowTheWorkerRunsIt) {
  const uint64_t base = RequestFingerprint("tiny", Request());
  EXPECT_EQ(RequestFingerprint("tiny", Request()), base);
  worker::v1::GenerateRequest other = Request();
  other.set_request_id("another#7");
  other.set_cache_salt("tenant-b");
  other.set_priority(5);
  other.mutable_sampling()->set_seed(43);
  EXPECT_EQ(RequestFingerprint("tiny", other), base);
}

TEST(RequestFingerprintTest, DiffersWithModelPromptSamplingStoppingAndConstraint) {
  const uint64_t base = RequestFingerprint("tiny", Request());
  EXPECT_NE(RequestFingerprint("other-model", Request()), base);
  worker::v1::GenerateRequest request = Request();
  request.add_prompt_token_ids(9);
  EXPECT_NE(RequestFingerprint("tiny", request), base);
  request = Request();
  request.mutable_sampling()->set_temperature(0.6);
  EXPECT_NE(RequestFingerprint("tiny", request), base);
  request = Request();
  request.mutable_sampling()->set_top_k(21);
  EXPECT_NE(RequestFingerprint("tiny", request), base);
  request = Request();
  request.set_max_tokens(9);
  EXPECT_NE(RequestFingerprint("tiny", request), base);
  request = Request();
  request.mutable_structured_output()->set_regex("a+");
  EXPECT_NE(RequestFingerprint("tiny", request), base);
}

TEST(WorkerCallFailureTest, TellsABrokenConnectionFromARefusal) {
  // gRPC 1.51's words for a connection that broke under a call.
  EXPECT_TRUE(IsBrokenConnectionMessage("Socket closed"));
  EXPECT_TRUE(IsBrokenConnectionMessage("recvmsg:Connection reset by peer"));
  EXPECT_TRUE(IsBrokenConnectionMessage("sendmsg:Broken pipe"));
  // A worker's own refusals, a failed connect, a message quoting these words.
  EXPECT_FALSE(IsBrokenConnectionMessage(
      "the worker is draining (shutting down) and accepts no new requests; retry on another "
      "worker"));
  EXPECT_FALSE(IsBrokenConnectionMessage(
      "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: Failed to "
      "connect to remote host: Connection refused"));
  EXPECT_FALSE(IsBrokenConnectionMessage("request_id \"Socket closed\" is already running"));
  EXPECT_FALSE(IsBrokenConnectionMessage(""));

  const absl::Status lost = WorkerConnectionLost("10.0.0.1:50051", "Socket closed");
  EXPECT_TRUE(absl::IsUnavailable(lost));
  EXPECT_TRUE(IsWorkerConnectionLost(lost));
  EXPECT_NE(lost.message().find("10.0.0.1:50051"), absl::string_view::npos);
  EXPECT_NE(lost.message().find("Socket closed"), absl::string_view::npos);
  EXPECT_EQ(WorkerConnectionLostCause(lost), "Socket closed");
  EXPECT_FALSE(IsWorkerConnectionLost(absl::UnavailableError("Socket closed")));
  EXPECT_EQ(WorkerConnectionLostCause(absl::UnavailableError("Socket closed")), "");
}

TEST(RetryPolicyTest, OrdinaryFailuresBeforeTheFirstTokenAreRetried) {
  const RetryLimits limits{.max_attempts = 3, .crash_retries = 0};
  RetryVerdict draining = DecideRetry({.status = absl::UnavailableError("draining")}, limits);
  EXPECT_TRUE(draining.retry);
  EXPECT_TRUE(draining.report_failure);
  EXPECT_FALSE(draining.worker_crashed);
  EXPECT_FALSE(draining.quarantine);
  RetryVerdict overload = DecideRetry({.status = absl::ResourceExhaustedError("full")}, limits);
  EXPECT_TRUE(overload.retry);
  EXPECT_FALSE(overload.report_failure);  // overload is no failure of the worker
  EXPECT_FALSE(DecideRetry({.status = absl::InvalidArgumentError("bad")}, limits).retry);
  EXPECT_FALSE(DecideRetry({.status = absl::UnavailableError("x"), .attempts = 3}, limits).retry);
  RetryVerdict after_tokens =
      DecideRetry({.status = absl::UnavailableError("x"), .received_tokens = true}, limits);
  EXPECT_FALSE(after_tokens.retry);
  EXPECT_FALSE(after_tokens.quarantine);
}

TEST(RetryPolicyTest, AWorkerThatWentAwayIsRetriedOnlyWithinCrashRetries) {
  const absl::Status lost = WorkerConnectionLost("a:1", "Socket closed");
  RetryVerdict safest = DecideRetry({.status = lost, .attempts = 1, .crashes = 1},
                                    {.max_attempts = 3, .crash_retries = 0});
  EXPECT_TRUE(safest.worker_crashed);
  EXPECT_FALSE(safest.retry);
  EXPECT_TRUE(safest.report_failure);
  EXPECT_TRUE(safest.quarantine);

  const RetryLimits once{.max_attempts = 3, .crash_retries = 1};
  RetryVerdict first = DecideRetry({.status = lost, .attempts = 1, .crashes = 1}, once);
  EXPECT_TRUE(first.retry);
  EXPECT_FALSE(first.quarantine);
  RetryVerdict second = DecideRetry({.status = lost, .attempts = 2, .crashes = 2}, once);
  EXPECT_FALSE(second.retry);
  EXPECT_TRUE(second.quarantine);
  // max_attempts still bounds it.
  EXPECT_FALSE(DecideRetry({.status = lost, .attempts = 1, .crashes = 1},
                           {.max_attempts = 1, .crash_retries = 1})
                   .retry);
  // After the first token: never retried, and quarantined.
  RetryVerdict streaming =
      DecideRetry({.status = lost, .received_tokens = true, .attempts = 1, .crashes = 1}, once);
  EXPECT_FALSE(streaming.retry);
  EXPECT_TRUE(streaming.quarantine);
}

TEST(QueryOfDeathGuardTest, QuarantinesARequestGivenUpOnAndRefusesItUntilItExpires) {
  QueryOfDeathGuard guard({.crash_retries = 0, .quarantine = absl::Minutes(5)}, nullptr);
  EXPECT_TRUE(guard.Check(7, "r1", kStart).ok());
  // Retried: not quarantined.
  guard.OnWorkerCrash(7, "r1", "a:1", "Socket closed", /*retried=*/true, kStart);
  EXPECT_TRUE(guard.Check(7, "r2", kStart).ok());
  guard.OnWorkerCrash(7, "r1", "b:1", "Socket closed", /*retried=*/false, kStart);
  const absl::Status refused = guard.Check(7, "r3", kStart + absl::Minutes(1));
  EXPECT_TRUE(absl::IsUnavailable(refused));
  EXPECT_NE(refused.message().find("made a worker fail"), absl::string_view::npos) << refused;
  EXPECT_NE(refused.message().find("240 s"), absl::string_view::npos) << refused;
  EXPECT_TRUE(guard.Check(8, "r4", kStart + absl::Minutes(1)).ok());
  EXPECT_TRUE(guard.Check(7, "r5", kStart + absl::Minutes(5)).ok());
  EXPECT_EQ(guard.quarantined(kStart + absl::Minutes(5)), 0u);
}

TEST(QueryOfDeathGuardTest, AZeroQuarantineRefusesNothing) {
  QueryOfDeathGuard guard({.quarantine = absl::ZeroDuration()}, nullptr);
  guard.OnWorkerCrash(7, "r1", "a:1", "Socket closed", /*retried=*/false, kStart);
  EXPECT_TRUE(guard.Check(7, "r2", kStart).ok());
  EXPECT_EQ(guard.GiveUpMessage().find("refused"), std::string::npos);
}

TEST(QueryOfDeathGuardTest, OptionsOutOfRangeNameTheirFlag) {
  EXPECT_TRUE(ValidateQueryOfDeathOptions({}).ok());
  const auto message = [](const QueryOfDeathOptions& options) {
    return std::string(ValidateQueryOfDeathOptions(options).message());
  };
  EXPECT_NE(message({.crash_retries = -1}).find("--query_of_death_retries"), std::string::npos);
  EXPECT_NE(message({.crash_retries = 10}).find("--query_of_death_retries"), std::string::npos);
  EXPECT_NE(message({.quarantine = absl::Seconds(-1)}).find("--query_of_death_quarantine "),
            std::string::npos);
  EXPECT_NE(message({.quarantine = absl::Hours(25)}).find("--query_of_death_quarantine "),
            std::string::npos);
  EXPECT_NE(message({.quarantine_size = 0}).find("--query_of_death_quarantine_size"),
            std::string::npos);
}

}  // namespace
}  // namespace llmserve::gateway
