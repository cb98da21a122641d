#include "common/tokenizer/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/status/status_macros.h"
#include "common/tokenizer/regex.h"
#include "common/tokenizer/unicode_categories.h"
#include "common/utf8/utf8.h"

namespace llmserve::common::tokenizer {
namespace {

class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(utf8proc_option_t options) : options_(options) {}
  absl::Status Normalize(std::string* text) const override {
    if (text->empty()) return absl::OkStatus();
    utf8proc_uint8_t* result = nullptr;
    const utf8proc_ssize_t n =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text->data()),
                     static_cast<utf8proc_ssize_t>(text->size()), &result, options_);
    if (n < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("unicode normalization failed: ", utf8proc_errmsg(n)));
    }
    text->assign(reinterpret_cast<const char*>(result), static_cast<size_t>(n));
    std::free(result);
    return absl::OkStatus();
  }

 private:
  utf8proc_option_t options_;
};

// Applies `fn` to each code point; fn appends the replacement text.
template <typename Fn>
void MapChars(std::string* text, Fn fn) {
  std::string out;
  out.reserve(text->size());
  size_t pos = 0;
  char32_t cp;
  while (pos < text->size()) {
    const int n = common::utf8::DecodeOne(*text, pos, &cp);
    fn(cp, &out);
    pos += n > 0 ? n : -n;
  }
  text->swap(out);
}

class LowercaseNormalizer : public Normalizer {
 public:
  absl::Status Normalize(std::string* text) const override {
    MapChars(text, [](char32_t cp, std::string* out) {
      common::utf8::Append(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp)), out);
    });
    return absl::OkStatus();
  }
};

class StripAccentsNormalizer : public Normalizer {
 public:
  absl::Status Normalize(std::string* text) const override {
    MapChars(text, [](char32_t cp, std::string* out) {
      if (!IsNonspacingMark(cp)) common::utf8::Append(cp, out);
    });
    return absl::OkStatus();
  }
};

class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  absl::Status Normalize(std::string* text) const override {
    std::vector<std::pair<size_t, size_t>> chars;  // [begin, end) of non-whitespace chars
    size_t pos = 0;
    char32_t cp;
    while (pos < text->size()) {
      const int n = common::utf8::DecodeOne(*text, pos, &cp);
      if (!IsWhitespace(cp)) chars.emplace_back(pos, pos + n);
      pos += n > 0 ? n : -n;
    }
    if (chars.empty()) {
      if (left_ || right_) text->clear();
      return absl::OkStatus();
    }
    const size_t begin = left_ ? chars.front().first : 0;
    const size_t end = right_ ? chars.back().second : text->size();
    *text = text->substr(begin, end - begin);
    return absl::OkStatus();
  }

 private:
  bool left_;
  bool right_;
};

class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  absl::Status Normalize(std::string* text) const override {
    // HF: Prepend does nothing on an empty string (so "" encodes to [] with Llama-2).
    if (!text->empty()) text->insert(0, prefix_);
    return absl::OkStatus();
  }

 private:
  std::string prefix_;
};

class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(std::string literal, std::unique_ptr<Regex> regex, std::string content)
      : literal_(std::move(literal)), regex_(std::move(regex)), content_(std::move(content)) {}
  absl::Status Normalize(std::string* text) const override {
    if (regex_ == nullptr) {
      if (!literal_.empty()) *text = absl::StrReplaceAll(*text, {{literal_, content_}});
      return absl::OkStatus();
    }
    std::vector<std::pair<size_t, size_t>> matches;
    LLMSERVE_RETURN_IF_ERROR(regex_->FindAll(*text, &matches));
    std::string out;
    size_t prev = 0;
    for (const auto& [begin, end] : matches) {
      out.append(*text, prev, begin - prev);
      out.append(content_);
      prev = end;
    }
    out.append(*text, prev, std::string::npos);
    text->swap(out);
    return absl::OkStatus();
  }

 private:
  std::string literal_;
  std::unique_ptr<Regex> regex_;  // null for a String pattern
  std::string content_;
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps)
      : steps_(std::move(steps)) {}
  absl::Status Normalize(std::string* text) const override {
    for (const auto& step : steps_) LLMSERVE_RETURN_IF_ERROR(step->Normalize(text));
    return absl::OkStatus();
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

absl::StatusOr<std::unique_ptr<Normalizer>> ReplaceNormalizerFromJson(const Json& json) {
  const Json& pattern = json.contains("pattern") ? json["pattern"] : Json();
  std::string content;
  LLMSERVE_ASSIGN_OR_RETURN(content, GetString(json, "content", "normalizer Replace"));
  if (pattern.is_object() && pattern.contains("String")) {
    std::string literal;
    LLMSERVE_ASSIGN_OR_RETURN(literal, GetString(pattern, "String", "normalizer Replace pattern"));
    return std::make_unique<ReplaceNormalizer>(literal, nullptr, content);
  }
  if (pattern.is_object() && pattern.contains("Regex")) {
    std::string source;
    LLMSERVE_ASSIGN_OR_RETURN(source, GetString(pattern, "Regex", "normalizer Replace pattern"));
    std::unique_ptr<Regex> regex;
    LLMSERVE_ASSIGN_OR_RETURN(regex, Regex::Compile(source));
    return std::make_unique<ReplaceNormalizer>("", std::move(regex), content);
  }
  return absl::InvalidArgumentError("normalizer Replace: pattern must be {String} or {Regex}");
}

absl::StatusOr<std::unique_ptr<Normalizer>> SequenceNormalizerFromJson(const Json& json) {
  const auto it = json.find("normalizers");
  if (it == json.end() || !it->is_array()) {
    return absl::InvalidArgumentError("normalizer Sequence: \"normalizers\" must be an array");
  }
  std::vector<std::unique_ptr<Normalizer>> steps;
  for (const Json& item : *it) {
    std::unique_ptr<Normalizer> step;
    LLMSERVE_ASSIGN_OR_RETURN(step, NormalizerFromJson(item));
    if (step != nullptr) steps.push_back(std::move(step));
  }
  return std::make_unique<SequenceNormalizer>(std::move(steps));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Normalizer>> NormalizerFromJson(const Json& json) {
  if (json.is_null()) return nullptr;
  const std::string type = ComponentType(json);
  const auto stable = UTF8PROC_STABLE;
  if (type == "NFC")
    return std::make_unique<UnicodeNormalizer>(utf8proc_option_t(stable | UTF8PROC_COMPOSE));
  if (type == "NFD")
    return std::make_unique<UnicodeNormalizer>(utf8proc_option_t(stable | UTF8PROC_DECOMPOSE));
  if (type == "NFKC") {
    return std::make_unique<UnicodeNormalizer>(
        utf8proc_option_t(stable | UTF8PROC_COMPOSE | UTF8PROC_COMPAT));
  }
  if (type == "NFKD") {
    return std::make_unique<UnicodeNormalizer>(
        utf8proc_option_t(stable | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT));
  }
  if (type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
  if (type == "StripAccents") return std::make_unique<StripAccentsNormalizer>();
  if (type == "Strip") {
    bool left = false;
    bool right = false;
    LLMSERVE_ASSIGN_OR_RETURN(left, GetBoolOr(json, "strip_left", true, "normalizer Strip"));
    LLMSERVE_ASSIGN_OR_RETURN(right, GetBoolOr(json, "strip_right", true, "normalizer Strip"));
    return std::make_unique<StripNormalizer>(left, right);
  }
  if (type == "Prepend") {
    std::string prefix;
    LLMSERVE_ASSIGN_OR_RETURN(prefix, GetString(json, "prepend", "normalizer Prepend"));
    return std::make_unique<PrependNormalizer>(prefix);
  }
  if (type == "Replace") return ReplaceNormalizerFromJson(json);
  if (type == "Sequence") return SequenceNormalizerFromJson(json);
  return absl::InvalidArgumentError(absl::StrCat("unsupported normalizer type \"", type, "\""));
}

}  // namespace llmserve::common::tokenizer
