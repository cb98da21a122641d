#include "tools/run/runner.h"

#include "absl/strings/str_cat.h"

namespace llmserve::tools {

const char* FinishReasonName(worker::FinishReason reason) {
  switch (reason) {
    case worker::FinishReason::kStop:
      return "stop";
    case worker::FinishReason::kLength:
      return "length";
    case worker::FinishReason::kAbort:
      return "abort";
    case worker::FinishReason::kError:
      return "error";
    case worker::FinishReason::kNone:
      break;
  }
  return "none";
}

void Runner::Complete(Live& live) {
  live.done = true;
  ++completed_;
  if (on_result_) on_result_(live.result);
}

void Runner::Submit(const RunPrompt& prompt, size_t index) {
  Live& live = *live_[index];
  live.result.index = index;
  std::vector<int32_t> ids;
  if (prompt.ids) {
    ids = *prompt.ids;
  } else if (tokenizer_ == nullptr) {
    live.result.finish = worker::FinishReason::kError;
    live.result.error = "the model has no tokenizer: give prompt ids";
    return Complete(live);
  } else {
    absl::StatusOr<std::vector<int32_t>> encoded = tokenizer_->Encode(*prompt.text, true);
    if (!encoded.ok()) {
      live.result.finish = worker::FinishReason::kError;
      live.result.error = std::string(encoded.status().message());
      return Complete(live);
    }
    ids = *std::move(encoded);
  }
  if (tokenizer_ != nullptr) live.detokenizer.emplace(tokenizer_, ids, true);
  worker::EngineRequest request{
      .prompt = ids,
      .sampling = prompt.sampling,
      .stopping = prompt.stopping,
      .on_output = [this, index](const worker::EngineOutput& output) { OnOutput(index, output); }};
  const absl::StatusOr<worker::RequestId> added = engine_->AddRequest(std::move(request));
  if (!added.ok()) {
    live.result.finish = worker::FinishReason::kError;
    live.result.error = std::string(added.status().message());
    Complete(live);
  }
}

void Runner::OnOutput(size_t index, const worker::EngineOutput& output) {
  Live& live = *live_[index];
  for (const worker::GeneratedToken& token : output.tokens) {
    live.result.token_ids.push_back(token.token_id);
    live.result.top_logprobs.push_back(token.top_logprobs);
    if (!live.detokenizer) continue;
    // An id beyond the tokenizer's vocabulary (a model whose embedding has spare rows) has no
    // text: skipped, as Hugging Face's decode does.
    absl::StatusOr<std::string> delta = live.detokenizer->Step(token.token_id);
    if (delta.ok() && !delta->empty()) {
      live.result.text += *delta;
      if (on_text_) on_text_(index, *delta);
    }
  }
  if (output.finish == worker::FinishReason::kNone) return;
  if (live.detokenizer) {
    absl::StatusOr<std::string> rest = live.detokenizer->Flush();
    if (rest.ok() && !rest->empty()) {
      live.result.text += *rest;
      if (on_text_) on_text_(index, *rest);
    }
  }
  live.result.finish = output.finish;
  if (!output.error.ok()) live.result.error = std::string(output.error.message());
  live.result.prompt_tokens = output.prompt_tokens;
  live.result.cached_prompt_tokens = output.cached_prompt_tokens;
  live.result.ttft_s = output.ttft_s;
  live.result.e2e_s = output.total_s;
  Complete(live);
}

absl::StatusOr<absl::Duration> Runner::Run(const std::vector<RunPrompt>& prompts,
                                           const std::vector<absl::Duration>& arrivals) {
  live_.clear();
  completed_ = 0;
  for (size_t i = 0; i < prompts.size(); ++i) live_.push_back(std::make_unique<Live>());
  const absl::Time start = absl::Now();
  size_t next = 0;
  while (completed_ < prompts.size()) {
    const absl::Time now = absl::Now();
    while (next < prompts.size() && (arrivals.empty() || start + arrivals[next] <= now)) {
      Submit(prompts[next], next);
      ++next;
    }
    if (engine_->StepOnce() || completed_ == prompts.size()) continue;
    if (next == prompts.size()) {
      return absl::InternalError("the engine went idle with requests unfinished");
    }
    absl::SleepFor(std::min(absl::Milliseconds(5), start + arrivals[next] - absl::Now()));
  }
  return absl::Now() - start;
}

}  // namespace llmserve::tools
