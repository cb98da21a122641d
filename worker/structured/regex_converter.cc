#include "worker/structured/regex_converter.h"

#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/string_views.h"
#include "common/utf8/utf8.h"
#include "worker/structured/gbnf_parser.h"
#include "worker/structured/grammar.h"
#include "worker/structured/hex_digit.h"

namespace llmserve::worker::structured {
namespace {

std::string CodePointEscape(char32_t cp) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "\\U%08X", static_cast<unsigned>(cp));
  return buf;
}

CodePointRanges Digits() { return {{U'0', U'9'}}; }
CodePointRanges Word() { return {{U'0', U'9'}, {U'A', U'Z'}, {U'_', U'_'}, {U'a', U'z'}}; }
CodePointRanges Space() { return {{U'\t', U'\r'}, {U' ', U' '}}; }

class RegexParser {
 public:
  RegexParser(absl::string_view src, const RegexOptions& options) : src_(src), options_(options) {}

  absl::StatusOr<std::string> Parse() {
    if (!common::utf8::IsValid(common::AsStd(src_))) {
      pos_ = common::utf8::FindFirstInvalid(common::AsStd(src_));
      return Error("invalid UTF-8");
    }
    bool anchored_start = false;
    if (pos_ < src_.size() && src_[pos_] == '^') {
      anchored_start = true;
      ++pos_;
    }
    std::string expr;
    if (absl::Status s = ParseAlternatives(0, &expr); !s.ok()) return s;
    if (pos_ < src_.size()) return Error("unmatched ')'");
    if (!options_.search) return expr;
    const std::string any = absl::StrCat("(", ClassText(NegateRanges({})), ")*");
    return absl::StrCat(anchored_start ? "" : any, " (", expr, ") ", anchored_end_ ? "" : any);
  }

 private:
  absl::Status Error(absl::string_view message) const {
    return absl::InvalidArgumentError(absl::StrCat("regex: position ", pos_, ": ", message));
  }

  // GBNF class text for `ranges` (normalized), filtered for JSON string content.
  std::string ClassText(CodePointRanges ranges) const {
    if (options_.json_string) {
      CodePointRanges banned = {{0, 0x1F}, {U'"', U'"'}, {U'\\', U'\\'}};
      CodePointRanges allowed = NegateRanges(banned);
      CodePointRanges out;
      for (const auto& [lo, hi] : ranges) {
        for (const auto& [alo, ahi] : allowed) {
          const char32_t l = std::max(lo, alo);
          const char32_t h = std::min(hi, ahi);
          if (l <= h) out.push_back({l, h});
        }
      }
      NormalizeRanges(&out);
      ranges = std::move(out);
    }
    if (ranges.empty()) return "[^\\U00000000-\\U0010FFFF]";  // matches nothing
    std::string text = "[";
    for (const auto& [lo, hi] : ranges) {
      absl::StrAppend(&text, CodePointEscape(lo));
      if (hi != lo) absl::StrAppend(&text, "-", CodePointEscape(hi));
    }
    return text + "]";
  }

  std::string LiteralText(char32_t cp) const {
    if (options_.json_string) {
      switch (cp) {
        case U'"':
          return "\"\\\\\\\"\"";  // the two bytes \"
        case U'\\':
          return "\"\\\\\\\\\"";
        case U'\b':
          return "\"\\\\b\"";
        case U'\f':
          return "\"\\\\f\"";
        case U'\n':
          return "\"\\\\n\"";
        case U'\r':
          return "\"\\\\r\"";
        case U'\t':
          return "\"\\\\t\"";
        default:
          if (cp < 0x20) {
            char buf[16];
            std::snprintf(buf, sizeof(buf), "\"\\\\u%04x\"", static_cast<unsigned>(cp));
            return buf;
          }
      }
    }
    return absl::StrCat("\"", CodePointEscape(cp), "\"");
  }

  absl::Status ParseAlternatives(int depth, std::string* out) {
    if (depth > kMaxGbnfNesting) {
      return Error(absl::StrCat("groups nested deeper than ", kMaxGbnfNesting));
    }
    std::string seq;
    if (absl::Status s = ParseSequence(depth, &seq); !s.ok()) return s;
    absl::StrAppend(out, "(", seq.empty() ? "\"\"" : seq);
    while (pos_ < src_.size() && src_[pos_] == '|') {
      ++pos_;
      seq.clear();
      if (absl::Status s = ParseSequence(depth, &seq); !s.ok()) return s;
      absl::StrAppend(out, " | ", seq.empty() ? "\"\"" : seq);
    }
    absl::StrAppend(out, ")");
    return absl::OkStatus();
  }

  absl::Status ParseSequence(int depth, std::string* out) {
    while (pos_ < src_.size()) {
      const char c = src_[pos_];
      if (c == '|' || c == ')') return absl::OkStatus();
      if (c == '$') {
        if (depth == 0 && pos_ + 1 == src_.size()) {
          anchored_end_ = true;
          ++pos_;
          return absl::OkStatus();
        }
        return Error("'$' is only supported at the end of the pattern");
      }
      if (c == '^') return Error("'^' is only supported at the start of the pattern");
      std::string atom;
      if (absl::Status s = ParseAtom(depth, &atom); !s.ok()) return s;
      std::string quant;
      if (absl::Status s = ParseQuantifier(&quant); !s.ok()) return s;
      if (quant.empty()) {
        absl::StrAppend(out, " ", atom);
      } else {
        absl::StrAppend(out, " (", atom, ")", quant);
      }
    }
    return absl::OkStatus();
  }

  bool ParseInt(int* value) {
    const size_t begin = pos_;
    int64_t v = 0;
    while (pos_ < src_.size() && src_[pos_] >= '0' && src_[pos_] <= '9') {
      v = std::min<int64_t>(v * 10 + (src_[pos_] - '0'), int64_t{kMaxRepetition} + 1);
      ++pos_;
    }
    *value = static_cast<int>(v);
    return pos_ > begin;
  }

  absl::Status ParseQuantifier(std::string* quant) {
    if (pos_ >= src_.size()) return absl::OkStatus();
    const char c = src_[pos_];
    if (c == '*' || c == '+' || c == '?') {
      *quant = std::string(1, c);
      ++pos_;
    } else if (c == '{') {
      ++pos_;
      int min = 0;
      int max = -1;
      if (!ParseInt(&min)) return Error("expected a number after '{'");
      if (pos_ < src_.size() && src_[pos_] == '}') {
        max = min;
      } else {
        if (pos_ >= src_.size() || src_[pos_] != ',') return Error("expected ',' or '}'");
        ++pos_;
        if (!ParseInt(&max)) max = -1;
      }
      if (pos_ >= src_.size() || src_[pos_] != '}') return Error("expected '}'");
      ++pos_;
      if (min > kMaxRepetition || max > kMaxRepetition) {
        return Error(absl::StrCat("repetition count above the limit of ", kMaxRepetition));
      }
      if (max >= 0 && max < min) return Error("repetition {m,n} with n < m");
      *quant = max < 0 ? absl::StrCat("{", min, ",}") : absl::StrCat("{", min, ",", max, "}");
    } else {
      return absl::OkStatus();
    }
    if (pos_ < src_.size() && src_[pos_] == '?') {
      ++pos_;  // lazy: same language
    } else if (pos_ < src_.size() && src_[pos_] == '+') {
      return Error("possessive quantifiers are not supported");
    }
    if (pos_ < src_.size() &&
        (src_[pos_] == '*' || src_[pos_] == '+' || src_[pos_] == '?' || src_[pos_] == '{')) {
      return Error("nested quantifier");
    }
    return absl::OkStatus();
  }

  // An escape after '\' (pos_ at the escaped char). Sets either *ranges (a class) or *cp.
  absl::Status ParseEscape(bool in_class, CodePointRanges* ranges, char32_t* cp, bool* is_class) {
    if (pos_ >= src_.size()) return Error("pattern ends with '\\'");
    const char e = src_[pos_++];
    *is_class = true;
    switch (e) {
      case 'd':
        *ranges = Digits();
        return absl::OkStatus();
      case 'D':
        *ranges = NegateRanges(Digits());
        return absl::OkStatus();
      case 'w':
        *ranges = Word();
        return absl::OkStatus();
      case 'W':
        *ranges = NegateRanges(Word());
        return absl::OkStatus();
      case 's':
        *ranges = Space();
        return absl::OkStatus();
      case 'S':
        *ranges = NegateRanges(Space());
        return absl::OkStatus();
      default:
        break;
    }
    *is_class = false;
    switch (e) {
      case 'n':
        *cp = U'\n';
        return absl::OkStatus();
      case 't':
        *cp = U'\t';
        return absl::OkStatus();
      case 'r':
        *cp = U'\r';
        return absl::OkStatus();
      case 'f':
        *cp = U'\f';
        return absl::OkStatus();
      case 'v':
        *cp = U'\v';
        return absl::OkStatus();
      case '0':
        *cp = U'\0';
        return absl::OkStatus();
      case 'b':
        if (in_class) {
          *cp = U'\b';
          return absl::OkStatus();
        }
        --pos_;
        return Error("word boundary \\b is not supported");
      case 'B':
        --pos_;
        return Error("word boundary \\B is not supported");
      case 'A':
      case 'z':
      case 'Z':
      case 'G':
        --pos_;
        return Error(absl::StrCat("anchor \\", std::string(1, e), " is not supported"));
      case 'p':
      case 'P':
        --pos_;
        return Error("Unicode property escapes (\\p, \\P) are not supported");
      case 'k':
        --pos_;
        return Error("backreferences are not supported");
      case 'x':
      case 'u': {
        uint32_t value = 0;
        if (e == 'u' && pos_ < src_.size() && src_[pos_] == '{') {
          ++pos_;
          int n = 0;
          while (pos_ < src_.size() && src_[pos_] != '}') {
            const int h = HexDigitValue(src_[pos_]);
            if (h < 0 || ++n > 6) return Error("bad \\u{...} escape");
            value = value * 16 + h;
            ++pos_;
          }
          if (pos_ >= src_.size() || n == 0) return Error("bad \\u{...} escape");
          ++pos_;
        } else {
          const int digits = e == 'x' ? 2 : 4;
          for (int i = 0; i < digits; ++i) {
            const int h = pos_ < src_.size() ? HexDigitValue(src_[pos_]) : -1;
            if (h < 0) return Error(absl::StrCat("bad \\", std::string(1, e), " escape"));
            value = value * 16 + h;
            ++pos_;
          }
        }
        if (value > 0x10FFFF || (value >= 0xD800 && value <= 0xDFFF)) {
          return Error("escape is not a Unicode scalar value");
        }
        *cp = value;
        return absl::OkStatus();
      }
      default:
        if (e >= '1' && e <= '9') {
          --pos_;
          return Error("backreferences are not supported");
        }
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z')) {
          --pos_;
          return Error(absl::StrCat("unknown escape \\", std::string(1, e)));
        }
        if (static_cast<unsigned char>(e) >= 0x80) {
          --pos_;
          char32_t decoded = 0;
          const int n = common::utf8::DecodeOne(common::AsStd(src_), pos_, &decoded);
          pos_ += n > 0 ? n : 1;
          *cp = decoded;
          return absl::OkStatus();
        }
        *cp = static_cast<unsigned char>(e);
        return absl::OkStatus();
    }
  }

  absl::Status ParseClass(std::string* out) {
    ++pos_;  // '['
    bool negate = false;
    if (pos_ < src_.size() && src_[pos_] == '^') {
      negate = true;
      ++pos_;
    }
    CodePointRanges ranges;
    bool first = true;
    while (true) {
      if (pos_ >= src_.size()) return Error("unterminated character class");
      if (src_[pos_] == ']' && !first) {
        ++pos_;
        break;
      }
      if (src_.substr(pos_, 2) == "[:") return Error("POSIX classes [:...:] are not supported");
      first = false;
      char32_t lo = 0;
      bool is_class = false;
      CodePointRanges sub;
      if (absl::Status s = ParseClassAtom(&sub, &lo, &is_class); !s.ok()) return s;
      if (is_class) {
        ranges.insert(ranges.end(), sub.begin(), sub.end());
        continue;
      }
      char32_t hi = lo;
      if (pos_ + 1 < src_.size() && src_[pos_] == '-' && src_[pos_ + 1] != ']') {
        ++pos_;
        if (absl::Status s = ParseClassAtom(&sub, &hi, &is_class); !s.ok()) return s;
        if (is_class) return Error("a class escape cannot end a range");
        if (hi < lo) return Error("character range out of order");
      }
      ranges.push_back({lo, hi});
    }
    NormalizeRanges(&ranges);
    *out = ClassText(negate ? NegateRanges(ranges) : WithoutSurrogates(ranges));
    return absl::OkStatus();
  }

  absl::Status ParseClassAtom(CodePointRanges* ranges, char32_t* cp, bool* is_class) {
    if (src_[pos_] == '\\') {
      ++pos_;
      return ParseEscape(/*in_class=*/true, ranges, cp, is_class);
    }
    *is_class = false;
    const int n = common::utf8::DecodeOne(common::AsStd(src_), pos_, cp);
    pos_ += n > 0 ? n : 1;
    return absl::OkStatus();
  }

  absl::Status ParseAtom(int depth, std::string* out) {
    const char c = src_[pos_];
    if (c == '(') {
      ++pos_;
      if (pos_ < src_.size() && src_[pos_] == '?') {
        const absl::string_view rest = src_.substr(pos_);
        if (rest.substr(0, 2) == "?:") {
          pos_ += 2;
        } else if (rest.substr(0, 2) == "?=" || rest.substr(0, 2) == "?!" ||
                   rest.substr(0, 3) == "?<=" || rest.substr(0, 3) == "?<!") {
          return Error("lookaround assertions are not supported");
        } else if (rest.substr(0, 2) == "?<" || rest.substr(0, 3) == "?P<") {
          const size_t close = src_.find('>', pos_);
          if (close == absl::string_view::npos) return Error("unterminated group name");
          pos_ = close + 1;
        } else {
          return Error("unsupported group syntax (?...)");
        }
      }
      if (absl::Status s = ParseAlternatives(depth + 1, out); !s.ok()) return s;
      if (pos_ >= src_.size() || src_[pos_] != ')') return Error("missing ')'");
      ++pos_;
      return absl::OkStatus();
    }
    if (c == '[') return ParseClass(out);
    if (c == '.') {
      ++pos_;
      *out = ClassText(NegateRanges({{U'\n', U'\n'}}));
      return absl::OkStatus();
    }
    if (c == '*' || c == '+' || c == '?' || c == '{') return Error("nothing to repeat");
    if (c == '\\') {
      ++pos_;
      CodePointRanges ranges;
      char32_t cp = 0;
      bool is_class = false;
      if (absl::Status s = ParseEscape(/*in_class=*/false, &ranges, &cp, &is_class); !s.ok()) {
        return s;
      }
      NormalizeRanges(&ranges);
      *out = is_class ? ClassText(ranges) : LiteralText(cp);
      return absl::OkStatus();
    }
    char32_t cp = 0;
    const int n = common::utf8::DecodeOne(common::AsStd(src_), pos_, &cp);
    pos_ += n > 0 ? n : 1;
    *out = LiteralText(cp);
    return absl::OkStatus();
  }

  absl::string_view src_;
  RegexOptions options_;
  size_t pos_ = 0;
  bool anchored_end_ = false;
};

}  // namespace

absl::StatusOr<std::string> RegexToGbnf(absl::string_view regex, const RegexOptions& options) {
  return RegexParser(regex, options).Parse();
}

}  // namespace llmserve::worker::structured
