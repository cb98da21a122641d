#include "gateway/pipeline/served_model.h"

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "gateway/reasoning/reasoning_parser.h"
#include "gateway/tool_calls/tools.h"

namespace llmserve::gateway {

absl::StatusOr<std::shared_ptr<const ServedModel>> ServedModel::Create(
    const worker::v1::ModelInfo& info, std::optional<tool_calls::ToolCallFormat> tool_call_format,
    reasoning::ReasoningFormat reasoning_format) {
  std::shared_ptr<ServedModel> model(new ServedModel());
  model->info_ = info;
  model->base_name_ = info.model_name();
  // The files are large and only needed to build the tokenizer.
  model->info_.clear_tokenizer_json();
  model->info_.clear_tokenizer_config_json();
  if (info.tokenizer_json().empty()) {
    model->tokenizer_error_ =
        absl::StrCat("model \"", info.model_name(), "\" has no tokenizer: send token ids");
  } else {
    absl::StatusOr<std::unique_ptr<common::tokenizer::Tokenizer>> tokenizer =
        common::tokenizer::Tokenizer::FromJson(info.tokenizer_json(), info.tokenizer_config_json());
    if (tokenizer.ok()) {
      model->tokenizer_ = *std::move(tokenizer);
      model->special_text_guard_ = std::make_shared<const common::SpecialTextGuard>(
          model->tokenizer_->SpecialTokenContents());
    } else {
      model->tokenizer_error_ = absl::StrCat("the tokenizer of model \"", info.model_name(),
                                             "\" does not load: ", tokenizer.status().message());
    }
  }
  if (!info.chat_template().empty()) {
    absl::StatusOr<common::ChatTemplate> parsed = common::ChatTemplate::Parse(info.chat_template());
    if (parsed.ok()) {
      model->chat_template_ = std::make_shared<const common::ChatTemplate>(*std::move(parsed));
    } else {
      model->chat_template_error_ =
          absl::StrCat("the chat template of model \"", info.model_name(),
                       "\" is not supported: ", parsed.status().message());
      LLMSERVE_LOG(ERROR) << model->chat_template_error_
                          << " (chat requests to it will fail; text and token prompts work)";
    }
  }
  model->tool_call_format_ = tool_call_format.has_value()
                                 ? *tool_call_format
                                 : tool_calls::DetectToolCallFormat(info.chat_template());
  model->reasoning_format_ = reasoning_format;
  if (reasoning_format != reasoning::ReasoningFormat::kNone && model->tokenizer_ != nullptr) {
    model->reasoning_end_token_id_ = model->tokenizer_->TokenToId(
        std::string_view(reasoning::kThinkClose.data(), reasoning::kThinkClose.size()));
  }
  return std::shared_ptr<const ServedModel>(std::move(model));
}

std::shared_ptr<const ServedModel> ServedModel::ForAdapter(const ServedModel& base,
                                                           const std::string& adapter) {
  std::shared_ptr<ServedModel> model(new ServedModel(base));
  model->info_.set_model_name(adapter);
  model->lora_adapter_ = adapter;
  return model;
}

absl::StatusOr<common::RenderedChat> ServedModel::RenderChat(
    const ::llmserve::v1::ChatPrompt& chat) const {
  if (!chat_template_error_.empty()) return absl::FailedPreconditionError(chat_template_error_);
  common::ChatTemplateInput input;
  for (const ::llmserve::v1::ChatMessage& message : chat.messages()) {
    common::ChatMessage& added = input.messages.emplace_back(common::ChatMessage{
        .role = message.role(), .content = message.content(), .name = message.name()});
    for (const ::llmserve::v1::ToolCall& call : message.tool_calls()) {
      added.tool_calls.push_back(
          {.id = call.id(), .name = call.name(), .arguments = call.arguments()});
    }
    // OpenAI clients send `content: null` with an assistant's calls; templates test for None.
    added.content_is_none = !added.tool_calls.empty() && added.content.empty();
    added.tool_call_id = message.tool_call_id();
  }
  if (!chat.tools().empty()) {
    input.tools_json = tool_calls::ToolsToTemplateJson(
        std::vector<::llmserve::v1::Tool>(chat.tools().begin(), chat.tools().end()));
  }
  input.add_generation_prompt =
      chat.has_add_generation_prompt() ? chat.add_generation_prompt() : true;
  input.template_kwargs_json = chat.chat_template_kwargs_json();
  if (!input.template_kwargs_json.empty() && chat_template_ == nullptr) {
    // The plain rendering has no variables: the kwargs would be ignored without a word.
    return absl::InvalidArgumentError(absl::StrCat(
        "chat.chat_template_kwargs: model \"", name(),
        "\" has no chat template (its prompt is the plain role: content rendering), so template "
        "kwargs cannot apply"));
  }
  if (tokenizer_ != nullptr) {
    if (tokenizer_->bos_token_id().has_value()) {
      input.bos_token = tokenizer_->IdToToken(*tokenizer_->bos_token_id()).value_or("");
    }
    if (tokenizer_->eos_token_id().has_value()) {
      input.eos_token = tokenizer_->IdToToken(*tokenizer_->eos_token_id()).value_or("");
    }
  }
  const common::SpecialTextGuard::Render render =
      [this](const common::ChatTemplateInput& in) -> absl::StatusOr<std::string> {
    if (chat_template_ == nullptr) return common::RenderPlainChat(in);
    absl::StatusOr<std::string> text = chat_template_->Render(in);
    if (!text.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("chat: ", text.status().message()));
    }
    return text;
  };
  if (chat.parse_special_tokens_in_content() || special_text_guard_ == nullptr) {
    absl::StatusOr<std::string> text = render(input);
    if (!text.ok()) return text.status();
    return common::RenderedChat{.text = *std::move(text)};
  }
  return special_text_guard_->RenderLiteral(
      input, chat_template_ != nullptr ? chat_template_->source() : "", render);
}

absl::StatusOr<common::RenderedChat> RenderChatPrompt(const ServedModel& model,
                                                      const ::llmserve::v1::ChatPrompt& chat) {
  return model.RenderChat(chat);
}

std::string ServedModel::TokenText(int32_t id) const {
  if (tokenizer_ == nullptr) return "";
  absl::StatusOr<std::string> text = tokenizer_->Decode({id}, /*skip_special_tokens=*/false);
  return text.ok() ? *text : "";
}

}  // namespace llmserve::gateway
