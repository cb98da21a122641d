// The model's vocabulary as the constrained-decoding engine sees it: the exact bytes each token
// appends to the output, which tokens are text at all, the EOS ids, and a byte trie over the text
// tokens (built once per vocabulary and shared by every grammar compiled against it).
//
// Tokens that are not text (special/control tokens, ids past the tokenizer's vocabulary) and
// text tokens with no bytes are never allowed under a constraint; EOS ids are allowed exactly
// where the grammar may end. SentencePiece's removal of the first space of a sequence is not
// modelled: a token's bytes are its text in the middle of a sequence.
//
// Thread-safety: immutable after construction; share it freely.
#ifndef LLMSERVE_WORKER_STRUCTURED_VOCABULARY_H_
#define LLMSERVE_WORKER_STRUCTURED_VOCABULARY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tokenizer/tokenizer.h"

namespace llmserve::worker::structured {

class TokenVocabulary {
 public:
  // is_text[i] = the tokenizer knows id i and it is not special. `vocab_size` is the model's
  // (it may exceed the tokenizer's: the padding ids are not text).
  static absl::StatusOr<std::shared_ptr<const TokenVocabulary>> FromTokenizer(
      const common::tokenizer::Tokenizer& tokenizer, int32_t vocab_size,
      std::vector<int32_t> eos_token_ids);
  // INVALID_ARGUMENT when the sizes differ, the vocabulary is empty or too large
  // (kMaxVocabSize), or an EOS id is out of range.
  static absl::StatusOr<std::shared_ptr<const TokenVocabulary>> FromTokenBytes(
      std::vector<std::string> token_bytes, std::vector<bool> is_text,
      std::vector<int32_t> eos_token_ids);

  static constexpr int32_t kMaxVocabSize = 1 << 22;

  int32_t size() const { return static_cast<int32_t>(token_bytes_.size()); }
  const std::string& token_bytes(int32_t id) const { return token_bytes_[id]; }
  bool is_text(int32_t id) const { return is_text_[id]; }
  bool is_eos(int32_t id) const { return is_eos_[id]; }
  const std::vector<int32_t>& eos_token_ids() const { return eos_token_ids_; }

  // The trie of text tokens in preorder: node 0 is the root; node i (i > 0) is reached from
  // its parent by byte trie_byte(i), sits at depth trie_depth(i), and its subtree is
  // [i, trie_subtree_end(i)). The tokens whose bytes end at node i are
  // trie_tokens()[trie_token_begin(i) .. trie_token_begin(i + 1)).
  int32_t trie_size() const { return static_cast<int32_t>(trie_byte_.size()); }
  int32_t trie_max_depth() const { return trie_max_depth_; }
  const std::vector<uint8_t>& trie_bytes() const { return trie_byte_; }
  const std::vector<int32_t>& trie_depths() const { return trie_depth_; }
  const std::vector<int32_t>& trie_subtree_ends() const { return trie_end_; }
  const std::vector<int32_t>& trie_token_begins() const { return trie_token_begin_; }
  const std::vector<int32_t>& trie_tokens() const { return trie_tokens_; }

 private:
  TokenVocabulary() = default;
  void BuildTrie();

  std::vector<std::string> token_bytes_;
  std::vector<bool> is_text_;
  std::vector<bool> is_eos_;
  std::vector<int32_t> eos_token_ids_;
  std::vector<uint8_t> trie_byte_;
  std::vector<int32_t> trie_depth_;
  std::vector<int32_t> trie_end_;
  std::vector<int32_t> trie_token_begin_;  // size trie_size() + 1
  std::vector<int32_t> trie_tokens_;
  int32_t trie_max_depth_ = 0;
};

}  // namespace llmserve::worker::structured

#endif  // LLMSERVE_WORKER_STRUCTURED_VOCABULARY_H_
