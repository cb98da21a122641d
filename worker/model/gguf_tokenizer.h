// The tokenizer of a GGUF file (`tokenizer.ggml.*` metadata) as the Hugging Face files our
// tokenizer reads (tokenizer.json and tokenizer_config.json text), so that a GGUF model's
// tokenizer travels to the gateway in GetModelInfo like a directory's and is built by the same
// loader (common/tokenizer/tokenizer.h).
//
// - `llama` (SentencePiece BPE with byte fallback): `tokens`, `scores` and `token_type` through
//   common/tokenizer/sentencepiece_json.h (merges derived from the scores as Hugging Face's
//   LlamaConverter does), the same builder as a SentencePiece .model's; the normalizer prepends
//   U+2581 and turns spaces into it, the decoder undoes that and fuses <0xAB> byte tokens.
// - `gpt2` (byte-level BPE): `tokens` and `merges`; the pre-tokenizer from `tokenizer.ggml.pre`
//   (`default`/`gpt-2`: GPT-2's regex; `llama-bpe`: Llama 3's; `qwen2`); others refused by name.
// Tokens of type control (3), user-defined (4) and unknown (2) become added tokens (special
// except user-defined). tokenizer_config.json gets bos/eos/unk tokens, `add_bos_token` /
// `add_eos_token` (defaults: llama true/false, gpt2 false/false, as llama.cpp's) and
// `tokenizer.chat_template`.
//
// Thread-safe: a pure function.

#ifndef LLMSERVE_WORKER_MODEL_GGUF_TOKENIZER_H_
#define LLMSERVE_WORKER_MODEL_GGUF_TOKENIZER_H_

#include <string>

#include "absl/status/statusor.h"
#include "common/tokenizer/tokenizer_files.h"
#include "worker/model/gguf/gguf_file.h"

namespace llmserve::worker {

// tokenizer.json, tokenizer_config.json and tokenizer.chat_template (or empty).
using GgufTokenizerFiles = common::tokenizer::TokenizerFiles;

// NOT_FOUND when the file has no tokenizer.ggml.model; UNIMPLEMENTED naming a tokenizer model or
// pre-tokenizer that is not supported; INVALID_ARGUMENT naming the key for arrays of the wrong type
// or length and ids outside the vocabulary.
absl::StatusOr<GgufTokenizerFiles> TokenizerFilesFromGguf(const gguf::GgufFile& file);

// The same for the GGUF file at `path` (and GgufFile::Open's errors).
absl::StatusOr<GgufTokenizerFiles> TokenizerFilesFromGgufPath(const std::string& path);

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_MODEL_GGUF_TOKENIZER_H_
