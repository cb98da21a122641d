// The Unigram model of HF tokenizers (tokenizers/src/models/unigram), which is SentencePiece's
// unigram language model: every piece has a log-probability score, and a split is cut into the
// pieces whose scores sum highest (Viterbi over the split's characters).
//
// As HF's encode_optimized: for each character position, every vocabulary piece that starts there
// (longest pieces bounded by the longest in the vocabulary) extends the best path ending at its
// end when it scores strictly higher; a character no piece covers gets the unk piece with score
// min_score - 10 (SentencePiece's kUnkPenalty). Consecutive unk characters fuse into one unknown
// piece (fuse_unk, always on for Unigram). An unknown piece becomes its UTF-8 bytes as <0xXX>
// tokens with byte_fallback (when all 256 are in the vocabulary), else the unk id, and is dropped
// when the model has no unk id.
//
// Immutable after FromJson; Tokenize is const and thread-safe (its scratch is per call).
#ifndef LLMSERVE_COMMON_TOKENIZER_UNIGRAM_MODEL_H_
#define LLMSERVE_COMMON_TOKENIZER_UNIGRAM_MODEL_H_

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/tokenizer/json_util.h"
#include "common/tokenizer/tokenizer_model.h"

namespace llmserve::common::tokenizer {

class UnigramModel final : public TokenizerModel {
 public:
  // Builds from a tokenizer.json "model" object of type "Unigram": "vocab" an array of
  // [piece, score] pairs (ids in order), "unk_id" an index into it or null, "byte_fallback".
  // INVALID_ARGUMENT naming the entry for a malformed pair, a repeated or empty piece, a score
  // that is not a finite number, or an unk_id outside the vocabulary.
  static absl::StatusOr<std::unique_ptr<UnigramModel>> FromJson(const Json& model);

  void Tokenize(std::string_view word, std::vector<int32_t>* ids) const override;
  std::optional<int32_t> TokenToId(std::string_view token) const override;
  const std::string* IdToToken(int32_t id) const override;
  int32_t id_limit() const override { return static_cast<int32_t>(pieces_.size()); }

 private:
  UnigramModel() = default;
  void EmitUnknown(std::string_view text, std::vector<int32_t>* ids) const;

  std::vector<std::string> pieces_;
  std::vector<double> scores_;
  absl::flat_hash_map<std::string, int32_t> ids_;
  size_t max_piece_bytes_ = 0;
  double unk_score_ = 0;
  std::optional<int32_t> unk_id_;
  bool byte_fallback_ = false;
  std::array<int32_t, 256> byte_ids_{};  // ids of "<0xXX>", -1 when absent
};

}  // namespace llmserve::common::tokenizer

#endif  // LLMSERVE_COMMON_TOKENIZER_UNIGRAM_MODEL_H_
