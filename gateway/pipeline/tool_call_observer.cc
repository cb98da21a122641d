#include "gateway/pipeline/tool_call_observer.h"

#include <optional>
#include <utility>

#include "gateway/tool_calls/streaming_constrained_parser.h"
#include "gateway/tool_calls/streaming_tool_call_parser.h"

namespace llmserve::gateway {
namespace {

class ToolCallObserver final : public GenerationObserver {
 public:
  ToolCallObserver(std::shared_ptr<GenerationObserver> inner, const ToolCalling& calling)
      : inner_(std::move(inner)) {
    if (calling.constrained()) {
      constrained_.emplace(calling.choice);
    } else {
      native_.emplace(calling.format, calling.tools);
    }
  }

  void OnDelta(GenerationDelta delta) override {
    tool_calls::StreamDelta parsed =
        constrained_.has_value() ? constrained_->Feed(delta.text) : native_->Feed(delta.text);
    delta.text = std::move(parsed.content);
    delta.tool_calls = std::move(parsed.tool_calls);
    inner_->OnDelta(std::move(delta));
  }

  void OnFinish(const GenerationResult& result) override {
    tool_calls::StreamDelta rest =
        constrained_.has_value() ? constrained_->Finish() : native_->Finish();
    if (!rest.content.empty() || !rest.tool_calls.empty()) {
      GenerationDelta delta;
      delta.text = std::move(rest.content);
      delta.tool_calls = std::move(rest.tool_calls);
      inner_->OnDelta(std::move(delta));
    }
    GenerationResult final_result = result;
    final_result.tool_calls = constrained_.has_value() ? constrained_->calls() : native_->calls();
    // A model that called tools and then stopped ends with "tool_calls", as OpenAI's do; one cut
    // by max_tokens keeps "length".
    if (!final_result.tool_calls.empty() &&
        result.finish_reason == ::llmserve::v1::FINISH_REASON_STOP) {
      final_result.finish_reason = ::llmserve::v1::FINISH_REASON_TOOL_CALLS;
    }
    inner_->OnFinish(final_result);
  }

  void OnError(const absl::Status& status) override { inner_->OnError(status); }

 private:
  const std::shared_ptr<GenerationObserver> inner_;
  // One of the two: the model's own call format, or the JSON a constraining tool_choice forces.
  std::optional<tool_calls::StreamingToolCallParser> native_;
  std::optional<tool_calls::StreamingConstrainedParser> constrained_;
};

}  // namespace

std::shared_ptr<GenerationObserver> WithToolCallParsing(std::shared_ptr<GenerationObserver> inner,
                                                        const ToolCalling& calling) {
  return std::make_shared<ToolCallObserver>(std::move(inner), calling);
}

}  // namespace llmserve::gateway
