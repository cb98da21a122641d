// Turns a public GenerateRequest into what the worker runs: the prompt's token ids (text
// tokenized, chat rendered with the model's template, or ids checked against the vocabulary),
// the worker request (sampling passed through, stopping resolved against the context), and the
// stop strings the gateway applies itself. Every field is checked here, before any work, with
// INVALID_ARGUMENT naming it.
//
// Thread-safe: pure functions.

#ifndef LLMSERVE_GATEWAY_PIPELINE_PROMPT_BUILDER_H_
#define LLMSERVE_GATEWAY_PIPELINE_PROMPT_BUILDER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/chat_template/chat_template.h"
#include "common/chat_template/literal_text.h"
#include "gateway/pipeline/logprob_budget.h"
#include "gateway/pipeline/output_constraints.h"
#include "gateway/pipeline/served_model.h"
#include "gateway/reasoning/reasoning_parser.h"
#include "llmserve/v1/inference.pb.h"
#include "llmserve/worker/v1/worker.pb.h"

namespace llmserve::gateway {

struct PromptLimits {
  // Text prompts and rendered chats, in bytes.
  size_t max_prompt_bytes = 1 << 20;
  // max_tokens when the request leaves it unset (capped by the context).
  uint32_t default_max_tokens = 1024;
  // Logprob entries (each token's own and its alternatives) a request may return, over all its
  // choices (logprob_budget.h).
  int64_t max_logprob_entries = kDefaultMaxLogprobEntries;
};

// Renders a chat with the model's template into prompt text and the spans of it to tokenize
// literally (ServedModel::RenderChat); UNIMPLEMENTED/INVALID_ARGUMENT when it cannot.
using ChatRenderer = std::function<absl::StatusOr<common::RenderedChat>(
    const ServedModel&, const ::llmserve::v1::ChatPrompt&)>;

// How a chat's reply is split into reasoning and content (reasoning_observer.h).
struct ReasoningParsing {
  reasoning::ReasoningFormat format = reasoning::ReasoningFormat::kNone;
  // Where the reply starts, as the rendered prompt left it.
  reasoning::ReasoningStart start = reasoning::ReasoningStart::kReasoning;
  // </think> as one token of the vocabulary, when it is one.
  std::optional<int32_t> end_token_id;
};

struct PreparedRequest {
  std::string request_id;
  std::shared_ptr<const ServedModel> model;
  // prompt_token_ids, sampling, max_tokens, stop ids, ... (request_id is set per attempt).
  worker::v1::GenerateRequest worker_request;
  std::vector<std::string> stop_strings;
  bool skip_special_tokens = true;
  // Chats with tools whose output is parsed into calls; unset otherwise.
  std::optional<ToolCalling> tool_calling;
  // Chats to a model with a reasoning parser; unset otherwise (the output is all content).
  std::optional<ReasoningParsing> reasoning;
};

// INVALID_ARGUMENT naming the field; FAILED_PRECONDITION when a text or chat prompt reaches a
// model without a tokenizer. A chat to a model with a reasoning parser whose reply starts in
// its reasoning refuses a structured output or a constraining tool_choice (INVALID_ARGUMENT
// naming it): the worker would constrain the reasoning too.
absl::StatusOr<PreparedRequest> PrepareRequest(const ::llmserve::v1::GenerateRequest& request,
                                               std::shared_ptr<const ServedModel> model,
                                               const PromptLimits& limits,
                                               const ChatRenderer& render_chat);

// The checks every chat gets, from Generate and Tokenize alike: 1 to 1024 messages, each with a
// role of system, user, assistant or tool. INVALID_ARGUMENT naming the field.
absl::Status ValidateChatPrompt(const ::llmserve::v1::ChatPrompt& chat);

// The ranges inference.proto states for each sampling field that is set (top_k against the
// model's `vocab_size`), checked here so that a bad value is refused before admission and before
// a streamed response starts, rather than by the worker. INVALID_ARGUMENT naming the field.
absl::Status ValidateSamplingParams(const ::llmserve::v1::SamplingParams& sampling,
                                    uint32_t vocab_size);

// The prompt ids of a text or chat input (Tokenize, and PrepareRequest). No added token is
// matched over `literal_spans` (a rendered chat's, see ServedModel::RenderChat).
absl::StatusOr<std::vector<int32_t>> TokenizeText(
    const ServedModel& model, absl::string_view text, bool add_special_tokens,
    const PromptLimits& limits, absl::Span<const common::LiteralSpan> literal_spans = {});

// The prompt ids of a chat (Tokenize, and PrepareRequest): validated, rendered with
// `render_chat`, tokenized. The errors of ValidateChatPrompt, the renderer and TokenizeText;
// FAILED_PRECONDITION when the model has no tokenizer.
absl::StatusOr<std::vector<int32_t>> TokenizeChat(const ServedModel& model,
                                                  const ::llmserve::v1::ChatPrompt& chat,
                                                  const PromptLimits& limits,
                                                  const ChatRenderer& render_chat);

// A request id: the client's when valid (1 to 128 printable ASCII), else INVALID_ARGUMENT; a
// fresh one when empty.
absl::StatusOr<std::string> ResolveRequestId(const std::string& client_id);

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_PIPELINE_PROMPT_BUILDER_H_
