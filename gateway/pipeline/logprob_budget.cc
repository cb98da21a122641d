#include "gateway/pipeline/logprob_budget.h"

#include "absl/strings/str_cat.h"

namespace llmserve::gateway {

int64_t LogprobEntries(const worker::v1::GenerateRequest& request, int n) {
  const ::llmserve::v1::SamplingParams& sampling = request.sampling();
  // The worker's rule (SamplingParams::wants_logprobs): alternatives alone also carry the chosen
  // token's logprob.
  if (!sampling.return_logprobs() && sampling.top_logprobs() <= 0) return 0;
  const int64_t per_token =
      int64_t{1} + (sampling.top_logprobs() > 0 ? sampling.top_logprobs() : 0);
  // Below 2^31 x 2^32 x 21: no overflow in 64 bits.
  return int64_t{n > 0 ? n : 0} * int64_t{request.max_tokens()} * per_token;
}

absl::Status CheckLogprobBudget(const worker::v1::GenerateRequest& request, int n,
                                bool max_tokens_defaulted, int64_t max_entries) {
  const int64_t entries = LogprobEntries(request, n);
  if (entries <= max_entries) return absl::OkStatus();
  const int32_t top = request.sampling().top_logprobs();
  return absl::InvalidArgumentError(absl::StrCat(
      "logprobs: n * max_tokens * (top_logprobs + 1) = ", n, " * ", request.max_tokens(),
      max_tokens_defaulted ? " (max_tokens unset: the default)" : "", " * (", top,
      " + 1) = ", entries, " logprob entries, over the gateway's limit of ", max_entries,
      " per request (--max_logprob_entries); lower max_tokens, n or top_logprobs (completions: "
      "logprobs)"));
}

}  // namespace llmserve::gateway
