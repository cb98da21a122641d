#include "worker/speculative/speculative_config.h"

#include "absl/strings/str_cat.h"

namespace llmserve::worker {

absl::StatusOr<SpeculativeMethod> ParseSpeculativeMethod(absl::string_view name) {
  if (name == "none") return SpeculativeMethod::kNone;
  if (name == "ngram") return SpeculativeMethod::kNgram;
  if (name == "draft") return SpeculativeMethod::kDraft;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown speculative method '", name, "' (expected none, ngram or draft)"));
}

absl::string_view SpeculativeMethodName(SpeculativeMethod method) {
  switch (method) {
    case SpeculativeMethod::kNone:
      return "none";
    case SpeculativeMethod::kNgram:
      return "ngram";
    case SpeculativeMethod::kDraft:
      return "draft";
  }
  return "none";
}

int32_t SpeculativeConfig::EffectiveDisableBatchSize() const {
  if (disable_batch_size != kAutoDisableBatchSize) return disable_batch_size;
  return method == SpeculativeMethod::kDraft ? 1 : 16;
}

absl::Status ValidateSpeculativeConfig(const SpeculativeConfig& config) {
  if (config.method == SpeculativeMethod::kDraft && config.model.empty()) {
    return absl::InvalidArgumentError(
        "speculative_model must name the draft model's directory for speculative_method=draft");
  }
  if (config.method != SpeculativeMethod::kDraft && !config.model.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("speculative_model is set, so speculative_method must be draft, not ",
                     SpeculativeMethodName(config.method)));
  }
  if (config.method != SpeculativeMethod::kDraft && config.model_int8) {
    return absl::InvalidArgumentError(
        "speculative_model_quantization is for speculative_method=draft only");
  }
  if (!config.enabled()) return absl::OkStatus();
  if (config.num_speculative_tokens < 1 || config.num_speculative_tokens > kMaxSpeculativeTokens) {
    return absl::InvalidArgumentError(absl::StrCat("num_speculative_tokens must be in [1, ",
                                                   kMaxSpeculativeTokens, "], got ",
                                                   config.num_speculative_tokens));
  }
  if (config.prompt_lookup_min < 1 || config.prompt_lookup_min > kMaxPromptLookup) {
    return absl::InvalidArgumentError(absl::StrCat("prompt_lookup_min must be in [1, ",
                                                   kMaxPromptLookup, "], got ",
                                                   config.prompt_lookup_min));
  }
  if (config.prompt_lookup_max < config.prompt_lookup_min ||
      config.prompt_lookup_max > kMaxPromptLookup) {
    return absl::InvalidArgumentError(
        absl::StrCat("prompt_lookup_max must be in [prompt_lookup_min (", config.prompt_lookup_min,
                     "), ", kMaxPromptLookup, "], got ", config.prompt_lookup_max));
  }
  if (config.disable_batch_size < kAutoDisableBatchSize) {
    return absl::InvalidArgumentError(absl::StrCat(
        "speculative_disable_batch_size must be >= 0 (or -1 for the method's default), got ",
        config.disable_batch_size));
  }
  return absl::OkStatus();
}

}  // namespace llmserve::worker
