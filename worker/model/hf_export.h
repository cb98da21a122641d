// Writes loaded Llama-family weights back out as a Hugging Face model directory: config.json,
// generation_config.json, model.safetensors (f32, Hugging Face's LlamaForCausalLM names, Q/K rows
// in its rotate-half order, which is the runtime's), and tokenizer.json / tokenizer_config.json
// when given. What `llmserve-make-model --from-llama2c` uses to convert a llama2.c checkpoint; the
// directory then loads as any other (LoadModelDirectory) and computes the same logits.
//
// Thread-safe: a pure function of its arguments (it writes files).

#ifndef LLMSERVE_WORKER_MODEL_HF_EXPORT_H_
#define LLMSERVE_WORKER_MODEL_HF_EXPORT_H_

#include <string>

#include "absl/status/status.h"
#include "common/tokenizer/tokenizer_files.h"
#include "worker/model/model_weights.h"

namespace llmserve::worker {

// Writes `weights` (f32, a dense Llama-family model without biases) into `directory` (created if
// needed), and `tokenizer` unless it is null. INVALID_ARGUMENT for weights of another dtype, family
// or with biases or 4-bit projections; the file errors otherwise.
absl::Status WriteHuggingFaceDirectory(const ModelWeights& weights,
                                       const common::tokenizer::TokenizerFiles* tokenizer,
                                       const std::string& directory);

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_MODEL_HF_EXPORT_H_
