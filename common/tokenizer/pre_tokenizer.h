// HF pre-tokenizers (tokenizers/src/pre_tokenizers): ByteLevel, Split, Digits, Punctuation,
// Whitespace, WhitespaceSplit, Metaspace and Sequence. A pre-tokenizer turns each split of the
// (normalized) text into smaller splits; the BPE model then encodes each split on its own.
//
// Immutable after construction; PreTokenize is const and thread-safe.
#ifndef LLMSERVE_COMMON_TOKENIZER_PRE_TOKENIZER_H_
#define LLMSERVE_COMMON_TOKENIZER_PRE_TOKENIZER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/tokenizer/json_util.h"

namespace llmserve::common::tokenizer {

struct PreTokenSplit {
  std::string text;
  // True when the split begins at offset 0 of the input text: Metaspace's prepend_scheme
  // "first" prepends only there (HF checks offsets_original().0 == 0).
  bool at_start = false;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces *splits by their sub-splits, in order. Empty splits are dropped.
  virtual absl::Status PreTokenize(std::vector<PreTokenSplit>* splits) const = 0;
};

// Builds the pre-tokenizer described by a tokenizer.json "pre_tokenizer" object. Returns nullptr
// for JSON null; INVALID_ARGUMENT naming the type for unsupported types (e.g. "BertPreTokenizer",
// "UnicodeScripts") or malformed fields, and PCRE2's message for a rejected regex.
absl::StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizerFromJson(const Json& json);

}  // namespace llmserve::common::tokenizer

#endif  // LLMSERVE_COMMON_TOKENIZER_PRE_TOKENIZER_H_
