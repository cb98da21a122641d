#include "common/tokenizer/tokenizer.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status/status_macros.h"
#include "common/utf8/utf8.h"

namespace llmserve::common::tokenizer {

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(std::string_view text,
                                                       bool add_special_tokens) const {
  return EncodeWithLiteralRanges(text, add_special_tokens, {});
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::EncodeWithLiteralRanges(
    std::string_view text, bool add_special_tokens,
    absl::Span<const TextRange> literal_ranges) const {
  size_t previous_end = 0;
  for (const TextRange& range : literal_ranges) {
    if (range.begin < previous_end || range.begin >= range.end || range.end > text.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "literal range [", range.begin, ", ", range.end,
          ") is empty, out of order, overlapping, or past the text's ", text.size(), " bytes"));
    }
    previous_end = range.end;
  }
  const size_t bad = common::utf8::FindFirstInvalid(text);
  if (bad != common::utf8::kValid) {
    return absl::InvalidArgumentError(absl::StrCat("text is not valid UTF-8 at byte offset ", bad));
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + prefix_ids_.size() + suffix_ids_.size());
  if (add_special_tokens) ids.insert(ids.end(), prefix_ids_.begin(), prefix_ids_.end());
  std::vector<AddedSplit> raw_splits;
  added_.Split(text, /*normalized_tokens=*/false, &raw_splits, literal_ranges);
  for (const AddedSplit& split : raw_splits) {
    if (split.id >= 0) {
      ids.push_back(split.id);
      continue;
    }
    const size_t begin = static_cast<size_t>(split.text.data() - text.data());
    const size_t end = begin + split.text.size();
    const bool overlaps_literal =
        std::any_of(literal_ranges.begin(), literal_ranges.end(),
                    [&](const TextRange& r) { return r.begin < end && begin < r.end; });
    LLMSERVE_RETURN_IF_ERROR(
        EncodePiece(split.text, /*at_start=*/begin == 0, !overlaps_literal, &ids));
  }
  if (add_special_tokens) ids.insert(ids.end(), suffix_ids_.begin(), suffix_ids_.end());
  return ids;
}

// One piece of raw text between added tokens: normalize, split on normalized added tokens,
// pre-tokenize, then BPE.
absl::Status Tokenizer::EncodePiece(std::string_view piece, bool at_start,
                                    bool match_normalized_tokens, std::vector<int32_t>* ids) const {
  std::string normalized(piece);
  if (normalizer_ != nullptr) LLMSERVE_RETURN_IF_ERROR(normalizer_->Normalize(&normalized));
  std::vector<AddedSplit> splits;
  if (match_normalized_tokens) {
    added_.Split(normalized, /*normalized_tokens=*/true, &splits);
  } else {
    splits.push_back({normalized, -1});
  }
  for (const AddedSplit& split : splits) {
    if (split.id >= 0) {
      ids->push_back(split.id);
      continue;
    }
    std::vector<PreTokenSplit> words;
    words.push_back({std::string(split.text), at_start && split.text.data() == normalized.data()});
    if (pre_tokenizer_ != nullptr) LLMSERVE_RETURN_IF_ERROR(pre_tokenizer_->PreTokenize(&words));
    for (const PreTokenSplit& word : words) model_->Tokenize(word.text, ids);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Tokenizer::DecodeImpl(absl::Span<const int32_t> ids,
                                                  bool skip_special_tokens, DecodeMode mode) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const int32_t id : ids) {
    if (const AddedToken* added = added_.FindById(id)) {
      if (!(skip_special_tokens && added->special)) tokens.push_back(added->content);
      continue;
    }
    const std::string* token = model_->IdToToken(id);
    if (token == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", id, " is out of range (vocabulary size ", vocab_size_, ")"));
    }
    tokens.push_back(*token);
  }
  if (decoder_ == nullptr) {
    std::string joined = absl::StrJoin(tokens, " ");
    return mode == DecodeMode::kText ? common::utf8::SanitizeLossy(joined) : joined;
  }
  decoder_->DecodeChain(&tokens, mode);
  std::string text = absl::StrJoin(tokens, "");
  return mode == DecodeMode::kText ? common::utf8::SanitizeLossy(text) : text;
}

absl::StatusOr<std::string> Tokenizer::Decode(absl::Span<const int32_t> ids,
                                              bool skip_special_tokens) const {
  return DecodeImpl(ids, skip_special_tokens, DecodeMode::kText);
}

absl::StatusOr<std::string> Tokenizer::DecodeBytes(absl::Span<const int32_t> ids,
                                                   bool skip_special_tokens) const {
  return DecodeImpl(ids, skip_special_tokens, DecodeMode::kBytes);
}

std::optional<int32_t> Tokenizer::TokenToId(std::string_view token) const {
  if (auto id = added_.FindByContent(token)) return id;
  return model_->TokenToId(token);
}

std::optional<std::string> Tokenizer::IdToToken(int32_t id) const {
  if (const AddedToken* added = added_.FindById(id)) return added->content;
  if (const std::string* token = model_->IdToToken(id)) return *token;
  return std::nullopt;
}

std::optional<std::string> Tokenizer::TokenBytes(int32_t id) const {
  if (const AddedToken* added = added_.FindById(id)) return added->content;
  const std::string* token = model_->IdToToken(id);
  if (token == nullptr) return std::nullopt;
  if (decoder_ == nullptr) return *token;
  // Decoders treat the start of a sequence specially (Metaspace and Strip drop its leading
  // space), so the token is decoded twice in a row and the first copy's text is cut off.
  std::vector<std::string> alone = {*token};
  decoder_->DecodeChain(&alone, DecodeMode::kBytes);
  std::vector<std::string> twice = {*token, *token};
  decoder_->DecodeChain(&twice, DecodeMode::kBytes);
  const std::string first = absl::StrJoin(alone, "");
  const std::string both = absl::StrJoin(twice, "");
  if (both.size() < first.size() || both.compare(0, first.size(), first) != 0) return both;
  return both.substr(first.size());
}

std::vector<std::string> Tokenizer::SpecialTokenContents() const {
  std::vector<std::string> contents;
  for (const AddedToken& token : added_.tokens()) {
    if (token.special) contents.push_back(token.content);
  }
  return contents;
}

bool Tokenizer::IsSpecial(int32_t id) const {
  const AddedToken* added = added_.FindById(id);
  return added != nullptr && added->special;
}

}  // namespace llmserve::common::tokenizer
