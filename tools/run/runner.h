// Runs prompts through an Engine on the calling thread (tokenize -> engine -> detokenize), for
// llmserve-run. Requests may arrive at given times (the benchmark's Poisson arrivals): the loop
// adds each when its time comes and steps the engine in between.
//
// Not thread-safe: one thread drives it.

#ifndef LLMSERVE_TOOLS_RUN_RUNNER_H_
#define LLMSERVE_TOOLS_RUN_RUNNER_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/tokenizer/incremental_detokenizer.h"
#include "common/tokenizer/tokenizer.h"
#include "tools/run/prompts.h"
#include "worker/engine/engine.h"

namespace llmserve::tools {

struct RunResult {
  size_t index = 0;
  std::vector<int32_t> token_ids;
  std::string text;
  worker::FinishReason finish = worker::FinishReason::kNone;
  std::string error;
  int32_t prompt_tokens = 0;
  int32_t cached_prompt_tokens = 0;
  double ttft_s = 0;
  double e2e_s = 0;
  // Per generated token: the requested alternatives, most likely first.
  std::vector<std::vector<std::pair<int32_t, float>>> top_logprobs;
};

class Runner {
 public:
  // `tokenizer` may be null when every prompt comes as ids (no text is produced then).
  Runner(worker::Engine* engine, const common::tokenizer::Tokenizer* tokenizer)
      : engine_(engine), tokenizer_(tokenizer) {}

  // Called with each text delta of each request as it is generated.
  void set_on_text(std::function<void(size_t index, const std::string& delta)> on_text) {
    on_text_ = std::move(on_text);
  }
  // Called once per request when it finishes.
  void set_on_result(std::function<void(const RunResult&)> on_result) {
    on_result_ = std::move(on_result);
  }

  // Runs every prompt; prompt i is added at start + arrivals[i] (all at once when `arrivals` is
  // empty). A prompt that cannot be tokenized or is rejected by the engine finishes at once with
  // kError. Returns the wall time.
  absl::StatusOr<absl::Duration> Run(const std::vector<RunPrompt>& prompts,
                                     const std::vector<absl::Duration>& arrivals = {});

 private:
  struct Live {
    RunResult result;
    std::optional<common::tokenizer::IncrementalDetokenizer> detokenizer;
    bool done = false;
  };
  void Submit(const RunPrompt& prompt, size_t index);
  void OnOutput(size_t index, const worker::EngineOutput& output);
  void Complete(Live& live);

  worker::Engine* engine_;
  const common::tokenizer::Tokenizer* tokenizer_;
  std::function<void(size_t, const std::string&)> on_text_;
  std::function<void(const RunResult&)> on_result_;
  std::vector<std::unique_ptr<Live>> live_;
  size_t completed_ = 0;
};

// "stop", "length", "abort", "error".
const char* FinishReasonName(worker::FinishReason reason);

}  // namespace llmserve::tools

#endif  // LLMSERVE_TOOLS_RUN_RUNNER_H_
