#include "common/tokenizer/incremental_detokenizer.h"

#include "absl/strings/str_cat.h"
#include "common/utf8/utf8.h"

namespace llmserve::common::tokenizer {

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer* tokenizer,
                                               absl::Span<const int32_t> prompt_ids,
                                               bool skip_special_tokens)
    : tokenizer_(tokenizer),
      skip_special_tokens_(skip_special_tokens),
      ids_(prompt_ids.begin(), prompt_ids.end()) {
  read_offset_ = ids_.size();
  prefix_offset_ = ids_.size() > kPromptContext ? ids_.size() - kPromptContext : 0;
}

absl::StatusOr<std::string> IncrementalDetokenizer::Step(int32_t id) {
  if (!tokenizer_->IdToToken(id)) {
    return absl::InvalidArgumentError(absl::StrCat("token id ", id, " is out of range"));
  }
  ids_.push_back(id);
  const absl::Span<const int32_t> all(ids_);
  absl::StatusOr<std::string> prefix_text = tokenizer_->DecodeBytes(
      all.subspan(prefix_offset_, read_offset_ - prefix_offset_), skip_special_tokens_);
  if (!prefix_text.ok()) return prefix_text.status();
  absl::StatusOr<std::string> new_text =
      tokenizer_->DecodeBytes(all.subspan(prefix_offset_), skip_special_tokens_);
  if (!new_text.ok()) return new_text.status();
  if (new_text->size() <= prefix_text->size()) return std::string();
  std::string_view delta = std::string_view(*new_text).substr(prefix_text->size());
  if (common::utf8::IncompleteSuffixLength(delta) > 0) return std::string();  // wait for more
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  return common::utf8::SanitizeLossy(delta);
}

absl::StatusOr<std::string> IncrementalDetokenizer::Flush() {
  if (read_offset_ == ids_.size()) return std::string();
  const absl::Span<const int32_t> all(ids_);
  absl::StatusOr<std::string> prefix_text = tokenizer_->DecodeBytes(
      all.subspan(prefix_offset_, read_offset_ - prefix_offset_), skip_special_tokens_);
  if (!prefix_text.ok()) return prefix_text.status();
  absl::StatusOr<std::string> new_text =
      tokenizer_->DecodeBytes(all.subspan(prefix_offset_), skip_special_tokens_);
  if (!new_text.ok()) return new_text.status();
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  if (new_text->size() <= prefix_text->size()) return std::string();
  return common::utf8::SanitizeLossy(std::string_view(*new_text).substr(prefix_text->size()));
}

}  // namespace llmserve::common::tokenizer
