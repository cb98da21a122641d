#include "worker/sampling/sampling_params.h"

#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/base/worker_api_limits.h"
#include "common/status/status_macros.h"

namespace llmserve::worker {
namespace {

absl::Status CheckRange(absl::string_view field, float value, common::SamplingRange range) {
  if (common::InRange(value, range)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(field, " is ", value, ", outside ", common::RangeText(range)));
}

}  // namespace

absl::Status ValidateSamplingParams(const SamplingParams& params, int64_t vocab_size) {
  LLMSERVE_RETURN_IF_ERROR(
      CheckRange("temperature", params.temperature, common::kTemperatureRange));
  if (params.top_k < 0 || params.top_k > vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_k is ", params.top_k, ", outside [0, ", vocab_size, "] (0 disables it)"));
  }
  LLMSERVE_RETURN_IF_ERROR(CheckRange("top_p", params.top_p, common::kTopPRange));
  LLMSERVE_RETURN_IF_ERROR(CheckRange("min_p", params.min_p, common::kMinPRange));
  LLMSERVE_RETURN_IF_ERROR(
      CheckRange("repetition_penalty", params.repetition_penalty, common::kRepetitionPenaltyRange));
  LLMSERVE_RETURN_IF_ERROR(
      CheckRange("presence_penalty", params.presence_penalty, common::kPresencePenaltyRange));
  LLMSERVE_RETURN_IF_ERROR(
      CheckRange("frequency_penalty", params.frequency_penalty, common::kFrequencyPenaltyRange));
  if (params.top_logprobs < 0 || params.top_logprobs > common::kMaxTopLogprobs) {
    return absl::InvalidArgumentError(absl::StrCat("top_logprobs is ", params.top_logprobs,
                                                   ", outside [0, ", common::kMaxTopLogprobs, "]"));
  }
  return ValidateLogitBias(params.logit_bias, vocab_size);
}

absl::Status ValidateLogitBias(absl::Span<const std::pair<int32_t, float>> logit_bias,
                               int64_t vocab_size) {
  if (logit_bias.size() > static_cast<size_t>(common::kMaxLogitBiasEntries)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "logit_bias has ", logit_bias.size(), " entries, at most ", common::kMaxLogitBiasEntries));
  }
  absl::flat_hash_set<int32_t> seen;
  for (const auto& [token_id, bias] : logit_bias) {
    const std::string field = absl::StrCat("logit_bias[", token_id, "]");
    if (token_id < 0 || token_id >= vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": token id ", token_id, " is outside the vocabulary [0, ", vocab_size, ")"));
    }
    if (!seen.insert(token_id).second) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": token id given twice"));
    }
    LLMSERVE_RETURN_IF_ERROR(CheckRange(field, bias, common::kLogitBiasRange));
  }
  return absl::OkStatus();
}

}  // namespace llmserve::worker
