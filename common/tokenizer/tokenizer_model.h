// The model step of a tokenizer (tokenizer.json's "model"): turns one pre-tokenized split into
// ids, and maps ids and token strings both ways. BpeModel (bpe_model.h) and UnigramModel
// (unigram_model.h) implement it; ModelFromJson picks by the model's "type".
//
// Implementations are immutable once built; every method is const and thread-safe.
#ifndef LLMSERVE_COMMON_TOKENIZER_TOKENIZER_MODEL_H_
#define LLMSERVE_COMMON_TOKENIZER_TOKENIZER_MODEL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tokenizer/json_util.h"

namespace llmserve::common::tokenizer {

class TokenizerModel {
 public:
  virtual ~TokenizerModel() = default;
  // Appends the ids of one split (valid UTF-8).
  virtual void Tokenize(std::string_view word, std::vector<int32_t>* ids) const = 0;
  virtual std::optional<int32_t> TokenToId(std::string_view token) const = 0;
  // nullptr when `id` is not in the vocabulary.
  virtual const std::string* IdToToken(int32_t id) const = 0;
  // One past the largest id in the vocabulary.
  virtual int32_t id_limit() const = 0;
};

// The model of a tokenizer.json "model" object: "BPE" (also an untyped object with "merges") or
// "Unigram". INVALID_ARGUMENT naming the type for any other (WordPiece, WordLevel), and the
// model's own errors.
absl::StatusOr<std::unique_ptr<TokenizerModel>> ModelFromJson(const Json& model);

}  // namespace llmserve::common::tokenizer

#endif  // LLMSERVE_COMMON_TOKENIZER_TOKENIZER_MODEL_H_
