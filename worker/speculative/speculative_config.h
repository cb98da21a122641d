// How the engine speculates: which proposer drafts tokens for the target model to verify, how
// many, and when it does not bother.
//
// Speculation never changes what a request generates (engine.h, "Speculative decoding"): only
// how many forward passes it takes.

#ifndef LLMSERVE_WORKER_SPECULATIVE_SPECULATIVE_CONFIG_H_
#define LLMSERVE_WORKER_SPECULATIVE_SPECULATIVE_CONFIG_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace llmserve::worker {

enum class SpeculativeMethod {
  kNone,
  // Prompt lookup: the tokens that followed the latest earlier occurrence of the request's last
  // n tokens, in its own prompt and output (vLLM's "ngram").
  kNgram,
  // A smaller model of the same vocabulary drafts greedily (SpeculativeConfig::model).
  kDraft,
};

struct SpeculativeConfig {
  SpeculativeMethod method = SpeculativeMethod::kNone;
  // Most draft tokens verified per request and step (k): a step then computes k + 1 positions of
  // the request and can emit up to k + 1 tokens. 3 because the CPU backend's decode GEMM reads
  // the weights once per 4 rows on AVX2 (8 on AVX-512): 4 positions cost one pass, 5 cost two.
  int32_t num_speculative_tokens = 3;
  // The n-gram sizes looked up, longest first.
  int32_t prompt_lookup_min = 2;
  int32_t prompt_lookup_max = 4;
  // No request drafts in a step that starts with more running requests than this (0: no limit;
  // kAutoDisableBatchSize: EffectiveDisableBatchSize's default for the method). A large batch is
  // compute-bound, so verifying drafts costs about what it saves, and a draft model's own passes
  // cost more.
  int32_t disable_batch_size = -1;
  // kDraft: the draft model's directory (a Hugging Face model directory, as the target's).
  std::string model;
  // kDraft: run the draft model's projections (unless 4-bit already) and LM head in int8, on
  // activations quantized per token. Drafts only need to be good guesses (outputs stay exact), and
  // a small model's decode time is mostly its LM head.
  bool model_int8 = false;

  bool enabled() const { return method != SpeculativeMethod::kNone; }
  // disable_batch_size, or for kAutoDisableBatchSize the default measured on the CPU backend
  // (docs/engine.md): 16 for kNgram (faster steps at 8 and 16 requests, fewer tokens per second
  // at 32), 1 for kDraft (1.6x at one request; at 2, 4 and 8 requests the draft model's passes
  // cost more than its drafts save).
  int32_t EffectiveDisableBatchSize() const;
};

// "none", "ngram" or "draft"; INVALID_ARGUMENT listing the values otherwise.
absl::StatusOr<SpeculativeMethod> ParseSpeculativeMethod(absl::string_view name);
absl::string_view SpeculativeMethodName(SpeculativeMethod method);

// INVALID_ARGUMENT naming the field when a value is out of range: num_speculative_tokens in
// [1, kMaxSpeculativeTokens], 1 <= prompt_lookup_min <= prompt_lookup_max <= kMaxPromptLookup,
// disable_batch_size >= -1, a model exactly when the method is kDraft. Values of a config whose
// method is kNone are not checked, but for a model, which needs a method.
absl::Status ValidateSpeculativeConfig(const SpeculativeConfig& config);

inline constexpr int32_t kMaxSpeculativeTokens = 16;
inline constexpr int32_t kAutoDisableBatchSize = -1;
inline constexpr int32_t kMaxPromptLookup = 32;

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_SPECULATIVE_SPECULATIVE_CONFIG_H_
