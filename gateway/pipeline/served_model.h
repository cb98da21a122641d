// What the gateway needs to serve one model without its files: the tokenizer, the chat template
// and the limits, built from a worker's GetModelInfo answer.
//
// Thread-safe: immutable after Create.

#ifndef LLMSERVE_GATEWAY_PIPELINE_SERVED_MODEL_H_
#define LLMSERVE_GATEWAY_PIPELINE_SERVED_MODEL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/chat_template/chat_template.h"
#include "common/chat_template/literal_text.h"
#include "common/tokenizer/tokenizer.h"
#include "gateway/reasoning/reasoning_format.h"
#include "gateway/tool_calls/tool_call_format.h"
#include "llmserve/v1/inference.pb.h"
#include "llmserve/worker/v1/worker.pb.h"

namespace llmserve::gateway {

class ServedModel {
 public:
  // FAILED_PRECONDITION naming the model when the worker sent no tokenizer, or one that does not
  // load (the model is then served for token-id prompts only: see tokenizer()).
  // `tool_call_format`: how the model writes tool calls; nullopt detects it from the template.
  // `reasoning_format`: how it marks its reasoning (--reasoning_parser); kNone: not parsed.
  static absl::StatusOr<std::shared_ptr<const ServedModel>> Create(
      const worker::v1::ModelInfo& info,
      std::optional<tool_calls::ToolCallFormat> tool_call_format = std::nullopt,
      reasoning::ReasoningFormat reasoning_format = reasoning::ReasoningFormat::kNone);

  // The name requests use: the model's, or a LoRA adapter's (ForAdapter).
  const std::string& name() const { return info_.model_name(); }
  // The base model's name, which routing asks workers for (name() for a base model).
  const std::string& base_name() const { return base_name_; }
  // The LoRA adapter the worker applies (GenerateRequest.lora_adapter); empty for a base model.
  const std::string& lora_adapter() const { return lora_adapter_; }

  // `base` served through LoRA adapter `adapter` of its workers: the same tokenizer, template
  // and limits, named `adapter`.
  static std::shared_ptr<const ServedModel> ForAdapter(const ServedModel& base,
                                                       const std::string& adapter);
  const worker::v1::ModelInfo& info() const { return info_; }
  // Null when the worker sent no usable tokenizer; tokenizer_error() says why.
  const common::tokenizer::Tokenizer* tokenizer() const { return tokenizer_.get(); }
  const std::string& tokenizer_error() const { return tokenizer_error_; }
  const std::string& chat_template() const { return info_.chat_template(); }
  uint32_t max_model_len() const { return info_.max_model_len(); }
  uint32_t vocab_size() const { return info_.vocab_size(); }
  // Whether its workers serve it as embeddings (--task=embed) rather than text generation.
  bool embeds() const { return info_.task() == "embed"; }
  // How the model writes tool calls (kNone: unknown, and "auto" tool calls are not parsed).
  tool_calls::ToolCallFormat tool_call_format() const { return tool_call_format_; }
  // How the model's chat replies mark their reasoning (kNone: not parsed, all content).
  reasoning::ReasoningFormat reasoning_format() const { return reasoning_format_; }
  // The id of </think> when the vocabulary has it as one token: the reasoning's token count
  // then ends exactly at it.
  std::optional<int32_t> reasoning_end_token_id() const { return reasoning_end_token_id_; }

  // The token's text alone (for logprob alternatives); "" when unknown.
  std::string TokenText(int32_t id) const;

  // The chat rendered into prompt text with the model's template (or the plain fallback for a
  // model without one), with the spans where the tokenizer must read the special-token text a
  // client wrote as plain text (none when chat.parse_special_tokens_in_content; see
  // common/chat_template/literal_text.h); FAILED_PRECONDITION when the template could not be
  // parsed (the reason was logged when the model was discovered), INVALID_ARGUMENT for a render
  // error (raise_exception in the template, e.g. roles not alternating).
  absl::StatusOr<common::RenderedChat> RenderChat(const ::llmserve::v1::ChatPrompt& chat) const;
  // Empty, or why chat prompts cannot be served.
  const std::string& chat_template_error() const { return chat_template_error_; }

 private:
  ServedModel() = default;

  worker::v1::ModelInfo info_;
  // Shared with the model's adapter variants (ForAdapter).
  std::shared_ptr<const common::tokenizer::Tokenizer> tokenizer_;
  std::string tokenizer_error_;
  std::shared_ptr<const common::ChatTemplate> chat_template_;
  std::string chat_template_error_;
  // Over the tokenizer's special tokens (none without a tokenizer).
  std::shared_ptr<const common::SpecialTextGuard> special_text_guard_;
  std::string lora_adapter_;
  std::string base_name_;
  tool_calls::ToolCallFormat tool_call_format_ = tool_calls::ToolCallFormat::kNone;
  reasoning::ReasoningFormat reasoning_format_ = reasoning::ReasoningFormat::kNone;
  std::optional<int32_t> reasoning_end_token_id_;
};

// ChatRenderer (prompt_builder.h) over ServedModel::RenderChat.
absl::StatusOr<common::RenderedChat> RenderChatPrompt(const ServedModel& model,
                                                      const ::llmserve::v1::ChatPrompt& chat);

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_PIPELINE_SERVED_MODEL_H_
