// The one entry point from a --model path to a config and weights, shared by the worker,
// llmserve-run and the benchmarks: the path is a Hugging Face model directory (model_weights.h,
// LoadModelDirectory), a GGUF file (gguf_model_config.h, gguf_weights.h) or a llama2.c checkpoint
// (llama2c_checkpoint.h), told apart by what it is on disk, not by its name alone.
//
// Context length (`max_model_len`, 0 = the model's):
// - a directory: at most the model's (config.json), as LoadModelDirectory;
// - a GGUF file: `<arch>.context_length` by default. With RoPE (llama, qwen2) it may be raised up
//   to kMaxGgufModelLen, as llama.cpp's -c allows, with a logged warning: converters write that
//   key from whatever they were told (llama.cpp's llama2.c converter writes 128 for checkpoints
//   trained at 512), and rotary positions past it still compute; what the model does there is
//   the user's call. gpt2's learned positions are a table of that length: at most it.
// - a llama2.c checkpoint: at most its header's seq_len.
//
// Thread-safe: pure functions.

#ifndef LLMSERVE_WORKER_MODEL_MODEL_LOADER_H_
#define LLMSERVE_WORKER_MODEL_MODEL_LOADER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/tokenizer/tokenizer_files.h"
#include "worker/model/dtype.h"
#include "worker/model/model_config.h"
#include "worker/model/model_weights.h"

namespace llmserve::worker {

enum class ModelFormat { kHuggingFaceDirectory, kGguf, kLlama2c };

// The largest context a GGUF file's RoPE model may be served with.
inline constexpr int64_t kMaxGgufModelLen = int64_t{1} << 20;

// What `path` is: a directory (a Hugging Face model), a regular file that starts with the GGUF
// magic or whose name ends in ".gguf" (GgufFile::Open then names what is wrong with it), or a
// regular file whose name ends in ".bin", a llama2.c checkpoint (ModelConfigFromLlama2c then
// checks its header against its size). NOT_FOUND when nothing is there; INVALID_ARGUMENT for
// anything else, naming the path.
absl::StatusOr<ModelFormat> DetectModelFormat(const std::string& path);

// The config of the model at `path`, its context length set from `max_model_len` (above), without
// loading the weights: what tools check before a long load.
absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& path, int64_t max_model_len);

// Loads the model at `path` into `dtype`, its context length set from `max_model_len`. The errors
// of DetectModelFormat and of the format's loader, each naming the file and the field or tensor;
// INVALID_ARGUMENT for a max_model_len out of range.
absl::StatusOr<std::unique_ptr<ModelWeights>> LoadModel(const std::string& path,
                                                        int64_t max_model_len, DType dtype,
                                                        const LoadProgress& progress = {});

// The tokenizer of a model file (not a directory, whose tokenizer.json is read as it is): a GGUF
// file's tokenizer.ggml.* keys (gguf_tokenizer.h), or the SentencePiece model next to a llama2.c
// checkpoint (FindLlama2cTokenizer, common/tokenizer/sentencepiece_model.h). NOT_FOUND when the
// model has none and UNIMPLEMENTED when it is of a kind not supported (callers then serve token
// ids only); other errors name the file and field.
absl::StatusOr<common::tokenizer::TokenizerFiles> ModelFileTokenizer(const std::string& path);

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_MODEL_MODEL_LOADER_H_
