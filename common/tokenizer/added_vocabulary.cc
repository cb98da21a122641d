#include "common/tokenizer/added_vocabulary.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/base/string_views.h"
#include "common/status/status_macros.h"
#include "common/tokenizer/unicode_categories.h"
#include "common/utf8/utf8.h"

namespace llmserve::common::tokenizer {
namespace {

// Debian's Abseil has its own string_view; heterogeneous lookup needs that type.
absl::StatusOr<AddedToken> ParseToken(const Json& json, size_t index) {
  const std::string where = absl::StrCat("added_tokens[", index, "]");
  if (!json.is_object()) return absl::InvalidArgumentError(where + ": must be an object");
  AddedToken token;
  int64_t id = -1;
  LLMSERVE_ASSIGN_OR_RETURN(id, GetIntOr(json, "id", -1, where));
  if (id < 0 || id > INT32_MAX - 1) return absl::InvalidArgumentError(where + ": missing \"id\"");
  token.id = static_cast<int32_t>(id);
  LLMSERVE_ASSIGN_OR_RETURN(token.content, GetString(json, "content", where));
  if (token.content.empty()) return absl::InvalidArgumentError(where + ": empty \"content\"");
  LLMSERVE_ASSIGN_OR_RETURN(token.special, GetBoolOr(json, "special", false, where));
  // HF's default: special tokens are not normalized, others are.
  LLMSERVE_ASSIGN_OR_RETURN(token.normalized, GetBoolOr(json, "normalized", !token.special, where));
  LLMSERVE_ASSIGN_OR_RETURN(token.lstrip, GetBoolOr(json, "lstrip", false, where));
  LLMSERVE_ASSIGN_OR_RETURN(token.rstrip, GetBoolOr(json, "rstrip", false, where));
  LLMSERVE_ASSIGN_OR_RETURN(token.single_word, GetBoolOr(json, "single_word", false, where));
  return token;
}

bool IsWordChar(char32_t cp) {
  // Approximates Rust's char::is_alphanumeric for single_word boundaries.
  return !IsWhitespace(cp) && !IsPunctuation(cp);
}

// The char that ends just before `pos` / starts at `pos`, or 0 at the text boundary.
char32_t CharBefore(std::string_view text, size_t pos) {
  if (pos == 0) return 0;
  size_t start = pos - 1;
  while (start > 0 && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) --start;
  char32_t cp = 0;
  return common::utf8::DecodeOne(text, start, &cp) > 0 ? cp : 0;
}

char32_t CharAt(std::string_view text, size_t pos) {
  char32_t cp = 0;
  return pos < text.size() && common::utf8::DecodeOne(text, pos, &cp) > 0 ? cp : 0;
}

// Whether byte `pos` lies in one of the sorted, disjoint `literal` ranges.
bool InLiteral(absl::Span<const TextRange> literal, size_t pos) {
  const auto it = std::upper_bound(literal.begin(), literal.end(), pos,
                                   [](size_t p, const TextRange& r) { return p < r.end; });
  return it != literal.end() && it->begin <= pos;
}

}  // namespace

void AddedVocabulary::Trie::Insert(std::string_view key, int32_t token) {
  int32_t node = 0;
  for (char c : key) {
    const auto byte = static_cast<uint8_t>(c);
    auto it = nodes[node].children.find(byte);
    if (it == nodes[node].children.end()) {
      nodes.emplace_back();
      it = nodes[node].children.emplace(byte, static_cast<int32_t>(nodes.size() - 1)).first;
    }
    node = it->second;
  }
  if (nodes[node].token < 0) nodes[node].token = token;  // first definition wins
  first_byte[static_cast<uint8_t>(key[0])] = true;
}

absl::StatusOr<AddedVocabulary> AddedVocabulary::FromJson(const Json& added_tokens,
                                                          const Normalizer* normalizer) {
  AddedVocabulary vocab;
  if (added_tokens.is_null()) return vocab;
  if (!added_tokens.is_array()) return absl::InvalidArgumentError("added_tokens must be an array");
  for (size_t i = 0; i < added_tokens.size(); ++i) {
    AddedToken token;
    LLMSERVE_ASSIGN_OR_RETURN(token, ParseToken(added_tokens[i], i));
    std::string key = token.content;
    if (token.normalized && normalizer != nullptr) {
      LLMSERVE_RETURN_IF_ERROR(normalizer->Normalize(&key));
    }
    const auto index = static_cast<int32_t>(vocab.tokens_.size());
    if (!key.empty())
      (token.normalized ? vocab.normalized_trie_ : vocab.raw_trie_).Insert(key, index);
    vocab.by_id_.emplace(token.id, index);
    vocab.by_content_.emplace(token.content, token.id);
    vocab.tokens_.push_back(std::move(token));
  }
  return vocab;
}

bool AddedVocabulary::FindMatch(const Trie& trie, std::string_view text, size_t from,
                                absl::Span<const TextRange> literal, int32_t* token, size_t* begin,
                                size_t* end) const {
  size_t next_literal = 0;  // the first literal range that ends after `start`
  for (size_t start = from; start < text.size(); ++start) {
    if (!trie.first_byte[static_cast<uint8_t>(text[start])]) continue;
    while (next_literal < literal.size() && literal[next_literal].end <= start) ++next_literal;
    // A match must end before the next literal range begins (and cannot start inside one).
    size_t limit = text.size();
    if (next_literal < literal.size()) {
      if (literal[next_literal].begin <= start) continue;
      limit = literal[next_literal].begin;
    }
    int32_t node = 0;
    int32_t best = -1;
    size_t best_end = 0;
    for (size_t i = start; i < limit; ++i) {
      const auto& children = trie.nodes[node].children;
      const auto it = children.find(static_cast<uint8_t>(text[i]));
      if (it == children.end()) break;
      node = it->second;
      const int32_t candidate = trie.nodes[node].token;
      if (candidate < 0) continue;
      const AddedToken& t = tokens_[candidate];
      if (t.single_word && (IsWordChar(CharBefore(text, start)) && start > 0)) continue;
      if (t.single_word && i + 1 < text.size() && IsWordChar(CharAt(text, i + 1))) continue;
      best = candidate;
      best_end = i + 1;
    }
    if (best >= 0) {
      *token = best;
      *begin = start;
      *end = best_end;
      return true;
    }
  }
  return false;
}

void AddedVocabulary::Split(std::string_view text, bool normalized_tokens,
                            std::vector<AddedSplit>* out,
                            absl::Span<const TextRange> literal) const {
  const Trie& trie = normalized_tokens ? normalized_trie_ : raw_trie_;
  size_t prev = 0;
  size_t from = 0;
  int32_t token = -1;
  size_t begin = 0;
  size_t end = 0;
  while (trie.nodes.size() > 1 && FindMatch(trie, text, from, literal, &token, &begin, &end)) {
    const AddedToken& t = tokens_[token];
    // lstrip/rstrip: the token also consumes the whitespace around it (never past `prev`, nor
    // into literal bytes).
    while (t.lstrip && begin > prev && IsWhitespace(CharBefore(text, begin)) &&
           !InLiteral(literal, begin - 1)) {
      begin -= common::utf8::Encode(CharBefore(text, begin)).size();
    }
    while (t.rstrip && end < text.size() && IsWhitespace(CharAt(text, end)) &&
           !InLiteral(literal, end)) {
      end += common::utf8::Encode(CharAt(text, end)).size();
    }
    if (begin > prev) out->push_back({text.substr(prev, begin - prev), -1});
    out->push_back({text.substr(begin, end - begin), t.id});
    prev = end;
    from = end;
  }
  if (prev < text.size()) out->push_back({text.substr(prev), -1});
}

const AddedToken* AddedVocabulary::FindById(int32_t id) const {
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

std::optional<int32_t> AddedVocabulary::FindByContent(std::string_view content) const {
  const auto it = by_content_.find(AsAbsl(content));
  if (it == by_content_.end()) return std::nullopt;
  return it->second;
}

}  // namespace llmserve::common::tokenizer
