// The weights of a GGUF file (llama.cpp's tensor names) in the runtime layout of ModelWeights
// (model_weights.h). A projection whose every part (q, k and v; gate and up) is Q4_0, Q4_1 or Q4_K
// is kept in 4 bits as an Int4Matrix (LayerWeights' *_int4, groups of 32 with f32 offsets), bit
// for bit what ggml dequantizes (gguf/gguf_dequantize.h says why); every other tensor is
// dequantized to f32 a few rows at a time (never the whole file at once) and converted to the
// runtime dtype; norms, biases and learned positions stay f32. A file with at least one 4-bit
// projection has config.quantization method kGguf (ModelConfigFromGguf sets it with
// GgufQuantization).
//
// Names (GGUF order, dims[0] fastest; `blk.N.` per layer):
//   llama, qwen2: token_embd, attn_norm, attn_q/k/v (+ .bias), attn_output, ffn_norm, ffn_gate,
//                 ffn_up, ffn_down (+ .bias each when the config says so), output_norm, output
//   gpt2:         token_embd, position_embd, attn_norm (+ bias), attn_qkv, attn_output, ffn_norm,
//                 ffn_up, ffn_down (each with a bias), output_norm (+ bias), output
// `output.weight` is optional (absent: the LM head is the embedding table, config.tied_embeddings).
//
// llama.cpp's `llama` graph rotates adjacent pairs (2i, 2i+1) of each head where ours rotates
// halves (i, i + head_dim/2), so its converter permutes the Q and K rows (and biases) of each head
// into pair order; this loader permutes them back: GGUF row h * head_dim + 2i + j becomes row
// h * head_dim + j * head_dim/2 + i, with num_heads heads for Q and num_kv_heads for K.
// `qwen2` (NEOX rotation in llama.cpp, halves like ours) and `gpt2` (no RoPE) are not permuted.
//
// Before anything is allocated, the runtime size of the weights is checked against the machine's
// physical memory (capped by the cgroup limit): a model that cannot fit is RESOURCE_EXHAUSTED.
//
// Thread-safe: a pure function of its arguments.

#ifndef LLMSERVE_WORKER_MODEL_GGUF_WEIGHTS_H_
#define LLMSERVE_WORKER_MODEL_GGUF_WEIGHTS_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "worker/model/dtype.h"
#include "worker/model/gguf/gguf_file.h"
#include "worker/model/model_config.h"
#include "worker/model/model_weights.h"
#include "worker/model/weights_memory.h"

namespace llmserve::worker {

// Loads the weights of `file`, whose config ModelConfigFromGguf gave (max_model_len may have been
// changed since). INVALID_ARGUMENT naming the tensor for a missing tensor, a shape other than the
// config's, or a tensor the model does not use; RESOURCE_EXHAUSTED when the weights would not fit
// in memory.
absl::StatusOr<std::unique_ptr<ModelWeights>> LoadGgufWeights(const gguf::GgufFile& file,
                                                              const ModelConfig& config,
                                                              const FileLoadOptions& options);

// Bytes the runtime weights of `file` take in `dtype`: 4-bit projections as Int4Matrix (0.75
// bytes a weight), other matrices in `dtype`, 1-D tensors and learned positions in f32 (what
// LoadGgufWeights allocates).
int64_t GgufRuntimeWeightBytes(const gguf::GgufFile& file, const ModelConfig& config, DType dtype);

// {kGguf, group 32} when LoadGgufWeights keeps at least one projection of `file` in 4 bits,
// otherwise none.
CheckpointQuantization GgufQuantization(const gguf::GgufFile& file, const ModelConfig& config);

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_MODEL_GGUF_WEIGHTS_H_
