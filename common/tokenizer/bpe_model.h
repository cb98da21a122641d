// The BPE model of HF tokenizers (tokenizers/src/models/bpe): vocabulary, ranked merges, unk
// token, byte fallback. Encodes one pre-tokenized split at a time.
//
// Merging follows HF's Word::merge_all: symbols in a linked list, a priority queue of adjacent
// pairs keyed by (merge rank, position), lowest first; stale queue entries are skipped. Each merge
// is O(log n), so a split of n chars costs O(n log n), not the O(n^2) of rescanning.
//
// Immutable after FromJson; Tokenize is const and thread-safe: scratch buffers and a bounded
// word cache are thread_local, never shared between threads.
#ifndef LLMSERVE_COMMON_TOKENIZER_BPE_MODEL_H_
#define LLMSERVE_COMMON_TOKENIZER_BPE_MODEL_H_

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/tokenizer/json_util.h"
#include "common/tokenizer/tokenizer_model.h"

namespace llmserve::common::tokenizer {

class BpeModel final : public TokenizerModel {
 public:
  // Builds from a tokenizer.json "model" object of type "BPE". INVALID_ARGUMENT for other model
  // types (WordPiece, Unigram, WordLevel), unsupported options (dropout,
  // continuing_subword_prefix, end_of_word_suffix), malformed merges, or merges whose parts or
  // result are not in the vocabulary.
  static absl::StatusOr<std::unique_ptr<BpeModel>> FromJson(const Json& model);

  // Appends the ids of one split (valid UTF-8). Characters that are neither in the vocabulary
  // nor representable by byte fallback become the unk token, or are dropped when the model has
  // none (as HF does).
  void Tokenize(std::string_view word, std::vector<int32_t>* ids) const override;

  std::optional<int32_t> TokenToId(std::string_view token) const override;
  // nullptr when `id` is not in the vocabulary.
  const std::string* IdToToken(int32_t id) const override;
  // One past the largest id in the vocabulary.
  int32_t id_limit() const override { return static_cast<int32_t>(id_to_token_.size()); }
  size_t num_merges() const { return merges_.size(); }

 private:
  struct MergeResult {
    int32_t rank;
    int32_t new_id;
  };
  struct Symbol {
    int32_t id;    // -1 once merged into its left neighbour
    int32_t prev;  // index of the previous live symbol, -1 at the start
    int32_t next;  // index of the next live symbol, -1 at the end
  };

  BpeModel() = default;
  absl::Status LoadVocab(const Json& vocab);
  absl::Status LoadMerges(const Json& merges);
  absl::Status AddMerge(const std::string& left, const std::string& right, int32_t rank);
  int32_t CharId(std::string_view chr, char32_t cp) const;
  void InitialSymbols(std::string_view word, std::vector<Symbol>* symbols) const;
  void MergeAll(std::vector<Symbol>* symbols) const;
  const MergeResult* FindMerge(int32_t left, int32_t right) const;

  absl::flat_hash_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> id_present_;
  absl::flat_hash_map<uint64_t, MergeResult> merges_;  // key: (left id << 32) | right id
  // Ids of single characters below U+10000, -1 when absent: skips hashing in the common case.
  std::vector<int32_t> char_ids_;
  std::array<int32_t, 256> byte_fallback_ids_{};  // ids of "<0xXX>", -1 when absent
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  uint64_t serial_ = 0;  // distinguishes models in the thread_local word cache
};

}  // namespace llmserve::common::tokenizer

#endif  // LLMSERVE_COMMON_TOKENIZER_BPE_MODEL_H_
