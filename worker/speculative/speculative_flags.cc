#include "worker/speculative/speculative_flags.h"

#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"

ABSL_FLAG(std::string, speculative_method, "none",
          "speculative decoding: none; ngram (prompt lookup: draft the tokens that followed the "
          "latest earlier occurrence of the request's last tokens); or draft (a smaller model of "
          "the same vocabulary, --speculative_model, drafts greedily). Outputs are unchanged");
ABSL_FLAG(std::string, speculative_model, "",
          "with --speculative_method=draft: the draft model's directory (same tokenizer as "
          "--model)");
ABSL_FLAG(std::string, speculative_model_quantization, "none",
          "with --speculative_method=draft: none, or int8 (the draft model's projections, unless "
          "4-bit already, and LM head in int8, with integer dot products: faster drafts, outputs "
          "unchanged)");
ABSL_FLAG(int, num_speculative_tokens, 3,
          "speculative decoding: most draft tokens verified per request and step (the CPU "
          "backend reads the weights once per 4 positions on AVX2, 8 on AVX-512)");
ABSL_FLAG(int, prompt_lookup_min, 2, "ngram speculation: shortest n-gram looked up");
ABSL_FLAG(int, prompt_lookup_max, 4, "ngram speculation: longest n-gram looked up");
ABSL_FLAG(int, speculative_disable_batch_size, -1,
          "speculative decoding: no drafts while more requests than this run (0: no limit; -1: "
          "16 for ngram, 1 for draft, as measured on the CPU backend)");

namespace llmserve::worker {

absl::StatusOr<SpeculativeConfig> SpeculativeConfigFromFlags() {
  absl::StatusOr<SpeculativeMethod> method =
      ParseSpeculativeMethod(absl::GetFlag(FLAGS_speculative_method));
  if (!method.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--speculative_method: ", method.status().message()));
  }
  const std::string quantization = absl::GetFlag(FLAGS_speculative_model_quantization);
  if (quantization != "none" && quantization != "int8") {
    return absl::InvalidArgumentError(
        absl::StrCat("--speculative_model_quantization: '", quantization, "' is not none or int8"));
  }
  const SpeculativeConfig config{
      .method = *method,
      .num_speculative_tokens = absl::GetFlag(FLAGS_num_speculative_tokens),
      .prompt_lookup_min = absl::GetFlag(FLAGS_prompt_lookup_min),
      .prompt_lookup_max = absl::GetFlag(FLAGS_prompt_lookup_max),
      .disable_batch_size = absl::GetFlag(FLAGS_speculative_disable_batch_size),
      .model = absl::GetFlag(FLAGS_speculative_model),
      .model_int8 = quantization == "int8"};
  if (absl::Status valid = ValidateSpeculativeConfig(config); !valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--", valid.message()));
  }
  return config;
}

}  // namespace llmserve::worker
