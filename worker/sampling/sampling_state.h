// What the sampler needs to remember about one request between steps: its parameters, its seed,
// how many tokens it has generated (the position in its random stream) and which tokens it has
// seen, for the penalties.
//
// Sparse by design: a 128k vocabulary times 64 running requests would make dense per-request
// arrays cost 32 MB and a full pass per step to maintain, while a request touches only the tokens
// of its prompt and output.
//
// Not thread-safe: owned and used by one thread (the engine thread), like the request it belongs
// to. Sampler::Sample only reads it; the owner calls Append once per generated token.

#ifndef LLMSERVE_WORKER_SAMPLING_SAMPLING_STATE_H_
#define LLMSERVE_WORKER_SAMPLING_SAMPLING_STATE_H_

#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/sampling/sampling_params.h"

namespace llmserve::worker {

class SamplingState {
 public:
  // Validates `params` against `vocab_size` (ValidateSamplingParams) and every prompt token id
  // against [0, vocab_size); INVALID_ARGUMENT naming the field otherwise. An unset seed is drawn
  // from std::random_device here, once, so the request is reproducible from then on (seed()).
  static absl::StatusOr<SamplingState> Create(const SamplingParams& params,
                                              absl::Span<const int32_t> prompt_token_ids,
                                              int64_t vocab_size);

  // Records the token generated at this step: it now counts for the presence, frequency and
  // repetition penalties, and the next Sample draws the next number of the random stream.
  // `token_id` must be in [0, vocab_size) (CHECKed: the sampler produced it).
  void Append(int32_t token_id);

  const SamplingParams& params() const { return params_; }
  // The seed actually used: params().seed, or the one drawn at creation.
  uint64_t seed() const { return seed_; }
  int64_t vocab_size() const { return vocab_size_; }
  // Tokens appended so far; also the counter of the next random draw.
  int64_t num_output_tokens() const { return num_output_tokens_; }

  // Distinct prompt token ids. Kept only when repetition_penalty != 1, the one penalty that reads
  // the prompt (a long prompt's set is the largest thing here); empty otherwise.
  const absl::flat_hash_set<int32_t>& prompt_token_ids() const { return prompt_token_ids_; }
  // Occurrences of each token id in the output so far.
  const absl::flat_hash_map<int32_t, int32_t>& output_token_counts() const {
    return output_token_counts_;
  }

 private:
  SamplingState(const SamplingParams& params, uint64_t seed, int64_t vocab_size)
      : params_(params), seed_(seed), vocab_size_(vocab_size) {}

  SamplingParams params_;
  uint64_t seed_;
  int64_t vocab_size_;
  int64_t num_output_tokens_ = 0;
  absl::flat_hash_set<int32_t> prompt_token_ids_;
  absl::flat_hash_map<int32_t, int32_t> output_token_counts_;
};

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_SAMPLING_SAMPLING_STATE_H_
