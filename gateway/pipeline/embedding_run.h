// An embeddings request as the pipeline runs it: each input becomes one choice of a PreparedRun
// (its own prompt: text tokenized with the model's special tokens, as Hugging Face tokenizers
// encode by default, or token ids checked against the vocabulary), sent to a worker serving the
// model as embeddings (GenerateRequest.embedding). The run keeps at most
// kMaxEmbeddingInputsRunning inputs on the workers at once (PreparedRun::max_concurrent).
//
// Thread-safe: pure functions.

#ifndef LLMSERVE_GATEWAY_PIPELINE_EMBEDDING_RUN_H_
#define LLMSERVE_GATEWAY_PIPELINE_EMBEDDING_RUN_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gateway/pipeline/embedding_input.h"
#include "gateway/pipeline/prompt_builder.h"
#include "gateway/pipeline/request_runner.h"
#include "gateway/pipeline/served_model.h"

namespace llmserve::gateway {

// The run for `inputs` (1 to kMaxEmbeddingInputs) to `model`, each embedding cut to
// `dimensions` (0: the model's length). INVALID_ARGUMENT naming the field as OpenAI spells it:
// "model" when the model does not serve embeddings, "input" (too many inputs, too many tokens in
// all), "input[i]" (empty, longer than the model's context, an id outside the vocabulary, text
// to a model without a tokenizer), "dimensions" (a length the model was not trained to be cut
// to). `request_id`: the client's (ResolveRequestId), or empty for a fresh one.
absl::StatusOr<PreparedRun> PrepareEmbeddings(std::shared_ptr<const ServedModel> model,
                                              const std::vector<EmbeddingInput>& inputs,
                                              int64_t dimensions, const std::string& request_id,
                                              const PromptLimits& limits);

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_PIPELINE_EMBEDDING_RUN_H_
