#include "gateway/pipeline/reasoning_observer.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>

#include "gateway/reasoning/reasoning_parser.h"

namespace llmserve::gateway {
namespace {

class ReasoningObserver final : public GenerationObserver {
 public:
  ReasoningObserver(std::shared_ptr<GenerationObserver> inner, const ReasoningParsing& parsing)
      : inner_(std::move(inner)),
        parser_(parsing.start),
        end_token_id_(parsing.end_token_id),
        counting_(parser_.in_reasoning()) {}

  void OnDelta(GenerationDelta delta) override {
    // A token counts as reasoning while the block is open; it closes at the </think> token when
    // the vocabulary has one, else with the delta whose text closes it.
    for (const ::llmserve::v1::GeneratedToken& token : delta.tokens) {
      if (!counting_) break;
      ++reasoning_tokens_;
      if (end_token_id_.has_value() && token.token_id() == *end_token_id_) counting_ = false;
    }
    reasoning::ReasoningDelta split = parser_.Feed(delta.text);
    if (!parser_.in_reasoning()) StopCounting();
    delta.reasoning = std::move(split.reasoning);
    delta.text = std::move(split.content);
    inner_->OnDelta(std::move(delta));
  }

  void OnFinish(const GenerationResult& result) override {
    reasoning::ReasoningDelta rest = parser_.Finish();
    StopCounting();
    if (!rest.reasoning.empty() || !rest.content.empty()) {
      GenerationDelta delta;
      delta.reasoning = std::move(rest.reasoning);
      delta.text = std::move(rest.content);
      inner_->OnDelta(std::move(delta));
    }
    GenerationResult final_result = result;
    final_result.reasoning_parsed = true;
    final_result.reasoned = parser_.reasoned();
    // A stop string may end the reply before tokens the worker already sent: never more
    // reasoning than completion.
    final_result.usage.set_reasoning_tokens(static_cast<uint32_t>(
        std::min<int64_t>(reasoning_tokens_, result.usage.completion_tokens())));
    inner_->OnFinish(final_result);
  }

  void OnError(const absl::Status& status) override { inner_->OnError(status); }

 private:
  void StopCounting() {
    counting_ = false;
    // The reply never opened a block (qwen3 answering straight away): the tokens read while that
    // was undecided were content.
    if (!parser_.reasoned()) reasoning_tokens_ = 0;
  }

  const std::shared_ptr<GenerationObserver> inner_;
  reasoning::StreamingReasoningParser parser_;
  const std::optional<int32_t> end_token_id_;
  bool counting_;
  int64_t reasoning_tokens_ = 0;
};

}  // namespace

std::shared_ptr<GenerationObserver> WithReasoningParsing(std::shared_ptr<GenerationObserver> inner,
                                                         const ReasoningParsing& parsing) {
  return std::make_shared<ReasoningObserver>(std::move(inner), parsing);
}

}  // namespace llmserve::gateway
