// A ModelConfig from a GGUF file's metadata (llama.cpp's `<arch>.*` keys) and tensor names,
// the GGUF counterpart of ParseModelConfig (model_config.h).
//
// Architectures: `llama` (which llama.cpp also writes for Mistral-style models), `qwen2`, `gpt2`;
// `ModelConfig::architecture` gets the Hugging Face name of each (LlamaForCausalLM,
// Qwen2ForCausalLM, GPT2LMHeadModel). From the tensors: the vocabulary size (token_embd.weight's
// second dimension), tied embeddings (no output.weight), and Llama/Qwen2 biases
// (blk.0.attn_q.bias, blk.0.attn_output.bias, blk.0.ffn_up.bias), and the quantization: kGguf
// when some projection's tensors are all Q4 types (gguf_weights.h's GgufQuantization).
//
// Errors: UNIMPLEMENTED naming what is not supported (another architecture, a RoPE scaling type
// other than none or linear, Llama 3 RoPE factors stored as rope_freqs.weight, partial rotary
// dimensions, key and value head sizes that differ); INVALID_ARGUMENT naming the key for a
// missing, mistyped or out-of-range value.
//
// Thread-safe: a pure function.

#ifndef LLMSERVE_WORKER_MODEL_GGUF_MODEL_CONFIG_H_
#define LLMSERVE_WORKER_MODEL_GGUF_MODEL_CONFIG_H_

#include "absl/status/statusor.h"
#include "worker/model/gguf/gguf_file.h"
#include "worker/model/model_config.h"

namespace llmserve::worker {

absl::StatusOr<ModelConfig> ModelConfigFromGguf(const gguf::GgufFile& file);

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_MODEL_GGUF_MODEL_CONFIG_H_
