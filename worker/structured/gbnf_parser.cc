#include "worker/structured/gbnf_parser.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/string_views.h"
#include "common/utf8/utf8.h"
#include "worker/structured/hex_digit.h"

namespace llmserve::worker::structured {
namespace {

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

class Parser {
 public:
  Parser(absl::string_view src, absl::string_view what, bool source_positions,
         absl::string_view start_rule)
      : src_(src), what_(what), source_positions_(source_positions), start_rule_(start_rule) {}

  absl::StatusOr<Grammar> Parse() {
    if (!common::utf8::IsValid(common::AsStd(src_))) {
      pos_ = common::utf8::FindFirstInvalid(common::AsStd(src_));
      return Error("invalid UTF-8");
    }
    SkipSpace();
    if (pos_ == src_.size()) return Error("no rules");
    while (pos_ < src_.size()) {
      const size_t name_pos = pos_;
      const absl::string_view name = ParseName();
      if (name.empty()) return Error("expected a rule name");
      SkipSpace();
      if (src_.substr(pos_, 3) != "::=") return Error("expected \"::=\"");
      pos_ += 3;
      const int32_t rule = builder_.RuleId(name);
      if (builder_.IsDefined(rule)) {
        pos_ = name_pos;
        return Error(absl::StrCat("rule \"", name, "\" is defined twice"));
      }
      std::vector<Sequence> alts;
      if (absl::Status s = ParseAlternatives(0, &alts); !s.ok()) return s;
      if (absl::Status s = builder_.Define(rule, std::move(alts)); !s.ok()) return Error(s);
      SkipSpace();
    }
    return builder_.Build(start_rule_, what_);
  }

 private:
  absl::Status Error(absl::string_view message) const {
    if (!source_positions_) return absl::InvalidArgumentError(absl::StrCat(what_, ": ", message));
    size_t line = 1;
    size_t column = 1;
    for (size_t i = 0; i < pos_ && i < src_.size(); ++i) {
      if (src_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    return absl::InvalidArgumentError(
        absl::StrCat(what_, ": line ", line, ", column ", column, ": ", message));
  }
  absl::Status Error(const absl::Status& status) const { return Error(status.message()); }

  void SkipSpace() {
    while (pos_ < src_.size()) {
      const char c = src_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else if (c == '#') {
        while (pos_ < src_.size() && src_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  absl::string_view ParseName() {
    const size_t begin = pos_;
    while (pos_ < src_.size() && IsNameChar(src_[pos_])) ++pos_;
    return src_.substr(begin, pos_ - begin);
  }

  // Whether a new rule (`name ::=`) starts at pos_.
  bool AtRuleStart() {
    const size_t saved = pos_;
    const bool name = !ParseName().empty();
    SkipSpace();
    const bool yes = name && src_.substr(pos_, 3) == "::=";
    pos_ = saved;
    return yes;
  }

  absl::Status ParseAlternatives(int depth, std::vector<Sequence>* alts) {
    if (depth > kMaxGbnfNesting) {
      return Error(absl::StrCat("groups nested deeper than ", kMaxGbnfNesting));
    }
    while (true) {
      Sequence seq;
      if (absl::Status s = ParseSequence(depth, &seq); !s.ok()) return s;
      alts->push_back(std::move(seq));
      SkipSpace();
      if (pos_ < src_.size() && src_[pos_] == '|') {
        ++pos_;
        continue;
      }
      return absl::OkStatus();
    }
  }

  absl::Status ParseSequence(int depth, Sequence* seq) {
    while (true) {
      SkipSpace();
      if (pos_ >= src_.size()) return absl::OkStatus();
      const char c = src_[pos_];
      if (c == '|' || c == ')') return absl::OkStatus();
      if (IsNameChar(c) && AtRuleStart()) return absl::OkStatus();
      Sequence item;
      if (absl::Status s = ParseElement(depth, &item); !s.ok()) return s;
      // Postfix operators.
      while (pos_ < src_.size()) {
        const char op = src_[pos_];
        int min = 0;
        int max = -1;
        if (op == '*') {
          ++pos_;
        } else if (op == '+') {
          ++pos_;
          min = 1;
        } else if (op == '?') {
          ++pos_;
          max = 1;
        } else if (op == '{') {
          if (absl::Status s = ParseBraces(&min, &max); !s.ok()) return s;
        } else {
          break;
        }
        absl::StatusOr<Symbol> group = builder_.Group(std::move(item));
        if (!group.ok()) return Error(group.status());
        item.clear();
        if (absl::Status s = builder_.AppendRepeat(*group, min, max, &item); !s.ok()) {
          return Error(s);
        }
      }
      seq->insert(seq->end(), item.begin(), item.end());
    }
  }

  absl::Status ParseBraces(int* min, int* max) {
    ++pos_;  // '{'
    auto number = [&](int* out) -> bool {
      const size_t begin = pos_;
      int64_t value = 0;
      while (pos_ < src_.size() && src_[pos_] >= '0' && src_[pos_] <= '9') {
        value = value * 10 + (src_[pos_] - '0');
        if (value > kMaxRepetition) value = kMaxRepetition + 1;
        ++pos_;
      }
      *out = static_cast<int>(value);
      return pos_ > begin;
    };
    SkipSpace();
    const bool has_min = number(min);
    if (!has_min) *min = 0;
    SkipSpace();
    if (pos_ < src_.size() && src_[pos_] == '}') {
      if (!has_min) return Error("empty repetition {}");
      ++pos_;
      *max = *min;
      return absl::OkStatus();
    }
    if (pos_ >= src_.size() || src_[pos_] != ',') return Error("expected ',' or '}' in {m,n}");
    ++pos_;
    SkipSpace();
    if (!number(max)) *max = -1;
    SkipSpace();
    if (pos_ >= src_.size() || src_[pos_] != '}') return Error("expected '}'");
    ++pos_;
    if (*max >= 0 && *max < *min) return Error("repetition {m,n} with n < m");
    if (*min > kMaxRepetition || *max > kMaxRepetition) {
      return Error(absl::StrCat("repetition count above the limit of ", kMaxRepetition));
    }
    return absl::OkStatus();
  }

  // One code point of a literal or class, with escapes.
  absl::StatusOr<char32_t> ParseChar() {
    if (pos_ >= src_.size()) return Error("unexpected end");
    if (src_[pos_] != '\\') {
      char32_t cp = 0;
      const int n = common::utf8::DecodeOne(common::AsStd(src_), pos_, &cp);
      if (n <= 0) return Error("invalid UTF-8");
      pos_ += n;
      return cp;
    }
    ++pos_;
    if (pos_ >= src_.size()) return Error("unfinished escape");
    const char e = src_[pos_++];
    int digits = 0;
    switch (e) {
      case 'n':
        return U'\n';
      case 'r':
        return U'\r';
      case 't':
        return U'\t';
      case 'f':
        return U'\f';
      case 'v':
        return U'\v';
      case '0':
        return U'\0';
      case 'x':
        digits = 2;
        break;
      case 'u':
        digits = 4;
        break;
      case 'U':
        digits = 8;
        break;
      default:
        if (e == '\\' || e == '"' || e == '\'' || e == '[' || e == ']' || e == '-' || e == '/' ||
            e == '^' || e == '.' || e == '(' || e == ')' || e == '|' || e == '*' || e == '+' ||
            e == '?' || e == '{' || e == '}' || e == ' ') {
          return static_cast<char32_t>(e);
        }
        --pos_;
        return Error(absl::StrCat("unknown escape \\", std::string(1, e)));
    }
    uint32_t value = 0;
    for (int i = 0; i < digits; ++i) {
      const int h = pos_ < src_.size() ? HexDigitValue(src_[pos_]) : -1;
      if (h < 0) return Error("bad hex escape");
      value = value * 16 + h;
      ++pos_;
    }
    if (value > 0x10FFFF || (value >= 0xD800 && value <= 0xDFFF)) {
      return Error("escape is not a Unicode scalar value");
    }
    return static_cast<char32_t>(value);
  }

  absl::Status ParseElement(int depth, Sequence* item) {
    const char c = src_[pos_];
    if (c == '"') {
      ++pos_;
      std::string bytes;
      while (true) {
        if (pos_ >= src_.size()) return Error("unterminated literal");
        if (src_[pos_] == '"') {
          ++pos_;
          break;
        }
        absl::StatusOr<char32_t> cp = ParseChar();
        if (!cp.ok()) return cp.status();
        common::utf8::Append(*cp, &bytes);
      }
      builder_.AppendLiteral(bytes, item);
      return absl::OkStatus();
    }
    if (c == '[') {
      ++pos_;
      bool negate = false;
      if (pos_ < src_.size() && src_[pos_] == '^') {
        negate = true;
        ++pos_;
      }
      CodePointRanges ranges;
      while (true) {
        if (pos_ >= src_.size()) return Error("unterminated character class");
        if (src_[pos_] == ']') {
          ++pos_;
          break;
        }
        absl::StatusOr<char32_t> lo = ParseChar();
        if (!lo.ok()) return lo.status();
        char32_t hi = *lo;
        if (pos_ + 1 < src_.size() && src_[pos_] == '-' && src_[pos_ + 1] != ']') {
          ++pos_;
          absl::StatusOr<char32_t> end = ParseChar();
          if (!end.ok()) return end.status();
          if (*end < *lo) return Error("character range out of order");
          hi = *end;
        }
        ranges.push_back({*lo, hi});
      }
      NormalizeRanges(&ranges);
      ranges = negate ? NegateRanges(ranges) : WithoutSurrogates(ranges);
      if (absl::Status s = builder_.AppendCodePointClass(ranges, item); !s.ok()) return Error(s);
      return absl::OkStatus();
    }
    if (c == '.') {
      ++pos_;
      if (absl::Status s = builder_.AppendCodePointClass(NegateRanges({}), item); !s.ok()) {
        return Error(s);
      }
      return absl::OkStatus();
    }
    if (c == '(') {
      ++pos_;
      std::vector<Sequence> alts;
      if (absl::Status s = ParseAlternatives(depth + 1, &alts); !s.ok()) return s;
      SkipSpace();
      if (pos_ >= src_.size() || src_[pos_] != ')') return Error("expected ')'");
      ++pos_;
      if (alts.size() == 1) {
        *item = std::move(alts[0]);
        if (!item->empty()) return absl::OkStatus();
      }
      const int32_t rule = builder_.NewRule("group");
      if (absl::Status s = builder_.Define(rule, std::move(alts)); !s.ok()) return Error(s);
      item->push_back({true, rule});
      return absl::OkStatus();
    }
    if (IsNameChar(c)) {
      const absl::string_view name = ParseName();
      item->push_back({true, builder_.RuleId(name)});
      return absl::OkStatus();
    }
    return Error(absl::StrCat("unexpected character '", std::string(1, c), "'"));
  }

  absl::string_view src_;
  absl::string_view what_;
  const bool source_positions_;
  const absl::string_view start_rule_;
  size_t pos_ = 0;
  GrammarBuilder builder_;
};

}  // namespace

absl::StatusOr<Grammar> ParseGbnf(absl::string_view source, absl::string_view what,
                                  bool source_positions, absl::string_view start_rule) {
  return Parser(source, what, source_positions, start_rule).Parse();
}

}  // namespace llmserve::worker::structured
