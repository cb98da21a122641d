// Which textual convention a model uses to emit tool calls, and how to tell from its chat template.
// Pure functions; thread-safe.
#ifndef LLMSERVE_GATEWAY_TOOL_CALLS_TOOL_CALL_FORMAT_H_
#define LLMSERVE_GATEWAY_TOOL_CALLS_TOOL_CALL_FORMAT_H_

#include <string_view>

#include "absl/status/statusor.h"

namespace llmserve::gateway::tool_calls {

enum class ToolCallFormat {
  kNone,        // no tool-call parsing: the output is all content
  kHermes,      // <tool_call>{"name": ..., "arguments": {...}}</tool_call> (Hermes, Qwen2.5, Qwen3)
  kLlama3Json,  // [<|python_tag|>]{"name": ..., "parameters"|"arguments": {...}}[; {...}]
                // (Llama 3.x)
  kMistral,     // [TOOL_CALLS][{...}, ...]  or  [TOOL_CALLS]name[ARGS]{...} (Mistral)
};

// From the model's chat template source: what the template emits when it renders tool calls or
// the tool prompt. "<tool_call>" -> kHermes, "[TOOL_CALLS]" -> kMistral, "<|python_tag|>" or a
// `"parameters": ` JSON call with the ipython role -> kLlama3Json; kNone when none of these.
ToolCallFormat DetectToolCallFormat(std::string_view chat_template_source);

// "hermes", "llama3_json", "mistral", "none" (vLLM's --tool-call-parser names); INVALID_ARGUMENT
// naming the accepted values otherwise.
absl::StatusOr<ToolCallFormat> ParseToolCallFormatName(std::string_view name);
std::string_view ToolCallFormatName(ToolCallFormat format);

}  // namespace llmserve::gateway::tool_calls

#endif  // LLMSERVE_GATEWAY_TOOL_CALLS_TOOL_CALL_FORMAT_H_
