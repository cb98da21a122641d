// The text of a Hugging Face tokenizer as the files a model directory carries: what the worker
// sends the gateway in GetModelInfo and what Tokenizer::FromJson reads. Built from other formats
// (a GGUF file's tokenizer.ggml.* keys, a SentencePiece .model) so that every tokenizer goes
// through the one loader.
//
// Thread-safe: a plain value.
#ifndef LLMSERVE_COMMON_TOKENIZER_TOKENIZER_FILES_H_
#define LLMSERVE_COMMON_TOKENIZER_TOKENIZER_FILES_H_

#include <string>

namespace llmserve::common::tokenizer {

struct TokenizerFiles {
  std::string tokenizer_json;
  std::string tokenizer_config_json;
  // The chat template (also in tokenizer_config.json), or empty.
  std::string chat_template;
};

}  // namespace llmserve::common::tokenizer

#endif  // LLMSERVE_COMMON_TOKENIZER_TOKENIZER_FILES_H_
