// Added tokens of a tokenizer.json ("added_tokens"): special tokens such as <s> and
// <|endoftext|> and user-defined tokens. They are matched in the text before pre-tokenization,
// leftmost-longest as HF's Aho-Corasick does: tokens with normalized=false in the raw text,
// tokens with normalized=true in the normalized text (their content normalized the same way).
//
// Immutable after construction; thread-safe.
#ifndef LLMSERVE_COMMON_TOKENIZER_ADDED_VOCABULARY_H_
#define LLMSERVE_COMMON_TOKENIZER_ADDED_VOCABULARY_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/tokenizer/json_util.h"
#include "common/tokenizer/normalizer.h"

namespace llmserve::common::tokenizer {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool normalized = false;
  bool lstrip = false;       // the match swallows whitespace on its left
  bool rstrip = false;       // ... and on its right
  bool single_word = false;  // only matches when not inside a word
};

// A byte range [begin, end) of a text being encoded.
struct TextRange {
  size_t begin = 0;
  size_t end = 0;
};

// A piece of text after splitting on added tokens: either a token (id >= 0) or text to encode.
struct AddedSplit {
  std::string_view text;
  int32_t id = -1;
};

class AddedVocabulary {
 public:
  // Parses "added_tokens". `normalizer` (may be null) normalizes the content of tokens that
  // have normalized=true, as HF does when it builds its normalized trie.
  static absl::StatusOr<AddedVocabulary> FromJson(const Json& added_tokens,
                                                  const Normalizer* normalizer);

  // Splits `text` on the raw (normalized=false) or normalized tokens, covering all of `text`.
  // No token is matched over bytes that overlap one of `literal` (sorted, disjoint, inside
  // `text`): those bytes stay in the text pieces.
  void Split(std::string_view text, bool normalized_tokens, std::vector<AddedSplit>* out,
             absl::Span<const TextRange> literal = {}) const;

  const AddedToken* FindById(int32_t id) const;
  std::optional<int32_t> FindByContent(std::string_view content) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  // A byte trie over token contents; node 0 is the root.
  struct Trie {
    struct Node {
      absl::flat_hash_map<uint8_t, int32_t> children;
      int32_t token = -1;  // index into tokens_, -1 when no token ends here
    };
    std::vector<Node> nodes{1};
    bool first_byte[256] = {};
    void Insert(std::string_view key, int32_t token);
  };
  // The leftmost-longest match at or after `from` that overlaps none of `literal`: index into
  // tokens_ and its [begin, end).
  bool FindMatch(const Trie& trie, std::string_view text, size_t from,
                 absl::Span<const TextRange> literal, int32_t* token, size_t* begin,
                 size_t* end) const;

  std::vector<AddedToken> tokens_;
  Trie raw_trie_;
  Trie normalized_trie_;
  absl::flat_hash_map<int32_t, size_t> by_id_;
  absl::flat_hash_map<std::string, int32_t> by_content_;
};

}  // namespace llmserve::common::tokenizer

#endif  // LLMSERVE_COMMON_TOKENIZER_ADDED_VOCABULARY_H_
