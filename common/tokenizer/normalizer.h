// HF normalizers (tokenizers/src/normalizers): NFC, NFD, NFKC, NFKD, Lowercase, Strip,
// StripAccents, Prepend, Replace and Sequence. Offsets are not tracked: llmserve only needs ids.
//
// Immutable after construction; Normalize is const and thread-safe.
#ifndef LLMSERVE_COMMON_TOKENIZER_NORMALIZER_H_
#define LLMSERVE_COMMON_TOKENIZER_NORMALIZER_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/tokenizer/json_util.h"

namespace llmserve::common::tokenizer {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // Rewrites *text (valid UTF-8 in, valid UTF-8 out).
  virtual absl::Status Normalize(std::string* text) const = 0;
};

// Builds the normalizer described by a tokenizer.json "normalizer" object. Returns nullptr for
// JSON null, INVALID_ARGUMENT naming the type for unsupported types (e.g. "Precompiled",
// "BertNormalizer") or malformed fields.
absl::StatusOr<std::unique_ptr<Normalizer>> NormalizerFromJson(const Json& json);

}  // namespace llmserve::common::tokenizer

#endif  // LLMSERVE_COMMON_TOKENIZER_NORMALIZER_H_
