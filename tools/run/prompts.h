// Prompts for llmserve-run: from flags, or from a JSONL file whose lines are
//   {"prompt": TEXT} or {"prompt_ids": [ids]}
// optionally with their own "max_tokens", "ignore_eos", "temperature", "top_k", "top_p",
// "min_p", "seed", "repetition_penalty", "presence_penalty", "frequency_penalty", "logprobs".
// Fields a line leaves out take the command line's values.
//
// Thread-safe: pure functions.

#ifndef LLMSERVE_TOOLS_RUN_PROMPTS_H_
#define LLMSERVE_TOOLS_RUN_PROMPTS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/sampling/sampling_params.h"
#include "worker/scheduler/request.h"

namespace llmserve::tools {

struct RunPrompt {
  // Exactly one of these holds the prompt.
  std::optional<std::string> text;
  std::optional<std::vector<int32_t>> ids;
  worker::SamplingParams sampling;
  worker::StoppingParams stopping;
};

// Parses one JSONL line (INVALID_ARGUMENT naming the field); `defaults` supplies what it omits.
absl::StatusOr<RunPrompt> ParsePromptLine(const std::string& line, const RunPrompt& defaults);

// Reads every non-empty line of `path`; errors are prefixed "PATH:LINE: ".
absl::StatusOr<std::vector<RunPrompt>> ReadPromptsFile(const std::string& path,
                                                       const RunPrompt& defaults);

// Parses "1 2 3" (spaces or commas) into ids.
absl::StatusOr<std::vector<int32_t>> ParseIds(const std::string& text);

}  // namespace llmserve::tools

#endif  // LLMSERVE_TOOLS_RUN_PROMPTS_H_
