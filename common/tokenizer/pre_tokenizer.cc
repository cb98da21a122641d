#include "common/tokenizer/pre_tokenizer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/status/status_macros.h"
#include "common/tokenizer/byte_level.h"
#include "common/tokenizer/pattern.h"
#include "common/tokenizer/regex.h"
#include "common/tokenizer/unicode_categories.h"
#include "common/utf8/utf8.h"

namespace llmserve::common::tokenizer {
namespace {

// The GPT-2 pattern HF's ByteLevel pre-tokenizer uses when use_regex is true.
constexpr char kGpt2Pattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// HF Whitespace: \w+|[^\w\s]+ (only the matches survive).
constexpr char kWhitespacePattern[] = R"(\w+|[^\w\s]+)";

// Splits every split by `find_pieces` + `behavior`. find_pieces(text, &pieces) -> Status.
template <typename FindPieces>
absl::Status SplitAll(std::vector<PreTokenSplit>* splits, SplitBehavior behavior, bool invert,
                      FindPieces find_pieces) {
  std::vector<PreTokenSplit> out;
  out.reserve(splits->size());
  PatternPieces pieces;
  std::vector<std::pair<size_t, size_t>> ranges;
  for (PreTokenSplit& split : *splits) {
    pieces.clear();
    ranges.clear();
    LLMSERVE_RETURN_IF_ERROR(find_pieces(split.text, &pieces));
    ApplySplitBehavior(std::move(pieces), behavior, invert, &ranges);
    pieces = PatternPieces();
    for (const auto& [begin, end] : ranges) {
      out.push_back({split.text.substr(begin, end - begin), split.at_start && begin == 0});
    }
  }
  splits->swap(out);
  return absl::OkStatus();
}

class RegexSplitter {
 public:
  explicit RegexSplitter(const Regex* regex) : regex_(regex) {}
  absl::Status operator()(const std::string& text, PatternPieces* pieces) const {
    return FindRegexPieces(*regex_, text, pieces);
  }

 private:
  const Regex* regex_;
};

template <bool (*kPredicate)(char32_t)>
absl::Status CharSplitter(const std::string& text, PatternPieces* pieces) {
  FindCharPieces(kPredicate, text, pieces);
  return absl::OkStatus();
}

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::unique_ptr<Regex> regex)
      : add_prefix_space_(add_prefix_space), regex_(std::move(regex)) {}
  absl::Status PreTokenize(std::vector<PreTokenSplit>* splits) const override {
    if (add_prefix_space_) {
      for (PreTokenSplit& split : *splits) {
        if (split.text.empty() || split.text[0] != ' ') split.text.insert(0, " ");
      }
    }
    if (regex_ != nullptr) {
      LLMSERVE_RETURN_IF_ERROR(
          SplitAll(splits, SplitBehavior::kIsolated, false, RegexSplitter(regex_.get())));
    }
    std::string mapped;
    for (PreTokenSplit& split : *splits) {
      mapped.clear();
      AppendByteLevel(split.text, &mapped);
      split.text.swap(mapped);
    }
    return absl::OkStatus();
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;  // null when use_regex is false
};

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(std::string literal, std::unique_ptr<Regex> regex, SplitBehavior behavior,
                    bool invert)
      : literal_(std::move(literal)),
        regex_(std::move(regex)),
        behavior_(behavior),
        invert_(invert) {}
  absl::Status PreTokenize(std::vector<PreTokenSplit>* splits) const override {
    if (regex_ != nullptr) return SplitAll(splits, behavior_, invert_, RegexSplitter(regex_.get()));
    return SplitAll(splits, behavior_, invert_,
                    [this](const std::string& text, PatternPieces* pieces) {
                      FindLiteralPieces(literal_, text, pieces);
                      return absl::OkStatus();
                    });
  }

 private:
  std::string literal_;
  std::unique_ptr<Regex> regex_;  // null for a String pattern
  SplitBehavior behavior_;
  bool invert_;
};

// Digits, Punctuation, WhitespaceSplit: a character predicate and a behavior.
template <bool (*kPredicate)(char32_t)>
class CharClassPreTokenizer : public PreTokenizer {
 public:
  explicit CharClassPreTokenizer(SplitBehavior behavior) : behavior_(behavior) {}
  absl::Status PreTokenize(std::vector<PreTokenSplit>* splits) const override {
    return SplitAll(splits, behavior_, false, CharSplitter<kPredicate>);
  }

 private:
  SplitBehavior behavior_;
};

class WhitespacePreTokenizer : public PreTokenizer {
 public:
  explicit WhitespacePreTokenizer(std::unique_ptr<Regex> regex) : regex_(std::move(regex)) {}
  absl::Status PreTokenize(std::vector<PreTokenSplit>* splits) const override {
    // Inverted + Removed: the gaps (whitespace) go, the matches stay.
    return SplitAll(splits, SplitBehavior::kRemoved, true, RegexSplitter(regex_.get()));
  }

 private:
  std::unique_ptr<Regex> regex_;
};

enum class PrependScheme { kAlways, kFirst, kNever };

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  MetaspacePreTokenizer(char32_t replacement, PrependScheme scheme, bool split)
      : replacement_(common::utf8::Encode(replacement)),
        replacement_cp_(replacement),
        scheme_(scheme),
        split_(split) {}
  absl::Status PreTokenize(std::vector<PreTokenSplit>* splits) const override {
    for (PreTokenSplit& split : *splits) {
      split.text = absl::StrReplaceAll(split.text, {{" ", replacement_}});
      const bool prepend =
          scheme_ == PrependScheme::kAlways || (scheme_ == PrependScheme::kFirst && split.at_start);
      if (prepend && split.text.rfind(replacement_, 0) != 0) split.text.insert(0, replacement_);
    }
    if (!split_) return absl::OkStatus();
    const char32_t replacement = replacement_cp_;
    return SplitAll(splits, SplitBehavior::kMergedWithNext, false,
                    [replacement](const std::string& text, PatternPieces* pieces) {
                      FindCharPieces([replacement](char32_t cp) { return cp == replacement; }, text,
                                     pieces);
                      return absl::OkStatus();
                    });
  }

 private:
  std::string replacement_;
  char32_t replacement_cp_;
  PrependScheme scheme_;
  bool split_;
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps)
      : steps_(std::move(steps)) {}
  absl::Status PreTokenize(std::vector<PreTokenSplit>* splits) const override {
    for (const auto& step : steps_) LLMSERVE_RETURN_IF_ERROR(step->PreTokenize(splits));
    return absl::OkStatus();
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

absl::StatusOr<std::unique_ptr<PreTokenizer>> ByteLevelFromJson(const Json& json) {
  bool add_prefix_space = false;
  bool use_regex = true;
  LLMSERVE_ASSIGN_OR_RETURN(add_prefix_space,
                            GetBoolOr(json, "add_prefix_space", true, "pre_tokenizer ByteLevel"));
  LLMSERVE_ASSIGN_OR_RETURN(use_regex,
                            GetBoolOr(json, "use_regex", true, "pre_tokenizer ByteLevel"));
  std::unique_ptr<Regex> regex;
  if (use_regex) LLMSERVE_ASSIGN_OR_RETURN(regex, Regex::Compile(kGpt2Pattern));
  return std::make_unique<ByteLevelPreTokenizer>(add_prefix_space, std::move(regex));
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> SplitFromJson(const Json& json) {
  constexpr char kWhere[] = "pre_tokenizer Split";
  std::string behavior_name;
  bool invert = false;
  SplitBehavior behavior;
  LLMSERVE_ASSIGN_OR_RETURN(behavior_name, GetString(json, "behavior", kWhere));
  LLMSERVE_ASSIGN_OR_RETURN(behavior, ParseSplitBehavior(behavior_name));
  LLMSERVE_ASSIGN_OR_RETURN(invert, GetBoolOr(json, "invert", false, kWhere));
  const auto pattern = json.find("pattern");
  if (pattern != json.end() && pattern->is_object() && pattern->contains("Regex")) {
    std::string source;
    std::unique_ptr<Regex> regex;
    LLMSERVE_ASSIGN_OR_RETURN(source, GetString(*pattern, "Regex", kWhere));
    absl::StatusOr<std::unique_ptr<Regex>> compiled = Regex::Compile(source);
    if (!compiled.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(kWhere, ": ", compiled.status().message()));
    }
    return std::make_unique<SplitPreTokenizer>("", *std::move(compiled), behavior, invert);
  }
  if (pattern != json.end() && pattern->is_object() && pattern->contains("String")) {
    std::string literal;
    LLMSERVE_ASSIGN_OR_RETURN(literal, GetString(*pattern, "String", kWhere));
    return std::make_unique<SplitPreTokenizer>(literal, nullptr, behavior, invert);
  }
  return absl::InvalidArgumentError("pre_tokenizer Split: pattern must be {String} or {Regex}");
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> MetaspaceFromJson(const Json& json) {
  constexpr char kWhere[] = "pre_tokenizer Metaspace";
  char32_t replacement = 0;
  bool split = true;
  bool legacy_prefix = true;
  std::string scheme_name;
  LLMSERVE_ASSIGN_OR_RETURN(replacement, GetChar(json, "replacement", kWhere));
  LLMSERVE_ASSIGN_OR_RETURN(split, GetBoolOr(json, "split", true, kWhere));
  // Older files have add_prefix_space instead of prepend_scheme.
  LLMSERVE_ASSIGN_OR_RETURN(legacy_prefix, GetBoolOr(json, "add_prefix_space", true, kWhere));
  LLMSERVE_ASSIGN_OR_RETURN(
      scheme_name, GetStringOr(json, "prepend_scheme", legacy_prefix ? "always" : "never", kWhere));
  PrependScheme scheme;
  if (scheme_name == "always") {
    scheme = PrependScheme::kAlways;
  } else if (scheme_name == "first") {
    scheme = PrependScheme::kFirst;
  } else if (scheme_name == "never") {
    scheme = PrependScheme::kNever;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(kWhere, ": unknown prepend_scheme \"", scheme_name, "\""));
  }
  return std::make_unique<MetaspacePreTokenizer>(replacement, scheme, split);
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> SequenceFromJson(const Json& json) {
  const auto it = json.find("pretokenizers");
  if (it == json.end() || !it->is_array()) {
    return absl::InvalidArgumentError("pre_tokenizer Sequence: \"pretokenizers\" must be an array");
  }
  std::vector<std::unique_ptr<PreTokenizer>> steps;
  for (const Json& item : *it) {
    std::unique_ptr<PreTokenizer> step;
    LLMSERVE_ASSIGN_OR_RETURN(step, PreTokenizerFromJson(item));
    if (step != nullptr) steps.push_back(std::move(step));
  }
  return std::make_unique<SequencePreTokenizer>(std::move(steps));
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> PunctuationFromJson(const Json& json) {
  std::string name;
  SplitBehavior behavior;
  LLMSERVE_ASSIGN_OR_RETURN(name,
                            GetStringOr(json, "behavior", "Isolated", "pre_tokenizer Punctuation"));
  LLMSERVE_ASSIGN_OR_RETURN(behavior, ParseSplitBehavior(name));
  return std::make_unique<CharClassPreTokenizer<IsPunctuation>>(behavior);
}

}  // namespace

absl::StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizerFromJson(const Json& json) {
  if (json.is_null()) return nullptr;
  const std::string type = ComponentType(json);
  if (type == "ByteLevel") return ByteLevelFromJson(json);
  if (type == "Split") return SplitFromJson(json);
  if (type == "Sequence") return SequenceFromJson(json);
  if (type == "Metaspace") return MetaspaceFromJson(json);
  if (type == "Punctuation") return PunctuationFromJson(json);
  if (type == "Digits") {
    bool individual = false;
    LLMSERVE_ASSIGN_OR_RETURN(individual,
                              GetBoolOr(json, "individual_digits", false, "pre_tokenizer Digits"));
    return std::make_unique<CharClassPreTokenizer<IsNumeric>>(
        individual ? SplitBehavior::kIsolated : SplitBehavior::kContiguous);
  }
  if (type == "WhitespaceSplit") {
    return std::make_unique<CharClassPreTokenizer<IsWhitespace>>(SplitBehavior::kRemoved);
  }
  if (type == "Whitespace") {
    std::unique_ptr<Regex> regex;
    LLMSERVE_ASSIGN_OR_RETURN(regex, Regex::Compile(kWhitespacePattern));
    return std::make_unique<WhitespacePreTokenizer>(std::move(regex));
  }
  return absl::InvalidArgumentError(absl::StrCat("unsupported pre_tokenizer type \"", type, "\""));
}

}  // namespace llmserve::common::tokenizer
