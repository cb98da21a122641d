// How a reasoning model marks its reasoning in its output, and which models the gateway parses
// it for (--reasoning_parser). Pure functions and plain values; thread-safe.
//
// Both formats write the reasoning between <think> and </think> before the answer; they differ
// in how an output that does not open a think block itself is read (reasoning_parser.h):
//   deepseek_r1  DeepSeek-R1 and its distills, QwQ: the model always reasons, and current chat
//                templates open the block in the prompt (`<｜Assistant｜><think>\n`), so the output
//                starts inside it and only </think> appears.
//   qwen3        Qwen3 (hybrid thinking): the output is reasoning only when the prompt opened the
//                block or the output opens it; thinking switched off (`/no_think`, or a template
//                that closes the block in the prompt) leaves it all content.
#ifndef LLMSERVE_GATEWAY_REASONING_REASONING_FORMAT_H_
#define LLMSERVE_GATEWAY_REASONING_REASONING_FORMAT_H_

#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace llmserve::gateway::reasoning {

enum class ReasoningFormat {
  kNone,  // no reasoning parsing: the output is all content
  kDeepSeekR1,
  kQwen3,
};

// "deepseek_r1", "qwen3", "none" (vLLM's --reasoning-parser names); INVALID_ARGUMENT naming the
// accepted values otherwise.
absl::StatusOr<ReasoningFormat> ParseReasoningFormatName(absl::string_view name);
absl::string_view ReasoningFormatName(ReasoningFormat format);

// Which reasoning format each served model has: a default for every model, and formats for
// models by name. Models the gateway learns from its workers, so a name that no worker serves
// is not an error (its workers may come later).
struct ReasoningParsers {
  ReasoningFormat default_format = ReasoningFormat::kNone;
  absl::flat_hash_map<std::string, ReasoningFormat> by_model;

  ReasoningFormat For(absl::string_view model) const;
};

// The --reasoning_parser flag's value: comma-separated entries, each a format name (the default
// for every model; at most one) or MODEL=FORMAT (that model's; a model at most once). "" is
// none for every model. INVALID_ARGUMENT naming the faulty entry.
absl::StatusOr<ReasoningParsers> ParseReasoningParsers(absl::string_view flag);

}  // namespace llmserve::gateway::reasoning

#endif  // LLMSERVE_GATEWAY_REASONING_REASONING_FORMAT_H_
