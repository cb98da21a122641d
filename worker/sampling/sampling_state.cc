#include "worker/sampling/sampling_state.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "common/status/status_macros.h"

namespace llmserve::worker {
namespace {

uint64_t RandomSeed() {
  std::random_device device;
  return (uint64_t{device()} << 32) | device();
}

}  // namespace

absl::StatusOr<SamplingState> SamplingState::Create(const SamplingParams& params,
                                                    absl::Span<const int32_t> prompt_token_ids,
                                                    int64_t vocab_size) {
  LLMSERVE_RETURN_IF_ERROR(ValidateSamplingParams(params, vocab_size));
  for (size_t i = 0; i < prompt_token_ids.size(); ++i) {
    const int32_t token_id = prompt_token_ids[i];
    if (token_id < 0 || token_id >= vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("prompt token_ids[", i, "] is ", token_id,
                                                     ", outside [0, ", vocab_size, ")"));
    }
  }
  SamplingState state(params, params.seed ? *params.seed : RandomSeed(), vocab_size);
  if (params.repetition_penalty != 1.0f) {
    state.prompt_token_ids_.insert(prompt_token_ids.begin(), prompt_token_ids.end());
  }
  return state;
}

void SamplingState::Append(int32_t token_id) {
  LLMSERVE_CHECK(token_id >= 0 && token_id < vocab_size_)
      << "token " << token_id << " outside the vocabulary of " << vocab_size_;
  ++output_token_counts_[token_id];
  ++num_output_tokens_;
}

}  // namespace llmserve::worker
