// A llama2.c checkpoint (Karpathy's llama2.c, `run.c`; the legacy "version 0" export, e.g.
// stories260K.bin / stories15M.bin) as a Llama ModelConfig and ModelWeights.
//
// The file is 7 little-endian int32 — dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size
// (negative: the classifier is stored, not shared with the embedding), seq_len — then f32 arrays
// in run.c's order: token embedding [vocab, dim]; for all layers the attention norms, then all wq
// [n_heads * head_dim, dim], all wk, all wv [n_kv_heads * head_dim, dim], all wo
// [dim, n_heads * head_dim], all FFN norms, all w1 (gate) [hidden, dim], all w2 (down)
// [dim, hidden], all w3 (up) [hidden, dim]; the final norm [dim]; two unused RoPE tables of
// seq_len * head_dim / 2 floats each; the classifier [vocab, dim] when vocab_size < 0. A file
// without the RoPE tables is accepted too. The size must be exactly what the header describes:
// the format has no magic, so that is what tells a checkpoint from anything else.
//
// llama2.c rotates adjacent pairs (2i, 2i + 1) of each head (Meta's layout) where our RoPE
// rotates halves (i, i + head_dim / 2), so the rows of wq and wk are permuted per head as the
// GGUF loader does (gguf_weights.h): row h * head_dim + 2i + j becomes h * head_dim +
// j * head_dim / 2 + i.
//
// The config is llama2.c's fixed one: RMSNorm eps 1e-5, RoPE theta 10000, SiLU-gated MLP,
// context seq_len, BOS 1; EOS 2 and BOS 1 both stop generation (llama2.c was trained with BOS
// before every story and stops when it generates one).
//
// Thread-safe: pure functions.

#ifndef LLMSERVE_WORKER_MODEL_LLAMA2C_CHECKPOINT_H_
#define LLMSERVE_WORKER_MODEL_LLAMA2C_CHECKPOINT_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/model/dtype.h"
#include "worker/model/model_config.h"
#include "worker/model/model_weights.h"
#include "worker/model/weights_memory.h"

namespace llmserve::worker {

// The config of the checkpoint at `path` from its header, checked against the file's size.
// INVALID_ARGUMENT naming the header field for a value out of range or inconsistent with the
// others or with the size; UNIMPLEMENTED for llama2.c's newer exports (magic "ak42", versions
// 1 and 2); NOT_FOUND when the file cannot be opened.
absl::StatusOr<ModelConfig> ModelConfigFromLlama2c(const std::string& path);

// Loads the weights of the checkpoint at `path`, whose config ModelConfigFromLlama2c gave
// (max_model_len may have been changed since). RESOURCE_EXHAUSTED when they would not fit in
// memory (checked before allocating); DATA_LOSS when the file is shorter than it was.
absl::StatusOr<std::unique_ptr<ModelWeights>> LoadLlama2cWeights(const std::string& path,
                                                                 const ModelConfig& config,
                                                                 const FileLoadOptions& options);

// The SentencePiece model that goes with the checkpoint at `path`, in its directory: `<stem>.model`
// (stories15M.bin -> stories15M.model), else `tokenizer.model`, else the only `*.model` file there.
// "" when there is none or several (then `why` says so).
std::string FindLlama2cTokenizer(const std::string& path, std::string* why);

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_MODEL_LLAMA2C_CHECKPOINT_H_
