// Limits both ends of the worker API (llmserve.worker.v1.Worker) must agree on.
//
// Thread-safe: constants.

#ifndef LLMSERVE_COMMON_BASE_WORKER_API_LIMITS_H_
#define LLMSERVE_COMMON_BASE_WORKER_API_LIMITS_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"

namespace llmserve::common {

// gRPC message size on the worker API: GetModelInfo carries tokenizer.json (Llama-3's is about
// 9 MB), past gRPC's 4 MB default (worker.proto).
inline constexpr int kWorkerApiMaxMessageBytes = 64 << 20;

// The largest message a worker accepts: a GenerateRequest holds at most the context's prompt
// tokens (a varint of at most 5 bytes each) plus small fields (sampling, stop ids, logit bias), so
// anything much larger is refused (RESOURCE_EXHAUSTED) before gRPC parses it, rather than parsed
// into memory and then refused.
inline constexpr int WorkerRequestMaxBytes(int64_t max_model_len) {
  const int64_t bytes = (int64_t{4} << 20) + 5 * max_model_len;
  return bytes < kWorkerApiMaxMessageBytes ? static_cast<int>(bytes) : kWorkerApiMaxMessageBytes;
}

// Request fields that the gateway checks for its clients (a clear error naming the public field)
// and the worker checks again for any caller of its API (worker.proto), with the same bounds.
inline constexpr size_t kMaxRequestIdLength = 128;
inline constexpr int kMaxStopTokenIds = 64;
inline constexpr int32_t kMaxPriority = 1000;
inline constexpr int32_t kMaxTopLogprobs = 20;
// logit_bias: at most this many entries (OpenAI's limit), each bias within +-kMaxLogitBias.
inline constexpr int kMaxLogitBiasEntries = 300;
inline constexpr float kMaxLogitBias = 100.0f;
// Worker only: the gateway makes the salt itself.
inline constexpr size_t kMaxCacheSaltBytes = 256;

// The ranges of the sampling fields, closed or open at the low end; each end names its own
// errors (the gateway the public field, the worker its own).
struct SamplingRange {
  float low;
  float high;
  bool low_open;
};
inline constexpr SamplingRange kTemperatureRange{0.0f, 100.0f, false};
inline constexpr SamplingRange kTopPRange{0.0f, 1.0f, true};
inline constexpr SamplingRange kMinPRange{0.0f, 1.0f, false};
inline constexpr SamplingRange kRepetitionPenaltyRange{0.0f, 2.0f, true};
inline constexpr SamplingRange kPresencePenaltyRange{-2.0f, 2.0f, false};
inline constexpr SamplingRange kFrequencyPenaltyRange{-2.0f, 2.0f, false};
inline constexpr SamplingRange kLogitBiasRange{-kMaxLogitBias, kMaxLogitBias, false};

// Written as an "inside" test, so that NaN, which compares false, is outside every range.
inline bool InRange(float value, SamplingRange range) {
  return (range.low_open ? value > range.low : value >= range.low) && value <= range.high;
}

// "[0, 100]", "(0, 1]".
inline std::string RangeText(SamplingRange range) {
  return absl::StrCat(range.low_open ? "(" : "[", range.low, ", ", range.high, "]");
}

}  // namespace llmserve::common

#endif  // LLMSERVE_COMMON_BASE_WORKER_API_LIMITS_H_
