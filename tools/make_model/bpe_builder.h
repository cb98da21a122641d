// Builds a small byte-level BPE tokenizer (GPT-2 style: ByteLevel pre-tokenizer and decoder) by
// training merges on a built-in English and code corpus, and writes it as Hugging Face
// tokenizer.json + tokenizer_config.json. Generated test models carry it, so that every piece of
// the stack runs on text without downloading a real tokenizer.
//
// Thread-safe: pure functions.

#ifndef LLMSERVE_TOOLS_MAKE_MODEL_BPE_BUILDER_H_
#define LLMSERVE_TOOLS_MAKE_MODEL_BPE_BUILDER_H_

#include <cstdint>
#include <string>
#include <vector>

namespace llmserve::tools {

struct BuiltTokenizer {
  std::string tokenizer_json;
  std::string tokenizer_config_json;
  // 256 byte tokens + merges + special tokens.
  int32_t vocab_size = 0;
  int32_t bos_token_id = 0;
  int32_t eos_token_id = 0;
};

// Special tokens, in id order after the merges: BOS, EOS, then the chat template's markers.
inline constexpr const char* kBosToken = "<|begin_of_text|>";
inline constexpr const char* kEosToken = "<|end_of_text|>";
inline constexpr const char* kImStartToken = "<|im_start|>";
inline constexpr const char* kImEndToken = "<|im_end|>";

// Trains `num_merges` merges (fewer if the corpus runs out of pairs) deterministically.
BuiltTokenizer BuildByteLevelTokenizer(int num_merges);

}  // namespace llmserve::tools

#endif  // LLMSERVE_TOOLS_MAKE_MODEL_BPE_BUILDER_H_
