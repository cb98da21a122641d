#include "worker/structured/vocabulary.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"

namespace llmserve::worker::structured {

absl::StatusOr<std::shared_ptr<const TokenVocabulary>> TokenVocabulary::FromTokenizer(
    const common::tokenizer::Tokenizer& tokenizer, int32_t vocab_size,
    std::vector<int32_t> eos_token_ids) {
  if (vocab_size <= 0 || vocab_size > kMaxVocabSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("vocabulary size ", vocab_size, " is out of range (1..", kMaxVocabSize, ")"));
  }
  std::vector<std::string> bytes(vocab_size);
  std::vector<bool> is_text(vocab_size, false);
  for (int32_t id = 0; id < vocab_size && id < tokenizer.vocab_size(); ++id) {
    std::optional<std::string> token = tokenizer.TokenBytes(id);
    if (!token.has_value()) continue;
    is_text[id] = !tokenizer.IsSpecial(id);
    bytes[id] = *std::move(token);
  }
  return FromTokenBytes(std::move(bytes), std::move(is_text), std::move(eos_token_ids));
}

absl::StatusOr<std::shared_ptr<const TokenVocabulary>> TokenVocabulary::FromTokenBytes(
    std::vector<std::string> token_bytes, std::vector<bool> is_text,
    std::vector<int32_t> eos_token_ids) {
  if (token_bytes.empty() || token_bytes.size() > static_cast<size_t>(kMaxVocabSize)) {
    return absl::InvalidArgumentError(
        absl::StrCat("vocabulary size ", token_bytes.size(), " is out of range"));
  }
  if (is_text.size() != token_bytes.size()) {
    return absl::InvalidArgumentError(absl::StrCat("is_text has ", is_text.size(), " entries for ",
                                                   token_bytes.size(), " tokens"));
  }
  std::shared_ptr<TokenVocabulary> vocab(new TokenVocabulary());
  vocab->is_eos_.assign(token_bytes.size(), false);
  for (const int32_t id : eos_token_ids) {
    if (id < 0 || id >= static_cast<int32_t>(token_bytes.size())) {
      return absl::InvalidArgumentError(absl::StrCat("EOS token id ", id, " is out of range"));
    }
    vocab->is_eos_[id] = true;
    is_text[id] = false;  // EOS ends the output; it never adds text
  }
  vocab->token_bytes_ = std::move(token_bytes);
  vocab->is_text_ = std::move(is_text);
  vocab->eos_token_ids_ = std::move(eos_token_ids);
  vocab->BuildTrie();
  return vocab;
}

void TokenVocabulary::BuildTrie() {
  std::vector<int32_t> order;
  for (int32_t id = 0; id < size(); ++id) {
    if (is_text_[id] && !token_bytes_[id].empty()) order.push_back(id);
  }
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return token_bytes_[a] < token_bytes_[b] || (token_bytes_[a] == token_bytes_[b] && a < b);
  });
  trie_byte_ = {0};
  trie_depth_ = {0};
  trie_end_ = {0};
  trie_token_begin_ = {0};
  std::vector<int32_t> path = {0};  // node at each depth of the current key
  const std::string* prev = nullptr;
  auto close_to = [&](size_t depth) {
    while (path.size() > depth + 1) {
      trie_end_[path.back()] = static_cast<int32_t>(trie_byte_.size());
      path.pop_back();
    }
  };
  for (const int32_t id : order) {
    const std::string& key = token_bytes_[id];
    size_t common = 0;
    if (prev != nullptr) {
      while (common < key.size() && common < prev->size() && key[common] == (*prev)[common]) {
        ++common;
      }
    }
    close_to(common);
    for (size_t d = common; d < key.size(); ++d) {
      const int32_t node = static_cast<int32_t>(trie_byte_.size());
      trie_byte_.push_back(static_cast<uint8_t>(key[d]));
      trie_depth_.push_back(static_cast<int32_t>(d + 1));
      trie_end_.push_back(0);
      trie_token_begin_.push_back(static_cast<int32_t>(trie_tokens_.size()));
      path.push_back(node);
    }
    trie_tokens_.push_back(id);
    trie_max_depth_ = std::max(trie_max_depth_, static_cast<int32_t>(key.size()));
    prev = &key;
  }
  close_to(0);
  trie_end_[0] = static_cast<int32_t>(trie_byte_.size());
  trie_token_begin_.push_back(static_cast<int32_t>(trie_tokens_.size()));
}

}  // namespace llmserve::worker::structured
